"""Where the public traces are (``HEADROOM_TRACES_DIR``), and what to do when one is missing.

The traces are not part of headroom: they are public data sets, read from a folder that holds
``azure/`` and ``mooncake/`` (laid out as :data:`TRACES` says). A source checkout finds them in
``../shared/traces`` beside it; an installed headroom in ``./traces``; ``HEADROOM_TRACES_DIR`` overrides
both. This module uses the standard library only, so ``make demo`` runs it as a script to check the
traces before it sets anything up::

    python3 sim/trace_files.py azure      # exit status 2 and the message when the Azure trace is missing
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ENV = "HEADROOM_TRACES_DIR"

# name -> (path inside the traces folder, where to get it)
TRACES = {
    "azure": ("azure/AzureLLMInferenceTrace_conv_2023.csv",
              "https://github.com/Azure/AzurePublicDataset (data/AzureLLMInferenceTrace_conv.csv, CC-BY-4.0)"),
    "mooncake": ("mooncake/mooncake_fast25_synthetic_trace.jsonl",
                 "https://github.com/kvcache-ai/Mooncake (FAST25-release/traces/synthetic_trace.jsonl, Apache-2.0)"),
}


def default_dir() -> Path:
    """``shared/traces`` beside a source checkout; ``traces`` in the working directory otherwise."""
    root = Path(__file__).resolve().parents[1]
    if (root / "pyproject.toml").is_file() and (root / "sim" / "trace_files.py").is_file():
        return root.parent / "shared" / "traces"
    return Path("traces")


def trace_path(traces_dir: Path, name: str) -> Path:
    return Path(traces_dir) / TRACES[name][0]


def missing(traces_dir: Path, *names: str) -> str | None:
    """What is missing and where to get it, or None when every named trace is there."""
    absent = [name for name in names if not trace_path(traces_dir, name).is_file()]
    if not absent:
        return None
    where = Path(traces_dir).absolute()
    lines = [f"missing trace file(s) in {where} (set {ENV} to the folder that holds them):"]
    lines += [f"  {trace_path(where, name)}\n    from {TRACES[name][1]}" for name in absent]
    return "\n".join(lines)


if __name__ == "__main__":
    problem = missing(Path(os.environ.get(ENV) or default_dir()), *(sys.argv[1:] or TRACES))
    if problem:
        print(problem, file=sys.stderr)
        sys.exit(2)
