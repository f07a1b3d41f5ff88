"""The local broker's lifecycle: ``up`` (idempotent), ``down`` and ``status``.

Everything lives under ``<state_dir>/kafka``: ``data/`` (KRaft storage), ``broker.log``, ``stdout.log``,
``broker.pid`` and the rendered ``server.properties``; in secure mode also ``security/``
(:mod:`localkafka.security`), whose users are created when the storage is formatted. A pid file whose
process is gone, or is not a Kafka broker, is stale and is removed.

Passwords never appear on a command line: the storage tool reads its arguments from a file (a JVM
argument file, ``java @file``) that is removed once it has run.
"""

from __future__ import annotations

import base64
import os
import signal
import socket
import subprocess
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from headroom import kafka_topics
from headroom.certificates import write_private
from headroom.localkafka import jars, security
from headroom.localkafka.errors import BrokerFailed, PortTaken, PrerequisiteMissing
from headroom.localkafka.settings import BrokerSettings

STOP_TIMEOUT_S = 30.0
BROKER_FILES = ("pom.xml", "server.properties", "listeners-plaintext.properties", "listeners-secure.properties",
                "log4j2.yaml")
_children: dict[int, subprocess.Popen[bytes]] = {}  # brokers this process started, reaped by down()


@dataclass(frozen=True)
class Status:
    running: bool
    pid: int | None
    bootstrap: str
    answering: bool
    log_file: Path


def status(settings: BrokerSettings) -> Status:
    pid = _live_pid(settings)
    answering = pid is not None and kafka_topics.answers(security.client(settings))
    return Status(pid is not None, pid, settings.bootstrap, answering, _log_file(settings))


