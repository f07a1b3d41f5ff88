"""Builders shared by the router tests: servers, candidates with predictions, a table predictor."""

from __future__ import annotations

import functools
import random
import tempfile
from pathlib import Path

import numpy as np

from headroom.router.errors import PredictionUnavailable
from headroom.router.framework.roles import Candidate, Context, Prediction, PredictionBatch, Request, ServerSnapshot


def server(name: str, **state) -> ServerSnapshot:
    defaults = {"kv_cache_usage": 0.0, "num_waiting": 0, "num_running": 1,  # busy unless a case says idle
                "prefix_match": 0.0, "inflight_requests": 0, "inflight_prompt_tokens": 0}
    defaults.update(state)
    return ServerSnapshot(server_id=name, address=f"127.0.0.1:{8000 + abs(hash(name)) % 1000}", **defaults)


def cand(name: str, ttft: float | None = None, tpot: float = 10.0, *, slo_ttft: float | None = None,
         slo_tpot: float | None = None, **state) -> Candidate:
    """A candidate; with ``ttft`` it carries a prediction and the headroom against the given SLOs."""
    snap = server(name, **state)
    if ttft is None:
        return Candidate(server=snap, fallback_reason="prediction-failed")
    return Candidate(server=snap, prediction=Prediction(ttft_ms=ttft, tpot_ms=tpot),
                     ttft_headroom_ms=None if slo_ttft is None else slo_ttft - ttft,
                     tpot_headroom_ms=None if slo_tpot is None else slo_tpot - tpot)


def ctx(seed: int = 0, predictor=None) -> Context:
    return Context(rng=random.Random(seed), predictor=predictor)


def req(**fields) -> Request:
    fields.setdefault("request_id", "r1")
    fields.setdefault("prompt_tokens", 512)
    return Request(**fields)


class TablePredictor:
    """Predicts TTFT = base + per_waiting·waiting, TPOT fixed; pools listed in ``unavailable`` raise."""

    def __init__(self, base: float = 100.0, per_waiting: float = 50.0, tpot: float = 20.0,
                 unavailable: dict[str, str] | None = None, failing_rows: set[int] = frozenset(), version: int = 3):
        self.base, self.per_waiting, self.tpot = base, per_waiting, tpot
        self.unavailable = unavailable or {}
        self.failing_rows = failing_rows
        self.version = version
        self.calls: list[tuple[str, np.ndarray]] = []

    def predict(self, pool_key: str, features: np.ndarray) -> PredictionBatch:
        self.calls.append((pool_key, features.copy()))
        if pool_key in self.unavailable:
            raise PredictionUnavailable(self.unavailable[pool_key])
        n = features.shape[0]
        waiting = features[:, 1]
        ok = np.array([i not in self.failing_rows for i in range(n)])
        return PredictionBatch(values={"ttft": self.base + self.per_waiting * waiting, "tpot": np.full(n, self.tpot)},
                               ok=ok, versions={"ttft": self.version, "tpot": self.version})


ROUTER_SETTINGS = {"httpPort": 0, "pickPort": 0, "extProcPort": 0, "telemetry": False, "predictor": "none",
                   "scrapeIntervalS": 0.02, "seed": 1}  # the ext_proc_front fixture sets extProcFront


def router_config(addresses, *, scheduling=None, environ=None, **settings):
    """A router config over live servers at ``addresses``: free ports, no Kafka, no model tailing; ``environ``
    holds the settings that come from the environment only (TLS, model signing)."""
    from headroom.router.app.config import load_config
    base = {**ROUTER_SETTINGS, **settings}
    data = {"settings": base, "servers": [{"id": f"s{i}", "address": a} for i, a in enumerate(addresses)]}
    if scheduling is not None:
        data["scheduling"] = scheduling
    return load_config(data, environ=environ or {})


GATEWAY_TOKEN = "gateway-token-1"
OPEN_TELEMETRY = {"HEADROOM_ROUTER_UNAUTHENTICATED_TELEMETRY": "true"}  # callers' reports become telemetry unchecked


@functools.cache
def gateway_environ() -> dict[str, str]:
    """The environment of a router whose gateway authenticates with :data:`GATEWAY_TOKEN` (a file made once)."""
    path = Path(tempfile.mkdtemp(prefix="headroom-gateway-")) / "tokens"
    path.write_text(GATEWAY_TOKEN + "\n")
    return {"HEADROOM_ROUTER_GATEWAY_TOKENS_FILE": str(path)}


def in_flight(router) -> tuple[int, int]:
    """Requests and prefill tokens the router has in flight, over all servers."""
    loads = router.pool.inflight.load().values()
    return sum(load.requests for load in loads), sum(load.prefill_tokens for load in loads)


async def wait_for(condition, timeout_s: float = 5.0, step_s: float = 0.01) -> bool:
    import asyncio
    for _ in range(int(timeout_s / step_s)):
        if condition():
            return True
        await asyncio.sleep(step_s)
    return condition()
