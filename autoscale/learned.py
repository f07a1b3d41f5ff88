"""The learned TTFT model behind headroom's predicted-TTFT signal, in closed-loop runs as in production.

The model learns from the pool's own telemetry: the trace's first ``requests`` requests play on fixed
pools of each size in ``pools`` (random routing, so idle to deeply queued servers are all seen), and the
TTFT of the streaming ones trains an XGBoost model through the trainer's own :func:`trainer.fit.fit`
(the reference hyperparameters, one thread, seeded: the same trace and seed give the same model).

:class:`LearnedTtft` then answers what the router's signal asks (:mod:`router.app.autoscale_signals`): the
TTFT a reference request (``reference_prompt_tokens``, no prefix match) would see on each ready server,
from the router's view of it — scraped metrics plus the router's own in-flight counts and step rhythm —
through :func:`contract.features.feature_matrix`, the function routing predicts with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import xgboost as xgb

from headroom.contract.features import RAW_COLUMNS, RAW_DEFAULTS, REQUEST_FIELDS, feature_matrix
from headroom.contract.scaling_signals import ReportedMetrics
from headroom.contract.server_state import SERVER_FIELDS
from headroom.contract.targets import target_value
from headroom.sim.policies import policy
from headroom.sim.pool import run, uniform_pool
from headroom.sim.profile import ServerProfile
from headroom.sim.request import SimRequest
from headroom.sim.view import PoolView
from headroom.trainer.fit import fit, predict
from headroom.trainer.params import TrainParams
from headroom.trainer.samples import Samples

REFERENCE_PROMPT_TOKENS = 1024  # the router's default (HEADROOM_ROUTER_AUTOSCALE_PROMPT_TOKENS)


@dataclass(frozen=True)
class TrainingPlan:
    """How much of the trace trains the model, on which fixed pool sizes."""

    requests: int = 2000
    pools: tuple[int, ...] = (1, 2, 4)
    reference_prompt_tokens: int = REFERENCE_PROMPT_TOKENS


def learn_ttft_model(requests: Sequence[SimRequest], server: ServerProfile, seed: int,
                     plan: TrainingPlan = TrainingPlan()) -> xgb.Booster:
    """A TTFT booster trained on the pool's simulated telemetry for the head of ``requests``."""
    head = list(requests[:plan.requests])
    records = []
    for size in plan.pools:
        result = run(head, uniform_pool(size, server), policy("random", seed), seed=seed)
        records += [r for r in result.records if target_value(r, "ttft") is not None]
    if not records:
        raise ValueError("no streaming request completed, so there is no TTFT to learn from")
    raw = np.array([[getattr(r, name) for name in RAW_COLUMNS] for r in records], dtype=np.float64)
    samples = Samples(raw=raw, values=np.array([r.ttft_ms for r in records], dtype=np.float64),
                      times=np.array([r.completion_ts for r in records], dtype=np.float64),
                      strata=np.full(len(records), "", dtype=object))
    return fit(samples, TrainParams(seed=seed))


class LearnedTtft:
    """A :class:`~contract.scaling_signals.TtftPredictor` over the router's view, as ``view()`` returns it."""

    def __init__(self, booster: xgb.Booster, view: Callable[[], PoolView],
                 reference_prompt_tokens: int = REFERENCE_PROMPT_TOKENS) -> None:
        self.booster, self.view, self.prompt_tokens = booster, view, reference_prompt_tokens

    def predict_ttft_ms(self, servers: Sequence[ReportedMetrics]) -> Mapping[str, float]:
        view = self.view()
        index = {s.server_id: i for i, s in enumerate(view.snapshots)}
        rows = [(s.server_id, index[s.server_id]) for s in servers if s.server_id in index]
        if not rows:
            return {}
        states = [view.server_state(i, prefix_match=0.0) for _, i in rows]
        columns: dict[str, list[float]] = {name: [getattr(s, name) for s in states] for name in SERVER_FIELDS}
        columns.update({name: [RAW_DEFAULTS[name]] * len(rows) for name in REQUEST_FIELDS if name in RAW_DEFAULTS},
                       prompt_tokens=[self.prompt_tokens] * len(rows))
        predicted = predict(self.booster, feature_matrix(columns))
        return {sid: float(v) for (sid, _), v in zip(rows, predicted)}
