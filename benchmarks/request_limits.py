"""How long one request holds the router's event loop before it is scheduled, at the request limits.

Times the work a request does before its server is picked — body checks and parsing
(:meth:`router.control.limits.RequestLimits.parse_json`), prompt reading and hashing (:func:`router.control.prompt.read_body`),
the Pick API's candidate mapping — for the largest inputs the default limits let through and for inputs
they refuse, next to a typical 2 KB request (the ratio column); then how long an event loop stalls while
a body is parsed on it, against the way the router parses it (:func:`router.control.prompt.parse_body_off_loop`:
a large body on a worker thread). Usage: ``python -m headroom.benchmarks.request_limits``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import time
from collections.abc import Callable

from headroom.router.control.limits import RequestLimits
from headroom.router.control.prompt import parse_body, parse_body_off_loop
from headroom.router.errors import RequestError
from headroom.router.fronts.pick_api import snapshot_of
from headroom.router.proto import router_pb2


def parse(limits: RequestLimits, raw: bytes, chat: bool) -> Callable[[], object]:
    def call() -> object:
        try:
            return parse_body(raw, chat, limits)
        except RequestError as err:  # refused: the time to refuse is what counts
            return err
    return call


def bodies(limits: RequestLimits) -> dict[str, tuple[bytes, bool]]:
    """Request bodies (raw, chat): a typical one, the largest the limits let through, and refused ones."""
    rng = random.Random(1)
    budget = limits.max_body_bytes - 64
    words = " ".join(rng.choice(["alpha", "beta", "gamma", "delta", "[x]", "{y}", '"q"']) for _ in range(budget // 5))
    ids = [rng.randrange(100_000) for _ in range(budget // 7)]
    messages = [{"role": "user", "content": "hello there " * 8}] * (budget // 120)
    typical = {"prompt": "Summarize the following. " * 80, "max_tokens": 64, "stream": True}

    def body(doc: object) -> bytes:
        raw = json.dumps(doc).encode()
        return raw[:limits.max_body_bytes] if len(raw) > limits.max_body_bytes else raw

    return {
        "typical 2 KB completion": (body(typical), False),
        "1 MiB text prompt": (body({"prompt": words[:budget - 40]}), False),
        "1 MiB of token ids": (body({"prompt": ids}), False),
        "1 MiB chat, many messages": (body({"messages": messages}), True),
        "max_block_hashes hash_ids": (body({"prompt": "x", "headroom": {
            "hash_ids": list(range(limits.max_block_hashes))}}), False),
        "refused: 100,000-deep JSON": (b"[" * 100_000 + b"]" * 100_000, False),
        "refused: 50 MB body": (b'{"prompt": "' + b"x" * 50_000_000 + b'"}', False),
    }


def cases(limits: RequestLimits) -> dict[str, Callable[[], object]]:
    candidates = [router_pb2.ServerState(server_id=f"s{i}", address=f"10.0.0.{i % 250}:8000", num_waiting=i % 7,
                                         kv_cache_usage=0.5, running_tpot_slos_ms=[20.0, 30.0])
                  for i in range(limits.max_candidates)]
    return {**{name: parse(limits, raw, chat) for name, (raw, chat) in bodies(limits).items()},
            "max_candidates Pick candidates": lambda: [snapshot_of(c) for c in candidates]}


async def loop_stalls(limits: RequestLimits, raw: bytes, chat: bool, off_loop: bool, repeat: int) -> list[float]:
    """The longest the event loop went without running a 1 ms ticker during each of ``repeat`` parses of
    ``raw``, on the loop or as the router does it (:func:`parse_body_off_loop`), in milliseconds."""
    longest, stop = 0.0, asyncio.Event()

    async def ticker() -> None:
        nonlocal longest
        last = time.perf_counter()
        while not stop.is_set():
            await asyncio.sleep(0.001)
            now = time.perf_counter()
            longest, last = max(longest, now - last), now

    task = asyncio.create_task(ticker())
    stalls = []
    for _ in range(repeat):
        await asyncio.sleep(0.005)
        longest = 0.0
        with contextlib.suppress(RequestError):
            await parse_body_off_loop(raw, chat, limits) if off_loop else parse_body(raw, chat, limits)
        await asyncio.sleep(0.002)  # the ticker's next turn closes the gap the parse opened
        stalls.append(longest * 1000)
    stop.set()
    await task
    return stalls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    timings = {}
    for name, call in cases(RequestLimits()).items():
        samples = []
        for _ in range(args.repeat):
            started = time.perf_counter()
            call()
            samples.append((time.perf_counter() - started) * 1000)
        timings[name] = (statistics.median(samples), max(samples))
    base = timings["typical 2 KB completion"][0]
    print(f"{'input':34} {'median ms':>10} {'max ms':>8} {'× typical':>10}")
    for name, (median, worst) in timings.items():
        print(f"{name:34} {median:10.3f} {worst:8.3f} {median / base:10.1f}")
    print(f"\nlongest stall of the event loop per parse (a 1 ms ticker's gap), median and max of {args.repeat}")
    print(f"{'input':34} {'on the loop ms':>18} {'as routed ms':>16}")
    limits = RequestLimits()
    for name, (raw, chat) in bodies(limits).items():
        on, routed = (asyncio.run(loop_stalls(limits, raw, chat, off, args.repeat)) for off in (False, True))
        print(f"{name:34} {statistics.median(on):9.1f} {max(on):8.1f} {statistics.median(routed):8.1f} "
              f"{max(routed):7.1f}")

if __name__ == "__main__":
    main()
