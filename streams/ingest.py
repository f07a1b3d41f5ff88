"""One telemetry message in, its effects out: window rows, residuals fed to drift detectors, or a dead letter.

:class:`Ingestor` holds no Kafka objects; the consuming loop (:mod:`streams.consume`) hands it each
message's bytes, partition and offset, sends dead letters, and now and then writes
:meth:`~streams.windows.Windows.flush` to the table. Records the window
already holds (at or below the partition's high-water mark) are skipped, so a replay after a restart
never adds a record twice. When a drift detector fires, the window can forget rows older than
``drift_memory_s``: they describe the regime that just ended, and keeping them would slow the next
model's adaptation. A request to forget (:mod:`contract.window_forget`, llm-d's ``/flush``) drops the
rows of its pool key completed before its time, in every target's window.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from operator import attrgetter

from headroom.contract.features import RAW_COLUMNS
from headroom.contract.strata import stratum_of
from headroom.contract.targets import TARGETS, predicted_value, target_value
from headroom.contract.telemetry import InvalidRecord, TelemetryRecord, decode
from headroom.contract.window_forget import decode as decode_forget
from headroom.streams.settings import PipelineSettings
from headroom.streams.window_rules import Row, implausible
from headroom.streams.windows import WindowKey, Windows, encode_row, row_key
from headroom.trainer.drift import ErrorDriftDetector, relative_error
from headroom.trainer.policy import RetrainPolicy

SWEEP_EVERY = 1000  # records between sweeps of aged-out rows across all strata
_ERROR_LABELS = {target: f"{target} relative error" for target in TARGETS}
_raw_columns = attrgetter(*RAW_COLUMNS)  # record -> its raw feature values, in RAW_COLUMNS order


@dataclass
class IngestResult:
    record: TelemetryRecord | None = None
    rejection: str | None = None  # why the record went to the dead-letter topic
    duplicate: bool = False
    admitted: list[WindowKey] = field(default_factory=list)
    drifted: list[WindowKey] = field(default_factory=list)  # windows whose detector fired on this record
    forgotten: int = 0  # rows dropped by a request to forget


class Ingestor:
    def __init__(self, windows: Windows, policy_for: Callable[[WindowKey], RetrainPolicy],
                 drift_memory_s: float | None = None):
        self.windows = windows
        self.drift_memory_s = drift_memory_s  # on drift, forget rows older than this (None: keep them)
        self._policy_for = policy_for
        self._policies: dict[WindowKey, RetrainPolicy] = {}
        self._since_sweep = 0

    def policy(self, window: WindowKey) -> RetrainPolicy:
        policy = self._policies.get(window)
        if policy is None:
            policy = self._policies[window] = self._policy_for(window)
        return policy

    def keep_policies(self, keep: Callable[[WindowKey], bool]) -> None:
        """Forget the retraining policy (and drift detector) of every window ``keep`` rejects."""
        self._policies = {window: policy for window, policy in self._policies.items() if keep(window)}

    def ingest(self, raw: bytes | None, partition: int, offset: int, now: float | None = None) -> IngestResult:
        """Decode, validate and admit one message; ``now`` (wall clock, unix seconds) also checks its time."""
        if self.windows.seen(partition, offset):
            return IngestResult(duplicate=True)
        try:
            record = decode(raw)
        except InvalidRecord as err:
            self.windows.mark(partition, offset)
            forget = decode_forget(raw)
            if forget is None:
                return IngestResult(rejection=err.reason)
            return IngestResult(forgotten=sum(len(self.windows.forget_before((forget.pool_key, target),
                                                                             forget.before_ts))
                                              for target in TARGETS))
        if now is not None and (reason := implausible(record.completion_ts, now, self.windows.limits)):
            self.windows.mark(partition, offset)
            return IngestResult(record=record, rejection=reason)
        return self._admit(record, partition, offset)

    def ingest_record(self, record: TelemetryRecord, partition: int, offset: int) -> IngestResult:
        """:meth:`ingest` for a record already decoded and validated (replays read them in bulk)."""
        if self.windows.seen(partition, offset):
            return IngestResult(duplicate=True)
        return self._admit(record, partition, offset)

    def _admit(self, record: TelemetryRecord, partition: int, offset: int) -> IngestResult:
        result = IngestResult(record=record)
        stratum = stratum_of(record)
        raw = tuple(map(float, _raw_columns(record)))
        windows = self.windows
        windows.advance(record.completion_ts)
        for target in TARGETS:
            value = target_value(record, target)
            if value is None:
                continue
            window = (record.pool_key, target)
            policy = self._policies.get(window) or self.policy(window)
            predicted = predicted_value(record, target)
            if predicted is not None and policy.observe(relative_error(value, predicted), _ERROR_LABELS[target]):
                result.drifted.append(window)
                if self.drift_memory_s is not None:
                    windows.forget_before(window, record.completion_ts - self.drift_memory_s)
            seq = windows.next_seq
            row = Row(record.completion_ts, value, raw, row_key(partition, offset, target), seq, partition, offset,
                      encode_row(record.completion_ts, value, seq, offset, raw))
            if windows.add(window, stratum, row)[0]:
                policy.admitted()
                result.admitted.append(window)
        self._since_sweep += 1
        if self._since_sweep >= SWEEP_EVERY:
            self._since_sweep = 0
            windows.sweep()
        windows.mark(partition, offset)
        return result


def build_ingestor(settings: PipelineSettings) -> Ingestor:
    """The worker's ingestor: windows, and one retraining policy with its drift detector per window."""

    def policy_for(_window: WindowKey) -> RetrainPolicy:
        return RetrainPolicy(settings.rule, ErrorDriftDetector(settings.drift_detector,
                                                               adwin_delta=settings.adwin_delta,
                                                               ph_threshold=settings.ph_threshold))

    return Ingestor(Windows(settings.limits), policy_for,
                    drift_memory_s=settings.drift_memory_s if settings.drift_memory_s >= 0 else None)
