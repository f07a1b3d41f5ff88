"""The vectorised streams at risk equal the straightforward walk over every stream, on random streams; after a
burst of streams ends, a decision scans the streams left, not the most ever held."""

import numpy as np
import pytest

from headroom.benchmarks.tpot_at_risk import walk
from headroom.output_lengths import OutputLengths
from headroom.router.state.inflight import Inflight
from headroom.router.state.stream_table import StreamTable


@pytest.mark.parametrize("seed", range(5))
def test_tpot_at_risk_equals_the_walk_over_every_stream(seed):
    rng = np.random.default_rng(seed)
    lengths = OutputLengths()
    for n in rng.integers(1, 60, 80).tolist():
        lengths.add(n)
    inflight, streams, now, decisions_with_risk = Inflight(), {}, 0.0, 0
    for _ in range(3000):
        now += float(rng.choice([0.0, rng.exponential(0.004)]))  # some events at the same instant
        rid, server_id = f"r{rng.integers(300)}", f"s{rng.integers(12)}"
        event = rng.random()
        if event < 0.2:  # a request starts (an id in use is replaced), a streaming one with a TPOT SLO mostly
            slo = None if rng.random() < 0.2 else float(rng.choice([10.0, 25.0, rng.uniform(5, 80)]))
            inflight.start(rid, server_id, 100, slo, now, stream=True)
            streams.pop(rid, None)
        elif event < 0.3:
            inflight.finish(rid)
            streams.pop(rid, None)
        else:
            entry = inflight._requests.get(rid)
            inflight.token(rid, now)
            if entry is not None and entry.tpot_slo_ms is not None:
                known = streams.get(rid)  # kept in the order of first tokens: the order the walk adds in
                streams[rid] = (entry.server_id, now, 1, now, entry.tpot_slo_ms) if known is None else \
                    (known[0], known[1], known[2] + 1, now, known[4])
        for at in (now, now + float(rng.uniform(0, 0.1))):
            expected = walk(streams.values(), at, lengths.end_chance)
            assert inflight.tpot_at_risk(at, lengths.end_chance) == expected
            decisions_with_risk += bool(expected)
    assert decisions_with_risk > 1000  # the random streams were at risk often enough to say something


def test_after_a_burst_ends_a_decision_scans_only_the_streams_left():
    table, streams = StreamTable(), {}
    for i in range(100_000):
        table.token(f"r{i}", f"s{i % 7}", 25.0, 0.0)
        streams[f"r{i}"] = (f"s{i % 7}", 0.0, 1, 0.0, 25.0)
    for i in range(100_000):
        if i % 10_000:  # every 10,000th stream stays
            table.drop(f"r{i}")
            del streams[f"r{i}"]
    assert len(table) == 10 and table.slots <= 64
    table.token("r20000", "s1", 25.0, 0.02)  # a stream that stayed (on s1) gets its second token
    streams["r20000"] = ("s1", 0.0, 2, 0.02, 25.0)
    for at in (0.03, 0.06):  # at 0.03 the rest are behind and r20000 on time; at 0.06 only r20000 is at risk
        assert table.at_risk(at, float) == walk(streams.values(), at, float) != {}
    assert set(table.at_risk(0.06, float)) == {"s1"}
