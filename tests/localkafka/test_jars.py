import stat

import pytest

from headroom.contract.settings import from_env
from headroom.localkafka import jars
from headroom.localkafka.settings import BrokerSettings

pytestmark = pytest.mark.kafka


def test_the_fetched_jars_are_readable_by_every_user(tmp_path):
    """A jar cache filled at image build time (as root) serves the image's unprivileged user."""
    lib = jars.jar_dir(from_env(BrokerSettings, {}, jar_cache=tmp_path))
    assert lib == tmp_path / jars.kafka_version(from_env(BrokerSettings, {})) / "lib"
    assert stat.S_IMODE(lib.stat().st_mode) == 0o755
    assert any(path.name.startswith("kafka_2.13-") for path in lib.iterdir())
