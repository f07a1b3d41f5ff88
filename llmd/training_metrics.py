"""``GET /metrics`` of llm-d's training API: headroom's own metrics, then the reference's names.

headroom's (``headroom_llmd_*``, Prometheus-typed): samples by where they went (``telemetry``,
``dead_letter``) and refused samples by reason kind, calls refused by the intake bound (429) or for a missing
token (401), bodies refused whole (422), samples waiting for the intake thread, what became of the records
sent to Kafka, samples per bucket, the newest version of each model key and its holdout metrics.

The reference's (untyped lines, as its training server writes them, so its clients and dashboards read them
unchanged): ``model_type{type}``, ``objective_type{type}``, ``model_quantile{}``, ``ensemble_active{}`` and
``ensemble_mode{}`` (0: headroom has no queue-gated ensemble), ``ttft_intercept{}``/``tpot_intercept{}`` (0,
as the reference writes for trees) and ``<target>_importance{feature}`` (the newest model's gain, normalised;
0 for every feature while the target is answered with the prior, which reads none), the bucket counts
``training_samples_count{model,queue_bucket,cache_bucket,prefix_bucket}`` and their sums by queue, cache and
prefix bucket (samples sent since the start or the last ``/flush``; the reference counts those its buckets
hold), and the holdout metrics of the newest version (``idx="0"``): ``<target>_quantile_loss``,
``<target>_coverage_percent``, ``<target>_violation_rate_percent`` and the targets, or ``<target>_mae``.
llm-d's feature names stand for headroom's features where one maps to the other
(:data:`headroom.llmd_terms.RAW_COLUMN_OF`); headroom's own names for the others.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from prometheus_client.core import Metric

from headroom.contract.features import FEATURE_NAMES
from headroom.contract.strata import KV_BUCKETS, PREFIX_BUCKETS, QUEUE_BUCKETS
from headroom.llmd_terms import RAW_COLUMN_OF
from headroom.metric_table import MetricTable, read_counter, read_gauge

if TYPE_CHECKING:
    from headroom.llmd.training_api import TrainingApi

LLMD_NAME = {headroom: llmd for llmd, headroom in RAW_COLUMN_OF.items()}
TARGETS = ("ttft", "tpot")


class TrainingApiMetrics(MetricTable):
    """headroom's metrics of a training API, read at scrape time (:class:`Collector`)."""

    samples = read_counter("headroom_llmd_samples", "Training samples by where they went.", "outcome")
    refused_samples = read_counter("headroom_llmd_refused_samples", "Samples refused at once (sent to the "
                                   "dead-letter topic, listed in the answer), by reason kind.", "reason")
    refused_calls = read_counter("headroom_llmd_refused_calls", "Bulk calls refused whole, by status: 422 (invalid "
                                 "body), 429 (intake full), 401 (no valid token).", "status")
    pending_samples = read_gauge("headroom_llmd_pending_samples", "Samples admitted and not yet sent.")
    deliveries = read_counter("headroom_llmd_deliveries", "What became of the records and dead letters sent to "
                              "Kafka.", "outcome")
    bucket_samples = read_counter("headroom_llmd_bucket_samples", "Samples sent per target and stratum (the "
                                  "reference's queue × KV-cache × prefix buckets).",
                                  "model", "queue_bucket", "cache_bucket", "prefix_bucket")
    model_version = read_gauge("headroom_llmd_model_version", "Newest listed version per model key.", "model_key")
    model_holdout = read_gauge("headroom_llmd_model_holdout", "Holdout metrics of the newest version.",
                               "model_key", "metric")


class Collector:
    """headroom's metrics of a training API (:class:`TrainingApiMetrics`), for a ``prometheus_client`` registry."""

    def __init__(self, api: TrainingApi) -> None:
        self.api = api

    def collect(self) -> Iterator[Metric]:
        api, table = self.api, TrainingApiMetrics
        with api.lock:
            outcomes, refusals = dict(api.outcomes), sorted(api.refused.items())
        samples = table.samples.make()
        for outcome in ("telemetry", "dead_letter"):
            samples.add_metric([outcome], outcomes.get(outcome, 0))
        refused = table.refused_samples.make()
        for reason, count in refusals:
            refused.add_metric([reason], count)
        calls = table.refused_calls.make()
        for status, count in (("422", api.rejected_bodies), ("429", api.intake.refused_calls),
                              ("401", api.unauthenticated)):
            calls.add_metric([status], count)
        pending = table.pending_samples.make()
        pending.add_metric([], api.intake.pending)
        deliveries = table.deliveries.make()
        for outcome, count in sorted(api.deliveries().items()):
            deliveries.add_metric([outcome], count)
        buckets = table.bucket_samples.make()
        with api.lock:
            totals = sorted(api.buckets_total.items())
        for (model, q, c, p), n in totals:
            buckets.add_metric([model, str(q), str(c), str(p)], n)
        version, holdout = table.model_version.make(), table.model_holdout.make()
        for key, shelved in sorted(api.shelf.models.items()):
            version.add_metric([key], shelved.update.version)
            for metric, value in sorted(shelved.update.holdout_metrics.items()):
                holdout.add_metric([key, metric], value)
        yield from (samples, refused, calls, pending, deliveries, buckets, version, holdout)


