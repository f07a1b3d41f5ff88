"""An approximate per-server index of prompt prefix blocks, built from the router's own decisions.

A prompt is cut into 16-token blocks hashed as a chain (:mod:`contract.prompt`), so equal hashes mean
equal prefixes. When the router sends a prompt to a server it records the prompt's
block hashes there; a later prompt's match on that server is the share of its tokens covered by its
leading blocks the server has seen. Each server keeps at most ``max_blocks`` hashes, least recently used
evicted first (a stand-in for the server's own cache eviction).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

from contract.prompt import BLOCK_TOKENS


class PrefixIndex:
    def __init__(self, max_blocks: int = 200_000, block_tokens: int = BLOCK_TOKENS):
        if max_blocks < 1:
            raise ValueError(f"max_blocks must be at least 1, got {max_blocks}")
        self.max_blocks = max_blocks
        self.block_tokens = block_tokens
        self._servers: dict[str, OrderedDict[int, None]] = {}  # per server, least recently used first
        self._holders: dict[int, set[str]] = {}  # block hash -> servers holding it

    def record(self, server_id: str, hashes: Sequence[int]) -> None:
        blocks = self._servers.setdefault(server_id, OrderedDict())
        for h in hashes:
            if h in blocks:
                blocks.move_to_end(h)
            else:
                blocks[h] = None
                self._holders.setdefault(h, set()).add(server_id)
        while len(blocks) > self.max_blocks:
            self._drop_holder(server_id, blocks.popitem(last=False)[0])

    def matches(self, hashes: Sequence[int], prompt_tokens: int) -> dict[str, float]:
        """Fraction (0-1) of a ``prompt_tokens``-token prompt whose leading blocks each server holds;
        servers holding none of them are left out. One walk over the prompt's blocks serves every server."""
        if not hashes or prompt_tokens <= 0:
            return {}
        alive = self._holders.get(hashes[0])
        if not alive:
            return {}
        alive = set(alive)
        leading: dict[str, int] = {}
        depth = 1
        for h in hashes[1:]:
            holders = self._holders.get(h)
            still = alive & holders if holders else set()
            for server_id in alive - still:
                leading[server_id] = depth
            alive = still
            if not alive:
                break
            depth += 1
        for server_id in alive:
            leading[server_id] = depth
        scale = self.block_tokens / prompt_tokens
        return {server_id: min(1.0, n * scale) for server_id, n in leading.items()}

    def match(self, server_id: str, hashes: Sequence[int], prompt_tokens: int) -> float:
        """Fraction (0-1) of a ``prompt_tokens``-token prompt whose leading blocks ``server_id`` holds."""
        return self.matches(hashes, prompt_tokens).get(server_id, 0.0)

    def forget(self, server_id: str) -> None:
        for h in self._servers.pop(server_id, ()):
            self._drop_holder(server_id, h)

    def size(self, server_id: str) -> int:
        return len(self._servers.get(server_id, ()))

    def _drop_holder(self, server_id: str, h: int) -> None:
        holders = self._holders.get(h)
        if holders is not None:
            holders.discard(server_id)
            if not holders:
                del self._holders[h]
