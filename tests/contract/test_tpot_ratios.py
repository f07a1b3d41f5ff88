import math

from headroom.contract.tpot_ratios import TpotRatios


def test_the_quantile_of_the_recent_ratios_of_a_pool():
    ratios = TpotRatios(capacity=100)
    for got in [52.0] * 50 + [20.0] * 100:  # the 50 at 52 ms fell out of the window
        ratios.add("a", predicted_ms=40.0, got_ms=got)
    assert len(ratios) == 100
    assert ratios.quantile("a", 0.9, window=100, least=10) == 0.5
    ratios.add("a", predicted_ms=40.0, got_ms=80.0)
    assert ratios.quantile("a", 1.0, window=1, least=10) == 2.0  # the newest only; the cache was cleared
    assert ratios.quantile("b", 0.9, window=100, least=1) is None  # another pool's are its own


def test_too_few_or_unusable_ratios_give_nothing():
    ratios = TpotRatios()
    for predicted, got in [(0.0, 30.0), (-1.0, 30.0), (math.nan, 30.0), (40.0, math.inf), (40.0, -1.0)]:
        ratios.add("a", predicted_ms=predicted, got_ms=got)
    assert len(ratios) == 0
    ratios.add("a", predicted_ms=40.0, got_ms=60.0)
    assert ratios.quantile("a", 0.9, window=10, least=2) is None
    assert ratios.quantile("a", 0.9, window=10, least=1) == 1.5
