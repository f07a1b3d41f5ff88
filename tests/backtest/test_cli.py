"""``headroom backtest run``'s command line: no secret is taken from it."""


import pytest

from headroom.cli.main import main
from headroom.ports import free_port


@pytest.mark.parametrize("option", ["sasl.password=hunter2", "ssl.key.password=hunter2",
                                    "sasl.oauthbearer.client.secret=hunter2"])
def test_secrets_are_refused_on_the_command_line(capsys, option):
    with pytest.raises(SystemExit):
        main(["backtest", "run", "--kafka-option", option])
    error = capsys.readouterr().err
    assert "is a secret: it is never taken from the command line" in error and "HEADROOM_KAFKA_SASL_PASSWORD_FILE" in error


def test_a_backtest_that_cannot_reach_its_broker_says_so_in_one_line(capfd, tmp_path, monkeypatch, trusted_keys):
    monkeypatch.setenv("HEADROOM_MODEL_TRUSTED_KEYS", trusted_keys)
    port = free_port()  # nothing listens on it
    code = main(["backtest", "run", "--bootstrap", f"127.0.0.1:{port}", "--telemetry-topic", "telemetry",
                 "--policies", "", "--processes", "1", "--out", str(tmp_path / "report")])
    out, err = capfd.readouterr()
    assert code == 1 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith(f"headroom backtest: cannot backtest 'telemetry' at 127.0.0.1:{port}: ")
