"""headroom as users install it: the wheel built and installed exactly as the Dockerfile does it
(``infra/image/build-wheels`` then ``infra/image/install``, into a fresh virtual environment), run from
outside the checkout so that no source folder can stand in for the installed package."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.deploy.resources import ROOT

pytestmark = [pytest.mark.kafka, pytest.mark.e2e, pytest.mark.timeout(1200)]  # builds every dependency's wheel


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The ``headroom`` command of a fresh environment holding only the built wheel and its dependencies."""
    folder = tmp_path_factory.mktemp("standalone")
    source = folder / "src"  # what `COPY . .` puts in the image: the files of a clone
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True,
                           text=True, check=True).stdout.split()
    for name in files:
        if (ROOT / name).is_file():
            (source / name).parent.mkdir(parents=True, exist_ok=True)
            (source / name).write_bytes((ROOT / name).read_bytes())
            (source / name).chmod((ROOT / name).stat().st_mode)
    # cargo's build cache is the checkout's (pip's editable install filled it): the compiled front's dependencies
    # are not compiled again, and the wheel holds what a first build makes
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
           "CARGO_TARGET_DIR": str(ROOT / "native" / "target")}
    for step in (["infra/image/build-wheels", str(source), str(folder / "wheels")],
                 ["infra/image/install", str(folder / "wheels"), str(folder / "prefix")]):
        done = subprocess.run(step, cwd=source, env=env, capture_output=True, text=True, timeout=1200)
        assert done.returncode == 0, f"{step[0]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return folder / "prefix" / "bin" / "headroom"


def run(headroom: Path, *args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("HEADROOM_") or k == "HEADROOM_KAFKA_JAR_CACHE"}
    return subprocess.run([str(headroom), *args], cwd=cwd, env={**environ, **(env or {})}, capture_output=True,
                          text=True, timeout=300)


def test_help_and_version(installed, tmp_path):
    done = run(installed, "--help", cwd=tmp_path)
    assert done.returncode == 0 and "kafka" in done.stdout and "router" in done.stdout
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    assert run(installed, "--version", cwd=tmp_path).stdout.strip() == f"headroom {version}"


def test_only_the_headroom_package_is_installed(installed):
    site = next((installed.parent.parent / "lib").glob("python3*/site-packages"))
    ours = {p.name for p in site.iterdir()} & {"cli", "contract", "demo", "sim", "router", "streams", "trainer",
                                               "predictor", "autoscale", "backtest", "localkafka", "infra", "tests"}
    assert ours == set()
    assert (site / "headroom" / "localkafka" / "infra" / "pom.xml").is_file()
    assert any(site.glob("headroom/router/__pycache__/*.pyc"))  # compiled at install: nothing is written at run time
    assert any(site.glob("headroom/_native.*.so"))  # the router's compiled ext_proc front, built into the wheel


def test_every_module_the_wheel_ships_imports_without_the_checkout(installed, tmp_path):
    """A shipped module that borrows the tests' helpers (``tests.*``) could not run where users install it."""
    python = installed.parent / "python"
    walk = ("import importlib, pkgutil, headroom\n"
            "names = [m.name for m in pkgutil.walk_packages(headroom.__path__, 'headroom.')]\n"
            "for name in names: importlib.import_module(name)\n"
            "print(len(names))")
    done = subprocess.run([str(python), "-c", walk], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) > 200
    site = next((installed.parent.parent / "lib").glob("python3*/site-packages"))
    assert not (site / "headroom" / "benchmarks" / "dev").exists()  # the developers' runs stay in the checkout
    for load in ("grpc_load", "http_load", "ext_proc_load", "ext_proc_go"):  # the Go sources `headroom bench` builds
        assert (site / "headroom" / "benchmarks" / load / "main.go").is_file(), load


def test_the_local_broker_runs_from_the_installed_package(installed, tmp_path):
    env = {"HEADROOM_KAFKA_PORT": str(free_port()), "HEADROOM_KAFKA_CONTROLLER_PORT": str(free_port())}
    state = tmp_path / "state"
    try:
        up = run(installed, "kafka", "up", "--state-dir", str(state), cwd=tmp_path, env=env)
        assert up.returncode == 0, up.stdout + up.stderr
        assert "created topics: telemetry, telemetry-dlq, model-updates" in up.stdout
        status = run(installed, "kafka", "status", "--state-dir", str(state), cwd=tmp_path, env=env)
        assert status.returncode == 0 and "answering" in status.stdout
    finally:
        down = run(installed, "kafka", "down", "--state-dir", str(state), cwd=tmp_path, env=env)
    assert down.returncode == 0 and down.stdout.strip() == "Kafka stopped"


