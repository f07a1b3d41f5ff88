"""What reading a metric off a :class:`~headroom.metric_table.MetricTable` costs, against prometheus_client objects
held as plain attributes (how the router's metrics were held before the tables): the reads every decision makes.

    python -m headroom.benchmarks.metric_reads [--rounds 15] [--reads 200000]

The two are timed interleaved, round by round; the best round of each is compared.
"""

from __future__ import annotations

import argparse
import timeit

from prometheus_client import CollectorRegistry, Counter

from headroom.metric_table import MetricTable, counter


class Plain:
    def __init__(self) -> None:
        registry = CollectorRegistry()
        self.decisions = Counter("decisions", "Decisions.", registry=registry)
        self.rejections = Counter("rejections", "Rejections.", registry=registry)


class Table(MetricTable):
    decisions = counter("decisions", "Decisions.")
    rejections = counter("rejections", "Rejections.")


def reads(metrics: Plain | Table, n: int) -> None:
    for _ in range(n // 2):
        metrics.decisions  # noqa: B018 - the read is what is timed
        metrics.rejections  # noqa: B018


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--reads", type=int, default=200_000)
    args = parser.parse_args()
    print("load average at start:", open("/proc/loadavg").read().split()[:3])
    plain, table = Plain(), Table()
    best = {"plain": float("inf"), "table": float("inf")}
    for _ in range(args.rounds):
        best["plain"] = min(best["plain"], timeit.timeit(lambda: reads(plain, args.reads), number=1))
        best["table"] = min(best["table"], timeit.timeit(lambda: reads(table, args.reads), number=1))
    per = {k: v / args.reads * 1e9 for k, v in best.items()}
    print(f"plain attributes {per['plain']:.1f} ns/read, table {per['table']:.1f} ns/read, "
          f"ratio {best['table'] / best['plain']:.3f}")
    print("load average at end:", open("/proc/loadavg").read().split()[:3])


if __name__ == "__main__":
    main()
