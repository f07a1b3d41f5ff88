from __future__ import annotations

import pytest

from headroom.sim.kvcache import BlockCache


def test_released_hashed_blocks_stay_cached_and_hit() -> None:
    cache = BlockCache(10)
    cache.allocate(3)
    for h in (1, 2, 3):
        assert cache.register(h)
    cache.release([1, 2, 3], 0)
    assert (cache.used, cache.cached, cache.free) == (0, 3, 7)
    assert cache.match([1, 2, 3, 4]) == 3
    cache.acquire([1, 2])
    assert (cache.used, cache.cached) == (2, 1)


@pytest.mark.parametrize("hashes, expected", [
    ([1, 2, 3], 3), ([1, 2, 9], 2), ([9, 8, 7], 0), ([], 0), ([1], 1), ([1, 2, 3, 4, 5], 3),
], ids=["full", "partial", "miss-first", "empty", "one", "longer-than-cached"])
def test_match_counts_the_leading_run(hashes: list[int], expected: int) -> None:
    cache = BlockCache(8)
    cache.allocate(3)
    for h in (1, 2, 3):
        cache.register(h)
    assert cache.match(hashes) == expected


def test_eviction_takes_the_least_recently_released_tails_first() -> None:
    cache = BlockCache(4)
    cache.allocate(2)
    cache.register(10)
    cache.register(11)
    cache.release([10, 11], 0)  # chain A
    cache.allocate(2)
    cache.register(20)
    cache.register(21)
    cache.release([20, 21], 0)  # chain B, released later
    cache.allocate(1)  # evicts A's tail, keeps its head
    assert cache.match([10, 11]) == 1
    assert cache.match([20, 21]) == 2
    cache.allocate(1)
    assert cache.match([10, 11]) == 0


def test_shared_blocks_count_once_and_free_with_their_last_user() -> None:
    cache = BlockCache(5)
    cache.allocate(2)
    cache.register(1)
    cache.register(2)
    cache.acquire([1, 2])  # a second sequence shares the prefix
    assert cache.used == 2
    cache.release([1, 2], 0)
    assert (cache.used, cache.cached) == (2, 0)
    cache.release([1, 2], 0)
    assert (cache.used, cache.cached) == (0, 2)


def test_over_capacity_allocation_is_refused() -> None:
    cache = BlockCache(2)
    cache.allocate(2)
    with pytest.raises(RuntimeError, match="over capacity"):
        cache.allocate(1)


def test_register_refuses_a_hash_that_is_already_cached() -> None:
    cache = BlockCache(4)
    cache.allocate(1)
    assert cache.register(7)
    cache.allocate(1)
    assert not cache.register(7)


def test_resize_evicts_the_oldest_cached_blocks_that_no_longer_fit() -> None:
    cache = BlockCache(10)
    for chain in ((1, 2, 3), (4, 5, 6)):
        cache.allocate(3)
        for h in chain:
            cache.register(h)
        cache.release(chain, 0)
    cache.allocate(2)  # a running sequence's private blocks
    assert (cache.used, cache.cached) == (2, 6)
    cache.resize(6)
    assert (cache.capacity, cache.used, cache.cached) == (6, 2, 4)
    assert cache.match((1, 2, 3)) == 1 and cache.match((4, 5, 6)) == 3  # tails go first
    with pytest.raises(RuntimeError, match="resized to 1 blocks with 2 in use"):  # held blocks must fit already
        cache.resize(1)
