"""The backtest's settings, built once by ``headroom backtest run``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from headroom.contract.settings import setting


@dataclass(frozen=True)
class BacktestSettings:
    """Where the report goes and what the policy comparison simulates."""

    out_dir: Path = setting(Path("backtest-report"), "HEADROOM_BACKTEST_OUT", "Directory the report is written to.")
    policies: str = setting("round-robin,least-queue,composite,predicted-latency", "HEADROOM_BACKTEST_POLICIES",
                            "Comma-separated simulator policies to compare (empty: skip the comparison).")
    servers: int = setting(0, "HEADROOM_BACKTEST_SERVERS",
                           "Simulated servers in the policy comparison (0: as many as the records name).")
    server_type: str = setting("h100", "HEADROOM_BACKTEST_SERVER_TYPE", "Simulated server profile.")
    seed: int = setting(0, "HEADROOM_BACKTEST_SEED", "Seed of the simulated policies and servers.")
    calibration_period_s: float = setting(15.0, "HEADROOM_BACKTEST_CALIBRATION_PERIOD_S",
                                          "Length of the periods over which each server's speed is fitted.")
    processes: int = setting(0, "HEADROOM_BACKTEST_PROCESSES",
                             "Processes fitting training rounds (0: one per core; 1: in the replaying process).")
    calibration_tolerance: float = setting(1.5, "HEADROOM_BACKTEST_CALIBRATION_TOLERANCE",
                                           "Largest ratio between the replayed and the recorded TTFT p50, p99 and "
                                           "TPOT p50 at which policies are still ranked.")

    def __post_init__(self) -> None:
        if self.processes < 0:
            raise ValueError(f"HEADROOM_BACKTEST_PROCESSES must be 0 or more, got {self.processes}")

    @property
    def training_processes(self) -> int:
        """How many processes fit rounds: ``processes``, or one per core this process may run on."""
        return self.processes or len(os.sched_getaffinity(0))

    @property
    def policy_names(self) -> list[str]:
        return [name.strip() for name in self.policies.split(",") if name.strip()]
