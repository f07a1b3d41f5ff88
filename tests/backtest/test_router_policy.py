import pytest

from headroom.backtest.router_policy import engine_pick
from headroom.router.errors import ConfigError
from headroom.sim.pool import run, uniform_pool
from headroom.sim.synthetic import generate, poisson_arrivals
from tests.router.routercases import TablePredictor


def test_routes_a_simulated_pool_with_the_predictions_it_used():
    requests = generate(poisson_arrivals(rate=20.0, duration_s=2.0, seed=3), seed=3)[:40]
    result = run(requests, uniform_pool(4), engine_pick(TablePredictor(), slo=(1000.0, 50.0)), seed=0)
    assert len(result.outcomes) == len(requests)
    assert all(r.predicted_ttft_ms is not None and r.predicted_tpot_ms == 20.0 for r in result.records)


@pytest.mark.parametrize("overlay, message", [
    pytest.param({"plugin_params": {"prefix-cache-affinity-filter": {"affinityThreshold": 1.5}}},
                 r"plugin 'affinity': parameter 'affinityThreshold' must be within", id="plugin-params"),
    pytest.param({"scorer_params": {"headroomSelectionStrategy": "sideways"}},
                 r"plugin 'latency': parameter 'headroomSelectionStrategy'", id="scorer-params"),
    pytest.param({"picker_params": {"sharpness": 0.0}}, r"plugin 'picker': parameter 'sharpness'", id="picker-params"),
])
def test_parameter_overlays_reach_their_plugins(overlay, message):
    with pytest.raises(ConfigError, match=message):
        engine_pick(TablePredictor(), **overlay)
