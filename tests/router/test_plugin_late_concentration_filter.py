import pytest

from headroom.router.errors import ConfigError
from headroom.router.framework.plugins.late_concentration_filter import build
from tests.router.routercases import cand, ctx, req


def names(cands):
    return sorted(c.server.server_id for c in cands)


SLO = req(slo_ttft_ms=1000.0, stream=True, holdable=True)

CASES = [  # the request's TTFT SLO is 1,000 ms
    pytest.param({}, [cand("a", 1500, inflight_prefill_tokens=2_000), cand("b", 3000, inflight_prefill_tokens=9_000),
                      cand("c", 1200, inflight_prefill_tokens=4_000)], ["b"],
                 id="late-everywhere-goes-where-the-most-prefill-is-queued"),
    pytest.param({}, [cand("a", 1500, inflight_prefill_tokens=2_000), cand("b", 3000, inflight_prefill_tokens=9_000),
                      cand("c", 900, inflight_prefill_tokens=4_000)], ["a", "b", "c"],
                 id="one-server-within-the-slo-keeps-all"),
    pytest.param({}, [cand("a", 1500, inflight_prefill_tokens=9_000), cand("b", 3000, inflight_prefill_tokens=9_000),
                      cand("c", 1200, inflight_prefill_tokens=4_000)], ["a", "b"], id="ties-are-kept"),
    pytest.param({"lateMargin": 0.5}, [cand("a", 1400, inflight_prefill_tokens=500),
                                       cand("b", 3000, inflight_prefill_tokens=9_000)], ["a", "b"],
                 id="just-late-within-the-margin-keeps-all"),
    pytest.param({"lateMargin": 0.5}, [cand("a", 1600, inflight_prefill_tokens=500),
                                       cand("b", 3000, inflight_prefill_tokens=9_000)], ["b"],
                 id="late-beyond-the-margin-concentrates"),
    pytest.param({"lateMargin": -0.2}, [cand("a", 900, inflight_prefill_tokens=500),
                                        cand("b", 3000, inflight_prefill_tokens=9_000)], ["b"],
                 id="a-negative-margin-concentrates-the-nearly-late"),
    pytest.param({"includeTPOT": False}, [cand("a", 500, 60, slo_tpot=50, inflight_prefill_tokens=500),
                      cand("b", 3000, inflight_prefill_tokens=9_000)], ["a", "b"], id="tpot-ignored-when-asked"),
    pytest.param({}, [cand("a", 500, 60, slo_tpot=50, inflight_prefill_tokens=500),
                                         cand("b", 3000, inflight_prefill_tokens=9_000)], ["b"],
                 id="a-predicted-tpot-miss-counts-as-late"),
    pytest.param({}, [cand("a", 500, 40, slo_tpot=50, inflight_prefill_tokens=500),
                                         cand("b", 3000, inflight_prefill_tokens=9_000)], ["a", "b"],
                 id="within-both-slos-keeps-all"),
    pytest.param({}, [cand("a", 1500, inflight_prefill_tokens=500), cand("b", None, inflight_prefill_tokens=9_000)],
                 ["a", "b"], id="an-unpredicted-server-might-make-it"),
    pytest.param({"lateCap": 2}, [cand("a", 1200, inflight_prefill_tokens=2_000),
                                  cand("b", 3000, inflight_prefill_tokens=9_000),
                                  cand("c", 1800, inflight_prefill_tokens=4_000)], ["c"],
                 id="the-most-queued-within-the-cap-takes-it-though-later"),
    pytest.param({"lateCap": 2}, [cand("a", 1200, inflight_prefill_tokens=4_000),
                                  cand("b", 3000, inflight_prefill_tokens=9_000),
                                  cand("c", 1800, inflight_prefill_tokens=4_000),
                                  cand("d", 1100, inflight_prefill_tokens=2_000)], ["a", "c"],
                 id="ties-for-the-most-queued-within-the-cap-are-kept"),
    pytest.param({"lateCap": 2}, [cand("a", 2100, inflight_prefill_tokens=2_000),
                                  cand("b", 3000, inflight_prefill_tokens=9_000),
                                  cand("c", 2100, inflight_prefill_tokens=4_000)], ["a", "c"],
                 id="none-within-the-cap-goes-where-least-late"),
    pytest.param({"lateSlack": 0.5}, [cand("a", 1200, inflight_prefill_tokens=2_000),
                                      cand("b", 3000, inflight_prefill_tokens=9_000),
                                      cand("c", 1600, inflight_prefill_tokens=4_000)], ["c"],
                 id="the-most-queued-within-the-slack-of-the-fastest-takes-it"),
    pytest.param({"lateSlack": 0.5}, [cand("a", 1200, inflight_prefill_tokens=2_000),
                                      cand("b", 3000, inflight_prefill_tokens=9_000),
                                      cand("c", 1800, inflight_prefill_tokens=4_000)], ["a"],
                 id="none-but-the-fastest-within-the-slack-keeps-the-fastest"),
    pytest.param({"lateSlack": 2, "lateCap": 3}, [cand("a", 2000, inflight_prefill_tokens=2_000),
                                                  cand("b", 3500, inflight_prefill_tokens=9_000),
                                                  cand("c", 2900, inflight_prefill_tokens=4_000)], ["c"],
                 id="the-cap-bounds-the-slack"),
]


