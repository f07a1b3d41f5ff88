"""The KV cache of one server: a fixed number of 16-token blocks with prefix caching.

Blocks are *referenced* (held by running sequences), *cached* (a full prompt block with a hash and no
users, kept for reuse until evicted, least recently released first) or *free*. Usage, as vLLM reports it,
is referenced / capacity. A sequence holds the hashed blocks of its prompt prefix (shareable) plus
private blocks; private blocks go straight back to the free pool when released, since no other request
can ever hit them.

Structure that keeps this cheap: a sequence always holds a leading run of its chain, so (1) the cached
set is closed under prefixes — eviction, oldest first, takes tails before the heads they extend — and
(2) reference counts never grow along a chain. Lookups are binary searches; a block's reference count
is ``taken[h] - given[h]``, two counters bumped in bulk (C speed) as chains are acquired and released.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Sequence

_count = Counter.update


class BlockCache:
    __slots__ = ("capacity", "used", "changes", "_taken", "_given", "_lru")

    def __init__(self, capacity: int):
        self.capacity = capacity
        self.used = 0  # referenced blocks, hashed or private
        self.changes = 0  # counts evictions and registrations: match() results stay valid while it holds
        self._taken: Counter[int] = Counter()  # hash -> references ever taken (only while referenced)
        self._given: Counter[int] = Counter()  # hash -> references given back
        self._lru: OrderedDict[int, None] = OrderedDict()  # cached blocks without users, oldest first

    @property
    def cached(self) -> int:
        return len(self._lru)

    @property
    def free(self) -> int:
        return self.capacity - self.used - len(self._lru)

    def available(self) -> int:
        """Blocks an allocation may take: free plus evictable."""
        return self.capacity - self.used

    def usage(self) -> float:
        return self.used / self.capacity

    def references(self, h: int) -> int:
        return self._taken[h] - self._given[h]

    def match(self, hashes: Sequence[int]) -> int:
        """How many leading blocks of the chain ``hashes`` are in the cache (referenced or cached)."""
        taken, lru = self._taken, self._lru
        low, high = 0, len(hashes)  # hashes[:low] cached; hashes[high:] not
        while low < high:
            mid = (low + high + 1) // 2
            h = hashes[mid - 1]
            if h in taken or h in lru:
                low = mid
            else:
                high = mid - 1
        return low

    def acquire(self, hashes: Sequence[int]) -> None:
        """Take a reference on blocks already in the cache (a prefix hit): a referenced head and a cached tail."""
        taken = self._taken
        if hashes and hashes[-1] not in taken:
            low, high = 0, len(hashes) - 1  # referenced blocks are hashes[:low]
            while low < high:
                mid = (low + high + 1) // 2
                if hashes[mid - 1] in taken:
                    low = mid
                else:
                    high = mid - 1
            pop = self._lru.pop
            for h in hashes[low:]:
                pop(h)
            self.used += len(hashes) - low
        _count(taken, hashes)

    def allocate(self, n: int) -> None:
        """Take ``n`` private blocks, evicting the least recently released cached blocks if needed."""
        if n <= 0:
            return
        if n > self.capacity - self.used:
            raise RuntimeError(f"KV cache over capacity: {n} blocks asked, {self.capacity - self.used} available")
        shortfall = n - (self.capacity - self.used - len(self._lru))
        if shortfall > 0:
            popitem = self._lru.popitem
            for _ in range(shortfall):
                popitem(last=False)
            self.changes += 1
        self.used += n

    def register(self, h: int) -> bool:
        """Give a just-computed private block the hash ``h``; False if that hash is already cached."""
        if h in self._taken or h in self._lru:
            return False
        self._taken[h] = 1
        self.changes += 1
        return True

    def release(self, hashes: Sequence[int], private: int) -> None:
        """Drop a sequence's references: hashed blocks left without users become cached (tail first, so
        eviction takes tails before heads), private blocks free."""
        self.used -= private
        if not hashes:
            return
        taken, given = self._taken, self._given
        _count(given, hashes)
        last = hashes[-1]
        if taken[last] != given[last]:
            return
        low, high = 0, len(hashes) - 1  # the first block left without users is hashes[low]
        while low < high:
            mid = (low + high) // 2
            h = hashes[mid]
            if taken[h] != given[h]:
                low = mid + 1
            else:
                high = mid
        lru, drop_taken, drop_given = self._lru, taken.pop, given.pop
        for h in reversed(hashes[low:]):
            drop_taken(h)
            drop_given(h)
            lru[h] = None
        self.used -= len(hashes) - low

    def resize(self, capacity: int) -> None:
        """Hold ``capacity`` blocks from now on, evicting the least recently released cached blocks that no
        longer fit; the referenced blocks must fit already."""
        if capacity < self.used:
            raise RuntimeError(f"KV cache resized to {capacity} blocks with {self.used} in use")
        excess = self.used + len(self._lru) - capacity
        if excess > 0:
            popitem = self._lru.popitem
            for _ in range(excess):
                popitem(last=False)
            self.changes += 1
        self.capacity = capacity

    def copy(self) -> BlockCache:
        twin = BlockCache(self.capacity)
        twin.used, twin.changes = self.used, self.changes
        twin._taken, twin._given = Counter(self._taken), Counter(self._given)
        twin._lru = OrderedDict(self._lru)
        return twin
