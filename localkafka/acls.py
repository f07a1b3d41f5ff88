"""Who may do what on the brokers: each component's principal and its grants, declared once.

The local secure broker applies them (:func:`apply`, as a super user); on Kubernetes the same grants are
Strimzi ``KafkaUser`` resources (:func:`strimzi_users`, printed by ``headroom kafka acls --strimzi CLUSTER``). Everything not granted is denied (``allow.everyone.if.no.acl.found``
is false):

- ``worker`` reads ``telemetry``, writes the dead-letter topic, reads and writes ``model-updates`` (it warm-starts
  from it and publishes to it), and owns the topics and consumer groups named after its app id (the window
  changelog, Faust's assignor topic, the Faust group and the telemetry reader's group);
- ``router`` writes ``telemetry`` and reads ``model-updates`` (its embedded predictor);
- ``predictor`` reads ``model-updates``;
- ``backtest`` reads ``telemetry`` and ``model-updates``.

No other principal may write ``model-updates``. Readers of ``model-updates`` and of a range of telemetry
are assigned partitions and never commit; they may only DESCRIBE their own groups (librdkafka looks up a
group's coordinator even so: :data:`~headroom.kafka_clients.MODEL_READERS`,
:data:`~headroom.kafka_clients.REPLAY_READERS`).
"""

from __future__ import annotations

from dataclasses import dataclass

from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from headroom.contract.topics import KafkaSettings
from headroom.kafka_clients import MODEL_READERS, REPLAY_READERS, admin


@dataclass(frozen=True)
class Grant:
    """Operations allowed on a topic or group: one named exactly, or every one whose name starts so."""

    resource: str  # "topic" or "group"
    name: str
    operations: tuple[str, ...]
    prefixed: bool = False


def grants(kafka: KafkaSettings, worker_app_id: str) -> dict[str, tuple[Grant, ...]]:
    """The grants of every component's principal, for the topics of ``kafka`` and the worker's app id."""
    telemetry, dead_letters, models = kafka.telemetry_topic, kafka.dlq_topic, kafka.model_topic
    read, write = ("READ", "DESCRIBE"), ("WRITE", "DESCRIBE")
    model_reader = (Grant("topic", models, read), Grant("group", f"{MODEL_READERS}-", ("DESCRIBE",), prefixed=True))
    return {
        "worker": (Grant("topic", telemetry, read), Grant("topic", dead_letters, write),
                   Grant("topic", models, ("READ", "WRITE", "DESCRIBE")),
                   Grant("group", f"{MODEL_READERS}-", ("DESCRIBE",), prefixed=True),
                   Grant("topic", f"{worker_app_id}-", ("CREATE", "READ", "WRITE", "DESCRIBE", "DESCRIBE_CONFIGS"),
                         prefixed=True),
                   Grant("group", worker_app_id, read, prefixed=True)),
        "router": (Grant("topic", telemetry, write), *model_reader),
        "predictor": model_reader,
        "backtest": (Grant("topic", telemetry, read), Grant("group", f"{REPLAY_READERS}-", ("DESCRIBE",), prefixed=True),
                     *model_reader),
    }


def bindings(kafka: KafkaSettings, worker_app_id: str) -> list[AclBinding]:
    """:func:`grants` as ACL bindings: one ALLOW per principal, resource and operation, from any host."""
    return [AclBinding(ResourceType[grant.resource.upper()], grant.name,
                       ResourcePatternType.PREFIXED if grant.prefixed else ResourcePatternType.LITERAL,
                       f"User:{user}", "*", AclOperation[operation], AclPermissionType.ALLOW)
            for user, user_grants in grants(kafka, worker_app_id).items()
            for grant in user_grants for operation in grant.operations]


def strimzi_users(kafka: KafkaSettings, worker_app_id: str, cluster: str,
                  authentication: str = "scram-sha-512") -> list[dict[str, object]]:
    """The grants as Strimzi ``KafkaUser`` manifests of the Kafka cluster ``cluster`` (``scram-sha-512`` or
    ``tls`` users; Strimzi keeps each user's password or certificate in a Secret named after it)."""
    return [{"apiVersion": "kafka.strimzi.io/v1beta2", "kind": "KafkaUser",
             "metadata": {"name": f"headroom-{user}", "labels": {"strimzi.io/cluster": cluster}},
             "spec": {"authentication": {"type": authentication},
                      "authorization": {"type": "simple", "acls": [
                          {"resource": {"type": grant.resource, "name": grant.name,
                                        "patternType": "prefix" if grant.prefixed else "literal"},
                           "operations": [_STRIMZI_OPERATIONS.get(op, op.capitalize()) for op in grant.operations]}
                          for grant in user_grants]}}}
            for user, user_grants in grants(kafka, worker_app_id).items()]


_STRIMZI_OPERATIONS = {"DESCRIBE_CONFIGS": "DescribeConfigs"}


def apply(admin_kafka: KafkaSettings, kafka: KafkaSettings, worker_app_id: str, timeout_s: float = 30.0) -> int:
    """Create the ACLs (as a super user, ``admin_kafka``); returns how many bindings there are. Idempotent."""
    wanted = bindings(kafka, worker_app_id)
    client = admin(admin_kafka)  # must outlive the futures
    for future in client.create_acls(wanted, request_timeout=timeout_s).values():
        future.result()
    return len(wanted)
