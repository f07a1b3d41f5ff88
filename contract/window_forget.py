"""A request to the worker to forget what its windows hold of one pool key: llm-d's ``POST /flush``.

It travels on the telemetry topic, keyed like the pool's records (its pool key), so it reaches the worker
that owns the pool's windows after every record sent before it, and it is kept in the telemetry history
like them. The worker drops every window row of the pool key (every target) completed before
``before_ts``; the rows written afterwards train the next models, and the live models keep serving until
they do. A message that is not a telemetry record and not one of these is dead-lettered as before.

Wire format: ``{"v": 1, "forget": {"pool_key": str, "before_ts": float, "reason": str}}``.

>>> raw = encode(Forget("llama", 1e9, "new deployment"))
>>> decode(raw)
Forget(pool_key='llama', before_ts=1000000000.0, reason='new deployment')
>>> decode(b'{"v": 1, "request_id": "r"}') is None
True
"""

from __future__ import annotations

import msgspec

VERSION = 1
MAX_REASON_CHARS = 256


class Forget(msgspec.Struct, frozen=True):
    pool_key: str
    before_ts: float
    reason: str = ""


class _Wire(msgspec.Struct):
    v: int
    forget: Forget


_DECODER = msgspec.json.Decoder(_Wire)


def encode(forget: Forget) -> bytes:
    return msgspec.json.encode(_Wire(VERSION, Forget(forget.pool_key, forget.before_ts,
                                                     forget.reason[:MAX_REASON_CHARS])))


def key(forget: Forget) -> bytes:
    """Its Kafka key: the pool key, as a record of the pool is keyed (:func:`contract.telemetry.partition_key`)."""
    return forget.pool_key.encode()


def decode(raw: bytes | None) -> Forget | None:
    """The request ``raw`` holds; None when it holds none (a telemetry record, or anything else)."""
    if not raw or b'"forget"' not in raw:
        return None
    try:
        wire = _DECODER.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    if wire.v != VERSION or not wire.forget.pool_key or wire.forget.before_ts != wire.forget.before_ts:
        return None
    return wire.forget
