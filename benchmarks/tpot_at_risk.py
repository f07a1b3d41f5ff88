"""Per-decision cost of the router's ``tpot_at_risk`` (:meth:`router.state.inflight.Inflight.tpot_at_risk`) with
many streams in flight, against the straightforward walk over every stream (:func:`walk`).

    python -m headroom.benchmarks.tpot_at_risk [--servers 100] [--streams 1000] [--decisions 2000]

The streams hold TPOT SLOs of 25–100 ms and are relayed tokens at random moments, each at a mean pace a
little faster or slower than its SLO, so at any decision some are at risk; a decision comes every
millisecond, after that millisecond's tokens (about 20 at 1,000 streams), as in a busy pool. The two are
timed interleaved on the same state, and their results compared.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable

import numpy as np

from headroom.contract.slo import tpot_at_risk
from headroom.output_lengths import OutputLengths
from headroom.router.state.inflight import Inflight

Stream = tuple[str, float, int, float, float]  # server id, first token s, tokens, last token s, TPOT SLO ms


def walk(streams: Iterable[Stream], now: float, weight: Callable[[int], float]) -> dict[str, float]:
    """Per server with any: its streams at risk at ``now``, each counted as ``weight(tokens)`` — one call of
    :func:`contract.slo.tpot_at_risk` per stream, in the order given."""
    sums: dict[str, float] = {}
    for server_id, first, tokens, last, slo_ms in streams:
        if tpot_at_risk(first, tokens, last, now, slo_ms):
            sums[server_id] = sums.get(server_id, 0) + weight(tokens)
    return {server_id: n for server_id, n in sums.items() if n}


class Load:
    """An :class:`Inflight` and the same streams as a plain list, driven by the same random token events: each
    stream is relayed a token in a millisecond with a chance that makes its mean pace 0.8–1.25 × its SLO."""

    def __init__(self, servers: int, streams: int, seed: int = 0) -> None:
        self.rng = np.random.default_rng(seed)
        self.inflight = Inflight()
        self.streams: dict[str, Stream] = {}
        self.ids = [f"r{i}" for i in range(streams)]
        slos = self.rng.uniform(25, 100, streams)
        self.chance = 1.0 / (slos * self.rng.uniform(0.8, 1.25, streams))
        self.now = 0.0
        for rid, slo in zip(self.ids, slos.tolist()):
            self.inflight.start(rid, f"s{self.rng.integers(servers)}", 100, slo, self.now, stream=True)
            self.token(rid)
        for _ in range(500):  # half a second of relaying before the first decision
            self.advance()

    def token(self, rid: str) -> None:
        self.inflight.token(rid, self.now)
        known = self.streams.get(rid)
        if known is None:
            entry = self.inflight._requests[rid]
            if entry.tpot_slo_ms is None:
                raise ValueError(f"stream {rid} was started without a TPOT SLO")
            self.streams[rid] = (entry.server_id, self.now, 1, self.now, entry.tpot_slo_ms)
        else:
            self.streams[rid] = (known[0], known[1], known[2] + 1, self.now, known[4])

    def advance(self) -> None:
        """A millisecond passes; the tokens relayed in it arrive."""
        self.now += 0.001
        for index in np.flatnonzero(self.rng.random(len(self.ids)) < self.chance).tolist():
            self.token(self.ids[index])


def bench(servers: int = 100, streams: int = 1000, decisions: int = 2000, seed: int = 0) -> dict[str, float]:
    load, lengths = Load(servers, streams, seed), OutputLengths()
    for n in np.random.default_rng(seed).integers(2, 400, 500).tolist():
        lengths.add(n)
    weight = lengths.end_chance
    timed = {"columns": 0.0, "walk": 0.0}
    servers_at_risk = streams_at_risk = 0
    for _ in range(decisions):
        load.advance()
        started = time.perf_counter()
        ours = load.inflight.tpot_at_risk(load.now, weight)
        middle = time.perf_counter()
        reference = walk(load.streams.values(), load.now, weight)
        timed["columns"] += middle - started
        timed["walk"] += time.perf_counter() - middle
        assert ours == reference, "the results differ"
        servers_at_risk += len(ours)
        streams_at_risk += sum(tpot_at_risk(first, tokens, last, load.now, slo_ms)
                               for _, first, tokens, last, slo_ms in load.streams.values())
    return {**{k: v / decisions * 1e6 for k, v in timed.items()}, "servers_with_risk": servers_at_risk / decisions,
            "streams_at_risk": streams_at_risk / decisions}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--servers", type=int, default=100)
    parser.add_argument("--streams", type=int, default=1000)
    parser.add_argument("--decisions", type=int, default=2000)
    args = parser.parse_args()
    result = bench(args.servers, args.streams, args.decisions)
    print(f"{args.streams} streams on {args.servers} servers, {args.decisions} decisions: "
          f"Inflight.tpot_at_risk {result['columns']:.1f} µs, walk {result['walk']:.1f} µs per decision "
          f"(ratio {result['walk'] / result['columns']:.1f}); per decision, streams at risk "
          f"{result['streams_at_risk']:.1f}, servers with any {result['servers_with_risk']:.1f}")


if __name__ == "__main__":
    main()