@pytest.mark.parametrize("params, candidates, kept", CASES)
def test_a_request_late_everywhere_joins_the_most_late_work(params, candidates, kept):
    assert names(build("concentrate", params).filter(SLO, candidates, ctx())) == kept


def test_by_default_the_cap_is_five_times_the_slo():
    late = [cand("a", 4000, inflight_prefill_tokens=2_000), cand("b", 6000, inflight_prefill_tokens=9_000)]
    assert names(build("concentrate").filter(SLO, late, ctx())) == ["a"]
    assert names(build("concentrate", {"lateCap": float("inf")}).filter(SLO, late, ctx())) == ["b"]


def test_rejects_a_negative_slack():
    with pytest.raises(ConfigError, match="lateSlack"):
        build("concentrate", {"lateSlack": -0.1})


def test_without_a_ttft_slo_keeps_all():
    late = [cand("a", 5000, inflight_prefill_tokens=500), cand("b", 9000, inflight_prefill_tokens=9_000)]
    assert names(build("concentrate").filter(req(slo_tpot_ms=50.0), late, ctx())) == ["a", "b"]


def test_rejects_a_margin_below_minus_one():
    with pytest.raises(ConfigError, match="lateMargin"):
        build("concentrate", {"lateMargin": -1.5})


def test_rejects_a_cap_no_late_server_could_be_within():
    with pytest.raises(ConfigError, match="lateCap"):
        build("concentrate", {"lateCap": 0.5})
    with pytest.raises(ConfigError, match=r"'lateCap' \(1\.5\) must exceed 1 \+ 'lateMargin' \(0\.5\)"):
        build("concentrate", {"lateCap": 1.5, "lateMargin": 0.5})
    with pytest.raises(ConfigError, match=r"'lateCap' \(1\.0\) must exceed 1 \+ 'lateMargin' \(0\.0\)"):
        build("concentrate", {"lateCap": 1})
    assert build("concentrate", {"lateCap": 1.6, "lateMargin": 0.5}).params.late_cap == 1.6
    assert build("concentrate", {"lateCap": 0.9, "lateMargin": -0.2}).params.late_cap == 0.9


def test_a_request_late_where_nothing_is_queued_is_late_by_its_own_size():
    late = [cand("a", 3000, inflight_prefill_tokens=0), cand("b", 4000, inflight_prefill_tokens=9_000)]
    assert names(build("concentrate").filter(SLO, late, ctx())) == ["a", "b"]
    assert names(build("concentrate", {"onlyInABurst": False}).filter(SLO, late, ctx())) == ["b"]


BURST = [cand("a", 1500, inflight_prefill_tokens=2_000, num_running=3), cand("b", 3000, inflight_prefill_tokens=9_000)]


def test_a_request_late_everywhere_in_a_burst_is_held_until_the_cap():
    holding = build("concentrate", {"holdCap": 3})
    assert "on every one of 2 servers" in holding.hold(SLO, BURST).reason
    assert holding.hold(req(slo_ttft_ms=1000.0, stream=True, holdable=True, waited_ms=2_999.0), BURST) is not None
    assert holding.hold(req(slo_ttft_ms=1000.0, stream=True, holdable=True, waited_ms=3_000.0), BURST) is None


def test_held_requests_wait_for_an_idle_server_not_for_one_in_time():
    holding = build("concentrate", {"holdCap": 3})
    waited = req(slo_ttft_ms=1000.0, stream=True, holdable=True, waited_ms=50.0)
    in_time = [cand("a", 600, inflight_prefill_tokens=2_000, num_running=3), BURST[1]]
    assert holding.hold(SLO, in_time) is None  # a request in time somewhere is never held
    assert holding.hold(waited, in_time) is not None  # a held one waits for capacity nobody in time could use
    idle = [cand("a", 1500, num_running=0), BURST[1]]
    assert holding.hold(waited, idle) is None


@pytest.mark.parametrize("params, request_", [
    pytest.param({"holdCap": 0}, SLO, id="off"),
    pytest.param({"holdCap": 3}, req(slo_ttft_ms=1000.0, stream=True, holdable=True, priority=-1),
                 id="a-sheddable-one-is-shed-not-held"),
    pytest.param({"holdCap": 3}, req(slo_tpot_ms=50.0, holdable=True), id="no-ttft-slo"),
    pytest.param({"holdCap": 3}, req(slo_ttft_ms=1000.0, stream=True), id="a-front-that-cannot-wait"),
])
def test_what_is_never_held(params, request_):
    assert build("concentrate", params).hold(request_, BURST) is None


def test_rejects_a_negative_hold_cap():
    with pytest.raises(ConfigError, match="holdCap"):
        build("concentrate", {"holdCap": -1})


def test_by_default_a_request_is_held_for_up_to_five_times_its_slo():
    assert build("concentrate").hold(SLO, BURST).for_ms == 5_000.0
