"""The prediction server over TLS and mTLS, called by a plain stub and by the router's PredictorClient."""

import urllib.error
import urllib.request

import grpc
import pytest

from headroom.contract.tls import PredictorClientTls, ServerTls
from headroom.predictor.client import PredictorClient
from headroom.predictor.proto import prediction_pb2_grpc
from headroom.tls import channel, channel_credentials
from tests.predictor.models import candidate_rows
from tests.predictor.test_service import boosters, request, runtime_with  # noqa: F401  (a fixture)


def server_tls(pki, mutual: bool) -> ServerTls:
    return ServerTls(cert_file=pki.server[0], key_file=pki.server[1], client_ca_file=pki.ca if mutual else None)


def predict(address: str, tls: PredictorClientTls | None) -> int:
    """Rows answered by one Predict call over a channel with ``tls`` (plaintext when None)."""
    with channel(address, channel_credentials(tls) if tls else None) as open_channel:
        return prediction_pb2_grpc.PredictionServiceStub(open_channel).Predict(request(), timeout=5).n_rows


def test_tls_serves_clients_that_trust_the_certificate_and_refuses_plaintext(start_server, boosters, pki):  # noqa: F811
    server = start_server(runtime=runtime_with(boosters), tls=server_tls(pki, mutual=False))
    assert predict(server.address, PredictorClientTls(ca_file=pki.ca)) == 30
    with pytest.raises(grpc.RpcError) as refused:
        predict(server.address, None)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


@pytest.mark.parametrize("client, answered", [
    pytest.param("client", True, id="certificate-from-the-client-ca"),
    pytest.param(None, False, id="no-certificate"),
    pytest.param("stranger", False, id="certificate-from-another-ca"),
])
def test_mtls_requires_a_client_certificate_from_the_client_ca(start_server, boosters, pki, client, answered):  # noqa: F811
    server = start_server(runtime=runtime_with(boosters), tls=server_tls(pki, mutual=True))
    cert, key = getattr(pki, client) if client else (None, None)
    tls = PredictorClientTls(ca_file=pki.ca, cert_file=cert, key_file=key)
    if answered:
        assert predict(server.address, tls) == 30
        return
    with pytest.raises(grpc.RpcError) as refused:
        predict(server.address, tls)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def test_the_routers_predictor_client_speaks_mtls(start_server, boosters, pki):  # noqa: F811
    server = start_server(runtime=runtime_with(boosters), tls=server_tls(pki, mutual=True))
    rows = candidate_rows(7, seed=3)
    credentials = channel_credentials(PredictorClientTls(ca_file=pki.ca, cert_file=pki.client[0],
                                                         key_file=pki.client[1]))
    with PredictorClient([server.address], timeout_seconds=5.0, credentials=credentials) as client:
        answer = client.predict("pool-a", rows)
    assert answer.ok.all() and answer.get("ttft") is not None
    without = channel_credentials(PredictorClientTls(ca_file=pki.ca))
    with PredictorClient([server.address], timeout_seconds=1.0, credentials=without) as client:
        refused = client.predict("pool-a", rows)
    assert not refused.ok.any() and "UNAVAILABLE" in refused.errors[0]


def test_probes_and_scrapes_need_no_tls_on_the_metrics_port(start_server, boosters, pki):  # noqa: F811
    from headroom.predictor.runtime import ModelRuntime
    from tests.keys import TRUST

    def get(server, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{server.metrics_port}{path}", timeout=5) as answer:
                return answer.status, answer.read().decode()
        except urllib.error.HTTPError as err:
            return err.code, err.read().decode()

    empty = start_server(runtime=ModelRuntime(trust=TRUST), tls=server_tls(pki, mutual=True))
    serving = start_server(runtime=runtime_with(boosters), tls=server_tls(pki, mutual=True))
    assert get(empty, "/readyz") == (503, "not ready\n") and get(empty, "/healthz") == (200, "ok\n")
    assert get(serving, "/readyz") == (200, "ok\n")
    status, metrics = get(serving, "/metrics")
    assert status == 200 and "headroom_predictor" in metrics
