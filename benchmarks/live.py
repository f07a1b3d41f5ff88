"""Live processes for the proxy and ext_proc benchmarks: a simulated pool, a router, the Go HTTP load
generator, the CPU time each process spent (Linux ``/proc``), and the CPUs each may run on.

The router runs in its own process (:mod:`benchmarks.live_router`) on the event loop ``headroom router
serve`` uses, so its CPU time is the router's alone; the pool is ``headroom sim serve``; the load comes from
``http_load/`` (Go, standard library), compiled once into ``~/.cache/headroom/bin``.
"""

from __future__ import annotations

import hashlib
import os
import resource
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from headroom.model_files import SUFFIX
from headroom.ports import free_port

HTTP_LOAD_SOURCE = Path(__file__).resolve().parent / "http_load"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def process_tree(pid: int) -> list[int]:
    """``pid`` and its live descendants."""
    pids, i = [pid], 0
    while i < len(pids):
        try:
            tasks = list(Path(f"/proc/{pids[i]}/task").iterdir())
        except OSError:
            tasks = []
        for task in tasks:
            try:
                pids += [int(child) for child in (task / "children").read_text().split()]
            except OSError:
                pass
        i += 1
    return pids


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU time so far of process ``pid`` and its live descendants."""
    total = 0.0
    for each in process_tree(pid):
        try:
            total += cpu_seconds(each)
        except OSError:  # it ended meanwhile
            pass
    return total


def tree_rss_mib(pid: int) -> float:
    """Resident memory (MiB) of process ``pid`` and its live descendants."""
    total = 0
    for each in process_tree(pid):
        try:
            status = Path(f"/proc/{each}/status").read_text()
        except OSError:
            continue
        total += next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return total / 1024


def children_cpu_seconds() -> float:
    """User + system CPU time of this process's children that have exited and been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def split_cpus() -> tuple[set[int], set[int]]:
    """The router's own CPU (the last this process may run on) and the rest, for the pool and the load."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        raise ValueError(f"a router CPU of its own needs 2 CPUs or more; this process may run on {len(cpus)}")
    return {cpus[-1]}, set(cpus[:-1])


def on_cpus(cpus: set[int] | None) -> Callable[[], None] | None:
    """A ``preexec_fn`` confining a child to ``cpus`` before it runs, so that every thread it starts inherits
    them (None for ``cpus`` None: the child may run where this process may). A ``preexec_fn`` is safe only
    while this process runs no other thread, as the proxy bench when it starts its children."""
    return None if cpus is None else lambda: os.sched_setaffinity(0, cpus)


def build_go(source: Path, name: str) -> Path:
    """The Go program in ``source`` compiled into the user cache (rebuilt when its source changes)."""
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(source.glob("*.go")))).hexdigest()[:12]
    binary = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "headroom" / "bin" / f"{name}-{digest}"
    if binary.exists():
        return binary
    go = shutil.which("go")
    if go is None:
        raise RuntimeError(f"building {name} needs the Go toolchain (`go` on PATH)")
    binary.parent.mkdir(parents=True, exist_ok=True)
    build = subprocess.run([go, "build", "-o", str(binary), "."], cwd=source, capture_output=True, text=True,
                           timeout=600, env={**os.environ, "GOFLAGS": "-mod=mod"})
    if build.returncode != 0:
        raise RuntimeError(f"cannot build {source}: {build.stderr.strip()}")
    return binary


Child = subprocess.Popen[str] | subprocess.Popen[bytes]  # a child with text or binary pipes, or none


@dataclass
class Process:
    """A child process of the benchmark; stopped with SIGTERM, then SIGKILL."""

    name: str
    popen: Child

    @property
    def cpu(self) -> float:
        """CPU seconds of the process and of any process it started that still runs."""
        return tree_cpu_seconds(self.popen.pid)

    @property
    def rss_mib(self) -> float:
        return tree_rss_mib(self.popen.pid)

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        if self.popen.stdout is not None:
            self.popen.stdout.close()


def start_pool(servers: int, server_type: str = "h100", seed: int = 1,
               cpus: set[int] | None = None) -> tuple[Process, list[str]]:
    """``headroom sim serve`` with ``servers`` servers on free ports (on ``cpus``, if given); returns it and
    their addresses."""
    popen = subprocess.Popen([sys.executable, "-m", "headroom.cli.main", "sim", "serve", "--servers", str(servers),
                              "--server-type", server_type, "--base-port", "0", "--seed", str(seed)],
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL,
                             preexec_fn=on_cpus(cpus))
    addresses: list[str] = []
    assert popen.stdout is not None
    while len(addresses) < servers:
        line = popen.stdout.readline()
        if not line:
            raise RuntimeError(f"the simulated pool exited with code {popen.wait()}")
        if " at http://" in line:
            addresses.append(line.rsplit("http://", 1)[1].strip())
    return Process("pool", popen), addresses


def start_router(addresses: Sequence[str], directory: Path, *, predictor: str, ext_proc: bool = False,
                 profile: Path | None = None, cpus: set[int] | None = None,
                 scrape_interval_s: float = 0.05, ext_proc_front: str = "native") -> tuple[Process, int]:
    """A router over ``addresses`` (:mod:`benchmarks.live_router`) on ``cpus``, if given, scraping every server every
    ``scrape_interval_s``, serving ext_proc with ``ext_proc_front``; returns it and its HTTP or ext_proc port."""
    http_port, ext_proc_port = free_port(), free_port() if ext_proc else -1
    config = {"settings": {"httpPort": http_port, "pickPort": -1, "extProcPort": ext_proc_port, "telemetry": False,
                           "predictor": "none", "seed": 1, "scrapeIntervalS": scrape_interval_s,
                           "extProcSecure": False, "extProcFront": ext_proc_front,  # plaintext on loopback; TLS's cost: docs/benchmarks.md, Security
                           # on loopback only the bench's client reaches ext_proc: it is the gateway, and its
                           # exchanges are telemetry (records made, corrections learned) as a gateway's are
                           "gatewayByNetwork": True},
              "servers": [{"id": f"s{i}", "address": a} for i, a in enumerate(addresses)]}
    path = directory / "router.yaml"
    path.write_text(yaml.safe_dump(config))
    command = [sys.executable, "-m", "headroom.benchmarks.live_router", str(path), "--predictor", predictor]
    if predictor == "embedded":
        command += ["--models", str(_write_models(directory / "models"))]
    if profile is not None:
        command += ["--profile", str(profile)]
    with open(directory / "router.log", "wb") as log:  # the child keeps its own descriptor
        popen = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                 preexec_fn=on_cpus(cpus))
    router = Process("router", popen)
    wait_until(lambda: _answers(f"http://127.0.0.1:{http_port}/healthz"), popen, directory / "router.log")
    return router, ext_proc_port if ext_proc else http_port


def _write_models(folder: Path) -> Path:
    """The reference's TTFT and TPOT models as signed model files in ``folder``, with the key that signed them."""
    from headroom.benchmarks.predictor import BENCH_KEY
    from headroom.benchmarks.router import reference_updates
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{BENCH_KEY.key_id}.pub").write_bytes(BENCH_KEY.public_pem())
    for index, raw in enumerate(reference_updates()):
        (folder / f"{index}{SUFFIX}").write_bytes(raw)
    return folder


def wait_until(ready: Callable[[], bool], popen: Child, log: Path, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if popen.poll() is not None:
            raise RuntimeError(f"exited with code {popen.returncode}:\n{log.read_text(errors='replace')[-2000:]}")
        if ready():
            return
        time.sleep(0.2)
    raise RuntimeError(f"not ready within {timeout_s:.0f} s:\n{log.read_text(errors='replace')[-2000:]}")


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())
