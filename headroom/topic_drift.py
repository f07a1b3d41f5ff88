"""How an existing topic differs from its declaration in :mod:`contract.topics`.

A topic made by hand, by an older headroom or by another tool may hold other settings than the ones the
code relies on (a telemetry topic that deletes history, a model topic that is not compacted). Only the
declared keys are compared; partitions count as drift only when there are fewer than declared (more
partitions only spread the load further).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from headroom.contract.topics import TopicSpec


@dataclass(frozen=True)
class TopicDrift:
    topic: str
    config: dict[str, tuple[str | None, str]] = field(default_factory=dict)  # key -> (actual, declared)
    partitions: tuple[int, int] | None = None  # (actual, declared) when fewer than declared

    def describe(self) -> str:
        parts = [f"{key}={actual if actual is not None else '(unset)'} (declared {declared})"
                 for key, (actual, declared) in sorted(self.config.items())]
        if self.partitions:
            actual, declared = self.partitions
            parts.append(f"{actual} partitions (declared {declared}; add partitions with kafka-topics --alter)")
        return f"topic {self.topic!r} differs from its declaration: " + ", ".join(parts)


def compare(spec: TopicSpec, partitions: int, configs: Mapping[str, str | None]) -> TopicDrift | None:
    """The drift of an existing topic with ``partitions`` and effective ``configs``, or None."""
    config = {key: (configs.get(key), declared) for key, declared in spec.config.items()
              if configs.get(key) != declared}
    fewer = (partitions, spec.partitions) if partitions < spec.partitions else None
    return TopicDrift(spec.name, config, fewer) if config or fewer else None
