from __future__ import annotations

import argparse

import pytest

from headroom.benchmarks.cli import register
from headroom.errors import CommandError


def _invoke(*argv: str) -> int:
    parser = argparse.ArgumentParser()
    register(parser.add_subparsers())
    args = parser.parse_args(["bench", *argv])
    return args.run(args)


def test_sim_bench_runs_each_policy(capsys) -> None:
    assert _invoke("sim", "--traces", "azure", "--limit", "200", "--servers", "2",
                   "--policies", "round-robin,least-queue") == 0
    printed = capsys.readouterr().out
    assert "round-robin" in printed and "least-queue" in printed


@pytest.mark.parametrize("argv, message", [
    (("sim", "--traces", "nope", "--limit", "10"), "unknown trace 'nope'"),
    (("router", "--candidates", "0"), "must be positive"),
], ids=["trace", "router-candidates"])
def test_user_errors_are_command_errors(argv, message) -> None:
    with pytest.raises(CommandError, match=message):
        _invoke(*argv)
