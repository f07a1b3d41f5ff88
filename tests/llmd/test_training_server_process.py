"""``headroom llmd training-server`` as a real process on the real broker: it listens on loopback unless told
otherwise, takes bearer tokens and mTLS like headroom's other listeners, and bounds its intake — a flood of
samples is refused in part with 429 and ``Retry-After``, while ``/healthz`` keeps answering and every
sample it took reaches the broker."""

from __future__ import annotations

import json
import os
import ssl
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.llmd.http import call
from tests.llmd.test_training_api import ENTRY

pytestmark = [pytest.mark.kafka, pytest.mark.e2e, pytest.mark.timeout(300)]

COMMAND = [sys.executable, "-m", "headroom.cli.main", "llmd", "training-server"]


@contextmanager
def training_server(kafka, folder: Path, trusted_keys: str, **env: str):
    """The process, its port, until it is stopped with SIGTERM; its log on failure."""
    port = free_port()
    log = folder / f"training-{port}.log"
    environ = {**os.environ, "HEADROOM_KAFKA_BOOTSTRAP": kafka.bootstrap_servers,
               "HEADROOM_TOPIC_TELEMETRY": kafka.telemetry_topic, "HEADROOM_TOPIC_DLQ": kafka.dlq_topic,
               "HEADROOM_TOPIC_MODELS": kafka.model_topic, "HEADROOM_LLMD_TRAINING_PORT": str(port),
               "HEADROOM_MODEL_TRUSTED_KEYS": trusted_keys, **env}
    with open(log, "wb") as out:
        process = subprocess.Popen(COMMAND, env=environ, stdout=out, stderr=subprocess.STDOUT)
    try:
        yield process, port, log
    finally:
        process.terminate()
        assert process.wait(30) == 0, log.read_text()[-3000:]


