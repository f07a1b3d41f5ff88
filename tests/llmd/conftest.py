from tests.predictor.conftest import start_server  # noqa: F401  # the predictor servers these tests drive
