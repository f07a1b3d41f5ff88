"""``headroom models keygen`` and the model commands' settings checks."""

import pytest

from headroom.cli.main import main
from headroom.contract.settings import from_env
from headroom.contract.signing import SigningSettings


def test_keygen_writes_a_pair_the_worker_and_readers_load_and_never_overwrites_it(tmp_path, capsys):
    assert main(["models", "keygen", "--out", str(tmp_path), "--name", "worker"]) == 0
    said = capsys.readouterr().out
    signing = from_env(SigningSettings, {"HEADROOM_MODEL_SIGNING_KEY_FILE": str(tmp_path / "worker.key"),
                                         "HEADROOM_MODEL_TRUSTED_KEYS": str(tmp_path / "worker.pub")})
    key = signing.signing_key()
    assert key is not None and f"key {key.key_id}" in said
    assert set(signing.trust().keys) == {key.key_id}
    assert (tmp_path / "worker.key").stat().st_mode & 0o777 == 0o600
    assert main(["models", "keygen", "--out", str(tmp_path), "--name", "worker"]) == 1
    assert "is never overwritten" in capsys.readouterr().err


@pytest.mark.parametrize("command", [["models", "list"], ["models", "tail"], ["models", "export", "out"],
                                     ["llmd", "training-server", "--port", "0"]])
def test_reading_models_needs_trusted_keys(monkeypatch, capsys, command):
    monkeypatch.delenv("HEADROOM_MODEL_TRUSTED_KEYS", raising=False)
    monkeypatch.delenv("HEADROOM_MODEL_ALLOW_UNSIGNED", raising=False)
    monkeypatch.setenv("HEADROOM_KAFKA_BOOTSTRAP", "127.0.0.1:1")  # never reached
    assert main(command) == 1
    assert "no trusted model-signing keys" in capsys.readouterr().err
