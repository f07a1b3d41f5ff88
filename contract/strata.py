"""The stratum of a record: waiting-queue bucket × KV-utilization bucket × prefix-match quartile.

Queue buckets are 0 | 1–2 | 3–5 | 6–10 | 11+, KV utilization is cut in 5% steps and prefix match in
quartiles: 5 × 20 × 4 = 400 strata, each kept as its own capped, aged window so a few hot regions of
the state space cannot crowd out the rest. The router knows a request's stratum at dispatch, so it can
sample telemetry per stratum (:mod:`router.control.telemetry_sampler`).

>>> stratum_key(num_waiting=4, kv_cache_usage=0.37, prefix_match=0.5)
'q3-5/kv35/pm2'
"""

from __future__ import annotations

from headroom.contract.server_state import ServerState

QUEUE_BUCKETS = ((0, 0), (1, 2), (3, 5), (6, 10), (11, None))  # inclusive bounds; None: unbounded
KV_STEP = 0.05
KV_BUCKETS = 20
PREFIX_BUCKETS = 4
_EPSILON = 1e-9  # so that 0.15 lands in the 15% bucket despite binary rounding


def queue_bucket(num_waiting: int) -> int:
    """Index into :data:`QUEUE_BUCKETS` of a waiting-queue length."""
    if num_waiting < 0:
        raise ValueError(f"waiting queue length must not be negative, got {num_waiting}")
    for index, (_, high) in enumerate(QUEUE_BUCKETS):
        if high is None or num_waiting <= high:
            return index
    raise AssertionError("the last queue bucket is unbounded")


def kv_bucket(kv_cache_usage: float) -> int:
    """0..19: which 5% step of KV-cache utilization (1.0 falls in the last one)."""
    return min(max(int(kv_cache_usage / KV_STEP + _EPSILON), 0), KV_BUCKETS - 1)


def prefix_bucket(prefix_match: float) -> int:
    """0..3: the quartile of the prefix-match fraction (1.0 falls in the last one)."""
    return min(max(int(prefix_match * PREFIX_BUCKETS + _EPSILON), 0), PREFIX_BUCKETS - 1)


def queue_label(index: int) -> str:
    low, high = QUEUE_BUCKETS[index]
    if high is None:
        return f"q{low}+"
    return f"q{low}" if low == high else f"q{low}-{high}"


def stratum_key(*, num_waiting: int, kv_cache_usage: float, prefix_match: float) -> str:
    """A readable key such as ``'q3-5/kv35/pm2'`` (KV bucket named by its lower percent)."""
    kv = kv_bucket(kv_cache_usage) * round(KV_STEP * 100)
    return f"{queue_label(queue_bucket(num_waiting))}/kv{kv:02d}/pm{prefix_bucket(prefix_match)}"


def stratum_of(state: ServerState) -> str:
    """The stratum of what the router saw of a server at dispatch (a telemetry record is one)."""
    return stratum_key(num_waiting=state.num_waiting, kv_cache_usage=state.kv_cache_usage,
                       prefix_match=state.prefix_match)


def all_strata() -> list[str]:
    """Every stratum key, in bucket order."""
    return [f"{queue_label(q)}/kv{k * round(KV_STEP * 100):02d}/pm{p}"
            for q in range(len(QUEUE_BUCKETS)) for k in range(KV_BUCKETS) for p in range(PREFIX_BUCKETS)]
