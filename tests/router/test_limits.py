"""The request limits: JSON depth read off the raw bytes agrees with the parsed document's, and every limit is
named when it refuses."""

import asyncio
import json
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headroom.contract.prompt import token_block_hashes
from headroom.router.control.limits import RequestLimits, json_depth
from headroom.router.control.prompt import OFF_LOOP_BYTES, parse_body_off_loop
from headroom.router.errors import RequestError, RequestTooLarge

TRICKY_TEXT = st.text(alphabet='[]{}"\\ab\u00e9\n', max_size=12)
DOCUMENTS = st.recursive(st.none() | st.booleans() | st.integers() | TRICKY_TEXT,
                         lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TRICKY_TEXT, inner, max_size=4),
                         max_leaves=30)


def depth(value) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth, value.values()), default=0)
    return 0


@settings(max_examples=300, deadline=None)
@given(DOCUMENTS, st.booleans())
def test_depth_of_the_raw_text_is_the_depth_of_the_document(document, ascii_only):
    assert json_depth(json.dumps(document, ensure_ascii=ascii_only).encode()) == depth(document)


@pytest.mark.parametrize(("raw", "error", "limit"), [
    (b"[" * 33 + b"]" * 33, RequestError, "max_json_depth"),
    (b'{"prompt": "' + b"x" * (1024 * 1024) + b'"}', RequestTooLarge, "max_body_bytes"),
    (b"{not json", RequestError, "not valid JSON"),
    (b"[" * 5000 + b"]" * 5000, RequestError, "max_json_depth"),
])
def test_bodies_beyond_a_limit_are_refused_naming_it(raw, error, limit):
    with pytest.raises(error, match=limit):
        RequestLimits().parse_json(raw)


def test_a_body_at_the_depth_limit_parses():
    assert RequestLimits().parse_json(b"[" * 32 + b"]" * 32) is not None


@pytest.mark.parametrize("ids", [[], list(range(15)), list(range(16)), [-3, 70000, 5] * 11, list(range(1000))])
def test_token_block_hashes_cut_the_joined_text_where_per_block_joins_would(ids):
    from headroom.contract.prompt import _chain
    per_block = [",".join(map(str, ids[i:i + 16])).encode() for i in range(0, len(ids) // 16 * 16, 16)]
    assert token_block_hashes(ids) == _chain(per_block)


class ThreadNoting(RequestLimits):
    """Default limits that note the thread each body is parsed on."""

    def parse_json(self, raw: bytes):
        self.thread = threading.get_ident()
        return super().parse_json(raw)


@pytest.mark.parametrize("size, off_loop", [(1_000, False), (OFF_LOOP_BYTES + 1, True)])
def test_a_large_body_is_parsed_on_a_worker_thread_and_a_small_one_on_the_loop(size, off_loop):
    raw = json.dumps({"prompt": "x" * size}).encode()

    async def parse():
        limits = ThreadNoting()
        _, prompt = await parse_body_off_loop(raw, False, limits)
        return limits.thread != threading.get_ident(), prompt.prompt_tokens
    moved, tokens = asyncio.run(parse())
    assert moved is off_loop and tokens > 0
