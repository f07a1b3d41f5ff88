"""The router's listeners secured: the HTTP proxy over TLS with bearer tokens and its metrics on a port of their
own, the Pick API (whose Report accepts telemetry) behind mTLS and tokens, ext_proc's TLS, telemetry only from
the gateway and from authenticated reporters, and the remote predictor called over mTLS — real servers, real
clients."""

import asyncio
import json
import ssl

import aiohttp
import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc

from headroom.contract.settings import from_env
from headroom.contract.topics import KafkaSettings
from headroom.router.app.server import RouterServer
from headroom.router.errors import ConfigError
from headroom.router.proto import router_pb2, router_pb2_grpc
from tests.predictor.conftest import start_server  # noqa: F401  (a fixture)
from tests.predictor.test_service import boosters, runtime_with  # noqa: F401  (a fixture)
from tests.router.routercases import TablePredictor, router_config, wait_for
from tests.router.test_ext_proc import header_map, request_messages
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
def test_ext_proc_transport(pki, environ, client, connects, ext_proc_front):
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


def forged_exchange(request_id: str) -> list:
    """A whole ext_proc exchange as a caller that is not the gateway could send it: a request, then a response
    whose bytes it says passed whenever it likes."""
    response = [ep.ProcessingRequest(response_headers=ep.HttpHeaders(headers=header_map({":status": "200"}))),
                ep.ProcessingRequest(response_body=ep.HttpBody(body=json.dumps(
                    {"choices": [{"text": "ok"}], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}).encode(),
                    end_of_stream=True))]
    return request_messages({"x-request-id": request_id}, {"prompt": "hi", "max_tokens": 2}) + response


async def forge(router, pki, *, token: str | None = None, certificate: str | None = None, count: int = 3):
    """``count`` forged exchanges over a channel with ``token`` and the client ``certificate`` (an attribute of
    ``pki``); each one's last reply, or the status that ended it."""
    if router.ext_proc_certificate is not None and certificate is None:
        credentials = grpc.ssl_channel_credentials(root_certificates=router.ext_proc_certificate)
    else:
        cert, key = getattr(pki, certificate) if certificate else (None, None)
        credentials = grpc.ssl_channel_credentials(pki.ca.read_bytes(), key.read_bytes() if key else None,
                                                   cert.read_bytes() if cert else None)
    if token is not None:
        credentials = grpc.composite_channel_credentials(credentials, grpc.access_token_call_credentials(token))
    outcomes = []
    async with grpc.aio.secure_channel(f"127.0.0.1:{router.ext_proc_port}", credentials) as channel:
        for i in range(count):
            call = ep_grpc.ExternalProcessorStub(channel).Process(timeout=5)
            try:
                for message in forged_exchange(f"forged-{i}"):
                    await call.write(message)
                    reply = await call.read()
                await call.done_writing()
                outcomes.append(reply.WhichOneof("response"))
            except grpc.RpcError as err:
                outcomes.append(err.code())
    return outcomes


def gateway_pki(pki, tmp_path):
    """A certificate of the tests' CA for the gateway, naming it gateway.llm.svc."""
    from headroom.certificates import CertificateAuthority
    ca = CertificateAuthority.load(pki.ca, pki.ca.with_name("ca.key"))
    return ca.issue("envoy", ("gateway.llm.svc",)).write(tmp_path, "gateway")


