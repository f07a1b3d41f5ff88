"""Every trace format the simulator reads, recognised by its first line; anything else is refused in one line.

- Azure (CSV with columns ``TIMESTAMP, ContextTokens, GeneratedTokens``), played without synthetic
  prefixes (the trace has none);
- Mooncake (JSON lines with ``timestamp``, ``input_length``, ``output_length``, ``hash_ids``), with
  its prefix hashes.

Both go through :mod:`sim.traces` (``speedup`` divides arrival times, ``limit`` keeps the first requests).
"""

from __future__ import annotations

import json
from pathlib import Path

from headroom.sim.request import SimRequest
from headroom.sim.traces import TraceError, load_azure, load_mooncake

AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
EXPECTED = (f"expected a CSV with columns {', '.join(AZURE_COLUMNS)} (Azure) or JSON lines with "
            f"{', '.join(MOONCAKE_KEYS)} (Mooncake)")


def trace_format(path: Path) -> str:
    """``"azure"`` or ``"mooncake"``; TraceError (one line, naming the expected columns) otherwise."""
    try:
        with Path(path).open(errors="replace") as handle:
            first = next((line.strip() for line in handle if line.strip()), "")
    except OSError as err:
        raise TraceError(f"cannot read {path}: {err.strerror or err}") from err
    if first.startswith("{"):
        try:
            keys = set(json.loads(first))
        except (ValueError, TypeError):
            keys = set()
        if keys >= set(MOONCAKE_KEYS):
            return "mooncake"
    elif {c.strip() for c in first.split(",")} >= set(AZURE_COLUMNS):
        return "azure"
    raise TraceError(f"{path}: not a trace headroom reads; {EXPECTED}")


def load_trace(path: Path, *, speedup: float = 1.0, limit: int | None = None, seed: int = 0) -> list[SimRequest]:
    """The requests of a trace file in either format (see the module docstring)."""
    if trace_format(path) == "mooncake":
        return load_mooncake(path, speedup=speedup, limit=limit, seed=seed)
    return load_azure(path, speedup=speedup, limit=limit, prefixes=None, seed=seed)
