"""What the compiled ext_proc front does beyond the protocol both fronts share (``test_ext_proc_parity``): how it
stops, that a decision failing in the router fails its stream alone, and what a router says without it."""

import asyncio
import socket
import sys

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.router.app.server import RouterServer
from headroom.router.errors import ConfigError
from tests.router.routercases import gateway_environ, router_config, wait_for
from tests.router.test_ext_proc import ext_proc_channel
from tests.router.test_ext_proc_parity import ANSWER, PROMPT, body, headers, response
from tests.router.upstream import Upstream, upstreams

pytestmark = pytest.mark.usefixtures("ext_proc_front")  # stopping: both fronts alike


async def routed_stream(router, request_id):
    """A stream whose request is routed and whose response has not come yet; returns the call."""
    channel = ext_proc_channel(router)
    call = ep_grpc.ExternalProcessorStub(channel).Process()
    await call.write(headers(request_id))
    await call.write(body(PROMPT))
    await call.read(), await call.read()  # the destination, the body handed back
    return channel, call


def test_stopping_lets_streams_finish_within_the_grace_period_then_cuts_the_rest():
    async def scenario():
        async with upstreams(Upstream("a")) as servers:
            router = RouterServer(router_config([s.address for s in servers], environ=gateway_environ()),
                                  from_env(KafkaSettings, {}))
            await router.start()
            assert await wait_for(lambda: all(sc.metrics is not None for sc in router.pool.scrapes.values()))
            (c1, finishing), (c2, hanging) = await routed_stream(router, "finishes"), await routed_stream(router, "hangs")
            stopping = asyncio.create_task(router.stop(grace_s=1.0))
            await asyncio.sleep(0.2)
            await finishing.write(response())
            await finishing.write(body(ANSWER, kind="response_body"))
            await finishing.read(), await finishing.read()
            await finishing.done_writing()
            finished = await finishing.code()
            await asyncio.wait_for(stopping, 10)
            cut = await asyncio.wait_for(hanging.code(), 10)
            await c1.close()
            await c2.close()
            return router, finished, cut
    router, finished, cut = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert finished == grpc.StatusCode.OK and cut != grpc.StatusCode.OK
    assert [r.request_id for r in router.telemetry.records] == ["finishes"]
    assert len(router.pool.inflight) == 0
    assert 'headroom_router_request_errors_total{kind="ext-proc-stream-ended"} 1.0' in \
        router.metrics.exposition().decode()


@pytest.mark.parametrize("ext_proc_front", ["native"], indirect=True)
def test_a_decision_that_fails_in_the_router_fails_its_stream_alone(monkeypatch):
    async def scenario():
        async with upstreams(Upstream("a")) as servers:
            router = RouterServer(router_config([s.address for s in servers], environ=gateway_environ()),
                                  from_env(KafkaSettings, {}))
            await router.start()
            assert await wait_for(lambda: all(sc.metrics is not None for sc in router.pool.scrapes.values()))
            pick = router.service.pick

            def failing(request, *args, **kwargs):
                if request.request_id == "broken":
                    raise RuntimeError("a bug")
                return pick(request, *args, **kwargs)
            monkeypatch.setattr(router.service, "pick", failing)
            try:
                outcomes = []
                for request_id in ("broken", "fine"):
                    async with ext_proc_channel(router) as channel:
                        call = ep_grpc.ExternalProcessorStub(channel).Process()
                        await call.write(headers(request_id))
                        await call.write(body(PROMPT))
                        try:
                            answer = await call.read()
                            outcomes.append(answer.HasField("request_headers"))
                            call.cancel()
                        except grpc.aio.AioRpcError as err:
                            outcomes.append((err.code(), err.details()))
                return outcomes
            finally:
                await router.stop()
    broken, fine = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert broken == (grpc.StatusCode.UNKNOWN, "the router failed to schedule the request") and fine is True


@pytest.mark.parametrize("ext_proc_front", ["native"], indirect=True)
def test_a_router_whose_compiled_front_is_not_built_says_what_to_do(monkeypatch):
    import headroom
    monkeypatch.delattr(headroom, "_native", raising=False)
    monkeypatch.setitem(sys.modules, "headroom._native", None)  # as in a source tree never installed

    async def scenario():
        router = RouterServer(router_config([]), from_env(KafkaSettings, {}))
        with pytest.raises(ConfigError, match="set HEADROOM_ROUTER_EXT_PROC_FRONT=grpcio") as raised:
            await router.start()
        return router, raised.value
    router, error = asyncio.run(asyncio.wait_for(scenario(), 60))
    assert "needs cargo and a C compiler" in str(error)
    with pytest.raises(ConnectionRefusedError):  # the listeners started before it are closed again
        socket.create_connection(("127.0.0.1", router.http_port), timeout=5).close()
