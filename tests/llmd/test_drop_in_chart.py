"""The drop-in values (infra/llmd/inferencepool-values.yaml, the block of docs/llm-d-drop-in.md) through the
Inference Extension's own inferencepool chart: what it renders is accepted by a real API server (a server-side
dry run of every object, the CRDs installed), and each sidecar it renders starts the headroom server its
probes and the endpoint picker expect, where they expect it."""

from __future__ import annotations

import pytest

from headroom.llmd.sidecar import plan
from tests.kube import ROOT
from tests.llmd.epp import ENTRYPOINT, VALUES, install_crds, render, rendered

pytestmark = [pytest.mark.kube, pytest.mark.timeout(600)]

DOC = ROOT / "docs" / "llm-d-drop-in.md"


def test_the_documented_values_are_the_values_file():
    assert VALUES.read_text().strip() in DOC.read_text()


def test_the_chart_renders_headroom_sidecars_that_a_real_api_server_accepts(helm, kube_api, tmp_path):
    from kubernetes import client, utils

    install_crds(kube_api)
    objects = render(helm, "llama", "drop-in", {"inferencePool": {"modelServers": {"matchLabels": {"app": "vllm"}}}},
                     tmp_path)
    api = kube_api.admin
    client.CoreV1Api(api).create_namespace({"metadata": {"name": "drop-in"}})
    for item in objects:
        if item["apiVersion"].startswith("inference.networking"):
            group, version = item["apiVersion"].split("/")
            plural = item["kind"].lower() + "s"
            client.CustomObjectsApi(api).create_namespaced_custom_object(group, version, "drop-in", plural, item,
                                                                         dry_run="All")
        else:
            utils.create_from_dict(api, item, namespace="drop-in", dry_run="All")

    deployment = rendered(objects, "Deployment")
    configs = {c["metadata"]["name"]: c["data"] for c in objects if c["kind"] == "ConfigMap"}
    containers = {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}
    assert set(containers) == {"epp", "training-server", "prediction-server-1"}
    epp_env = {e["name"]: e.get("value") for e in containers["epp"]["env"]}
    assert (epp_env["TRAINING_SERVER_URL"], epp_env["PREDICTION_SERVER_URL"]) == ("http://localhost:8000",
                                                                                  "http://localhost:8001")
    for name, role, listens in (("training-server", "training", "port"), ("prediction-server-1", "prediction",
                                                                           "http_port")):
        container = containers[name]
        assert container["image"] == "registry.example.com/headroom/headroom-llmd:0.1.0"
        env = {k: v for source in container["envFrom"] for k, v in configs[source["configMapRef"]["name"]].items()}
        env.update({e["name"]: e["value"] for e in container["env"] if "value" in e})
        command = container.get("command") or ENTRYPOINT
        assert command in (["uvicorn"], ENTRYPOINT)  # infra/image/uvicorn, or the image's entry point
        got_role, settings = plan(list(container.get("args", [])), env)
        assert got_role == role
        url = (epp_env["TRAINING_SERVER_URL"] if role == "training" else epp_env["PREDICTION_SERVER_URL"])
        assert url.endswith(f":{getattr(settings, listens)}")  # where the endpoint picker calls it
        for probe, path in (("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")):
            assert container[probe]["httpGet"]["path"] == path
            port = container[probe]["httpGet"]["port"]
            if role == "training":  # the API on loopback; the probes on the health port, on every interface
                assert (settings.host, settings.health_port, settings.health_host) == ("127.0.0.1", port, "0.0.0.0")
            else:  # the chart passes --host 0.0.0.0 and probes the prediction port itself
                assert (settings.host, settings.http_port) == ("0.0.0.0", port)
