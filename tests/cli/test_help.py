"""What ``headroom --help`` and each command's help tell a user: plain text, the version, and every
environment variable the command reads, taken from the settings it builds."""

import argparse

import pytest

from headroom import __version__
from headroom.autoscale.controller import ControllerSettings
from headroom.backtest.settings import BacktestSettings
from headroom.cli.main import build_parser, main
from headroom.contract.settings import describe
from headroom.contract.signing import SigningSettings
from headroom.contract.topics import KafkaSettings
from headroom.demo.settings import DemoSettings
from headroom.llmd.settings import TrainingApiSettings
from headroom.localkafka.settings import BrokerSettings
from headroom.predictor.settings import PredictorSettings
from headroom.router.app.settings import RouterSettings
from headroom.sim.settings import SimSettings
from headroom.streams.settings import PipelineSettings


def help_of(capsys, *argv: str) -> str:
    with pytest.raises(SystemExit) as exited:
        main([*argv, "--help"])
    assert exited.value.code == 0
    return capsys.readouterr().out


def test_top_level_help_is_for_users(capsys):
    text = help_of(capsys)
    assert "predicted latency" in text and "--version" in text
    for developer_text in ("``", ":mod:", ":class:", "register(", "subcommand group"):
        assert developer_text not in text


def test_version(capsys):
    with pytest.raises(SystemExit):
        main(["--version"])
    assert capsys.readouterr().out.strip() == f"headroom {__version__}"


@pytest.mark.parametrize("argv, classes", [
    (("router", "serve"), (RouterSettings, KafkaSettings)),
    (("predictor", "serve"), (PredictorSettings, KafkaSettings)),
    (("worker", "start"), (PipelineSettings, KafkaSettings, SigningSettings)),
    (("models", "list"), (KafkaSettings, SigningSettings)),
    (("models", "tail"), (KafkaSettings, SigningSettings)),
    (("models", "export"), (KafkaSettings, SigningSettings)),
    (("llmd", "training-server"), (TrainingApiSettings, KafkaSettings)),
    (("kafka", "up"), (BrokerSettings, KafkaSettings)),
    (("demo",), (DemoSettings, BrokerSettings, KafkaSettings)),
    (("sim", "serve"), (SimSettings,)),
    (("sim", "run"), (SimSettings,)),
    (("backtest", "run"), (BacktestSettings, KafkaSettings, SigningSettings, PipelineSettings)),
    (("autoscale", "recommend"), (ControllerSettings,)),
    (("bench", "sim"), (SimSettings,)),
], ids=lambda v: "-".join(v) if isinstance(v, tuple) and isinstance(v[0], str) else "")
def test_each_command_lists_the_environment_variables_it_reads(capsys, argv, classes):
    text = " ".join(help_of(capsys, *argv).split())  # wrapped lines joined
    for cls in classes:
        for name, env, _, _ in describe(cls):
            assert f"{env} (default " in text, f"{' '.join(argv)} --help does not list {env} ({cls.__name__}.{name})"


def test_every_command_that_runs_says_what_it_reads():
    def leaves(parser, path=()):
        actions = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not actions:
            yield path, parser
        for action in actions:
            for name, sub in action.choices.items():
                yield from leaves(sub, (*path, name))

    silent = [" ".join(path) for path, parser in leaves(build_parser())
              if "environment (read at start" not in (parser.epilog or "")
              and path[0] not in ("bench",)  # benchmarks that read nothing from the environment
              and path != ("models", "keygen")]  # writes a new key pair, reads nothing
    assert silent == []


def test_demo_help_gives_the_defaults_it_runs_with(capsys):
    text = help_of(capsys, "demo")
    defaults = DemoSettings()
    assert f"(default {defaults.load:g})" in text and f"(default {defaults.duration_s:g})" in text