def reference_lines(api: TrainingApi) -> list[str]:
    """The reference training server's metric lines, from what this server knows."""
    models = api.models
    q = models.quantile()
    lines = ['model_type{type="xgboost"} 1', f'objective_type{{type="{api.objective}"}} 1',
             f"model_quantile{{}} {q}", "ensemble_active{} 0", "ensemble_mode{} 0"]
    for target in TARGETS:
        shelved = models.model(target)
        lines.append(f"{target}_intercept{{}} 0.0")
        for feature, gain in importances(shelved.booster if shelved else None).items():
            lines.append(f'{target}_importance{{feature="{feature}"}} {gain:.6f}')
    counts: Counter[tuple[str, str, int]] = Counter()
    with api.lock:
        held = sorted(api.buckets.items())
    for (model, queue, cache, prefix), n in held:
        lines.append(f'training_samples_count{{model="{model}",queue_bucket="{queue}",cache_bucket="{cache}",'
                     f'prefix_bucket="{prefix}"}} {n}')
        counts[model, "queue", queue] += n
        counts[model, "cache", cache] += n
        counts[model, "prefix", prefix] += n
    for model in TARGETS:
        lines += [f'training_samples_queue_total{{model="{model}",queue_bucket="{b}"}} {counts[model, "queue", b]}'
                  for b in range(len(QUEUE_BUCKETS))]
        lines += [f'training_samples_cache_total{{model="{model}",cache_bucket="{b}"}} {counts[model, "cache", b]}'
                  for b in range(KV_BUCKETS)]
        lines += [f'training_samples_prefix_total{{model="{model}",prefix_bucket="{b}",range="{b / PREFIX_BUCKETS:.2f}-'
                  f'{(b + 1) / PREFIX_BUCKETS:.2f}"}} {counts[model, "prefix", b]}' for b in range(PREFIX_BUCKETS)]
    for target in TARGETS:
        shelved = models.model(target)
        shown = shelved is not None and shelved.update.version > api.scores_after.get(shelved.update.key, 0)
        lines += _scores(target, shelved.update.holdout_metrics if shelved and shown else {}, api.objective)
    if api.objective == "quantile":
        lines += [f"target_coverage_percent{{}} {q * 100:.1f}",
                  f"target_violation_rate_percent{{}} {(1 - q) * 100:.1f}"]
    return lines


def importances(booster: Any) -> dict[str, float]:
    """Each feature's share of the model's total gain, under llm-d's name where it has one; all 0 without a
    model (the prior reads no feature)."""
    names = [LLMD_NAME.get(name, name) for name in FEATURE_NAMES]
    if booster is None:
        return dict.fromkeys(names, 0.0)
    gains = booster.get_score(importance_type="total_gain")
    index = {name: i for i, name in enumerate(booster.feature_names or [f"f{i}" for i in range(len(names))])}
    total = sum(gains.values()) or 1.0
    shares = dict.fromkeys(names, 0.0)
    for feature, gain in gains.items():
        if feature in index and index[feature] < len(names):
            shares[names[index[feature]]] = gain / total
    return shares


def _scores(target: str, metrics: dict[str, float], objective: str) -> list[str]:
    if objective == "mean":
        return [f'{target}_mae{{idx="0"}} {metrics["mae"]:.6f}'] if "mae" in metrics else []
    lines = [f'{target}_quantile_loss{{idx="0"}} {metrics["pinball"]:.6f}'] if "pinball" in metrics else []
    if "coverage" in metrics:
        lines += [f'{target}_coverage_percent{{idx="0"}} {100 * metrics["coverage"]:.6f}',
                  f'{target}_violation_rate_percent{{idx="0"}} {100 * (1 - metrics["coverage"]):.6f}']
    return lines
