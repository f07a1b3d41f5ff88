import math

from headroom.tpot_ratios import TpotRatios


def test_the_quantile_of_the_recent_ratios_of_a_pool():
    ratios = TpotRatios(capacity=100)
    for got in [52.0] * 50 + [20.0] * 100:  # the 50 at 52 ms fell out of the window
        ratios.add("a", predicted_ms=40.0, got_ms=got)
    assert len(ratios) == 100
    assert ratios.quantile("a", 0.9, window=100, least=10) == 0.5
    assert ratios.quantile("a", 1.0, window=100, least=10) == 0.5
    ratios.add("a", predicted_ms=40.0, got_ms=80.0)
    assert ratios.quantile("a", 1.0, window=100, least=10) == 2.0  # asked before: the new ratio counts
    assert ratios.quantile("a", 1.0, window=1, least=10) == 2.0  # the newest only
    assert ratios.quantile("b", 0.9, window=100, least=1) is None  # another pool's are its own


def test_the_window_reads_across_the_ring_s_end():
    ratios = TpotRatios(capacity=8)
    for got in range(1, 12):  # ratios 1..11 over 1 ms predicted: the ring holds 4..11, its end at slot 3
        ratios.add("a", predicted_ms=1.0, got_ms=float(got))
    assert ratios.quantile("a", 0.0, window=5, least=1) == 7.0  # the last five: 7..11
    assert ratios.quantile("a", 0.0, window=8, least=1) == 4.0
    assert ratios.quantile("a", 0.0, window=10, least=1) == 4.0  # a window past the ring: what it holds
    assert ratios.quantile("a", 1.0, window=8, least=1) == 11.0
    for got in range(12, 17):  # 16 added: the ring's end at slot 0
        ratios.add("a", predicted_ms=1.0, got_ms=float(got))
    assert (ratios.quantile("a", 0.0, window=8, least=1), ratios.quantile("a", 1.0, window=3, least=1)) == (9.0, 16.0)


def test_too_few_or_unusable_ratios_give_nothing():
    ratios = TpotRatios()
    for predicted, got in [(0.0, 30.0), (-1.0, 30.0), (math.nan, 30.0), (math.inf, 30.0), (40.0, math.inf),
                           (40.0, -1.0), (1e-300, 1e10)]:  # the last: each finite, their ratio not
        ratios.add("a", predicted_ms=predicted, got_ms=got)
    assert len(ratios) == 0
    ratios.add("a", predicted_ms=40.0, got_ms=60.0)
    assert ratios.quantile("a", 0.9, window=10, least=2) is None
    assert ratios.quantile("a", 0.9, window=10, least=1) == 1.5
