"""An approximate per-server index of prompt prefix blocks, built from the router's own decisions.

A prompt is cut into 16-token blocks hashed as a chain (:mod:`contract.prompt`), so equal hashes mean
equal prefixes. When the router sends a prompt to a server it records the prompt's
block hashes there; a later prompt's match on that server is the share of its tokens covered by its
leading blocks the server has seen. Each server keeps at most ``max_blocks`` hashes, least recently used
evicted first (a stand-in for the server's own cache eviction).

Each server owns one bit; the index maps a block hash to the bit set of the servers holding it, so
matching a prompt costs one integer AND per block however many servers there are.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from headroom.contract.prompt import BLOCK_TOKENS


class PrefixIndex:
    def __init__(self, max_blocks: int = 200_000, block_tokens: int = BLOCK_TOKENS):
        if max_blocks < 1:
            raise ValueError(f"max_blocks must be at least 1, got {max_blocks}")
        self.max_blocks = max_blocks
        self.block_tokens = block_tokens
        self._servers: dict[str, OrderedDict[int, None]] = {}  # per server, least recently used first
        self._holders: dict[int, int] = {}  # block hash -> bit set of the servers holding it
        self._bit: dict[str, int] = {}  # server -> its bit
        self._server_of_bit: list[str | None] = []
        self._free_bits: list[int] = []

    def record(self, server_id: str, hashes: Sequence[int]) -> None:
        blocks = self._servers.setdefault(server_id, OrderedDict())
        bit = 1 << self._bit_of(server_id)
        holders = self._holders
        for h in hashes:
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = None
                holders[h] = holders.get(h, 0) | bit
        while len(blocks) > self.max_blocks:
            self._drop_holder(bit, blocks.popitem(last=False)[0])

    def matches(self, hashes: Sequence[int], prompt_tokens: int) -> dict[str, float]:
        """Fraction (0-1) of a ``prompt_tokens``-token prompt whose leading blocks each server holds;
        servers holding none of them are left out."""
        fractions = self.fractions(hashes, prompt_tokens)
        names = self._server_of_bit
        return {names[i]: float(fractions[i]) for i in np.flatnonzero(fractions)}  # type: ignore[misc]

    def fractions(self, hashes: Sequence[int], prompt_tokens: int) -> np.ndarray:
        """:meth:`matches` as a column indexed by server bit (see :meth:`bits`); 0 where nothing matches.
        One walk over the prompt's blocks serves every server."""
        width = len(self._server_of_bit)
        if not hashes or prompt_tokens <= 0 or not width:
            return np.zeros(width)
        holders = self._holders
        alive = holders.get(hashes[0], 0)
        if not alive:
            return np.zeros(width)
        lost: list[int] = []  # bit sets of the servers whose leading run ends at depth 1, 2, ...
        depths: list[int] = []
        depth = 1
        for h in hashes[1:]:
            still = alive & holders.get(h, 0)
            if still != alive:
                lost.append(alive ^ still)
                depths.append(depth)
                alive = still
                if not alive:
                    break
            depth += 1
        if alive:
            lost.append(alive)
            depths.append(depth)
        leading = [0] * width  # blocks each server holds in a row from the first; each ends its run at most once
        for members, at in zip(lost, depths):
            while members:
                lowest = members & -members
                leading[lowest.bit_length() - 1] = at
                members ^= lowest
        matched: np.ndarray = np.minimum(1.0, np.array(leading, dtype=np.float64) * (self.block_tokens / prompt_tokens))
        return matched

    def bits(self, server_ids: Sequence[str]) -> np.ndarray:
        """The bit number of each server (a server the index has not seen gets one), for :meth:`fractions`."""
        return np.fromiter((self._bit_of(s) for s in server_ids), dtype=np.intp, count=len(server_ids))

    def match(self, server_id: str, hashes: Sequence[int], prompt_tokens: int) -> float:
        """Fraction (0-1) of a ``prompt_tokens``-token prompt whose leading blocks ``server_id`` holds."""
        return self.matches(hashes, prompt_tokens).get(server_id, 0.0)

    def forget(self, server_id: str) -> None:
        bit_number = self._bit.pop(server_id, None)
        blocks = self._servers.pop(server_id, ())
        if bit_number is None:
            return
        for h in blocks:
            self._drop_holder(1 << bit_number, h)
        self._server_of_bit[bit_number] = None
        self._free_bits.append(bit_number)

    def size(self, server_id: str) -> int:
        return len(self._servers.get(server_id, ()))

    def _bit_of(self, server_id: str) -> int:
        number = self._bit.get(server_id)
        if number is None:
            if self._free_bits:
                number = self._free_bits.pop()
                self._server_of_bit[number] = server_id
            else:
                number = len(self._server_of_bit)
                self._server_of_bit.append(server_id)
            self._bit[server_id] = number
        return number

    def _drop_holder(self, bit: int, h: int) -> None:
        remaining = self._holders.get(h, 0) & ~bit
        if remaining:
            self._holders[h] = remaining
        else:
            self._holders.pop(h, None)