def test_the_demo_without_its_trace_fails_at_once_saying_what_is_missing(installed, tmp_path):
    done = run(installed, "demo", cwd=tmp_path)
    assert done.returncode == 1
    assert f"missing trace file(s) in {tmp_path / 'traces'}" in done.stderr
    assert "AzureLLMInferenceTrace_conv_2023.csv" in done.stderr and "github.com/Azure/AzurePublicDataset" in done.stderr
    assert not (tmp_path / ".headroom").exists()  # nothing was started


def test_make_demo_on_a_clone_without_the_traces_fails_before_setting_anything_up(tmp_path):
    done = subprocess.run(["make", "-s", "demo", "VENV=" + str(tmp_path / "venv")], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, env={**os.environ, "HEADROOM_TRACES_DIR": str(tmp_path / "none")})
    assert done.returncode != 0
    assert f"missing trace file(s) in {tmp_path / 'none'}" in done.stderr
    assert not (tmp_path / "venv").exists()


def documented_commands() -> set[tuple[str, ...]]:
    """Every ``headroom GROUP [COMMAND]`` the README and docs/ show as code (in backticks, fenced or indented
    blocks), checked against the real parser: code naming a command that does not exist fails here."""
    from headroom.cli.main import build_parser

    def choices(parser) -> dict:
        actions = parser._subparsers._group_actions if parser._subparsers else []
        return {name: sub for action in actions for name, sub in action.choices.items()}

    groups = choices(build_parser())
    named = set()
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        text = page.read_text()
        code = re.findall(r"```[^\n]*\n(.*?)```", text, re.S) + re.findall(r"`([^`\n]+)`", text)
        code += [line for line in text.splitlines() if line.startswith("    ")]
        commands_shown = "\n".join(line.split(" #")[0] for snippet in code for line in snippet.splitlines())
        for group, command in re.findall(r"\bheadroom ([a-z][a-z-]*)(?=\s|$)(?: ([a-z][a-z-]*)(?=\s|$))?", commands_shown):
            assert group in groups, f"{page.name} shows `headroom {group}`, which is not a command"
            commands = choices(groups[group])
            assert not commands or not command or command in commands, \
                f"{page.name} shows `headroom {group} {command}`, which is not a command"
            named.add((group, command) if commands and command else (group,))
    return named


def test_every_command_the_docs_name_runs_from_the_installed_package(installed, tmp_path):
    commands = documented_commands()
    assert {("autoscale", "check"), ("router", "serve"), ("worker", "start"), ("models", "list")} <= commands
    failed = {" ".join(c): done.stderr[-500:] for c in sorted(commands)
              if (done := run(installed, *c, "--help", cwd=tmp_path)).returncode != 0}
    assert failed == {}


def test_the_documented_offline_commands_do_their_work_from_the_installed_package(installed, tmp_path):
    hpa = tmp_path / "hpa.yaml"
    hpa.write_text("apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: vllm}\nspec:\n"
                   "  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: vllm}\n  maxReplicas: 8\n"
                   "  metrics:\n  - type: Pods\n    pods:\n      metric: {name: 'vllm:num_requests_waiting'}\n"
                   "      target: {type: AverageValue, averageValue: '5'}\n")
    check = run(installed, "autoscale", "check", "--hpa", str(hpa), "--kubernetes-version", "1.33", cwd=tmp_path)
    assert check.returncode == 0 and "schema: valid autoscaling/v2 HorizontalPodAutoscaler" in check.stdout, \
        check.stderr
    decide = run(installed, "autoscale", "decide", "--hpa", str(hpa), "--replicas", "4",
                 "--metric", "vllm:num_requests_waiting=1,1,1,1", cwd=tmp_path)
    assert decide.returncode == 0, decide.stderr
    keygen = run(installed, "models", "keygen", "--out", str(tmp_path / "keys"), cwd=tmp_path)
    assert keygen.returncode == 0 and any((tmp_path / "keys").glob("*.pub")), keygen.stderr
    strimzi = run(installed, "kafka", "strimzi", "--out", str(tmp_path / "k8s"), cwd=tmp_path)
    assert strimzi.returncode == 0 and (tmp_path / "k8s" / "topics.yaml").is_file(), strimzi.stderr
    with socket.create_server(("127.0.0.1", port := free_port())):
        (tmp_path / "router.yaml").write_text(f"settings: {{httpPort: {port}, pickPort: -1, extProcPort: -1, "
                                              f"predictor: none, telemetry: false}}\nservers: []\n")
        taken = run(installed, "router", "serve", "--config", str(tmp_path / "router.yaml"), cwd=tmp_path)
    assert taken.returncode == 1 and len(taken.stderr.splitlines()) == 1, taken.stderr
