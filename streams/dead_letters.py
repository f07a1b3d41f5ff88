"""Dead letters: rejected telemetry in the dead-letter topic, bounded in size, with what the record was.

A letter (:func:`letter_of`) keeps the original's key and at most :data:`MAX_LETTER_BYTES` of its bytes;
its headers say why the record was rejected (:data:`REASON_HEADER`), where it came from
(:data:`SOURCE_HEADER`: topic/partition/offset), how large it was and its sha256, so a record of any size
the telemetry topic took fits in the dead-letter topic and can be found and checked against the original.

The worker writes letters in the transaction of the partition the record came from, with that partition's
window changes (:mod:`streams.app`), so a letter is stored exactly when the high-water mark moves past its
record. A letter the dead-letter topic refuses for its size is written again without the original's bytes
(:func:`without_original`; reason, source, size and checksum stay), counted
(``headroom_telemetry_dead_letter_failures_total{error}``) and logged.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, replace

from confluent_kafka import KafkaError, KafkaException

from headroom.contract.topics import REASON_HEADER, SOURCE_HEADER
from headroom.streams.reader import Delivery

BYTES_HEADER = "headroom-original-bytes"
SHA256_HEADER = "headroom-original-sha256"
MAX_LETTER_BYTES = 64 * 1024  # of the original's bytes; a larger original is cut to its first bytes
MAX_KEY_BYTES = 1024
MAX_REASON_CHARS = 2000  # a reason may quote the record (an unknown field's name)
_TOO_LARGE = {KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.RECORD_LIST_TOO_LARGE}


@dataclass(frozen=True)
class Letter:
    key: bytes | None
    value: bytes
    headers: list[tuple[str, str | bytes | None]]


def letter_of(delivery: Delivery, reason: str, source_topic: str) -> Letter:
    """The dead letter of a rejected message."""
    original = delivery.value or b""
    if len(reason) > MAX_REASON_CHARS:
        reason = reason[:MAX_REASON_CHARS] + "…"
    return Letter(
        key=None if delivery.key is None else delivery.key[:MAX_KEY_BYTES], value=original[:MAX_LETTER_BYTES],
        headers=[(REASON_HEADER, reason.encode()),
                 (SOURCE_HEADER, f"{source_topic}/{delivery.partition}/{delivery.offset}".encode()),
                 (BYTES_HEADER, str(len(original)).encode()),
                 (SHA256_HEADER, hashlib.sha256(original).hexdigest().encode())])


def without_original(letter: Letter) -> Letter:
    """The letter without the original's bytes: its reason, source, size and checksum alone."""
    return replace(letter, value=b"")


def refused_for_size(error: BaseException) -> bool:
    """Whether a failed write (its cause a :class:`KafkaException`) was refused for a message's size."""
    cause = error.__cause__
    code = cause.args[0].code() if isinstance(cause, KafkaException) and cause.args and isinstance(
        cause.args[0], KafkaError) else None
    return code in _TOO_LARGE or "too large" in str(error).lower()
