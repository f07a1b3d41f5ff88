import json

import pytest

from headroom.contract.features import FEATURE_SCHEMA
from headroom.contract.telemetry import encode
from headroom.streams.ingest import Ingestor
from headroom.streams.window_rules import WindowLimits
from headroom.streams.windows import Windows, hwm_key
from headroom.trainer.drift import ErrorDriftDetector
from headroom.trainer.policy import RetrainPolicy, RetrainRule
from tests.contract.records import valid_record
from tests.trainer.synthetic import oracle, synthetic_records


def ingestor(limits: WindowLimits = WindowLimits()) -> Ingestor:
    return Ingestor(Windows(limits), lambda window: RetrainPolicy(RetrainRule(), ErrorDriftDetector()))


class Table(dict):
    """What the Faust table holds after the agent wrote the windows' flushes to it."""

    def flush(self, windows: Windows, partitions=(0, 1)) -> None:
        for partition in partitions:
            for key, value in windows.flush(partition):
                if value is None:
                    self.pop(key)
                else:
                    self[key] = value

    def rows(self) -> int:
        return sum(len(json.loads(v)["rows"]) for k, v in self.items() if not k.startswith("hwm:"))


def test_streaming_records_train_ttft_and_tpot_and_others_train_e2e():
    ing = ingestor()
    streaming = ing.ingest(encode(valid_record()), 0, 0)
    plain = ing.ingest(encode(valid_record(stream=False, ttft_ms=None, tpot_ms=None)), 0, 1)
    assert streaming.admitted == [("h100/llama3-8b", "ttft"), ("h100/llama3-8b", "tpot")]
    assert plain.admitted == [("h100/llama3-8b", "e2e")]
    assert ing.windows.strata_counts(("h100/llama3-8b", "ttft")) == {"q1-2/kv40/pm2": 1}
    assert ing.windows.samples(("h100/llama3-8b", "tpot")).values.tolist() == [14.8]


@pytest.mark.parametrize(("raw", "reason"), [
    pytest.param(b"not json", "not valid JSON", id="not-json"),
    pytest.param(encode(valid_record()).replace(b'"ttft_ms":120.0', b'"ttft_ms":NaN'), "must be finite", id="nan"),
    pytest.param(encode(valid_record(ttft_ms=-5.0)), "is a latency and must be within", id="negative-latency"),
    pytest.param(encode(valid_record()).replace(b'"num_waiting":2', b'"num_waiting":"2"'), "must be an integer",
                 id="wrong-type"),
])
def test_invalid_records_are_rejected_with_their_reason_and_never_enter_a_window(raw, reason):
    ing = ingestor()
    result = ing.ingest(raw, 3, 17)
    assert result.record is None and reason in result.rejection
    assert result.admitted == [] and ing.windows.keys() == []
    assert ing.windows.flush(3) == [(hwm_key(3), b"17")]


def test_a_replayed_offset_is_skipped():
    ing = ingestor()
    raw = encode(valid_record())
    assert not ing.ingest(raw, 0, 5).duplicate
    assert ing.ingest(raw, 0, 5).duplicate and ing.ingest(raw, 0, 4).duplicate
    assert not ing.ingest(raw, 1, 5).duplicate
    assert ing.windows.size(("h100/llama3-8b", "ttft")) == 2


def test_rows_of_another_feature_schema_are_not_restored():
    ing, table = ingestor(), Table()
    for offset, record in enumerate(synthetic_records(20, seed=5, rate_per_s=100.0)):
        ing.ingest(encode(record), 0, offset)
    table.flush(ing.windows)
    (key, value), (other_key, other) = [(k, v) for k, v in table.items() if not k.startswith("hwm:")][:2]
    rows, other_rows = json.loads(value)["rows"], json.loads(other)["rows"]
    older = {"schema": FEATURE_SCHEMA.rsplit(",", 1)[0], "rows": [row[:-1] for row in rows]}  # one column less
    unstamped = other_rows  # as stored before entries carried their schema
    assert Windows(WindowLimits()).restore({**table, key: json.dumps(older).encode(),
                                            other_key: json.dumps(unstamped).encode()}.items()) == \
        table.rows() - len(rows) - len(other_rows)


def test_table_entries_restore_the_same_windows_and_high_water_marks():
    limits = WindowLimits(max_rows=5, max_age_s=60.0)
    ing, table = ingestor(limits), Table()
    for offset, record in enumerate(synthetic_records(3000, seed=4, rate_per_s=500.0)):
        ing.ingest(encode(record), offset % 2, offset)
        if offset % 250 == 0:
            table.flush(ing.windows)
    table.flush(ing.windows)
    restored = Windows(limits)
    assert restored.restore(table.items()) == table.rows() == sum(ing.windows.size(w) for w in ing.windows.keys())
    for window in ing.windows.keys():
        assert restored.strata_counts(window) == ing.windows.strata_counts(window)
        assert {s: [r.key for r in rows] for s, rows in restored.copy(window).items()} == {
            s: [r.key for r in rows] for s, rows in ing.windows.copy(window).items()}
    assert restored.high_water == {0: 2998, 1: 2999}
    assert max(ing.windows.strata_counts(("pool-a", "ttft")).values()) == 5


def test_rows_age_out_by_event_time():
    limits = WindowLimits(max_rows=500, max_age_s=2.0)
    ing, table = ingestor(limits), Table()
    for offset, record in enumerate(synthetic_records(2000, seed=9, rate_per_s=200.0)):
        ing.ingest(encode(record), 0, offset)
        table.flush(ing.windows, (0,))
    samples = ing.windows.samples(("pool-a", "ttft"))
    assert samples.times.min() >= ing.windows.clock - 2.0
    assert table.rows() < 2000 * 0.2 * 3  # 10 s of records went by, about 2 s of them stay (per target)


