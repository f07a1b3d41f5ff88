"""The backtest's settings, built once by ``headroom backtest run``."""

from __future__ import annotations

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
    calibration_tolerance: float = setting(1.5, "HEADROOM_BACKTEST_CALIBRATION_TOLERANCE",
                                           "Largest ratio between the replayed and the recorded TTFT p50, p99 and "
                                           "TPOT p50 at which policies are still ranked.")

    @property
    def policy_names(self) -> list[str]:
        return [name.strip() for name in self.policies.split(",") if name.strip()]
