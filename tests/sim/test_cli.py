from __future__ import annotations

import argparse

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


@pytest.mark.parametrize("argv, message", [
    (("run", "--policy", "nope", "--limit", "10"), "unknown policy 'nope'"),
    (("run", "--servers", "0", "--limit", "10"), "HEADROOM_SIM_SERVERS"),
], ids=["policy", "servers"])
def test_user_errors_are_command_errors(argv, message) -> None:
    with pytest.raises(CommandError, match=message):
        _invoke(*argv)
