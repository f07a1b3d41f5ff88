"""Replaying ``model-updates`` at start: only the newest acceptable version of each model is verified.

Verifying a version (loading it, laying out its trees, the probe prediction) is the expensive part of
applying it, and a replayed topic holds every version not yet compacted away. :class:`Replay` screens each
replayed message as it arrives (:meth:`ModelRuntime.screen`: checksum, version bounds, succession — in
topic order, against the newest version staged so far), keeps the newest ``keep`` acceptable versions per
model, and at the end installs the newest one that passes verification, falling back to the staged
versions before it. The outcome is the one applying every message in turn would reach, at the cost of
one verification per model. :attr:`Replay.outcomes` counts every replayed message once, by outcome and
rejection reason (a staged version never verified because a newer one was installed is ``stale``, a tombstone
``tombstone``).
"""

from __future__ import annotations

from collections import Counter

from headroom.contract.model_update import ModelUpdate
from headroom.predictor.runtime import ApplyOutcome, ApplyResult, ModelRuntime

KEEP = 3  # acceptable versions staged per model, newest first, in case the newest fails verification
TOMBSTONE = "tombstone"  # the outcome counted for a replayed message with no value


class Replay:
    def __init__(self, runtime: ModelRuntime, keep: int = KEEP) -> None:
        self.runtime = runtime
        self.keep = keep
        self._staged: dict[str, list[ModelUpdate]] = {}  # model key -> screened updates, oldest first
        self._newest: dict[str, int] = {}  # model key -> version of its newest staged update
        self.outcomes: Counter[tuple[str, str]] = Counter()  # (outcome, rejection reason or "") -> messages

    def add(self, message: bytes | None) -> ApplyResult | None:
        """Screen one replayed message; the outcome if it goes no further, None when it is staged or a tombstone
        (None: counted, nothing to serve)."""
        if message is None:
            self.outcomes[TOMBSTONE, ""] += 1
            return None
        screened = self.runtime.screen(message, self._newest)
        if isinstance(screened, ApplyResult):
            self._count(screened)
            return screened
        self._newest[screened.key] = screened.version
        chain = self._staged.setdefault(screened.key, [])
        chain.append(screened)
        if len(chain) > self.keep:
            del chain[0]
            self.runtime.stale += 1
            self.outcomes[ApplyOutcome.STALE.value, ""] += 1
        return None

    def finish(self) -> list[ApplyResult]:
        """Install, per model, the newest staged version that passes verification."""
        results = []
        for chain in self._staged.values():
            for index in range(len(chain) - 1, -1, -1):
                result = self.runtime.install(chain[index])
                results.append(result)
                self._count(result)
                if result.outcome is ApplyOutcome.APPLIED:
                    self.runtime.stale += index  # the older staged versions: superseded, never verified
                    self.outcomes[ApplyOutcome.STALE.value, ""] += index
                    break
        self._staged.clear()
        self._newest.clear()
        return results

    def _count(self, result: ApplyResult) -> None:
        self.outcomes[result.outcome.value, result.reason or ""] += 1
