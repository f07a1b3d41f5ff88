"""localkafka.acls: the grants of localkafka.strimzi as the local secure broker's ACL bindings."""

from confluent_kafka.admin import AclOperation, ResourcePatternType, ResourceType

from headroom.contract.topics import KafkaSettings
from headroom.localkafka.acls import bindings
from headroom.localkafka.strimzi import grants


def test_every_grant_becomes_one_binding_per_operation():
    kafka = KafkaSettings(model_topic="models-x")
    expected = sum(len(grant.operations) for user_grants in grants(kafka, "app").values() for grant in user_grants)
    made = bindings(kafka, "app")
    assert len(made) == expected
    assert {b.principal for b in made} == {f"User:{user}" for user in grants(kafka, "app")}
    changelog = [b for b in made if b.principal == "User:headroom-worker" and b.name == "app-"
                 and b.restype == ResourceType.TOPIC]
    assert {b.operation for b in changelog} >= {AclOperation.CREATE, AclOperation.DESCRIBE_CONFIGS}
    assert {b.resource_pattern_type for b in changelog} == {ResourcePatternType.PREFIXED}


def test_only_the_worker_may_use_transactional_ids_and_only_its_app_ids():
    transactional = [b for b in bindings(KafkaSettings(), "app") if b.restype == ResourceType.TRANSACTIONAL_ID]
    assert {(b.principal, b.name, b.resource_pattern_type) for b in transactional} == {
        ("User:headroom-worker", "app-", ResourcePatternType.PREFIXED)}
    assert {b.operation for b in transactional} == {AclOperation.WRITE, AclOperation.DESCRIBE}


def test_only_the_worker_may_write_model_updates_and_routers_and_llm_d_training_api_telemetry():
    writers = {topic: sorted({b.principal for b in bindings(KafkaSettings(), "app")
                              if b.name == topic and b.operation == AclOperation.WRITE})
               for topic in ("model-updates", "telemetry", "telemetry-dlq")}
    assert writers == {"model-updates": ["User:headroom-worker"],
                       "telemetry": ["User:headroom-llmd-training", "User:headroom-router"],
                       "telemetry-dlq": ["User:headroom-llmd-training", "User:headroom-worker"]}
