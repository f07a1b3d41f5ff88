"""The router's listeners secured: the HTTP proxy over TLS with bearer tokens and its metrics on a port of their
own, the Pick API (whose Report accepts telemetry) behind mTLS and tokens, ext_proc's TLS, and the remote
predictor called over mTLS — real servers, real clients."""

import asyncio
import ssl

import aiohttp
import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.router.errors import ConfigError
from headroom.router.proto import router_pb2, router_pb2_grpc
from headroom.router.server import RouterServer
from tests.predictor.conftest import start_server  # noqa: F401  (a fixture)
from tests.predictor.test_service import boosters, runtime_with  # noqa: F401  (a fixture)
from tests.router.routercases import TablePredictor, router_config, wait_for
from tests.router.test_ext_proc import request_messages
from tests.router.test_pick_api import candidates
from tests.router.upstream import Upstream, upstreams

TOKEN = "router-client-token-1"


def tls_environ(pki, *, mutual: bool = False, **extra: str) -> dict[str, str]:
    environ = {"HEADROOM_TLS_CERT_FILE": str(pki.server[0]), "HEADROOM_TLS_KEY_FILE": str(pki.server[1]), **extra}
    if mutual:
        environ["HEADROOM_TLS_CLIENT_CA_FILE"] = str(pki.ca)
    return environ


def token_file(tmp_path) -> str:
    path = tmp_path / "tokens"
    path.write_text(f"# clients of the router\n{TOKEN}\n\nanother-token\n")
    return str(path)


def run(scenario):
    return asyncio.run(asyncio.wait_for(scenario(), timeout=60))


async def started(addresses, environ, **settings) -> RouterServer:
    router = RouterServer(router_config(addresses, environ=environ, **settings), from_env(KafkaSettings, {}),
                          predictor=TablePredictor())
    await router.start()
    return router


def test_the_http_proxy_over_tls_requires_a_token_and_keeps_it_from_the_model_servers(pki, tmp_path):
    environ = tls_environ(pki, HEADROOM_ROUTER_AUTH_TOKENS_FILE=token_file(tmp_path))

    async def scenario():
        async with upstreams(Upstream("a")) as servers:
            router = await started([s.address for s in servers], environ, metricsPort=0)
            assert await wait_for(lambda: all(sc.metrics is not None for sc in router.pool.scrapes.values()))
            url = f"https://127.0.0.1:{router.http_port}/v1/completions"
            trusting = ssl.create_default_context(cafile=str(pki.ca))
            statuses = {}
            async with aiohttp.ClientSession() as http:
                for name, headers in {"no token": {}, "unknown token": {"authorization": "Bearer guess"},
                                      "basic scheme": {"authorization": f"Basic {TOKEN}"},
                                      "token": {"authorization": f"Bearer {TOKEN}"}}.items():
                    async with http.post(url, json={"prompt": "hi", "max_tokens": 2}, headers=headers,
                                         ssl=trusting) as response:
                        statuses[name] = response.status
                async with http.get(f"https://127.0.0.1:{router.http_port}/metrics", ssl=trusting,
                                    headers={"authorization": f"Bearer {TOKEN}"}) as response:
                    statuses["metrics on the proxy port"] = response.status
                async with http.get(f"http://127.0.0.1:{router.metrics_port}/metrics") as response:
                    statuses["metrics on their port"] = response.status
                    metrics = await response.text()
                with pytest.raises(aiohttp.ClientError):  # plain HTTP to the TLS port
                    async with http.post(f"http://127.0.0.1:{router.http_port}/v1/completions", json={}) as response:
                        await response.read()
            await router.stop()
            return statuses, metrics, servers[0].received
    statuses, metrics, received = run(scenario)
    assert statuses == {"no token": 401, "unknown token": 401, "basic scheme": 401, "token": 200,
                        "metrics on the proxy port": 404, "metrics on their port": 200}
    assert 'headroom_router_unauthenticated_total{listener="http"} 3.0' in metrics
    ((_, headers, _),) = received
    assert "authorization" not in {name.lower() for name in headers}


def _pick_channel(router, pki, certificate: str | None) -> grpc.aio.Channel:
    cert, key = getattr(pki, certificate) if certificate else (None, None)
    credentials = grpc.ssl_channel_credentials(pki.ca.read_bytes(), key.read_bytes() if key else None,
                                               cert.read_bytes() if cert else None)
    return grpc.aio.secure_channel(f"127.0.0.1:{router.pick_port}", credentials)