@pytest.mark.parametrize("case", ["no gateway credential", "gateway token", "opt-out"])
def test_ext_proc_telemetry_comes_only_from_the_gateway(pki, tmp_path, case):
    tokens = tmp_path / "gateway-tokens"
    tokens.write_text("gateway-secret\n")
    environ = {"no gateway credential": {}, "gateway token": {"HEADROOM_ROUTER_GATEWAY_TOKENS_FILE": str(tokens)},
               "opt-out": {"HEADROOM_ROUTER_UNAUTHENTICATED_TELEMETRY": "true"}}[case]

    async def scenario():
        async with upstreams(Upstream("a")) as servers:
            router = await started([s.address for s in servers], environ)
            assert await wait_for(lambda: all(sc.metrics is not None for sc in router.pool.scrapes.values()))
            try:
                return (await forge(router, pki), await forge(router, pki, token="a-guess", count=1),
                        await forge(router, pki, token="gateway-secret", count=1), router)
            finally:
                await router.stop()
    anonymous, guessed, gateway, router = run(scenario)
    metrics = router.metrics.exposition().decode()
    records = [r.request_id for r in router.telemetry.records]
    if case == "gateway token":  # the caller without the token is refused before anything is routed
        assert anonymous == [grpc.StatusCode.UNAUTHENTICATED] * 3 and guessed == [grpc.StatusCode.UNAUTHENTICATED]
        assert gateway == ["response_body"] and records == ["forged-0"]
        assert 'headroom_router_unauthenticated_total{listener="ext_proc"} 4.0' in metrics
    elif case == "no gateway credential":  # routed, but no caller is proven to be the gateway: no telemetry
        assert anonymous == guessed + ["response_body"] * 2 == ["response_body"] * 3 and gateway == guessed
        assert records == []
        assert 'headroom_router_telemetry_records_total{outcome="unauthenticated"} 5.0' in metrics
    else:
        assert records == ["forged-0", "forged-1", "forged-2", "forged-0", "forged-0"]


def test_the_gateway_is_known_by_its_certificate_identity_over_mtls(pki, tmp_path):
    gateway = gateway_pki(pki, tmp_path)
    environ = tls_environ(pki, mutual=True, HEADROOM_ROUTER_GATEWAY_IDENTITIES="gateway.llm.svc, spiffe://other")

    async def scenario():
        async with upstreams(Upstream("a")) as servers:
            router = await started([s.address for s in servers], environ)
            assert await wait_for(lambda: all(sc.metrics is not None for sc in router.pool.scrapes.values()))
            try:
                pki_with_gateway = type(pki)(pki.ca, pki.server, gateway, pki.stranger)
                return (await forge(router, pki, certificate="client", count=1),
                        await forge(router, pki_with_gateway, certificate="client", count=1), router)
            finally:
                await router.stop()
    other_client, the_gateway, router = run(scenario)
    assert other_client == [grpc.StatusCode.UNAUTHENTICATED] and the_gateway == ["response_body"]
    assert [r.request_id for r in router.telemetry.records] == ["forged-0"]


def test_gateway_identities_without_a_client_ca_are_a_configuration_error():
    with pytest.raises(ConfigError, match="HEADROOM_TLS_CLIENT_CA_FILE"):
        router_config([], environ={"HEADROOM_ROUTER_GATEWAY_IDENTITIES": "gateway.llm.svc"})


def test_report_is_closed_unless_its_callers_are_authenticated(caplog):
    async def scenario():
        router = await started([], {})
        try:
            async with grpc.aio.insecure_channel(f"127.0.0.1:{router.pick_port}") as channel:
                stub = router_pb2_grpc.RouterStub(channel)
                codes = []
                for i in range(3):
                    await stub.Pick(router_pb2.PickRequest(request_id=f"r{i}", prompt_tokens=100, max_tokens=5,
                                                           candidates=candidates(0, 3)), timeout=5)
                    try:
                        await stub.Report(router_pb2.ReportRequest(request_id=f"r{i}", e2e_ms=4000, output_tokens=5),
                                          timeout=5)
                        codes.append(grpc.StatusCode.OK)
                    except grpc.RpcError as err:
                        codes.append(err.code())
                return codes, router
        finally:
            await router.stop()
    with caplog.at_level("WARNING"):
        codes, router = run(scenario)
    assert codes == [grpc.StatusCode.PERMISSION_DENIED] * 3
    assert router.telemetry.records == [] and len(router.pool.inflight) == 0  # released, not left in flight
    assert 'headroom_router_unauthenticated_total{listener="report"} 3.0' in router.metrics.exposition().decode()
    assert any("Report is closed" in r.getMessage() for r in caplog.records)
    assert any("no gateway credential" in r.getMessage() for r in caplog.records)