def listening_addresses(port: int) -> set[str]:
    """The local addresses on which something listens on TCP ``port`` (IPv4 and IPv6), from /proc/net."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def wait_ready(process, url: str, log: Path, **kwargs) -> None:
    deadline = time.monotonic() + 60
    while True:
        try:
            if call(url, "/readyz", timeout=2, **kwargs)[0] == 200:
                return
        except OSError:
            pass
        assert process.poll() is None, log.read_text()[-3000:]
        assert time.monotonic() < deadline, f"not ready:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


def post(url: str, body: dict, token: str | None = None, context: ssl.SSLContext | None = None):
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=120, context=context) as answer:
            return answer.status, json.loads(answer.read()), dict(answer.headers)
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read()), dict(err.headers)


def test_it_listens_on_loopback_and_requires_a_token_and_a_client_certificate(pipeline_kafka, tmp_path, pki,
                                                                             trusted_keys):
    (tmp_path / "tokens").write_text("the-pickers-token\n")
    tokens = str(tmp_path / "tokens")
    with training_server(pipeline_kafka, tmp_path, trusted_keys, HEADROOM_LLMD_TRAINING_AUTH_TOKENS_FILE=tokens,
                         HEADROOM_TLS_CERT_FILE=str(pki.server[0]), HEADROOM_TLS_KEY_FILE=str(pki.server[1]),
                         HEADROOM_TLS_CLIENT_CA_FILE=str(pki.ca)) as (process, port, log):
        url = f"https://127.0.0.1:{port}"
        client = ssl.create_default_context(cafile=str(pki.ca))
        client.load_cert_chain(*map(str, pki.client))
        wait_ready(process, url, log, context=client)
        assert listening_addresses(port) == {"0100007F"}  # 127.0.0.1, and nothing else
        assert post(f"{url}/add_training_data_bulk", {"entries": [ENTRY]}, context=client)[0] == 401
        status, body, _ = post(f"{url}/add_training_data_bulk", {"entries": [ENTRY]}, "the-pickers-token", client)
        assert (status, body["telemetry"]) == (202, 1)
        stranger = ssl.create_default_context(cafile=str(pki.ca))
        stranger.load_cert_chain(*map(str, pki.stranger))  # a certificate from another CA
        for context in (stranger, ssl.create_default_context(cafile=str(pki.ca))):
            with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
                post(f"{url}/add_training_data_bulk", {"entries": [ENTRY]}, "the-pickers-token", context)


def test_a_flood_is_refused_in_part_with_retry_after_while_healthz_answers(pipeline_kafka, tmp_path, trusted_keys):
    health = free_port()
    with training_server(pipeline_kafka, tmp_path, trusted_keys, HEADROOM_LLMD_MAX_PENDING_SAMPLES="20000",
                         HEADROOM_LLMD_TRAINING_HEALTH_PORT=str(health),
                         HEADROOM_LLMD_TRAINING_HEALTH_HOST="127.0.0.1") as (process, port, log):
        url = f"http://127.0.0.1:{port}"
        wait_ready(process, url, log)
        assert listening_addresses(health) == {"0100007F"}
        body = {"entries": [dict(ENTRY, num_request_waiting=i % 20) for i in range(10_000)]}
        answers: list[tuple[int, dict, dict]] = []
        probes: list[tuple[float, int, int, str]] = []  # (seconds, status, samples pending just before, port)
        flooding = threading.Event()

        def flood() -> None:
            for _ in range(5):
                answers.append(post(f"{url}/add_training_data_bulk", body))

        def probe() -> None:
            while flooding.is_set():
                pending = call(url, "/data/status")[1]["intake"]["pending_samples"]
                for base, where in ((url, "api"), (f"http://127.0.0.1:{health}", "health")):  # both ports' /healthz
                    began = time.monotonic()
                    status = call(base, "/healthz")[0]
                    probes.append((time.monotonic() - began, status, pending, where))

        quiet = []  # /healthz with no flood, for comparison
        for _ in range(200):
            began = time.monotonic()
            assert call(url, "/healthz")[0] == 200
            quiet.append(time.monotonic() - began)
        flooding.set()
        prober = threading.Thread(target=probe)
        prober.start()
        senders = [threading.Thread(target=flood) for _ in range(6)]  # 300,000 samples at once
        for sender in senders:
            sender.start()
        for sender in senders:
            sender.join()
        flooding.clear()
        prober.join()

        taken = [b for status, b, _ in answers if status == 202]
        refused = [(b, headers) for status, b, headers in answers if status == 429]
        assert len(taken) + len(refused) == 30 and taken and refused
        assert all(headers["Retry-After"] == "1" and "retry after 1 s" in b["detail"] for b, headers in refused)
        assert all(status == 200 for _, status, _, _ in probes)
        assert any(pending > 0 for _, _, pending, _ in probes)  # /healthz answered while samples were being taken
        sent = sum(b["telemetry"] for b in taken)
        assert sent == 10_000 * len(taken)
        deadline = time.monotonic() + 60
        while (status := call(url, "/data/status")[1])["telemetry"]["delivered"] < sent:
            assert time.monotonic() < deadline, status
            time.sleep(0.5)
        telemetry = status["telemetry"]
        assert (telemetry["records_sent"], telemetry["delivered"], telemetry["dropped"], telemetry["failed"],
                telemetry["calls_refused_busy"]) == (sent, sent, 0, 0, len(refused))
        during = sorted(s for s, _, _, w in probes if w == "api")
        print(json.dumps({"taken": len(taken), "refused": len(refused), "probes": len(probes),
                          "healthz_quiet_ms": {"p50": round(1000 * sorted(quiet)[100], 2),
                                               "max": round(1000 * max(quiet), 2)},
                          "healthz_flood_ms": {"p50": round(1000 * during[len(during) // 2], 2),
                                               "p99": round(1000 * during[int(len(during) * 0.99)], 2),
                                               "max": round(1000 * during[-1], 2)},
                          "health_port_flood_max_ms": round(1000 * max(s for s, _, _, w in probes if w == "health"),
                                                            2)}))
