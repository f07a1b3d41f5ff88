import pytest

from headroom.cli.main import main


@pytest.mark.parametrize(("env", "value", "message"), [
    ("HEADROOM_CENTRAL_LOSS", "cubic", "central loss 'cubic' is not one of ('squared', 'absolute')"),
    ("HEADROOM_TARGET_TRANSFORM", "sqrt", "target transform 'sqrt'"),
])
def test_worker_start_rejects_bad_training_settings_before_touching_kafka(monkeypatch, capsys, env, value, message):
    monkeypatch.setenv(env, value)
    monkeypatch.setenv("HEADROOM_KAFKA_BOOTSTRAP", "127.0.0.1:1")  # never reached
    assert main(["worker", "start"]) == 1
    assert message in capsys.readouterr().err


def test_settings_with_a_calibration_share_of_one_are_refused():
    from headroom.streams.settings import PipelineSettings

    with pytest.raises(ValueError, match=r"calibration fraction must be within \[0, 1\), got 1.0"):
        PipelineSettings(calibration_fraction=1.0)


def test_worker_start_refuses_to_publish_unsigned_models_unless_allowed(monkeypatch, capsys):
    monkeypatch.delenv("HEADROOM_MODEL_SIGNING_KEY_FILE", raising=False)
    monkeypatch.delenv("HEADROOM_MODEL_ALLOW_UNSIGNED", raising=False)
    monkeypatch.setenv("HEADROOM_KAFKA_BOOTSTRAP", "127.0.0.1:1")  # never reached
    assert main(["worker", "start"]) == 1
    assert "the worker signs every model it publishes: set HEADROOM_MODEL_SIGNING_KEY_FILE" in capsys.readouterr().err


def test_worker_start_refuses_to_train_models_its_readers_would_reject(monkeypatch, capsys, tmp_path):
    from tests.keys import write_private_key

    monkeypatch.setenv("HEADROOM_MODEL_SIGNING_KEY_FILE", str(write_private_key(tmp_path)))
    monkeypatch.setenv("HEADROOM_TRAIN_TREES", "3000")
    monkeypatch.setenv("HEADROOM_KAFKA_BOOTSTRAP", "127.0.0.1:1")  # never reached
    assert main(["worker", "start"]) == 1
    assert "HEADROOM_TRAIN_TREES=3000 is over HEADROOM_MODEL_MAX_TREES=1000" in capsys.readouterr().err
