import pytest

from headroom.contract.features import FEATURE_NAMES, RAW_COLUMNS
from headroom.streams.window_rules import Row, WindowLimits, admits, evictions, live, snapshot


def rows_at(*times: float) -> list[Row]:
    return [Row(t, 10.0 * i, (1.0,) * len(RAW_COLUMNS), f"k{i}") for i, t in enumerate(times)]


LIMITS = WindowLimits(max_rows=3, max_age_s=60.0)


@pytest.mark.parametrize(("times", "now", "evict"), [
    pytest.param((), 100.0, 0, id="empty"),
    pytest.param((90.0, 95.0), 100.0, 0, id="under-cap-and-fresh"),
    pytest.param((90.0, 95.0, 96.0), 100.0, 0, id="at-cap"),
    pytest.param((90.0, 95.0, 96.0, 99.0), 100.0, 1, id="one-over-cap"),
    pytest.param((90.0, 95.0, 96.0, 97.0, 99.0), 100.0, 2, id="two-over-cap"),
    pytest.param((30.0, 95.0), 100.0, 1, id="oldest-aged-out"),
    pytest.param((40.0, 95.0), 100.0, 0, id="exactly-max-age-stays"),
    pytest.param((10.0, 20.0, 30.0), 100.0, 3, id="all-aged-out"),
    pytest.param((10.0, 95.0, 96.0, 97.0, 98.0), 100.0, 2, id="cap-then-age"),
    pytest.param((95.0, 10.0), 100.0, 0, id="age-only-from-the-front"),
])
def test_evictions(times, now, evict):
    assert evictions(rows_at(*times), now, LIMITS) == evict


@pytest.mark.parametrize(("row_time", "now", "admitted"), [
    pytest.param(100.0, 100.0, True, id="now"), pytest.param(40.0, 100.0, True, id="at-max-age"),
    pytest.param(39.9, 100.0, False, id="too-old"), pytest.param(150.0, 100.0, True, id="from-the-future"),
])
def test_admits(row_time, now, admitted):
    assert admits(row_time, now, LIMITS) is admitted


def test_live_drops_expired_rows_anywhere():
    assert [r.time for r in live(rows_at(95.0, 10.0, 99.0), 100.0, LIMITS)] == [95.0, 99.0]


def test_snapshot_labels_every_live_row_with_its_stratum():
    samples = snapshot({"q0/kv00/pm0": rows_at(95.0, 10.0), "q1-2/kv05/pm1": rows_at(99.0)}, 100.0, LIMITS)
    assert len(samples) == 2
    assert samples.strata.tolist() == ["q0/kv00/pm0", "q1-2/kv05/pm1"]
    assert samples.times.tolist() == [95.0, 99.0]
    assert samples.features().shape == (2, len(FEATURE_NAMES))


def test_limits_reject_nonsense():
    with pytest.raises(ValueError, match="max_rows=0"):
        WindowLimits(max_rows=0)
