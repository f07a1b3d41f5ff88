"""The simulator's settings, built once at the command line from the environment and flags."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, fields

from headroom.contract.settings import from_env, setting


@dataclass(frozen=True)
class SimSettings:
    servers: int = setting(16, "HEADROOM_SIM_SERVERS", "Servers in a simulated pool.")
    server_type: str = setting("h100", "HEADROOM_SIM_SERVER_TYPE", "Server profile: h100 or a100.")
    utilization: float = setting(0.8, "HEADROOM_SIM_UTILIZATION", "Offered load as a fraction of pool capacity.")
    seed: int = setting(0, "HEADROOM_SIM_SEED", "Seed of every random draw in a run.")
    scrape_interval_s: float = setting(0.05, "HEADROOM_SIM_SCRAPE_INTERVAL_S", "How stale the router's metrics are.")
    host: str = setting("127.0.0.1", "HEADROOM_SIM_HOST", "Address live servers listen on.")
    base_port: int = setting(8100, "HEADROOM_SIM_BASE_PORT", "Port of the first live server (0: any free).")
    time_scale: float = setting(1.0, "HEADROOM_SIM_TIME_SCALE", "Live mode: virtual seconds per wall second.")

    def __post_init__(self) -> None:
        if self.servers < 1:
            raise ValueError(f"HEADROOM_SIM_SERVERS must be at least 1, got {self.servers}")
        if not 0 < self.utilization:
            raise ValueError(f"HEADROOM_SIM_UTILIZATION must be positive, got {self.utilization}")
        if self.time_scale <= 0 or self.scrape_interval_s <= 0:
            raise ValueError("HEADROOM_SIM_TIME_SCALE and HEADROOM_SIM_SCRAPE_INTERVAL_S must be positive")


def settings_from(args: argparse.Namespace) -> SimSettings:
    """Defaults, then the environment, then the flags that were given."""
    overrides = {f.name: getattr(args, f.name) for f in fields(SimSettings) if getattr(args, f.name, None) is not None}
    return from_env(SimSettings, **overrides)
