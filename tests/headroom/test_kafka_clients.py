"""librdkafka's log lines through Python logging: a broker still starting is no warning, one out of reach is
said once at info (tests/cli/test_one_line_failures.py follows it for a minute), another error at its level."""

import logging

import pytest

from headroom.kafka_clients import librdkafka_logger


@pytest.mark.parametrize("message, level", [
    ("GETPID [p#producer-1] [thrd:main]: Failed to acquire idempotence PID from broker 127.0.0.1:9092/1: "
     "Broker: Coordinator load in progress: retrying", "DEBUG"),
    ("FAIL [p#producer-1] [thrd:127.0.0.1:1/bootstrap]: Connect to ipv4#127.0.0.1:1 failed: Connection refused",
     "INFO"),
    ("FAIL [p#producer-1] [thrd:sasl_ssl://127.0.0.1:9094/bootstrap]: SASL authentication error: Authentication "
     "failed due to invalid credentials with SASL mechanism SCRAM-SHA-512", "WARNING"),
], ids=["transient", "unreachable", "a-real-failure"])
def test_each_kind_of_note_at_its_level_and_not_again_within_a_minute(caplog, message, level):
    logger = librdkafka_logger(f"tests.kafka.{level}")
    with caplog.at_level(logging.DEBUG, logger=logger.name):
        logger.warning(message)
        logger.warning(message)
    repeated = 2 if level == "DEBUG" else 1  # debug lines are not spaced out: they show only when asked for
    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [(level, message)] * repeated


def test_the_filter_is_added_once():
    assert librdkafka_logger("tests.once") is librdkafka_logger("tests.once")
    assert len(logging.getLogger("tests.once.librdkafka").filters) == 1
