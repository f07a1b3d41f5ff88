"""Every error the hierarchy in headroom.errors draws is rooted there and keeps its built-in kind."""

import importlib

import pytest

from headroom.errors import CommandError, HeadroomError

DRAWN = [  # (module, class, built-in kind it also is)
    ("headroom.contract.settings", "SettingsError", ValueError),
    ("headroom.contract.telemetry", "InvalidRecord", ValueError),
    ("headroom.contract.model_update", "InvalidUpdate", ValueError),
    ("headroom.contract.model_update", "RejectedUpdate", ValueError),
    ("headroom.trainer.publish", "PublishError", RuntimeError),
    ("headroom.localkafka.errors", "BrokerError", RuntimeError),
    ("headroom.predictor.errors", "PredictorError", Exception),
    ("headroom.predictor.forest", "UnsupportedModel", ValueError),
    ("headroom.router.errors", "RouterError", Exception),
    ("headroom.router.state.server_metrics", "MetricsFormatError", ValueError),
    ("headroom.sim.pool", "SimulationError", RuntimeError),
    ("headroom.sim.traces", "TraceError", ValueError),
    ("headroom.sim.live", "BadRequest", ValueError),
    ("headroom.autoscale.errors", "AutoscaleError", Exception),
    ("headroom.demo.processes", "ComponentFailed", RuntimeError),
]


@pytest.mark.parametrize("module, name, kind", DRAWN, ids=[name for _, name, _ in DRAWN])
def test_each_error_is_a_headroom_error_of_its_kind(module, name, kind):
    error = getattr(importlib.import_module(module), name)
    assert issubclass(error, HeadroomError) and issubclass(error, kind)
    assert name in importlib.import_module("headroom.errors").__doc__


def test_command_errors_are_headroom_errors():
    assert issubclass(CommandError, HeadroomError)
