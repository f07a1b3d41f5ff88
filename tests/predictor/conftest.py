from __future__ import annotations

import pytest

from headroom.contract.settings import from_env
from headroom.contract.signing import SigningSettings
from headroom.predictor.server import PredictorServer
from headroom.predictor.settings import PredictorSettings


def local_settings(**overrides) -> PredictorSettings:
    return from_env(PredictorSettings, {}, **{"host": "127.0.0.1", "port": 0, "metrics_port": 0,
                                              "grace_seconds": 1.0, **overrides})


@pytest.fixture
def start_server(trusted_keys):
    """Starts PredictorServers on free loopback ports, trusting the tests' signing key; stops them after the test."""
    started: list[PredictorServer] = []

    def start(kafka=None, runtime=None, **overrides) -> PredictorServer:
        overrides.setdefault("signing", SigningSettings(trusted_keys=trusted_keys))
        server = PredictorServer(local_settings(**overrides), kafka, runtime).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop(grace=0.5)
