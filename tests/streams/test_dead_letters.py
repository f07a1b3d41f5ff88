"""A dead letter is bounded whatever the record it stands for, and says what the record was."""

import hashlib

import pytest

from headroom.streams.dead_letters import (
    BYTES_HEADER,
    MAX_LETTER_BYTES,
    MAX_REASON_CHARS,
    REASON_HEADER,
    SHA256_HEADER,
    SOURCE_HEADER,
    letter_of,
)
from headroom.streams.reader import Delivery


@pytest.mark.parametrize("size", [0, 100, MAX_LETTER_BYTES, 1_000_000])
def test_a_letter_keeps_a_bounded_prefix_with_the_original_size_and_checksum(size):
    original = bytes(range(256)) * (size // 256) + b"x" * (size % 256)
    letter = letter_of(Delivery(3, 41, b"pool-a", original), "not valid JSON", "telemetry")
    headers = dict(letter.headers)
    assert letter.value == original[:MAX_LETTER_BYTES] and letter.key == b"pool-a"
    assert headers[SOURCE_HEADER] == b"telemetry/3/41" and headers[REASON_HEADER] == b"not valid JSON"
    assert int(headers[BYTES_HEADER]) == size
    assert headers[SHA256_HEADER].decode() == hashlib.sha256(original).hexdigest()


def test_a_reason_quoting_a_huge_record_is_cut_and_a_tombstone_has_empty_bytes():
    letter = letter_of(Delivery(0, 7, b"k" * 10**6, None), "unknown field '" + "f" * 10**6 + "'", "telemetry")
    headers = dict(letter.headers)
    assert len(headers[REASON_HEADER].decode()) == MAX_REASON_CHARS + 1 and len(letter.key) == 1024
    assert letter.value == b"" and headers[BYTES_HEADER] == b"0"
