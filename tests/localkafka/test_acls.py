"""localkafka.acls: the one list of grants, as the local broker's ACL bindings and as Strimzi KafkaUsers."""

import yaml

from headroom.cli.main import main
from headroom.contract.topics import KafkaSettings
from headroom.localkafka.acls import bindings, grants, strimzi_users


def test_only_the_worker_may_write_model_updates_and_only_routers_telemetry():
    writers = {topic: sorted(user for user, user_grants in grants(KafkaSettings(), "app").items()
                             for g in user_grants if g.resource == "topic" and g.name == topic and "WRITE" in g.operations)
               for topic in ("model-updates", "telemetry", "telemetry-dlq")}
    assert writers == {"model-updates": ["worker"], "telemetry": ["router"], "telemetry-dlq": ["worker"]}
    assert {b.principal for b in bindings(KafkaSettings(), "app")} == {
        "User:worker", "User:router", "User:predictor", "User:backtest"}


def test_strimzi_users_carry_the_same_grants(capsys):
    kafka = KafkaSettings(model_topic="models-x")
    users = {u["metadata"]["name"]: u for u in strimzi_users(kafka, "app", "prod", "tls")}
    assert set(users) == {f"headroom-{user}" for user in grants(kafka, "app")}
    worker = users["headroom-worker"]
    assert worker["metadata"]["labels"] == {"strimzi.io/cluster": "prod"}
    assert worker["spec"]["authentication"] == {"type": "tls"}
    assert {"resource": {"type": "topic", "name": "app-", "patternType": "prefix"},
            "operations": ["Create", "Read", "Write", "Describe", "DescribeConfigs"]} in worker["spec"]["authorization"]["acls"]
    assert main(["kafka", "acls", "--strimzi", "prod", "--worker-app-id", "app"]) == 0
    printed = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [u["metadata"]["name"] for u in printed] == ["headroom-worker", "headroom-router", "headroom-predictor",
                                                         "headroom-backtest"]
