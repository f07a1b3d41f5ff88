"""Process-wide settings, applied once where a process starts — the ``headroom`` command, the test
session, a benchmark script — before anything loads the libraries that read them.

The libraries read these variables when they load, not when they are used, so each is set here in the
environment (a value already there wins) rather than passed down like a service's settings.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from dataclasses import dataclass

from headroom.contract.settings import describe, from_env, setting


@dataclass(frozen=True)
class ProcessSettings:
    """What every headroom process sets before XGBoost or OpenMP load."""

    omp_wait_policy: str = setting("PASSIVE", "OMP_WAIT_POLICY", "How idle OpenMP (XGBoost) threads wait: "
                                   "PASSIVE sleeps; spinning ones compete with the event loop on small machines.")


def configure(environ: MutableMapping[str, str] = os.environ) -> ProcessSettings:
    """Read the process settings and put them in ``environ``, for the libraries to find when they load."""
    settings = from_env(ProcessSettings, environ)
    for name, env, _, _ in describe(ProcessSettings):
        environ[env] = str(getattr(settings, name))
    return settings
