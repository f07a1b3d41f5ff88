import pytest

from headroom.router.framework.plugins.latency_slo_admitter import build
from tests.router.routercases import cand, req

SLO = {"slo_ttft": 500.0}
SHED = {"slo_ttft_ms": 500.0, "priority": -1}
BUSY = {"kv_cache_usage": 0.5}

CASES = [
    pytest.param(req(**SHED), [cand("a", 900, **SLO, **BUSY), cand("b", 800, **SLO, **BUSY)], True,
                 id="sheddable-none-meets-rejected"),
    pytest.param(req(**SHED), [cand("a", 900, **SLO, **BUSY), cand("b", 400, **SLO, **BUSY)], False,
                 id="sheddable-one-meets-admitted"),
    pytest.param(req(slo_ttft_ms=500.0, priority=0), [cand("a", 900, **SLO, **BUSY)], False,
                 id="not-sheddable-admitted"),
    pytest.param(req(priority=-1), [cand("a", 900, **BUSY)], False, id="no-slo-headers-admitted"),
    pytest.param(req(**SHED), [cand("a", 900, **SLO, **BUSY), cand("b", 900, **SLO, num_running=0, kv_cache_usage=0.3)],
                 False, id="idle-server-admits"),
    pytest.param(req(**SHED), [cand("a", 900, **SLO, **BUSY), cand("b", 900, **SLO, kv_cache_usage=0.01)], False,
                 id="cold-server-admits"),
    pytest.param(req(**SHED), [cand("a", 900, **SLO, **BUSY), cand("b", None, **BUSY)], False,
                 id="fail-open-without-prediction"),
    pytest.param(req(**SHED), [cand("a", None, **BUSY)], False, id="fail-open-no-predictions-at-all"),
    pytest.param(req(**SHED), [cand("a", 400, **SLO, **BUSY, tpot_at_risk=2), cand("b", 900, **SLO, **BUSY)], True,
                 id="sheddable-only-meets-where-streams-are-over-slo"),
    pytest.param(req(**SHED), [cand("a", 400, **SLO, **BUSY, tpot_at_risk=2), cand("b", 450, **SLO, **BUSY)], False,
                 id="sheddable-meets-where-no-stream-is-at-risk"),
    pytest.param(req(**SHED), [cand("a", 400, **SLO, **BUSY, tpot_at_risk=2),
                               cand("b", 900, **SLO, num_running=0, kv_cache_usage=0.3)], False,
                 id="protecting-idle-server-admits"),
    pytest.param(req(slo_ttft_ms=500.0), [cand("a", 400, **SLO, **BUSY, tpot_at_risk=2)], False,
                 id="not-sheddable-admitted-despite-risk"),
]


@pytest.mark.parametrize("request_, candidates, rejected", CASES)
def test_admitter(request_, candidates, rejected):
    reason = build("admitter").admit(request_, candidates)
    assert (reason is not None) == rejected
    if rejected:
        assert "priority -1" in reason and "SLO" in reason


def test_protecting_running_streams_can_be_switched_off():
    candidates = [cand("a", 400, **SLO, **BUSY, tpot_at_risk=2)]
    assert build("admitter", {"protectRunning": False}).admit(req(**SHED), candidates) is None
    assert "streams at risk of missing their TPOT SLO" in build("admitter").admit(req(**SHED), candidates)
