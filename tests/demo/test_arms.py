"""The two-arm harness's plan of a scenario: which servers run and which the routers start with."""

import pytest

from headroom.demo.arms import Layout
from headroom.sim.scenarios import Replace, scenario


def test_the_live_layout_runs_every_server_the_scenario_uses_and_routes_to_its_pool():
    assert Layout.of(scenario("replace")) == Layout((("h100", 4), ("a100", 1)), 0.1,
                                                 ("h100-0", "h100-1", "h100-2", "a100-0"))
    with pytest.raises(ValueError, match="live servers are named h100-0 … h100-3, not h100-7"):
        Layout.of(scenario("replace").with_(change=Replace(remove="h100-0", add="h100-7")))
