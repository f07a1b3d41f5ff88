"""The router's scheduling engine as a pick function of the offline simulator (:mod:`sim.pool`).

Each simulated request is scheduled exactly as the router would schedule it — the same pipeline, plugins
and predictor — from what the simulator's view shows (scraped snapshots, the router's in-flight counts, the
TPOT SLOs it holds its running streams to and how many of those are over it, how its completed streams' TPOT
compared with their predictions, how far each server's latencies departed from the models', and prefix matches). A request
keeps its priority, so the admitter may shed a sheddable one (the pick returns a :class:`~sim.view.Shed`), and the
pipeline may hold one at the router (a :class:`~sim.view.Hold`: the run asks again later, with the time it waited);
``slo`` overrides every request's own SLOs when given; ``predict=False`` schedules every request with the
heuristic profile.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Mapping
from typing import Any

from headroom.contract.server_state import state_values
from headroom.router.framework.engine import Engine
from headroom.router.framework.pipeline import DEFAULT_PIPELINE, load_pipeline
from headroom.router.framework.roles import Context, LatencyPredictor, Request, ServerSnapshot
from headroom.sim.request import SimRequest
from headroom.sim.view import Hold, Pick, PickFunction, PickResult, PoolView, Shed


def engine_pick(predictor: LatencyPredictor | None, *, slo: tuple[float, float] | None = None, seed: int = 0,
                scorer_params: dict[str, Any] | None = None, picker_params: dict[str, Any] | None = None,
                pipeline: dict[str, Any] | None = None,
                plugin_params: Mapping[str, Mapping[str, Any]] | None = None, predict: bool = True) -> PickFunction:
    """A pick function running the scheduling pipeline (default: the router's) over the simulator's view.

    ``plugin_params`` maps a plugin type to parameters laid over those of every plugin of that type;
    ``scorer_params`` and ``picker_params`` do the same for the latency scorer and the picker. Without a
    ``predictor`` every request is scheduled as the router schedules it when predictions are unavailable.
    """
    config = copy.deepcopy(pipeline or DEFAULT_PIPELINE)
    overlays = {**(plugin_params or {})}
    for kind, extra in (("latency-scorer", scorer_params), ("weighted-random-picker", picker_params)):
        if extra:
            overlays[kind] = {**overlays.get(kind, {}), **extra}
    for plugin in config["plugins"]:
        if overlays.get(plugin["type"]):
            plugin["params"] = {**plugin.get("params", {}), **overlays[plugin["type"]]}
    engine = Engine(load_pipeline(config))
    rng = random.Random(seed)

    def pick(request: SimRequest, view: PoolView) -> PickResult:
        servers = [ServerSnapshot(server_id=s.server_id, pool_key=s.pool_key,
                                  running_tpot_slos_ms=view.running_tpot_slos[i], tpot_at_risk=view.tpot_at_risk(i),
                                  metrics_age_s=max(0.0, view.now - s.time_s),
                                  latency_correction=view.latency_correction(i),
                                  prefill_ms_per_token=view.prefill_pace(i), **state_values(view.server_state(i)))
                   for i, s in enumerate(view.snapshots)]
        ttft_slo, tpot_slo = slo if slo else (request.slo_ttft_ms, request.slo_tpot_ms)
        decision = engine.decide(Request(request_id=request.request_id, prompt_tokens=request.prompt_tokens,
                                         max_tokens=request.max_tokens, stream=request.stream, slo_ttft_ms=ttft_slo,
                                         slo_tpot_ms=tpot_slo, priority=request.priority, predict=predict,
                                         holdable=True, waited_ms=(view.now - request.arrival_s) * 1000.0),
                                 servers, Context(rng=rng, predictor=predictor, tpot_ratios=view.tpot_ratios))
        chosen = decision.chosen
        if decision.held is not None:
            return Hold(decision.held.reason)
        if chosen is None:
            return Shed(decision.rejection or "rejected")
        prediction = chosen.prediction
        if prediction is None:
            return Pick(chosen.server.server_id, tpot_slo_ms=decision.request.slo_tpot_ms)
        for target, version in prediction.versions.items():
            view.corrections.model_version(chosen.server.pool_key, target, version)
        model = prediction.model_ms()
        return Pick(chosen.server.server_id, model["ttft"], model["tpot"], model["e2e"], dict(prediction.versions),
                    decision.request.slo_tpot_ms, prediction.correction)

    return pick