def up(settings: BrokerSettings) -> Status:
    """Start the broker unless it is already running; wait until it answers a metadata request."""
    missing = [name for name in BROKER_FILES if not (settings.infra_dir / name).is_file()]
    if missing:
        raise PrerequisiteMissing(f"HEADROOM_KAFKA_INFRA={settings.infra_dir} lacks {', '.join(missing)}; point it at "
                                  "a folder with the broker files (infra/kafka/ of headroom's source) or unset it")
    current = status(settings)
    if current.running and current.pid is not None:
        _wait_until_answering(settings, current.pid)
        return status(settings)
    for port in (settings.port, settings.controller_port) + ((settings.ssl_port,) if settings.secure else ()):
        _check_port_free(port)
    java = jars.java_command()
    lib = jars.jar_dir(settings)
    home = settings.home
    formatted = (home / "data" / "meta.properties").exists()
    if formatted and settings.secure != security.layout(settings).ca.exists():
        raise BrokerFailed(f"the broker storage in {home / 'data'} was formatted "
                           f"{'without' if settings.secure else 'with'} secure mode; use another state folder "
                           f"or remove {home}")
    (home / "data").mkdir(parents=True, exist_ok=True)
    if settings.secure:
        security.prepare(settings)
    properties = _render_properties(settings)
    if not formatted:
        _format_storage(java, lib, settings, properties)
    with open(home / "stdout.log", "ab") as out:
        process = subprocess.Popen(
            [java, f"-Xmx{settings.heap}", "-Xms128m", *_jvm_flags(lib, settings), "kafka.Kafka", str(properties)],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    _children[process.pid] = process
    _pid_file(settings).write_text(str(process.pid))
    try:
        _wait_until_answering(settings, process.pid)
    except BrokerFailed:
        down(settings)
        raise
    return status(settings)


def down(settings: BrokerSettings) -> bool:
    """Stop the broker (SIGTERM, then SIGKILL after a grace period); False if it was not running."""
    pid = _live_pid(settings)
    _pid_file(settings).unlink(missing_ok=True)
    if pid is None:
        return False
    os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if _alive(pid):
        os.kill(pid, signal.SIGKILL)
        while _alive(pid):
            time.sleep(0.05)
    child = _children.pop(pid, None)
    if child is not None:
        child.wait()
    return True


def log_tail(settings: BrokerSettings, lines: int = 40) -> str:
    chunks = []
    for path in (_log_file(settings), settings.home / "stdout.log"):
        if path.exists():
            chunks.append(f"--- {path} ---\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:]))
    return "\n".join(chunks) or "(no broker log was written)"


def _wait_until_answering(settings: BrokerSettings, pid: int) -> None:
    deadline = time.monotonic() + settings.start_timeout_s
    while time.monotonic() < deadline:
        if not _alive(pid):
            raise BrokerFailed(f"the Kafka broker exited during start-up\n{log_tail(settings)}")
        if kafka_topics.answers(security.client(settings), timeout=1.0):
            return
        time.sleep(0.25)
    raise BrokerFailed(f"the Kafka broker did not answer on {settings.bootstrap} within "
                       f"{settings.start_timeout_s:.0f} s\n{log_tail(settings)}")


def _format_storage(java: str, lib: Path, settings: BrokerSettings, properties: Path) -> None:
    arguments = ["kafka.tools.StorageTool", "format", "--ignore-formatted", f"--cluster-id={_cluster_id()}",
                 "-c", str(properties)]
    if settings.secure:
        arguments += security.scram_arguments(settings)
    argument_file = settings.home / "format.args"
    write_private(argument_file, "\n".join(arguments).encode())
    try:
        done = subprocess.run([java, *_jvm_flags(lib, settings), f"@{argument_file}"], capture_output=True, text=True)
    finally:
        argument_file.unlink(missing_ok=True)
    if done.returncode != 0:
        raise BrokerFailed(f"formatting the broker storage failed:\n{(done.stdout + done.stderr)[-3000:]}")


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (it may start with '-')."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _jvm_flags(lib: Path, settings: BrokerSettings) -> list[str]:
    return ["-cp", f"{lib}/*", f"-Dheadroom.kafka.log={_log_file(settings)}",
            f"-Dlog4j2.configurationFile={settings.infra_dir / 'log4j2.yaml'}",
            "-XX:+UseG1GC", "-Djava.awt.headless=true", *(security.jvm_flags(settings) if settings.secure else [])]


def _render_properties(settings: BrokerSettings) -> Path:
    """``server.properties`` and the listeners of the broker's mode, placeholders filled in; readable by its
    owner only, since in secure mode it holds the broker's key and the PLAIN users' passwords."""
    listeners = "listeners-secure.properties" if settings.secure else "listeners-plaintext.properties"
    rendered = "\n".join((settings.infra_dir / name).read_text() for name in ("server.properties", listeners))
    values = {"port": str(settings.port), "controller_port": str(settings.controller_port),
              "data_dir": str((settings.home / "data").resolve()),
              **(security.listener_values(settings) if settings.secure else {})}
    for name, value in values.items():
        rendered = rendered.replace(f"{{{name}}}", value)
    path = settings.home / "server.properties"
    write_private(path, rendered.encode())
    return path


def _check_port_free(port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as err:
            raise PortTaken(f"port {port} on 127.0.0.1 is taken by another process ({err.strerror}); "
                            "stop it or choose other ports with HEADROOM_KAFKA_PORT / "
                            "HEADROOM_KAFKA_CONTROLLER_PORT") from err


def _live_pid(settings: BrokerSettings) -> int | None:
    path = _pid_file(settings)
    try:
        pid = int(path.read_text().strip())
    except (FileNotFoundError, ValueError):
        return None
    if _alive(pid) and _is_kafka(pid):
        return pid
    path.unlink(missing_ok=True)  # stale
    return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie child of ours has exited
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _is_kafka(pid: int) -> bool:
    try:
        return b"kafka.Kafka" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except FileNotFoundError:
        return False


def _pid_file(settings: BrokerSettings) -> Path:
    return settings.home / "broker.pid"


def _log_file(settings: BrokerSettings) -> Path:
    return (settings.home / "broker.log").resolve()
