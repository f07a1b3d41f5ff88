"""Each replayed batch's partitions and offsets: every consumed message has both; one without is refused."""

import pytest
from confluent_kafka import KafkaException, Message

from headroom.backtest.replay import _positions


def test_the_partitions_and_offsets_of_a_batch_in_its_order():
    messages = [Message(topic="telemetry", partition=p, offset=o, value=b"{}") for p, o in ((1, 7), (0, 3), (1, 8))]
    assert _positions(messages, "telemetry") == ([1, 0, 1], [7, 3, 8])


@pytest.mark.parametrize("message", [
    pytest.param(Message(topic="telemetry", offset=3, value=b"{}"), id="no-partition"),
    pytest.param(Message(topic="telemetry", partition=1, value=b"{}"), id="no-offset"),
])
def test_a_message_without_its_position_is_refused(message):
    good = Message(topic="telemetry", partition=0, offset=1, value=b"{}")
    with pytest.raises(KafkaException, match="a message of telemetry without its partition or offset"):
        _positions([good, message], "telemetry")
