"""Two server roles in one pool: a pool key per role, or one model with the role as a feature
(``headroom bench pod-type``).

The simulator replays a trace on a pool of two server kinds whose latencies follow different laws — H100s
and A100s (prefill 3.3× slower, steps 1.6× longer: ``sim.profile``), standing in for prefill/decode roles,
which the simulator does not split a request between. Its telemetry, in completion order, is cut into the
oldest ``train_fraction`` for training (the newest ``rows`` of it, for several sizes) and the rest for
testing. Each target's models are fitted with the trainer's hyperparameters and log target three ways:

- ``pool_key``: one model per role, trained on that role's rows only (what headroom does with ``pod_type``);
- ``feature``: one model over both roles with the role as one more feature (llm-d's ``pod_type_cat``);
- ``ignored``: one model over both roles that cannot tell them apart.

Scored by MAPE and p90 coverage on the test rows of both roles.
"""

from __future__ import annotations

import numpy as np

from headroom.contract.features import records_matrix
from headroom.contract.targets import target_value
from headroom.contract.telemetry import TelemetryRecord
from headroom.trainer.evaluation import score
from headroom.trainer.fit import training_target
from headroom.trainer.params import TrainParams

WAYS = ("pool_key", "feature", "ignored")


def simulate(trace: str, requests: int, servers_per_role: int, load: float, seed: int) -> list[TelemetryRecord]:
    from headroom.sim.capacity import capacity_rps
    from headroom.sim.policies import policy
    from headroom.sim.pool import SimServerSpec, run
    from headroom.sim.profile import A100, H100
    from headroom.sim.traces import load_azure, load_mooncake

    loader = {"azure": load_azure, "mooncake": load_mooncake}[trace]
    capacity = (capacity_rps(loader(limit=500), "h100") + capacity_rps(loader(limit=500), "a100")) * servers_per_role
    pool = [SimServerSpec(f"{role}-{i}", profile, f"pool-{role}") for role, profile in (("h100", H100), ("a100", A100))
            for i in range(servers_per_role)]
    trace_requests = loader(rate=load * capacity, limit=requests, stream_fraction=1.0, seed=seed)
    result = run(trace_requests, pool, policy("composite", seed), seed=seed)
    return sorted(result.records, key=lambda r: r.completion_ts)


Labelled = tuple[TelemetryRecord, float]  # a record and its observed value of the target


def compare(records: list[TelemetryRecord], train_rows: tuple[int, ...], train_fraction: float = 0.7,
            params: TrainParams = TrainParams()) -> list[dict[str, str | int | float]]:
    """MAPE and p90 coverage of each way, per target and training size."""
    cut = int(len(records) * train_fraction)
    results = []
    for target in ("ttft", "tpot"):
        rows = [(r, target_value(r, target)) for r in records]
        train = [(r, v) for r, v in rows[:cut] if v is not None]
        test = [(r, v) for r, v in rows[cut:] if v is not None]
        for size in train_rows:
            recent = train[-size:]
            for objective in ("mean", "quantile"):
                p = TrainParams(**{**params.__dict__, "objective": objective})
                for way in WAYS:
                    predicted = _fit_predict(way, recent, test, p)
                    metrics = score(np.array([v for _, v in test]), predicted, p.quantile)
                    results.append({"target": target, "train_rows": len(recent), "objective": objective, "way": way,
                                    "mape": metrics.mape, "coverage": metrics.coverage, "test_rows": len(test)})
    return results


def _fit_predict(way: str, train: list[Labelled], test: list[Labelled], params: TrainParams) -> np.ndarray:
    import xgboost

    def matrix(rows: list[Labelled]) -> np.ndarray:
        features = records_matrix([r for r, _ in rows])
        if way == "feature":
            features = np.column_stack([features, [_role(r) for r, _ in rows]])
        return features

    def fit(rows: list[Labelled]) -> xgboost.Booster:
        label = training_target(np.array([v for _, v in rows]), params.target_transform)
        return xgboost.train(params.booster_params(), xgboost.DMatrix(matrix(rows), label=label), params.n_trees)

    def predict(booster: xgboost.Booster, rows: list[Labelled]) -> np.ndarray:
        raw = booster.inplace_predict(matrix(rows))
        return np.exp(raw) if params.target_transform == "log" else raw

    if way != "pool_key":
        return predict(fit(train), test)
    out = np.zeros(len(test))
    for role in {_role(r) for r, _ in test}:
        index = [i for i, (r, _) in enumerate(test) if _role(r) == role]
        out[index] = predict(fit([row for row in train if _role(row[0]) == role]), [test[i] for i in index])
    return out


def _role(record: TelemetryRecord) -> int:
    return int(record.pool_key.endswith("a100"))