def test_drift_is_reported_by_the_record_that_triggered_it():
    ing = ingestor()
    steady = synthetic_records(2000, seed=1, stream_fraction=1.0, predictor=oracle(1.0))
    slower = synthetic_records(500, seed=2, slowdown=2.0, stream_fraction=1.0, predictor=oracle(1.0),
                               start_ts=1_700_000_010.0)
    drifted = [i for i, r in enumerate(steady + slower) if ing.ingest(encode(r), 0, i).drifted]
    assert drifted and 2000 <= drifted[0] < 2200
    assert "relative error" in ing.policy(("pool-a", "ttft")).drift_reason


@pytest.mark.parametrize(("memory_s", "old_rows_left"), [pytest.param(None, True, id="keep"),
                                                          pytest.param(3.0, False, id="forget")])
def test_on_drift_the_window_can_forget_the_old_regime(memory_s, old_rows_left):
    ing = Ingestor(Windows(WindowLimits()), lambda w: RetrainPolicy(RetrainRule(), ErrorDriftDetector()),
                   drift_memory_s=memory_s)
    table = Table()
    steady = synthetic_records(2000, seed=1, stream_fraction=1.0, predictor=oracle(1.0))
    slower = synthetic_records(1000, seed=2, slowdown=2.0, stream_fraction=1.0, predictor=oracle(1.0),
                               start_ts=1_700_000_010.0)
    for i, record in enumerate(steady + slower):
        ing.ingest(encode(record), 0, i)
        if i % 100 == 0:
            table.flush(ing.windows, (0,))
    table.flush(ing.windows, (0,))
    times = ing.windows.samples(("pool-a", "ttft")).times
    assert bool(times.min() < 1_700_000_010.0) is old_rows_left
    assert sum(len(json.loads(v)["rows"]) for k, v in table.items() if '"ttft"' in k) == len(times)


def test_a_crash_between_flushes_replays_exactly_the_unflushed_records():
    records = [encode(r) for r in synthetic_records(1000, seed=12, rate_per_s=300.0)]
    reference, crashed, table = ingestor(), ingestor(), Table()
    for offset, raw in enumerate(records):
        reference.ingest(raw, 0, offset)
        crashed.ingest(raw, 0, offset)
        if offset == 600:
            table.flush(crashed.windows, (0,))
    restarted = ingestor()
    restarted.windows.restore(table.items())
    assert restarted.windows.high_water == {0: 600}
    replayed = [restarted.ingest(raw, 0, offset) for offset, raw in enumerate(records[500:], start=500)]
    assert sum(r.duplicate for r in replayed) == 101
    for window in reference.windows.keys():
        assert restarted.windows.strata_counts(window) == reference.windows.strata_counts(window)


@pytest.mark.parametrize(("completion_ts", "reason"), [
    pytest.param(1_700_000_000.0 + 1e7, "ahead of the consumer's clock (at most 300 s allowed)", id="far-future"),
    pytest.param(1_700_000_000.0 - 3600.0, "behind the consumer's clock, older than the windows' 600 s", id="stale"),
])
def test_a_record_implausible_against_the_wall_clock_is_rejected_and_leaves_the_clock_alone(completion_ts, reason):
    ing = ingestor()
    now = 1_700_000_000.0
    ing.ingest(encode(valid_record(arrival_ts=now - 2, dispatch_ts=now - 2, completion_ts=now)), 0, 0, now)
    odd = valid_record(arrival_ts=completion_ts - 2.0, dispatch_ts=completion_ts - 2.0, completion_ts=completion_ts)
    result = ing.ingest(encode(odd), 0, 1, now)
    assert reason in result.rejection and result.admitted == []
    assert ing.windows.clock == now and ing.windows.seen(0, 1)
    later = ing.ingest(encode(valid_record(arrival_ts=now, dispatch_ts=now, completion_ts=now + 1.0)), 0, 2, now)
    assert later.rejection is None and later.admitted  # the next honest record still enters its windows


def test_a_request_to_forget_drops_the_pools_rows_before_its_time_and_persists():
    from headroom.contract import window_forget
    ing, table = ingestor(), Table()
    base = valid_record().completion_ts
    for offset, record in enumerate([valid_record(completion_ts=base + i, request_id=f"r{i}") for i in range(4)] +
                                    [valid_record(completion_ts=base + 0.5, pool_key="other", request_id="o")]):
        ing.ingest(encode(record), 0, offset)
    table.flush(ing.windows, (0,))
    forget = window_forget.Forget("h100/llama3-8b", base + 2, "new deployment")
    result = ing.ingest(window_forget.encode(forget), 0, 5)
    assert (result.rejection, result.record, result.forgotten) == (None, None, 4)  # 2 rows of each of two targets
    assert ing.windows.samples(("h100/llama3-8b", "ttft")).times.tolist() == [base + 2, base + 3]
    assert len(ing.windows.samples(("other", "ttft")).times) == 1
    table.flush(ing.windows, (0,))
    restored = Windows(WindowLimits())
    restored.restore(table.items())
    assert restored.samples(("h100/llama3-8b", "tpot")).times.tolist() == [base + 2, base + 3]
    assert ing.ingest(window_forget.encode(forget), 0, 5).duplicate  # replayed: skipped like a record
