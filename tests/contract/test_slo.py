"""The TPOT-at-risk rule on columns answers as the rule on one stream does, boundaries included."""

import numpy as np

from headroom.contract.slo import tpot_at_risk, tpot_at_risk_columns


def test_the_columns_answer_as_each_stream_does():
    rng = np.random.default_rng(3)
    n = 20_000
    slo = rng.choice([10.0, 25.0, 50.0], n)
    first = rng.uniform(0, 1, n).round(3)  # on a millisecond grid: many deficits exactly 0 or one SLO
    tokens = rng.integers(1, 40, n)
    last = np.where(tokens > 1, first + (rng.uniform(0, 1, n) * tokens * slo / 1000.0).round(3), first)
    for now in (1.0, 1.025, 1.5, 2.0):
        expected = [tpot_at_risk(f, t, la, now, s) for f, t, la, s in zip(first.tolist(), tokens.tolist(),
                                                                           last.tolist(), slo.tolist())]
        assert tpot_at_risk_columns(first, tokens, last, now, slo).tolist() == expected
        assert 0 < sum(expected) < n
