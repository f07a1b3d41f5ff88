"""Process-wide settings, applied once where a process starts — the ``headroom`` command, the test
session, a benchmark script — before anything loads the libraries that read them.

The libraries read these variables when they load, not when they are used, so each is set here in the
environment (a value already there wins) rather than passed down like a service's settings.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

from headroom.contract.settings import describe, from_env, setting


def _cache_home() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")


@dataclass(frozen=True)
class ProcessSettings:
    """What every headroom process sets before XGBoost, OpenMP or numba load."""

    omp_wait_policy: str = setting("PASSIVE", "OMP_WAIT_POLICY", "How idle OpenMP (XGBoost) threads wait: "
                                   "PASSIVE sleeps; spinning ones compete with the event loop on small machines.")
    numba_cache_dir: Path = setting(_cache_home() / "headroom" / "numba", "NUMBA_CACHE_DIR",
                                    "Where the compiled tree kernels are cached between processes.")


def configure(environ: MutableMapping[str, str] = os.environ) -> ProcessSettings:
    """Read the process settings and put them in ``environ``, for the libraries to find when they load."""
    settings = from_env(ProcessSettings, environ)
    for name, env, _, _ in describe(ProcessSettings):
        environ[env] = str(getattr(settings, name))
    return settings
