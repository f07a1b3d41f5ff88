"""Loaders for the public traces (see :mod:`sim.trace_files` for where they are), as :class:`~sim.request.SimRequest`s.

Both loaders rescale time to a target mean arrival rate (``rate``, requests/s; None keeps the trace's
own timing) by dividing every inter-arrival gap by the same factor, so burstiness is kept; ``speedup``
then divides all arrival times (a speedup of 4 replays the same requests four times faster).

- Azure (CSV: ``TIMESTAMP, ContextTokens, GeneratedTokens``): no prefix information, so shared prefixes
  are synthesised with :class:`~sim.prefixes.SharedPrefixes` (system prompts; pass ``prefixes=None``
  for none).
- Mooncake (JSON lines: ``timestamp`` ms, ``input_length``, ``output_length``, ``hash_ids``): each
  512-token hash block ``h`` becomes 32 16-token blocks hashed ``h * 32 + j``, cut to the prompt's full
  16-token blocks; shared leading runs of ``hash_ids`` become shared leading runs of block hashes.

``stream_fraction`` of the requests (drawn from the seed) stream. Zero-length prompts or outputs in a
trace are raised to one token.

:func:`load_trace` loads any source by format — the one system of trace formats, the simulator's, the
benchmarks' and ``headroom autoscale``'s: a file in one of the formats above (when not stated, recognised by
its first line; a file that is neither is refused in one line naming the columns expected), or a named
synthetic load of :mod:`sim.synthetic` (format ``synthetic``, e.g. ``code:burst_factor=8``), rescaled the
same way.
"""

from __future__ import annotations

import csv
import json
import random
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path

from headroom.contract.prompt import BLOCK_TOKENS
from headroom.contract.settings import from_env, setting
from headroom.errors import HeadroomError
from headroom.sim import trace_files
from headroom.sim.prefixes import SharedPrefixes
from headroom.sim.request import SimRequest
from headroom.sim.synthetic import LOADS, synthetic_load

MOONCAKE_BLOCK_TOKENS = 512


class TraceError(HeadroomError, ValueError):
    """A trace file is missing or malformed; the message names the file and line."""


@dataclass(frozen=True)
class TraceSettings:
    traces_dir: Path = setting(trace_files.default_dir(), trace_files.ENV,
                               "Folder of the public traces (azure/, mooncake/).")

    def path(self, name: str) -> Path:
        """The file of trace ``name`` (azure or mooncake); :class:`TraceError` saying where to get it if missing."""
        problem = trace_files.missing(self.traces_dir, name)
        if problem:
            raise TraceError(problem)
        return trace_files.trace_path(self.traces_dir, name)


def _parse_time(text: str) -> float:
    day, _, clock = text.strip().partition(" ")
    whole, _, fraction = clock.partition(".")
    base = datetime.fromisoformat(f"{day} {whole}").timestamp()
    return base + (float("0." + fraction) if fraction else 0.0)


def _rescale(times: list[float], rate: float | None, speedup: float = 1.0) -> list[float]:
    """Offsets from the first arrival, scaled to ``rate`` if given, then divided by ``speedup``."""
    if speedup <= 0:
        raise TraceError(f"speedup must be positive, got {speedup}")
    if speedup != 1.0:
        return [t / speedup for t in _rescale(times, rate)]
    if not times:
        return times
    start = times[0]
    offsets = [t - start for t in times]
    if rate is None or len(times) < 2 or offsets[-1] <= 0:
        return offsets
    if rate <= 0:
        raise TraceError(f"target rate must be positive, got {rate}")
    factor = (len(times) - 1) / offsets[-1] / rate
    return [o * factor for o in offsets]


def load_azure(path: Path | str | None = None, *, rate: float | None = None, limit: int | None = None,
               prefixes: SharedPrefixes | None = SharedPrefixes(), stream_fraction: float = 1.0,
               seed: int = 0, id_prefix: str = "az", speedup: float = 1.0) -> list[SimRequest]:
    """The Azure LLM inference trace (conversation by default); see the module docstring."""
    path = Path(path) if path is not None else from_env(TraceSettings).path("azure")
    rows: list[tuple[float, int, int]] = []
    try:
        with path.open(newline="") as handle:
            reader = csv.DictReader(handle)
            for line, row in enumerate(reader, start=2):
                if limit is not None and len(rows) >= limit:
                    break
                try:
                    rows.append((_parse_time(row["TIMESTAMP"]), int(row["ContextTokens"]), int(row["GeneratedTokens"])))
                except (KeyError, ValueError, TypeError) as err:
                    raise TraceError(f"{path}:{line}: bad Azure row {row!r}: {err}") from err
    except OSError as err:
        raise TraceError(f"cannot read Azure trace {path}: {err}") from err
    rows.sort(key=lambda r: r[0])
    times = _rescale([r[0] for r in rows], rate, speedup)
    rng = random.Random(seed)
    sampler = prefixes.sampler(seed) if prefixes else None
    requests = []
    for i, (t, (_, prompt, output)) in enumerate(zip(times, rows)):
        prompt, output = max(1, prompt), max(1, output)
        hashes = sampler.hashes(prompt) if sampler else ()
        requests.append(SimRequest(f"{id_prefix}-{i}", t, prompt, output, prefix_hashes=hashes,
                                stream=rng.random() < stream_fraction))
    return requests


