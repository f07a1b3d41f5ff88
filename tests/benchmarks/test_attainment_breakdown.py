"""The attainment breakdown accounts for every request once — per server, per tenth of the arrival window,
and in its total — on a real simulated run of a baseline, and runs the policies router_quality would."""

import re

from headroom.benchmarks.attainment_breakdown import breakdown
from headroom.benchmarks.router_quality import Workload
from headroom.benchmarks.routing_policies import BASELINES
from headroom.contract.signing import TrustedKeys
from headroom.predictor.runtime import ModelRuntime
from headroom.router.framework.predictors import EmbeddedPredictor
from headroom.sim.pool import run, uniform_pool


def test_every_request_is_counted_once_per_server_per_tenth_and_in_the_total(capsys):
    _, requests = Workload("code", None, 300).slices(40.0)
    pick, _ = BASELINES["least-queue"]
    breakdown("least-queue", requests, run(requests, uniform_pool(2), pick(0), seed=0), (1000.0, 50.0))
    out = capsys.readouterr().out
    met_total = int(re.search(r"least-queue: (\d+) of 300 met", out).group(1))
    per_server = [tuple(map(int, m)) for m in re.findall(r"^  \S+: (\d+) / (\d+) / (\d+) / (\d+)$", out, re.M)]
    tenths = [tuple(map(int, m)) for m in re.findall(r"(\d+)/(\d+)", out.split("arrival window:")[1].splitlines()[0])]
    assert len(per_server) == 2 and sum(n for n, *_ in per_server) == 300
    assert sum(met for _, met, *_ in per_server) == met_total == sum(met for met, _ in tenths)
    assert len(tenths) == 10 and sum(n for _, n in tenths) == 300


def test_the_breakdown_runs_the_policies_asked_for_as_router_quality_does():
    from headroom.benchmarks.router_quality import arguments, policies

    predictor = EmbeddedPredictor(ModelRuntime(trust=TrustedKeys()))  # no models: the factories are not called
    args = arguments("").parse_args(["--baselines", "least-kv,random", "--variant", 'x={"producer":{}}'])
    assert [p[0] for p in policies(args, (1000.0, 50.0), predictor)] == ["least-kv", "random", "headroom",
                                                                         "headroom no-SLO", "x", "oracle"]
    args = arguments("").parse_args(["--baselines", "", "--no-oracle"])
    assert [p[0] for p in policies(args, (1000.0, 50.0), predictor, include_no_slo=False)] == ["headroom"]
