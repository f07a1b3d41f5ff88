"""librdkafka's log lines through Python logging: a broker still starting is no warning."""

import logging

import pytest

from headroom.kafka_clients import librdkafka_logger


@pytest.mark.parametrize("message, shown", [
    ("GETPID [p#producer-1] [thrd:main]: Failed to acquire idempotence PID from broker 127.0.0.1:9092/1: "
     "Broker: Coordinator load in progress: retrying", False),
    ("FAIL [p#producer-1] [thrd:127.0.0.1:1/bootstrap]: Connect to ipv4#127.0.0.1:1 failed: Connection refused", True),
], ids=["transient", "a-real-failure"])
def test_transient_notes_are_debug(caplog, message, shown):
    logger = librdkafka_logger("tests.kafka")
    with caplog.at_level(logging.INFO, logger="tests.kafka.librdkafka"):
        logger.warning(message)
    assert [r.getMessage() for r in caplog.records] == ([message] if shown else [])
    with caplog.at_level(logging.DEBUG, logger="tests.kafka.librdkafka"):
        logger.warning(message)
    assert caplog.records[-1].levelname == ("WARNING" if shown else "DEBUG")


def test_the_filter_is_added_once():
    assert librdkafka_logger("tests.once") is librdkafka_logger("tests.once")
    assert len(logging.getLogger("tests.once.librdkafka").filters) == 1
