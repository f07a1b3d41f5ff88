import numpy as np
import pytest

from headroom.trainer.holdout import holdout_mask, split
from tests.trainer.synthetic import samples_of, synthetic_records


@pytest.mark.parametrize(("sizes", "fraction", "held_per_stratum"), [
    pytest.param([10], 0.2, [2], id="one-stratum"),
    pytest.param([10, 5, 2, 1], 0.2, [2, 1, 0, 0], id="small-strata-keep-their-rows"),
    pytest.param([10, 10], 0.0, [0, 0], id="no-holdout"),
    pytest.param([100, 7], 0.5, [50, 3], id="half"),
])
def test_each_stratum_holds_out_its_share(sizes, fraction, held_per_stratum):
    strata = np.array([f"s{i}" for i, n in enumerate(sizes) for _ in range(n)], dtype=object)
    times = np.random.default_rng(0).permutation(len(strata)).astype(float)
    mask = holdout_mask(strata, times, fraction, min_stratum_rows=1)
    assert [int(mask[strata == f"s{i}"].sum()) for i in range(len(sizes))] == held_per_stratum


def test_thin_strata_are_pooled_so_their_newest_rows_are_held_out_too():
    strata = np.array([f"s{i}" for i in range(10)] + ["big"] * 10, dtype=object)
    times = np.r_[np.arange(10.0), np.arange(10.0)]
    mask = holdout_mask(strata, times, 0.2, min_stratum_rows=5)
    assert sorted(times[:10][mask[:10]].tolist()) == [8.0, 9.0]
    assert sorted(times[10:][mask[10:]].tolist()) == [8.0, 9.0]
    assert not holdout_mask(strata, times, 0.2, min_stratum_rows=1)[:10].any()


def test_holdout_rows_are_the_newest_of_their_stratum():
    records = synthetic_records(1500, seed=3)
    train, holdout = split(samples_of(records, "ttft"), 0.2, min_stratum_rows=1)
    assert len(holdout) > 0.15 * (len(train) + len(holdout))
    for stratum in set(holdout.strata.tolist()):
        assert holdout.times[holdout.strata == stratum].min() > train.times[train.strata == stratum].max()


def test_fraction_out_of_range_is_rejected():
    with pytest.raises(ValueError, match="holdout fraction"):
        holdout_mask(np.array(["a"], dtype=object), np.zeros(1), 1.0)
