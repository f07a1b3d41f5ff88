from __future__ import annotations

import argparse
import re

import pytest

from headroom.contract.telemetry import decode
from headroom.errors import CommandError
from headroom.sim.cli import register


def _invoke(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["sim", *argv])
    return args.run(args)


def test_run_prints_the_table_and_writes_telemetry(tmp_path, capsys) -> None:
    out = tmp_path / "telemetry.jsonl"
    assert _invoke("run", "--trace", "azure", "--limit", "300", "--servers", "2", "--policy", "least-kv",
                   "--telemetry", str(out)) == 0
    printed = capsys.readouterr().out
    assert "least-kv" in printed and "TTFT p99 ms" in printed
    lines = out.read_bytes().splitlines()
    assert len(lines) == 300
    assert decode(lines[0]).server_id in {"server-0", "server-1"}


def test_run_takes_a_trace_file_and_a_synthetic_load(tmp_path, capsys) -> None:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("".join(f'{{"timestamp": {100 * i}, "input_length": 700, "output_length": 20, "hash_ids": [1]}}\n'
                             for i in range(40)))
    assert _invoke("run", "--trace", str(trace), "--servers", "2") == 0
    assert re.search(r"│\s+40\s+│", capsys.readouterr().out)  # every request of the file
    assert _invoke("run", "--trace", "code:burst_factor=4", "--limit", "60", "--servers", "2",
                   "--policy", "prefix-least-queue") == 0
    printed = capsys.readouterr().out
    assert "code:burst_factor=4" in printed and "prefix-least-queue" in printed and re.search(r"│\s+60\s+│", printed)


@pytest.mark.parametrize("argv, message", [
    (("run", "--trace", "nope", "--limit", "10"), "cannot tell the format of trace 'nope'"),
    (("run", "--trace", "code", "--format", "mooncake", "--limit", "10"), "cannot read Mooncake trace code"),
    (("run", "--trace", "code:burst_factor=x", "--limit", "10"), "'burst_factor=x' is not key=number"),
    (("run", "--policy", "nope", "--limit", "10"), "unknown policy 'nope'"),
    (("run", "--servers", "0", "--limit", "10"), "HEADROOM_SIM_SERVERS"),
], ids=["trace", "format", "synthetic-spec", "policy", "servers"])
def test_user_errors_are_command_errors(argv, message) -> None:
    with pytest.raises(CommandError, match=message):
        _invoke(*argv)
