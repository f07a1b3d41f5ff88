from datetime import UTC, datetime

import pytest
from kubernetes.client import V1Container, V1ContainerPort, V1ObjectMeta, V1Pod, V1PodCondition, V1PodSpec, V1PodStatus

from headroom.router.errors import ConfigError
from headroom.router.state.pods import PodSelector, parse_pods, server_of
from headroom.router.state.servers import ServerSpec

SELECTOR = PodSelector("llm", {"app": "vllm"}, port=8000, metrics_port="metrics", pool_label="pool")


def pod(name="p1", ip="10.0.0.5", ready="True", deleting=False, ports=(), labels=None) -> V1Pod:
    return V1Pod(
        metadata=V1ObjectMeta(name=name, labels={"app": "vllm", **(labels or {})},
                              deletion_timestamp=datetime.now(UTC) if deleting else None),
        spec=V1PodSpec(containers=[V1Container(name="vllm", ports=[V1ContainerPort(container_port=number, name=port_name)
                                                                   for port_name, number in ports])]),
        status=V1PodStatus(pod_ip=ip, conditions=[V1PodCondition(type="Ready", status=ready)] if ready else None))


@pytest.mark.parametrize("given, expected", [
    (pod(), ServerSpec("p1", "10.0.0.5:8000", "default", "http://10.0.0.5:8000/metrics", "llm", "p1")),
    (pod(ports=[("metrics", 9400), ("http", 8000)], labels={"pool": "h100"}),
     ServerSpec("p1", "10.0.0.5:8000", "h100", "http://10.0.0.5:9400/metrics", "llm", "p1")),
    (pod(ip="fd00::7"), ServerSpec("p1", "[fd00::7]:8000", "default", "http://[fd00::7]:8000/metrics", "llm", "p1")),
    (pod(ready="False"), None),
    (pod(ready=None), None),
    (pod(ip=None), None),
    (pod(deleting=True), None),
], ids=["ready", "metrics port and pool from the pod", "ipv6", "not ready", "no conditions yet", "no ip yet",
        "terminating"])
def test_server_of(given, expected):
    assert server_of(given, SELECTOR) == expected


def test_a_numeric_metrics_port_needs_no_port_in_the_spec():
    assert server_of(pod(), PodSelector("llm", {"app": "vllm"}, metrics_port=9090)).scrape_url == \
        "http://10.0.0.5:9090/metrics"


def test_parse_pods_fills_defaults_and_builds_the_label_selector():
    selector = parse_pods({"namespace": "llm", "selector": {"tier": "gpu", "app": "vllm"}})
    assert selector == PodSelector("llm", {"tier": "gpu", "app": "vllm"}, 8000, "metrics", "")
    assert selector.label_selector == "app=vllm,tier=gpu"


@pytest.mark.parametrize("raw, message", [
    ({"namespace": "llm", "selector": {}}, "selector must map"),
    ({"namespace": "llm", "selector": {"app": 1}}, "selector must map"),
    ({"namespace": "llm", "selector": {"app": "x"}, "port": 70000}, "port must be a port number"),
    ({"namespace": "llm", "selector": {"app": "x"}, "metricsPort": True}, "metricsPort must be"),
    ({"namespace": "llm", "selector": {"app": "x"}, "poolLabel": 3}, "poolLabel must be"),
], ids=["empty selector", "non-string label value", "port out of range", "boolean metrics port", "pool label type"])
def test_parse_pods_errors(raw, message):
    with pytest.raises(ConfigError, match=message):
        parse_pods(raw)
