"""``headroom backtest run``'s command line: no secret is taken from it."""

import pytest

from headroom.cli.main import main


@pytest.mark.parametrize("option", ["sasl.password=hunter2", "ssl.key.password=hunter2",
                                    "sasl.oauthbearer.client.secret=hunter2"])
def test_secrets_are_refused_on_the_command_line(capsys, option):
    with pytest.raises(SystemExit):
        main(["backtest", "run", "--kafka-option", option])
    error = capsys.readouterr().err
    assert "is a secret: it is never taken from the command line" in error and "HEADROOM_KAFKA_SASL_PASSWORD_FILE" in error
