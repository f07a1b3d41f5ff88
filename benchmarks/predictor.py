"""Benchmarks of the predictor in process: runtime latency (``headroom bench predictor runtime``) and the
delay from publishing a version to serving it (``... update``); the gRPC server under load is
:mod:`benchmarks.predictor_grpc`.

Models are trained here with the reference hyperparameters (200 trees, depth 6) on synthetic candidate
rows: TTFT and TPOT, each a mean and a p90 model, and signed with a key made for the run (:data:`BENCH_KEY`,
trusted by :data:`BENCH_TRUST`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from headroom.contract.features import FEATURE_NAMES, FEATURE_SCHEMA, RAW_FIELDS, feature_matrix
from headroom.contract.model_update import encode_update, make_update
from headroom.contract.signing import SigningKey, TrustedKeys

if TYPE_CHECKING:
    import xgboost

    from headroom.contract.topics import KafkaSettings

REFERENCE_PARAMS = {"max_depth": 6, "eta": 0.05, "subsample": 0.8, "colsample_bytree": 0.8, "min_child_weight": 5,
                    "gamma": 0.2, "alpha": 0.01, "lambda": 0.1, "tree_method": "hist", "nthread": 1}
MODELS = (("ttft", "mean"), ("tpot", "mean"), ("ttft", "quantile"), ("tpot", "quantile"))


EFFECTIVE_PROMPT = FEATURE_NAMES.index("effective_prompt_tokens")
BENCH_KEY = SigningKey.generate()
BENCH_TRUST = TrustedKeys([BENCH_KEY.public_key])


def candidates(n: int, seed: int = 0) -> np.ndarray:
    """Feature rows of ``n`` plausible candidate servers (synthetic, for benchmarks and tests); a raw feature
    without a distribution of its own here is drawn over its probe range (a server's encoder match held to the
    request's encoder input)."""
    rng = np.random.default_rng(seed)
    inflight_tokens = rng.integers(0, 200_000, n)
    columns = {
        "kv_cache_usage": rng.uniform(0, 1, n), "num_waiting": rng.integers(0, 20, n),
        "num_running": rng.integers(0, 64, n), "prompt_tokens": rng.integers(1, 8000, n),
        "prefix_match": rng.uniform(0, 1, n), "inflight_requests": rng.integers(0, 80, n),
        "inflight_prompt_tokens": inflight_tokens, "max_tokens": rng.integers(1, 2048, n),
        "inflight_prefill_tokens": (inflight_tokens * rng.uniform(0, 1, n)).astype(np.int64),
        "last_token_age_ms": rng.exponential(20, n), "token_interval_ms": rng.uniform(5, 60, n)}
    for name, raw in RAW_FIELDS.items():
        if name not in columns:
            columns[name] = raw.draw(rng, n)
    columns["encoder_matched_size"] = np.minimum(columns["encoder_matched_size"], columns["encoder_input_size"])
    return feature_matrix(columns)


def reference_messages(trees: int = 200, rows: int = 20_000, seed: int = 0) -> list[tuple[bytes, xgboost.Booster]]:
    """Signed model-update messages (and their boosters) for the four benchmark models."""
    import xgboost

    from headroom.trainer.fit import model_bytes

    x = candidates(rows, seed)
    rng = np.random.default_rng(seed + 1)
    load = 1 + 3 * x[:, 0] + 0.2 * x[:, 1] + 0.02 * x[:, 2]
    targets = {"ttft": 20 * load + 0.01 * x[:, EFFECTIVE_PROMPT] + rng.exponential(5, rows),
               "tpot": 8 * load + rng.exponential(2, rows)}
    out = []
    for target, objective in MODELS:
        params = dict(REFERENCE_PARAMS, seed=seed)
        if objective == "quantile":
            params.update(objective="reg:quantileerror", quantile_alpha=0.9)
        booster = xgboost.train(params, xgboost.DMatrix(x, label=targets[target]), trees)
        update = make_update(model=model_bytes(booster), version=1, pool_key="bench", target=target,
                             objective=objective, quantile=0.9 if objective == "quantile" else None,
                             feature_schema=FEATURE_SCHEMA, model_format="ubj", created_at=time.time())
        out.append((BENCH_KEY.sign(encode_update(update)), booster))
    return out


def percentiles(seconds: list[float]) -> dict[str, float]:
    ms = np.asarray(seconds) * 1000
    return {"p50_ms": float(np.percentile(ms, 50)), "p90_ms": float(np.percentile(ms, 90)),
            "p99_ms": float(np.percentile(ms, 99)),
            "mean_ms": float(ms.mean())}


def bench_runtime(candidate_counts: Sequence[int] = (1, 10, 100, 1000), iterations: int = 2000, models: int = 4,
                  threads: int = 1) -> list[dict[str, object]]:
    """In-process: one ``ModelRuntime.predict`` of all models, and XGBoost ``inplace_predict`` per model."""
    from headroom.predictor.kernels import available_engines
    from headroom.predictor.runtime import ModelRuntime

    messages = reference_messages()[:models]
    results: list[dict[str, object]] = []
    for engine in available_engines():
        runtime = ModelRuntime(trust=BENCH_TRUST, engine=engine, threads=threads)
        for raw, _ in messages:
            runtime.apply(raw)
        for n in candidate_counts:
            rows = candidates(n, seed=n)
            runs = iterations if engine == "native" else max(20, iterations // 50)
            results.append({"engine": engine, "models": models, "candidates": n, "threads": threads,
                            **percentiles(_time(partial(runtime.predict, "bench", rows), runs))})
    boosters = [b for _, b in messages]
    for n in candidate_counts:
        rows = candidates(n, seed=n)
        results.append({"engine": "xgboost inplace_predict", "models": models, "candidates": n,
                        **percentiles(_time(partial(_inplace_predict, boosters, rows), max(50, iterations // 10)))})
    return results


def _inplace_predict(boosters: list[xgboost.Booster], rows: np.ndarray) -> list[np.ndarray]:
    return [b.inplace_predict(rows) for b in boosters]


def _time(work: Callable[[], object], runs: int) -> list[float]:
    for _ in range(min(50, runs)):
        work()
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        work()
        samples.append(time.perf_counter() - started)
    return samples


def bench_verify(iterations: int = 2000, models: int = 4) -> list[dict[str, object]]:
    """Per reference-size update: opening the signed message (the Ed25519 check), decoding it with the check
    and without (an unsigned message, allowed), and the whole of ``ModelRuntime.apply`` (load, tree layout,
    probe) beside them, in the same run."""
    from headroom.contract.model_update import decode_update
    from headroom.predictor.runtime import ModelRuntime

    unsigned_allowed = TrustedKeys(allow_unsigned=True)
    results: list[dict[str, object]] = []
    for raw, _ in reference_messages()[:models]:
        update = decode_update(raw, BENCH_TRUST)
        unsigned = encode_update(update)
        steps: dict[str, Callable[[], object]] = {"open signed (Ed25519 verify)": partial(BENCH_TRUST.open, raw),
                 "decode signed": partial(decode_update, raw, BENCH_TRUST),
                 "decode unsigned": partial(decode_update, unsigned, unsigned_allowed),
                 "sign (publisher)": partial(BENCH_KEY.sign, unsigned)}
        row: dict[str, object] = {"model": update.key, "message_bytes": len(raw)}
        for name, step in steps.items():
            row[name] = percentiles(_time(step, iterations))

        def apply_fresh(raw: bytes = raw) -> None:
            ModelRuntime(trust=BENCH_TRUST).apply(raw)

        row["runtime.apply (all checks)"] = percentiles(_time(apply_fresh, max(20, iterations // 100)))
        results.append(row)
    return results


def bench_update(kafka: KafkaSettings, versions: int = 10) -> dict[str, object]:
    """Publish→serving delay: a fresh compacted topic, one instance tailing it, ``versions`` new TTFT versions
    published one after another (reference-size models), each timed until ``predict`` uses it."""
    import dataclasses
    import uuid

    from headroom import kafka_clients
    from headroom.contract.model_update import decode_update
    from headroom.contract.settings import from_env
    from headroom.contract.topics import MODEL_MESSAGE_MAX_BYTES, TopicSpec
    from headroom.kafka_topics import ensure_topics
    from headroom.predictor.runtime import ModelRuntime
    from headroom.predictor.server import PredictorServer
    from headroom.predictor.settings import PredictorSettings

    topic = f"bench-model-updates-{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka, [TopicSpec(topic, 1, {"cleanup.policy": "compact"})])
    kafka = dataclasses.replace(kafka, model_topic=topic)
    template = decode_update(reference_messages()[0][0], BENCH_TRUST)
    producer = kafka_clients.producer(kafka, {"message.max.bytes": MODEL_MESSAGE_MAX_BYTES})
    server = PredictorServer(from_env(PredictorSettings, {}, host="127.0.0.1", port=0, metrics_port=-1), kafka,
                             runtime=ModelRuntime(trust=BENCH_TRUST))
    server.start()
    delays = []
    try:
        for version in range(1, versions + 1):
            raw = BENCH_KEY.sign(encode_update(dataclasses.replace(template, version=version, created_at=time.time())))
            started = time.perf_counter()
            producer.produce(topic, key=template.key.encode(), value=raw)
            producer.flush(10)
            for _ in range(30_000):
                if server.runtime.version(template.pool_key, template.target, template.objective) == version:
                    break
                time.sleep(0.001)
            delays.append(time.perf_counter() - started)
    finally:
        server.stop(grace=1.0)
    return {"versions": versions, "model_bytes": len(template.model), **percentiles(delays),
            "max_ms": 1000 * max(delays)}
