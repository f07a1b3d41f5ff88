"""An approximate per-server index of multimodal items, built from the router's own decisions: which media
each server has likely encoded and holds in its encoder cache.

When the router sends a request to a server it records the hashes of the request's media items there
(:func:`router.control.prompt.media_hashes`); a later request's ``encoder_matched_size`` on that server is how many
of its items the server has seen. Each server keeps at most ``max_items``, least recently used evicted
first (a stand-in for the server's own cache eviction).

>>> index = EncoderIndex(max_items=2)
>>> index.record("a", (1, 2)); index.record("a", (3,))  # item 1 is evicted
>>> index.matched((1, 2, 3), ["a", "b"]).tolist()
[2.0, 0.0]
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np


class EncoderIndex:
    def __init__(self, max_items: int = 2048):
        if max_items < 1:
            raise ValueError(f"max_items must be at least 1, got {max_items}")
        self.max_items = max_items
        self._servers: dict[str, OrderedDict[int, None]] = {}  # per server, least recently used first

    def record(self, server_id: str, hashes: Sequence[int]) -> None:
        if not hashes:
            return
        items = self._servers.setdefault(server_id, OrderedDict())
        for h in hashes:
            items[h] = None
            items.move_to_end(h)
        while len(items) > self.max_items:
            items.popitem(last=False)

    def matched(self, hashes: Sequence[int], server_ids: Sequence[str]) -> np.ndarray:
        """How many of ``hashes`` each of ``server_ids`` holds, in their order."""
        if not hashes or not self._servers:
            return np.zeros(len(server_ids))
        empty: OrderedDict[int, None] = OrderedDict()
        return np.array([sum(h in self._servers.get(sid, empty) for h in hashes) for sid in server_ids], dtype=float)

    def forget(self, server_id: str) -> None:
        self._servers.pop(server_id, None)