def load_mooncake(path: Path | str | None = None, *, rate: float | None = None, limit: int | None = None,
                  stream_fraction: float = 1.0, seed: int = 0, id_prefix: str = "mc",
                  speedup: float = 1.0) -> list[SimRequest]:
    """The Mooncake trace with its prefix hashes mapped onto 16-token blocks; see the module docstring."""
    path = Path(path) if path is not None else from_env(TraceSettings).path("mooncake")
    per_block = MOONCAKE_BLOCK_TOKENS // BLOCK_TOKENS
    rows: list[tuple[float, int, int, list[int]]] = []
    try:
        with path.open() as handle:
            for line, text in enumerate(handle, start=1):
                if limit is not None and len(rows) >= limit:
                    break
                if not text.strip():
                    continue
                try:
                    item = json.loads(text)
                    rows.append((float(item["timestamp"]) / 1000.0, int(item["input_length"]),
                                 int(item["output_length"]), [int(h) for h in item["hash_ids"]]))
                except (KeyError, ValueError, TypeError) as err:
                    raise TraceError(f"{path}:{line}: bad Mooncake record: {err}") from err
    except OSError as err:
        raise TraceError(f"cannot read Mooncake trace {path}: {err}") from err
    rows.sort(key=lambda r: r[0])
    times = _rescale([r[0] for r in rows], rate, speedup)
    rng = random.Random(seed)
    requests = []
    for i, (t, (_, prompt, output, ids)) in enumerate(zip(times, rows)):
        prompt, output = max(1, prompt), max(1, output)
        full = prompt // BLOCK_TOKENS
        hashes = tuple(h * per_block + j for h in ids for j in range(per_block))[:full]
        requests.append(SimRequest(f"{id_prefix}-{i}", t, prompt, output, prefix_hashes=hashes,
                                stream=rng.random() < stream_fraction))
    return requests


FORMATS = ("azure", "mooncake", "synthetic")
SHARED_TRACES = tuple(trace_files.TRACES)  # short names of the shared trace files (azure, mooncake)


AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
MOONCAKE_KEYS = ("timestamp", "input_length", "output_length", "hash_ids")
EXPECTED = (f"expected a CSV with columns {', '.join(AZURE_COLUMNS)} (Azure) or JSON lines with "
            f"{', '.join(MOONCAKE_KEYS)} (Mooncake)")


def trace_format(source: str | Path) -> str:
    """The format of ``source`` when none is stated: a shared trace's own; a file's by its first line (refused
    in one line naming the expected columns when it is neither); a path not there by its extension; or
    ``synthetic`` for a load name."""
    source = str(source)
    if source in SHARED_TRACES:
        return source
    if Path(source).is_file():
        return _file_format(Path(source))
    suffix = Path(source).suffix.lower()
    if suffix == ".csv":
        return "azure"
    if suffix in (".jsonl", ".json"):
        return "mooncake"
    if source.partition(":")[0] in LOADS:
        return "synthetic"
    raise TraceError(f"cannot tell the format of trace {source!r}: state one of {', '.join(FORMATS)}")


def _file_format(path: Path) -> str:
    """``"azure"`` or ``"mooncake"`` by the first line of the file at ``path``; TraceError otherwise."""
    try:
        with path.open(errors="replace") as handle:
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


def load_trace(source: str | Path, format: str | None = None, *, rate: float | None = None,
               limit: int | None = None, seed: int = 0, stream_fraction: float = 1.0, speedup: float = 1.0,
               prefixes: SharedPrefixes | None = SharedPrefixes()) -> list[SimRequest]:
    """The requests of ``source`` (a file path, a shared trace's short name, or a synthetic load spec) in
    ``format`` (inferred when None), time-scaled to ``rate`` and ``speedup`` as the loaders do; ``limit`` caps
    the count (a synthetic load needs it); ``prefixes`` are the Azure trace's synthetic shared prefixes."""
    source = str(source)
    format = format or trace_format(source)
    if format == "synthetic":
        if limit is None:
            raise TraceError(f"synthetic load {source!r} needs a request count (limit)")
        try:
            requests = synthetic_load(source, limit, seed)
        except ValueError as err:
            raise TraceError(str(err)) from err
        times = _rescale([r.arrival_s for r in requests], rate, speedup)
        rng = random.Random(seed)
        return [replace(r, arrival_s=t, stream=rng.random() < stream_fraction) for r, t in zip(requests, times)]
    if format not in SHARED_TRACES:
        raise TraceError(f"unknown trace format {format!r}; known: {', '.join(FORMATS)}")
    path = from_env(TraceSettings).path(source) if source in SHARED_TRACES else source
    if format == "azure":
        requests = load_azure(path, rate=rate, limit=limit, prefixes=prefixes, stream_fraction=stream_fraction,
                              seed=seed, speedup=speedup)
    else:
        requests = load_mooncake(path, rate=rate, limit=limit, stream_fraction=stream_fraction, seed=seed,
                                 speedup=speedup)
    if not requests:
        raise TraceError(f"trace {path} has no requests")
    return requests
