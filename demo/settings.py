"""Settings of ``headroom demo``."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from headroom.contract.settings import setting


@dataclass(frozen=True)
class DemoSettings:
    """The demo's pool, load and where it writes; ports are consecutive from ``base_port``."""

    duration_s: float = setting(120.0, "HEADROOM_DEMO_DURATION_S", "Seconds of load.")
    load: float = setting(0.5, "HEADROOM_DEMO_LOAD", "Arrivals as a share of the pool's capacity (before the change).")
    time_scale: float = setting(0.2, "HEADROOM_DEMO_TIME_SCALE", "How fast the simulated servers run, as a share of their hardware's speed (the SLOs follow).")
    min_samples: int = setting(50, "HEADROOM_DEMO_MIN_SAMPLES", "Window rows before the worker trains a model.")
    retrain_interval_s: float = setting(30.0, "HEADROOM_DEMO_RETRAIN_INTERVAL", "Seconds between periodic retrains.")
    fast_servers: int = setting(3, "HEADROOM_DEMO_FAST_SERVERS", "Simulated H100 servers.")
    slow_servers: int = setting(1, "HEADROOM_DEMO_SLOW_SERVERS", "Simulated A100 servers (slower).")
    slowed_servers: int = setting(2, "HEADROOM_DEMO_SLOWED_SERVERS", "How many of the H100 servers slow down (the first ones).")
    regime_change_at: float = setting(0.5, "HEADROOM_DEMO_REGIME_AT", "When they slow down, as a share of the run.")
    slowdown: float = setting(2.0, "HEADROOM_DEMO_SLOWDOWN", "How much slower they become.")
    base_port: int = setting(18100, "HEADROOM_DEMO_BASE_PORT", "First of the ports the demo's components use.")
    state_dir: Path = setting(Path(".headroom/demo"), "HEADROOM_DEMO_STATE_DIR", "Broker data and logs; wiped at start.")
    report_dir: Path = setting(Path("demo-report"), "HEADROOM_DEMO_REPORT_DIR", "Where the report is written.")
    seed: int = setting(11, "HEADROOM_DEMO_SEED", "Seed of the load and the simulated servers.")
