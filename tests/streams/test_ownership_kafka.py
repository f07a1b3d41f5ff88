"""Partition ownership on the real broker: a new owner fences the old one, which can then write nothing."""

import uuid

import pytest
from confluent_kafka import Producer

from headroom.contract.partitions import home_partition
from headroom.model_topic import read_all
from headroom.streams.ownership import FencedPublisher, Message, PartitionOwnership
from headroom.trainer.publish import PublishFenced
from tests.keys import TEST_KEY, TRUST
from tests.streams.ledger import read_committed
from tests.trainer.test_publish import update

pytestmark = pytest.mark.kafka


def test_a_worker_that_lost_a_partition_can_publish_and_write_nothing_for_it(pipeline_kafka):
    app_id = f"fence-{uuid.uuid4().hex[:8]}"
    home = home_partition("pool-a", pipeline_kafka.telemetry_partitions)
    old = PartitionOwnership(pipeline_kafka, app_id)
    old.fence(range(pipeline_kafka.telemetry_partitions))
    old.open()
    FencedPublisher(old, pipeline_kafka, TEST_KEY).publish(update(1))

    new = PartitionOwnership(pipeline_kafka, app_id)
    new.fence([home])  # as after a rebalance the old owner has not heard of yet
    assert old.owns_pool("pool-a")  # it still believes so ...
    with pytest.raises(PublishFenced, match="fenced"):  # ... but the broker refuses it
        FencedPublisher(old, pipeline_kafka, TEST_KEY).publish(update(2))
    assert not old.owns_pool("pool-a")
    with pytest.raises(PublishFenced, match="does not own"):
        old.write(home, [Message(pipeline_kafka.dlq_topic, b"k", b"v")])

    with pytest.raises(PublishFenced, match="does not own"):  # not before it has read what came before
        FencedPublisher(new, pipeline_kafka, TEST_KEY).publish(update(2))
    assert new.open() == {home}
    FencedPublisher(new, pipeline_kafka, TEST_KEY).publish(update(2))
    assert [item.update.version for item in read_all(pipeline_kafka, TRUST)] == [1, 2]
    assert read_committed(pipeline_kafka, pipeline_kafka.dlq_topic) == []


def test_what_a_killed_owner_left_open_is_aborted_by_the_next_owner(pipeline_kafka):
    app_id = f"fence-{uuid.uuid4().hex[:8]}"
    ownership = PartitionOwnership(pipeline_kafka, app_id)
    killed = Producer({"bootstrap.servers": pipeline_kafka.bootstrap_servers,
                       "transactional.id": ownership.transactional_id(0)})
    killed.init_transactions(30)
    killed.begin_transaction()
    killed.produce(pipeline_kafka.dlq_topic, key=b"half", value=b"written")
    assert killed.flush(10) == 0  # in the log, not committed: then the process dies

    ownership.fence([0])
    ownership.open()
    ownership.write(0, [Message(pipeline_kafka.dlq_topic, b"next", b"owner")])
    assert [(m.key(), m.value()) for m in read_committed(pipeline_kafka, pipeline_kafka.dlq_topic)] == \
        [(b"next", b"owner")]


def test_a_worker_publishes_only_for_pools_homed_in_its_partitions(pipeline_kafka):
    ownership = PartitionOwnership(pipeline_kafka, f"fence-{uuid.uuid4().hex[:8]}")
    pools = [f"pool-{i}" for i in range(20)]
    ownership.fence([0, 1])
    assert ownership.taken == {0, 1} and not any(ownership.owns_pool(pool) for pool in pools)
    ownership.open()
    assert {pool for pool in pools if ownership.owns_pool(pool)} == \
        {pool for pool in pools if home_partition(pool, pipeline_kafka.telemetry_partitions) in (0, 1)}
    ownership.release()
    assert ownership.owned == frozenset() and not any(ownership.owns_pool(pool) for pool in pools)
