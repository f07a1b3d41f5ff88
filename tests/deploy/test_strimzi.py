"""The Strimzi resources of infra/kafka/k8s: generated from the code's topic declarations (a drift between
the committed files and the declarations fails here), with the ACLs of each component, and the cluster
they belong to."""

from __future__ import annotations

import pytest
import yaml

from headroom.contract.topics import KafkaSettings, declared_topics
from headroom.localkafka import strimzi
from headroom.streams.settings import PipelineSettings
from headroom.streams.state_topic import state_topic
from tests.deploy.resources import ROOT, problems

K8S = ROOT / "infra" / "kafka" / "k8s"
DEFAULTS = KafkaSettings()


def load(name: str) -> list[dict]:
    return [obj for obj in yaml.safe_load_all((K8S / name).read_text()) if obj]


def test_the_committed_files_are_what_the_declarations_generate(tmp_path):
    strimzi.write(tmp_path, DEFAULTS)
    for name in ("topics.yaml", "users.yaml"):
        assert (K8S / name).read_text() == (tmp_path / name).read_text(), \
            f"infra/kafka/k8s/{name} is out of date: run `headroom kafka strimzi --out infra/kafka/k8s`"


def test_a_topic_declaration_that_changes_changes_the_generated_topics():
    wider = KafkaSettings(telemetry_partitions=12)
    telemetry = next(t for t in strimzi.topics(wider) if t["metadata"]["name"] == wider.telemetry_topic)
    assert telemetry["spec"]["partitions"] == 12


def test_every_declared_topic_is_a_kafka_topic_with_its_partitions_and_configuration():
    topics = {t["metadata"]["name"]: t["spec"] for t in load("topics.yaml")}
    assert set(topics) == {s.name for s in declared_topics(DEFAULTS)}
    for spec in declared_topics(DEFAULTS):
        assert topics[spec.name]["partitions"] == spec.partitions
        assert topics[spec.name]["config"] == spec.config


@pytest.mark.parametrize("name", ["kafka.yaml", "topics.yaml", "users.yaml"])
def test_required_fields_and_one_cluster(name):
    clusters = {obj["metadata"]["name"] for obj in load("kafka.yaml") if obj["kind"] == "Kafka"}
    assert clusters == {strimzi.CLUSTER}
    for obj in load(name):
        assert obj["apiVersion"] == strimzi.API_VERSION
        assert problems(obj) == []
        if obj["kind"] != "Kafka":
            assert obj["metadata"]["labels"]["strimzi.io/cluster"] == strimzi.CLUSTER


def test_the_cluster_is_kraft_with_authentication_and_acls():
    objects = {obj["kind"]: obj for obj in load("kafka.yaml")}
    assert set(objects["KafkaNodePool"]["spec"]["roles"]) == {"controller", "broker"}
    kafka = objects["Kafka"]["spec"]
    assert "zookeeper" not in kafka
    assert kafka["kafka"]["authorization"]["type"] == "simple"
    assert all(listener["tls"] and listener["authentication"]["type"] in ("tls", "scram-sha-512")
               for listener in kafka["kafka"]["listeners"])
    assert kafka["entityOperator"].keys() == {"topicOperator", "userOperator"}
    assert objects["KafkaNodePool"]["spec"]["replicas"] >= strimzi.REPLICAS  # every topic's replicas fit


def allowed(user: str) -> set[tuple[str, str, str, str]]:
    """(operation, resource type, name, pattern) the user's ACLs allow."""
    [obj] = [u for u in load("users.yaml") if u["metadata"]["name"] == user]
    return {(op, acl["resource"]["type"], acl["resource"]["name"], acl["resource"]["patternType"])
            for acl in obj["spec"]["authorization"]["acls"] for op in acl["operations"]}


def may(user: str, operation: str, topic: str) -> bool:
    return any(op in (operation, "All") and kind == "topic"
               and (name == topic if pattern == "literal" else topic.startswith(name))
               for op, kind, name, pattern in allowed(user))


USERS = ("headroom-router", "headroom-predictor", "headroom-worker", "headroom-ops", "headroom-llmd-training")
TELEMETRY, DLQ, MODELS = DEFAULTS.telemetry_topic, DEFAULTS.dlq_topic, DEFAULTS.model_topic
CHANGELOG = state_topic(PipelineSettings.app_id)


@pytest.mark.parametrize("operation, topic, writers", [
    ("Write", MODELS, {"headroom-worker"}),
    ("Write", TELEMETRY, {"headroom-router", "headroom-llmd-training"}),
    ("Write", DLQ, {"headroom-worker", "headroom-llmd-training"}),
    ("Write", CHANGELOG, {"headroom-worker"}),
    ("Create", CHANGELOG, {"headroom-worker"}),
    ("Read", TELEMETRY, {"headroom-worker", "headroom-ops"}),
    ("Read", MODELS, {"headroom-worker", "headroom-router", "headroom-predictor", "headroom-ops",
                      "headroom-llmd-training"}),
    ("Read", CHANGELOG, {"headroom-worker"}),
], ids=["only the worker writes models", "routers and llm-d's training API write telemetry",
        "the worker and llm-d's training API write dead letters",
        "only the worker writes its changelog", "only the worker creates its changelog",
        "the worker and ops read telemetry", "models are read by all", "only the worker reads its changelog"])
def test_acls(operation, topic, writers):
    assert {user for user in USERS if may(user, operation, topic)} == writers


def test_nobody_may_do_everything_or_delete():
    for user in USERS:
        assert not {op for op, *_ in allowed(user)} & {"All", "Delete", "Alter", "AlterConfigs", "ClusterAction"}
        assert not [name for _, kind, name, _ in allowed(user) if name == "*"]


def test_consumer_groups_cover_the_groups_the_code_uses():
    from headroom.model_topic import GROUP_PREFIX
    groups = {user: {(name, pattern) for op, kind, name, pattern in allowed(user) if kind == "group" and op == "Read"}
              for user in USERS}
    assert (GROUP_PREFIX, "prefix") in groups["headroom-predictor"] & groups["headroom-router"]
    assert {(PipelineSettings.app_id, "prefix"), (GROUP_PREFIX, "prefix")} <= groups["headroom-worker"]


def test_only_the_worker_may_use_transactional_ids_and_only_its_own():
    from headroom.streams.ownership import PartitionOwnership
    transactional = {user: {(name, pattern) for op, kind, name, pattern in allowed(user)
                            if kind == "transactionalId" and op == "Write"} for user in USERS}
    assert transactional == {**{user: set() for user in USERS},
                             "headroom-worker": {(f"{PipelineSettings.app_id}-", "prefix")}}
    assert PartitionOwnership(DEFAULTS, PipelineSettings.app_id).transactional_id(3).startswith(
        f"{PipelineSettings.app_id}-")
