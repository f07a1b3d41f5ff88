"""A router process for the live benchmarks: ``python -m headroom.benchmarks.live_router CONFIG``.

The real :class:`~router.app.server.RouterServer`, served as ``headroom router serve`` serves it, with
``--predictor none`` (every request takes the heuristic profile, counted as ``predictor-unavailable``) or
``embedded`` (TTFT and TPOT models of the reference's size, 200 trees of depth 6, in process, as
``headroom bench router`` trains them; with ``--models DIR``, the signed model files there, trusting the keys of
its ``*.pub`` files, read as a router reads its models: without XGBoost); ``--profile FILE`` writes the event loop thread's cProfile
statistics there when it stops, timed in CPU time (on a shared machine, wall time would charge the router's
waits for a core to whatever ran before them).
"""

from __future__ import annotations

import argparse
import cProfile
import time
from pathlib import Path

from headroom.process import configure


def main() -> None:
    configure()
    parser = argparse.ArgumentParser()
    parser.add_argument("config")
    parser.add_argument("--predictor", choices=("none", "embedded"), default="none")
    parser.add_argument("--models", type=Path, help="Signed model files and their keys' *.pub (embedded).")
    parser.add_argument("--profile")
    args = parser.parse_args()
    from headroom.contract.settings import from_env
    from headroom.contract.topics import KafkaSettings
    from headroom.router.app.config import load_config
    from headroom.router.app.server import RouterServer, serve

    predictor = None
    if args.predictor == "embedded":
        from headroom.benchmarks.router import embedded_predictor
        if args.models is None:
            predictor = embedded_predictor()
        else:
            from headroom.contract.signing import TrustedKeys, load_public_key
            from headroom.model_files import model_paths
            trust = TrustedKeys([load_public_key(path) for path in sorted(args.models.glob("*.pub"))])
            predictor = embedded_predictor(updates=[p.read_bytes() for p in model_paths(args.models)], trust=trust)
    server = RouterServer(load_config(args.config), from_env(KafkaSettings), predictor=predictor)
    profiler = cProfile.Profile(time.thread_time) if args.profile else None
    if profiler is not None:
        profiler.enable()
    serve(server)
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)


if __name__ == "__main__":
    main()