@pytest.mark.parametrize("certificate, token, answer", [
    pytest.param("client", TOKEN, grpc.StatusCode.OK, id="certificate-and-token"),
    pytest.param("client", None, grpc.StatusCode.UNAUTHENTICATED, id="no-token"),
    pytest.param(None, TOKEN, grpc.StatusCode.UNAVAILABLE, id="no-certificate"),
    pytest.param("stranger", TOKEN, grpc.StatusCode.UNAVAILABLE, id="certificate-of-another-ca"),
])
def test_pick_and_report_require_a_client_certificate_and_a_token(pki, tmp_path, certificate, token, answer):
    environ = tls_environ(pki, mutual=True, HEADROOM_ROUTER_AUTH_TOKENS_FILE=token_file(tmp_path))

    async def scenario():
        router = await started([], environ)
        metadata = (("authorization", f"Bearer {token}"),) if token else ()
        try:
            async with _pick_channel(router, pki, certificate) as channel:
                stub = router_pb2_grpc.RouterStub(channel)
                try:
                    await stub.Pick(router_pb2.PickRequest(request_id="r1", prompt_tokens=100, max_tokens=5,
                                                           candidates=candidates(0, 3)), metadata=metadata, timeout=5)
                    reported = await stub.Report(router_pb2.ReportRequest(request_id="r1", e2e_ms=50, output_tokens=5),
                                                 metadata=metadata, timeout=5)
                    return grpc.StatusCode.OK, reported.telemetry_sent, router
                except grpc.RpcError as err:
                    return err.code(), None, router
        finally:
            await router.stop()
    code, sent, router = run(scenario)
    assert code == answer
    assert router.telemetry.records if code == grpc.StatusCode.OK else not router.telemetry.records
    if answer == grpc.StatusCode.UNAUTHENTICATED:
        assert 'headroom_router_unauthenticated_total{listener="pick"} 1.0' in router.metrics.exposition().decode()


@pytest.mark.parametrize("environ, client, connects", [
    pytest.param({"HEADROOM_EXT_PROC_SECURE": "false"}, "plaintext", True, id="secure-off-plaintext"),
    pytest.param({}, "plaintext", False, id="self-signed-refuses-plaintext"),
    pytest.param({"tls": True}, "ca", True, id="given-certificate"),
    pytest.param({"tls": True, "mutual": True}, "ca", False, id="mtls-without-client-certificate"),
    pytest.param({"tls": True, "mutual": True}, "ca+client", True, id="mtls-with-client-certificate"),
])
def test_ext_proc_transport(pki, environ, client, connects):
    settings = dict(environ)
    if settings.pop("tls", False):
        settings = tls_environ(pki, mutual=settings.pop("mutual", False), **settings)

    async def scenario():
        router = await started([], settings)
        address = f"127.0.0.1:{router.ext_proc_port}"
        if client == "plaintext":
            channel = grpc.aio.insecure_channel(address)
        else:
            cert, key = pki.client if client == "ca+client" else (None, None)
            channel = grpc.aio.secure_channel(address, grpc.ssl_channel_credentials(
                pki.ca.read_bytes(), key.read_bytes() if key else None, cert.read_bytes() if cert else None))
        try:
            async with channel:
                call = ep_grpc.ExternalProcessorStub(channel).Process(timeout=5)
                replies = []
                for message in request_messages({}, {"prompt": "x"}):
                    await call.write(message)
                    replies.append(await call.read())
                return replies[-1].immediate_response.status.code == 503, router.ext_proc_certificate  # no server
        except grpc.RpcError as err:
            return err.code(), router.ext_proc_certificate
        finally:
            await router.stop()
    answered, certificate = run(scenario)
    assert answered is True if connects else answered == grpc.StatusCode.UNAVAILABLE
    if "HEADROOM_EXT_PROC_SECURE" in settings:
        assert certificate is None
    elif "HEADROOM_TLS_CERT_FILE" in settings:
        assert certificate == pki.server[0].read_bytes()


def test_an_empty_token_file_is_a_configuration_error(tmp_path):
    (tmp_path / "tokens").write_text("# nobody yet\n\n")
    config = router_config([], environ={"HEADROOM_ROUTER_AUTH_TOKENS_FILE": str(tmp_path / "tokens")})
    with pytest.raises(ConfigError, match="holds no token"):
        RouterServer(config, from_env(KafkaSettings, {}))


def test_the_remote_predictor_is_called_over_mtls(start_server, boosters, pki):  # noqa: F811
    from headroom.contract.tls import ServerTls
    predictor = start_server(runtime=runtime_with(boosters), tls=ServerTls(
        cert_file=pki.server[0], key_file=pki.server[1], client_ca_file=pki.ca))
    environ = {"HEADROOM_PREDICTOR_TLS_CA_FILE": str(pki.ca), "HEADROOM_PREDICTOR_TLS_CERT_FILE": str(pki.client[0]),
               "HEADROOM_PREDICTOR_TLS_KEY_FILE": str(pki.client[1])}

    async def scenario():
        async with upstreams(Upstream("a")) as servers:
            config = router_config([servers[0].address], environ=environ, predictor="remote",
                                   predictorAddresses=predictor.address, predictorTimeoutS=5.0)
            router = RouterServer(config, from_env(KafkaSettings, {}))
            await router.start()
            try:
                async with grpc.aio.insecure_channel(f"127.0.0.1:{router.pick_port}") as channel:
                    return await router_pb2_grpc.RouterStub(channel).Pick(router_pb2.PickRequest(
                        request_id="r1", prompt_tokens=100, max_tokens=5, headers={"x-prediction-based-scheduling":
                                                                                   "true"},
                        candidates=[router_pb2.ServerState(server_id="c0", address="10.0.0.1:8000",
                                                           pool_key="pool-a")]), timeout=5)
            finally:
                await router.stop()
    picked = run(scenario)
    assert picked.profile == "predicted" and picked.candidates[0].predicted
    assert picked.model_versions["ttft"] == 3
