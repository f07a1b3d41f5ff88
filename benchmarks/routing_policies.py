"""The policies the routing-quality benchmark compares: every baseline, headroom's pipelines and the oracle.

Baselines (:data:`BASELINES`, name → factory of a pick function from a seed, and whether it is
deterministic — a deterministic baseline gives the same run for every seed, so it is run once):

- ``round-robin``, ``random``, ``least-queue``, ``prefix-least-queue``, ``least-kv``, ``composite``: the
  simulator's policies (:mod:`sim.policies`); ``composite`` is the reference's fallback scorer (KV free,
  relative queue, prefix match, weights 1/1/1) taking the top score.
- ``llm-d``: llm-d's heuristic scheduling stack as it runs in production — prefix-cache, queue and
  KV-cache-utilization scorers weighted 3/2/2, picked by the weighted-random picker (probability ∝ score) —
  run through the router's own engine as a pipeline; ``llm-d argmax`` the same stack with the max-score
  picker.

Headroom's policies are the router's pipeline (default or given as data) through
:func:`backtest.router_policy.engine_pick`, with ``overlays`` mapping a plugin name or type to parameters laid
over its own. The oracle sends each request where its true TTFT is lowest (greedy, simulated forward).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from typing import Any

from headroom.backtest.router_policy import engine_pick
from headroom.router.framework.pipeline import DEFAULT_PIPELINE
from headroom.router.framework.roles import LatencyPredictor
from headroom.sim.oracle import oracle_pick
from headroom.sim.policies import policy
from headroom.sim.view import PickFunction

Factory = Callable[[int], PickFunction]


def heuristic_stack(picker: Mapping[str, Any], prefix: float = 3.0, queue: float = 2.0,
                    kv: float = 2.0) -> dict[str, Any]:
    """A heuristic-only pipeline: prefix-match, queue and KV-free scorers with these weights, then ``picker``."""
    plugins = [{"type": "prefix-match-scorer", "name": "prefix"}, {"type": "queue-scorer", "name": "queue"},
               {"type": "kv-cache-free-scorer", "name": "kv"}, {"name": "picker", **picker},
               {"type": "predicted-latency-producer", "name": "producer"}]
    scorers = [{"ref": "prefix", "weight": prefix}, {"ref": "queue", "weight": queue}, {"ref": "kv", "weight": kv}]
    return {"predictedProfile": "unused", "heuristicProfile": "stack", "plugins": plugins,
            "profiles": [{"name": "stack", "plugins": [*scorers, {"ref": "picker"}]},
                         {"name": "unused", "plugins": [{"ref": "producer"}, {"ref": "picker"}]}]}


LLM_D = heuristic_stack({"type": "weighted-random-picker"})
LLM_D_ARGMAX = heuristic_stack({"type": "max-score-picker"})


def _simulator(name: str) -> Factory:
    return lambda seed: policy(name, seed)


def _stack(config: dict[str, Any]) -> Factory:
    return lambda seed: engine_pick(None, seed=seed, pipeline=config, predict=False)


BASELINES: dict[str, tuple[Factory, bool]] = {
    "round-robin": (_simulator("round-robin"), True),
    "random": (_simulator("random"), False),
    "least-queue": (_simulator("least-queue"), True),
    "prefix-least-queue": (_simulator("prefix-least-queue"), True),
    "least-kv": (_simulator("least-kv"), True),
    "composite": (_simulator("composite"), True),
    "llm-d": (_stack(LLM_D), False),
    "llm-d argmax": (_stack(LLM_D_ARGMAX), False),
}


def headroom(predictor: LatencyPredictor, slo: tuple[float, float] | None, seed: int = 0,
             pipeline: Mapping[str, Any] | None = None,
             overlays: Mapping[str, Mapping[str, Any]] | None = None) -> PickFunction:
    """Headroom's router: ``pipeline`` (default: the router's) with ``overlays`` (plugin name or type →
    parameters), SLO headers ``slo`` on every request (None: none)."""
    config = copy.deepcopy(dict(pipeline or DEFAULT_PIPELINE))
    for plugin in config["plugins"]:
        for key in (plugin["type"], plugin.get("name")):
            if overlays and key in overlays:
                plugin["params"] = {**plugin.get("params", {}), **overlays[key]}
    return engine_pick(predictor, slo=slo, seed=seed, pipeline=config)


def oracle(seed: int = 0) -> PickFunction:
    return oracle_pick
