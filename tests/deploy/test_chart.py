"""The Helm chart, rendered by a real ``helm``: lint, schema validation of every object (Kubernetes 1.30
and the newest schema kubernetes-validate ships), the custom resources' required fields, and the wiring
between objects (ports, Secrets, selectors, settings names) that no schema can see."""

from __future__ import annotations

import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from headroom.autoscale.manifest import emit_manifest, parse_manifest
from headroom.contract.settings import describe
from headroom.contract.signing import SigningSettings
from headroom.contract.topics import KafkaSettings
from headroom.localkafka.settings import BrokerSettings
from headroom.predictor.settings import PredictorSettings
from headroom.router.app.config import load_config
from headroom.router.app.settings import RouterSettings
from headroom.sim.traces import TraceSettings
from headroom.streams.settings import PipelineSettings
from tests.deploy.resources import CHART, KUBE_VERSION, REQUIRED, ROOT, RenderError, problems, render

pytestmark = [pytest.mark.kube, pytest.mark.timeout(1800)]  # the first use builds helm or the API server

# Every variable a settings dataclass declares, its nested ones (TLS, Kafka security, model signing) included.
SETTINGS_ENV = {env for cls in (KafkaSettings, BrokerSettings, RouterSettings, PredictorSettings, PipelineSettings,
                                TraceSettings, SigningSettings) for _, env, _, _ in describe(cls)}

RECOMMENDED_HPA = """
apiVersion: autoscaling/v2
kind: HorizontalPodAutoscaler
metadata: {name: model-server, namespace: llm, annotations: {autoscaling.headroom.dev/initial-replicas: "3"}}
spec:
  scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: model-server}
  minReplicas: 2
  maxReplicas: 12
  metrics:
    - type: Pods
      pods:
        metric: {name: prometheus.googleapis.com|vllm:num_requests_waiting|gauge}
        target: {type: AverageValue, averageValue: "4"}
  behavior:
    scaleUp: {stabilizationWindowSeconds: 0, policies: [{type: Pods, value: 4, periodSeconds: 15}]}
    scaleDown: {stabilizationWindowSeconds: 300, policies: [{type: Percent, value: 50, periodSeconds: 60}]}
"""


@pytest.fixture(scope="module")
def secure_values(tmp_path_factory) -> list[str]:
    """Non-default values: Kafka over SASL_SSL from a bootstrap Secret, listener mTLS, remote prediction
    servers, the model servers' HPA, monitoring, the Gateway and a scheduling pipeline."""
    folder = tmp_path_factory.mktemp("values")
    hpa = folder / "hpa.yaml"
    hpa.write_text(emit_manifest(parse_manifest(RECOMMENDED_HPA)))  # what `headroom autoscale recommend` writes
    scheduling = yaml.safe_load((ROOT / "router" / "router.example.yaml").read_text())["scheduling"]
    values = folder / "secure.yaml"
    values.write_text(yaml.safe_dump({
        "kafka": {"bootstrapSecret": {"name": "kafka-endpoint", "key": "bootstrap"},
                  "security": {"protocol": "SASL_SSL", "saslMechanism": "SCRAM-SHA-512"}},
        "tls": {"secret": "headroom-tls", "requireClientCert": True},
        "router": {"replicas": 2, "predictor": "remote", "authTokensSecret": "router-tokens",
                   "gateway": {"trust": "mtls", "identities": ["gateway.llm.svc", "spiffe://cluster.local/ns/gw/sa/envoy"]},
                   "settings": {"autoscaleTTFTSLOMs": 500.0}, "scheduling": scheduling},
        "networkPolicy": {"clientSources": [{"namespaceSelector": {"matchLabels": {"team": "inference"}}}],
                          "metricsSources": [{"namespaceSelector": {"matchLabels": {
                              "kubernetes.io/metadata.name": "gmp-system"}}}]},
        "predictor": {"replicas": 4},
        "worker": {"replicas": 4},
        "inferencePool": {"modelServers": {"poolLabel": "headroom.dev/pool", "metricsPort": 9400}},
        "gateway": {"enabled": True},
        "monitoring": {"podMonitoring": {"enabled": True}, "serviceMonitor": {"enabled": True},
                       "dashboard": {"enabled": True}},
        "autoscaling": {"modelServers": {"enabled": True, "target": {"apiVersion": "apps/v1", "kind": "Deployment",
                                                                     "name": "model-server"}}}}))
    return ["-f", str(values), "--set-file", f"autoscaling.modelServers.recommendation={hpa}"]


PLAINTEXT = ["--set", "kafka.security.protocol=PLAINTEXT", "--set", "kafka.bootstrapServers=kafka:9092",
             "--set", "modelSigning.allowUnsigned=true", "--set", "modelSigning.trustedKeysSecret=",
             "--set", "modelSigning.signingKeySecret.name=", "--set", "inferencePool.enabled=false",
             "--set", "router.servers[0].id=vllm-0", "--set", "router.servers[0].address=10.0.0.7:8000"]
LEADER = ["--set", "router.leaderElection=true", "--set", "router.replicas=2"]
NETWORK = ["--set", "router.gateway.trust=network", "--set", "router.authTokensSecret=",
           "--set", "tls.secret=headroom-tls", "--set", "tls.requireClientCert=true",
           "--set-json", 'networkPolicy.gatewaySources=[{"ipBlock": {"cidr": "10.129.0.0/23"}}]']
LOCAL = ["--set", "security.insecureLocal=true", "--set", "router.leaderElection=true"]
OAUTH = ["--set", "kafka.security.protocol=SASL_SSL", "--set", "kafka.security.saslMechanism=OAUTHBEARER",
         "--set", "kafka.security.oauthTokenProvider=mytokens:google_token", "--set", "kafka.security.caSecret.name="]


@pytest.fixture(scope="module")
def variants(helm, secure_values) -> dict[str, list[dict]]:
    return {"default": render(helm), "secure": render(helm, *secure_values), "plaintext": render(helm, *PLAINTEXT),
            "oauth": render(helm, *OAUTH), "leader": render(helm, *LEADER), "network": render(helm, *NETWORK),
            "local": render(helm, *LOCAL)}


VARIANTS = ["default", "secure", "plaintext", "oauth", "leader", "network", "local"]


def test_lint(helm, secure_values):
    for args in ([], secure_values, PLAINTEXT, NETWORK, LOCAL):
        done = subprocess.run([str(helm), "lint", str(CHART), "--strict", "--kube-version", KUBE_VERSION, *args],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_object_validates(variants, variant):
    objects = variants[variant]
    unchecked = []
    for obj in objects:
        key = (obj["apiVersion"], obj["kind"])
        if key in REQUIRED:
            assert problems(obj) == []
            continue
        for version in (KUBE_VERSION, kubernetes_validate.latest_version()):
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.SchemaNotFoundError:
                unchecked.append(key)
            except kubernetes_validate.ValidationError as err:
                pytest.fail(f"{obj['kind']} {obj['metadata']['name']} fails the {version} schema: {err.message}")
    assert unchecked == []  # every kind is either a built-in one or in the custom-resource table


def test_the_custom_resources_checked_are_the_ones_rendered(variants):
    kinds = {(o["apiVersion"], o["kind"]) for objects in variants.values() for o in objects}
    assert {k for k in REQUIRED if not k[0].startswith("kafka.strimzi.io")} <= kinds


def test_a_missing_required_field_is_caught():
    pool = {"apiVersion": "inference.networking.k8s.io/v1", "kind": "InferencePool", "metadata": {"name": "p"},
            "spec": {"selector": {"matchLabels": {"app": "x"}}, "targetPorts": [{"number": 8000}],
                     "endpointPickerRef": {"name": "epp", "failureMode": "FailSometimes"}}}
    assert problems(pool) == ["InferencePool p: spec.endpointPickerRef.port.number is required",
                              "InferencePool p: spec.endpointPickerRef.failureMode='FailSometimes' is not one of "
                              "['FailClose', 'FailOpen']"]


def containers(objects: list[dict]) -> dict[str, tuple[dict, dict]]:
    """Component -> (its Deployment's pod spec, its container)."""
    found = {}
    for obj in objects:
        if obj["kind"] == "Deployment":
            pod = obj["spec"]["template"]["spec"]
            found[obj["metadata"]["labels"]["app.kubernetes.io/component"]] = (pod, pod["containers"][0])
    return found


def find(objects: list[dict], kind: str, name: str | None = None) -> dict:
    matches = [o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(matches) == 1, f"{kind} {name}: {len(matches)} found"
    return matches[0]


@pytest.mark.parametrize("variant", VARIANTS)
def test_environment_names_are_settings_the_code_reads_or_the_agreed_security_ones(variants, variant):
    for component, (_, container) in containers(variants[variant]).items():
        names = {e["name"] for e in container["env"]}
        assert names - SETTINGS_ENV == set(), component


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_file_an_environment_variable_names_is_mounted_from_a_volume_of_the_pod(variants, variant):
    for component, (pod, container) in containers(variants[variant]).items():
        volumes = {v["name"]: v for v in pod.get("volumes", [])}
        mounts = container.get("volumeMounts", [])
        assert {m["name"] for m in mounts} <= set(volumes), component
        for env in container["env"]:
            value = env.get("value", "")
            if value.startswith("/etc/headroom") or value.startswith("/var/lib/headroom"):
                assert any(value == m["mountPath"] or value.startswith(m["mountPath"] + "/") for m in mounts), \
                    f"{component}: {env['name']}={value} is on no mounted volume"


def test_security_settings_come_from_secrets(variants):
    pods = containers(variants["secure"])
    router_pod, router = pods["router"]
    env = {e["name"]: e for e in router["env"]}
    assert env["HEADROOM_KAFKA_BOOTSTRAP"]["valueFrom"]["secretKeyRef"] == {"name": "kafka-endpoint", "key": "bootstrap"}
    assert env["HEADROOM_KAFKA_SECURITY_PROTOCOL"]["value"] == "SASL_SSL"
    assert env["HEADROOM_KAFKA_SASL_USERNAME"]["value"] == "headroom-router"
    secrets = {v["name"]: v.get("secret", {}).get("secretName") for v in router_pod["volumes"]}
    assert secrets["kafka-user"] == "headroom-router" and secrets["kafka-ca"] == "headroom-kafka-cluster-ca-cert"
    assert secrets["tls"] == "headroom-tls" and secrets["auth"] == "router-tokens"
    assert secrets["trusted-keys"] == "headroom-model-trusted-keys"
    assert {"HEADROOM_TLS_CLIENT_CA_FILE", "HEADROOM_PREDICTOR_TLS_CERT_FILE", "HEADROOM_ROUTER_AUTH_TOKENS_FILE"} <= set(env)
    assert env["HEADROOM_ROUTER_GATEWAY_IDENTITIES"]["value"] == \
        "gateway.llm.svc,spiffe://cluster.local/ns/gw/sa/envoy"  # trust: mtls
    default_pod, default_router = containers(variants["default"])["router"]
    default_env = {e["name"]: e.get("value") for e in default_router["env"]}
    assert default_env["HEADROOM_ROUTER_AUTH_TOKENS_FILE"] == "/etc/headroom/auth/tokens"
    assert default_env["HEADROOM_ROUTER_GATEWAY_TOKENS_FILE"] == "/etc/headroom/gateway/tokens"
    assert {v["name"]: v.get("secret", {}).get("secretName") for v in default_pod["volumes"]}["gateway-auth"] == \
        "headroom-gateway-tokens"
    worker_pod, worker = pods["worker"]
    assert {e["name"]: e.get("value") for e in worker["env"]}["HEADROOM_MODEL_SIGNING_KEY_FILE"] == \
        "/etc/headroom/signing/signing-key.pem"
    assert "HEADROOM_MODEL_SIGNING_KEY_FILE" not in {e["name"] for e in router["env"]}  # only the worker signs
    assert "HEADROOM_MODEL_TRUSTED_KEYS" not in {e["name"] for e in worker["env"]}
    oauth = {e["name"]: e.get("value") for e in containers(variants["oauth"])["predictor"][1]["env"]}
    assert oauth["HEADROOM_KAFKA_SASL_OAUTH_TOKEN_PROVIDER"] == "mytokens:google_token"
    assert "HEADROOM_KAFKA_SASL_PASSWORD_FILE" not in oauth and "HEADROOM_KAFKA_SSL_CA_FILE" not in oauth


@pytest.mark.parametrize("variant", ["default", "secure", "plaintext"])
def test_the_router_config_loads_and_matches_the_pool_and_the_ports(variants, variant):
    objects = variants[variant]
    config_map = find(objects, "ConfigMap", "hr-headroom-router")
    config = load_config(yaml.safe_load(config_map["data"]["router.yaml"]), environ={})
    _, router = containers(objects)["router"]
    ports = {p["name"]: p["containerPort"] for p in router["ports"]}
    s = config.settings
    assert (s.http_port, s.pick_port, s.ext_proc_port, s.metrics_port, s.host) == (
        ports["http"], ports["pick"], ports["ext-proc"], ports["health"], "0.0.0.0")
    if variant == "plaintext":
        assert config.pods is None and [spec.address for spec in config.servers] == ["10.0.0.7:8000"]
        assert not [o for o in objects if o["kind"] in ("Role", "RoleBinding", "InferencePool")]
        return
    pool = find(objects, "InferencePool")
    assert config.pods.match_labels == pool["spec"]["selector"]["matchLabels"]
    assert config.pods.port == pool["spec"]["targetPorts"][0]["number"]
    assert config.pods.namespace == "llm"
    if variant == "secure":
        predictor = find(objects, "Service", "hr-headroom-predictor")
        assert s.predictor == "remote" and predictor["spec"]["clusterIP"] == "None"
        assert s.predictor_addresses == "dns:///hr-headroom-predictor.llm.svc.cluster.local:50061"
        assert s.autoscale_ttft_slo_ms == 500.0 and config.pods.metrics_port == 9400
        assert (config.pipeline.predicted.name, config.pipeline.heuristic.name) == ("predicted", "heuristic")
        assert config.pipeline.predicted.picker.name == "predicted-picker"  # the example pipeline, not the default


def test_the_inference_pool_points_at_the_routers_ext_proc_port_and_the_route_at_the_pool(variants):
    objects = variants["secure"]
    pool = find(objects, "InferencePool")
    ref = pool["spec"]["endpointPickerRef"]
    service = find(objects, "Service", ref["name"])
    [port] = [p for p in service["spec"]["ports"] if p["port"] == ref["port"]["number"]]
    assert port["targetPort"] == "ext-proc"
    _, router = containers(objects)["router"]
    assert service["spec"]["selector"].items() <= find(objects, "Deployment", "hr-headroom-router")["spec"]["template"][
        "metadata"]["labels"].items()
    assert {e["name"]: e["value"] for e in router["env"] if "value" in e}["HEADROOM_EXT_PROC_SECURE"] == "true"
    route = find(objects, "HTTPRoute")
    assert route["spec"]["rules"][0]["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": pool["metadata"]["name"]}]
    gateway = find(objects, "Gateway")
    assert gateway["spec"]["gatewayClassName"] == "gke-l7-regional-external-managed"
    assert route["spec"]["parentRefs"][0]["name"] == gateway["metadata"]["name"]
    for kind in ("HealthCheckPolicy", "GCPBackendPolicy"):
        assert find(objects, kind)["spec"]["targetRef"] == {"group": "inference.networking.k8s.io",
                                                            "kind": "InferencePool", "name": pool["metadata"]["name"]}


@pytest.mark.parametrize("variant", VARIANTS)
def test_probes_are_plain_http_on_ports_the_containers_declare(variants, variant):
    for component, (_, container) in containers(variants[variant]).items():
        names = {p["name"] for p in container["ports"]}
        for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
            probe = container[kind]
            [(how, target)] = [(k, v) for k, v in probe.items() if k in ("httpGet", "grpc", "tcpSocket")]
            assert how == "httpGet" and target.get("scheme", "HTTP") == "HTTP", f"{component} {kind}"
            assert target["port"] in names and target["port"] != "http", f"{component} {kind}"  # never the proxy
    router = containers(variants[variant])["router"][1]
    predictor = containers(variants[variant])["predictor"][1]
    assert router["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert predictor["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}  # once models are live


@pytest.mark.parametrize("args, message", [
    (["--set", "worker.replicas=5"], "worker.replicas (5) exceeds the telemetry topic's partitions"),
    (["--set", "worker.replicas=8", "--set", "kafka.topics.telemetryPartitions=6"], "worker.replicas (8) exceeds"),
    (["--set", "kafka.security.protocol=TLS"], "kafka.security.protocol must be one of"),
    (["--set", "router.predictor=remote", "--set", "predictor.enabled=false"], "predictor.enabled is false"),
    (["--set", "autoscaling.modelServers.enabled=true"], "needs the HPA that `headroom autoscale recommend` wrote"),
    (["--set", "autoscaling.modelServers.enabled=true", "--set", "autoscaling.modelServers.recommendation=kind: Pod"],
     "is not an autoscaling/v2 HorizontalPodAutoscaler"),
    (["--set", "kafka.security.protocol=SASL_SSL", "--set", "kafka.security.saslMechanism=OAUTHBEARER"],
     "oauthTokenProvider"),
    (["--set", "modelSigning.trustedKeysSecret="], "could verify no model update"),
    (["--set", "tls.requireClientCert=true"], "tls.requireClientCert needs tls.secret"),
    (["--set", "router.authTokensSecret="], "anyone who reaches the router could use its proxy and Pick API"),
    (["--set", "router.gateway.tokensSecret="], "router.gateway.tokensSecret is empty"),
    (["--set", "router.gateway.trust=mtls", "--set", "tls.secret=t", "--set", "tls.requireClientCert=true"],
     "router.gateway.trust is mtls: it needs tls.requireClientCert and router.gateway.identities"),
    (["--set", "router.gateway.trust=network"], "router.gateway.trust is network: it needs networkPolicy.enabled and"),
    (["--set", "router.gateway.trust=anyone"], "router.gateway.trust must be one of token, mtls, network"),
    (["--set", "security.insecureLocal=true", "--set", "gateway.enabled=true"], "never behind the load balancer"),
    (["--set", "inferencePool.appProtocol=h2"], "inferencePool.appProtocol must be http or kubernetes.io/h2c"),
], ids=["more workers than partitions", "more workers than raised partitions", "unknown protocol",
        "remote without predictors", "hpa without recommendation", "recommendation not an hpa",
        "oauth without provider", "unverifiable models", "mtls without certificate", "no client authentication",
        "gateway token without secret", "gateway mtls without identities", "gateway network without sources",
        "unknown gateway trust", "insecure local behind a gateway", "unknown app protocol"])
def test_values_that_would_break_the_deployment_fail_rendering(helm, args, message):
    with pytest.raises(RenderError, match=message.replace("(", r"\(").replace(")", r"\)")):
        render(helm, *args)


def test_the_worker_may_have_as_many_replicas_as_partitions(helm):
    objects = render(helm, "--set", "worker.replicas=6", "--set", "kafka.topics.telemetryPartitions=6")
    worker = find(objects, "Deployment", "hr-headroom-worker")
    assert worker["spec"]["replicas"] == 6
    env = {e["name"]: e.get("value") for e in worker["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["HEADROOM_TELEMETRY_PARTITIONS"] == "6"


def test_the_model_servers_hpa_is_the_recommended_one_aimed_at_the_target(variants):
    hpa = find(variants["secure"], "HorizontalPodAutoscaler")
    recommended = yaml.safe_load(emit_manifest(parse_manifest(RECOMMENDED_HPA)))["spec"]
    assert hpa["spec"]["scaleTargetRef"] == {"apiVersion": "apps/v1", "kind": "Deployment", "name": "model-server"}
    for key in ("minReplicas", "maxReplicas", "metrics", "behavior"):
        assert hpa["spec"][key] == recommended[key]
    assert hpa["metadata"]["annotations"] == {"autoscaling.headroom.dev/initial-replicas": "3"}  # where it starts
    assert not [o for o in variants["default"] if o["kind"] == "HorizontalPodAutoscaler"]


def test_the_hpa_scales_the_deployment_the_recommendation_was_made_for(helm, secure_values):
    """Left unnamed, the target is the recommendation's; named otherwise, or in another namespace, rendering fails
    (the recommendation's PodMonitoring selects that Deployment's pods, in its namespace)."""
    unnamed = render(helm, *secure_values, "--set", "autoscaling.modelServers.target.name=")
    assert find(unnamed, "HorizontalPodAutoscaler")["spec"]["scaleTargetRef"]["name"] == "model-server"
    with pytest.raises(RenderError, match='target.name is "vllm-llama3" but the recommendation was made for the '
                                          'Deployment "model-server"'):
        render(helm, *secure_values, "--set", "autoscaling.modelServers.target.name=vllm-llama3")
    with pytest.raises(RenderError, match='the recommendation was made for namespace "llm", the release is in "prod"'):
        render(helm, *secure_values, namespace="prod")


def test_the_inference_pool_leaves_app_protocol_out_unless_asked(variants, helm):
    assert "appProtocol" not in find(variants["default"], "InferencePool")["spec"]  # CRDs before v1.4.0 lack it
    h2c = render(helm, "--set", "inferencePool.appProtocol=kubernetes.io/h2c")
    assert find(h2c, "InferencePool")["spec"]["appProtocol"] == "kubernetes.io/h2c"


@pytest.mark.parametrize("variant", VARIANTS)
def test_network_policies_admit_each_pod_only_the_ports_it_serves(variants, variant):
    objects = variants[variant]
    policies = {o["metadata"]["labels"]["app.kubernetes.io/component"]: o for o in objects
                if o["kind"] == "NetworkPolicy"}
    if variant == "local":  # the opt-out: no policy at all, and the router takes telemetry from anyone
        _, router = containers(objects)["router"]
        env = {e["name"]: e.get("value") for e in router["env"]}
        assert policies == {} and env["HEADROOM_ROUTER_UNAUTHENTICATED_TELEMETRY"] == "true"
        assert not {"HEADROOM_ROUTER_AUTH_TOKENS_FILE", "HEADROOM_ROUTER_GATEWAY_TOKENS_FILE"} & set(env)
        return
    assert set(policies) == set(containers(objects))
    for component, (_, container) in containers(objects).items():
        spec = policies[component]["spec"]
        assert spec["policyTypes"] == ["Ingress"] and "egress" not in spec
        assert spec["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == component
        admitted = {port["port"] for rule in spec["ingress"] for port in rule["ports"]}
        assert admitted == {p["name"] for p in container["ports"]}
    [grpc] = [r for r in policies["predictor"]["spec"]["ingress"] if r["ports"][0]["port"] == "grpc"]
    assert grpc["from"] == [{"podSelector": {"matchLabels": policies["router"]["spec"]["podSelector"]["matchLabels"]}}]
    ext_proc = [r for r in policies["router"]["spec"]["ingress"] if r["ports"][0]["port"] == "ext-proc"][0]
    if variant == "network":
        assert ext_proc["from"] == [{"ipBlock": {"cidr": "10.129.0.0/23"}}]
        _, router = containers(objects)["router"]
        assert {e["name"]: e.get("value") for e in router["env"]}["HEADROOM_ROUTER_GATEWAY_BY_NETWORK"] == "true"


def test_monitoring_scrapes_a_port_every_selected_pod_declares(variants):
    objects = variants["secure"]
    pods = containers(objects)
    for kind, ports_of in (("PodMonitoring", lambda c: {p["name"] for p in c["ports"]}),):
        monitors = [o for o in objects if o["kind"] == kind]
        assert {m["metadata"]["labels"]["app.kubernetes.io/component"] for m in monitors} == set(pods)
        for monitor in monitors:
            _, container = pods[monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]]
            endpoint = monitor["spec"]["endpoints"][0]
            assert endpoint["port"] in ports_of(container) and endpoint["scheme"] == "http"
            assert endpoint["port"] == container["readinessProbe"]["httpGet"]["port"]  # the plain health port
    for monitor in [o for o in objects if o["kind"] == "ServiceMonitor"]:
        component = monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"]
        services = [o for o in objects if o["kind"] == "Service"
                    and o["metadata"]["labels"]["app.kubernetes.io/component"] == component]
        assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for s in services for p in s["spec"]["ports"]}
    dashboard = find(objects, "ConfigMap", "hr-headroom-dashboard")
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert dashboard["data"]["headroom.json"] == (CHART / "dashboards" / "headroom.json").read_text()


@pytest.mark.parametrize("variant", ["default", "plaintext"])
def test_rbac_is_least_privilege(variants, variant):
    objects = variants[variant]
    assert not [o for o in objects if o["kind"] in ("ClusterRole", "ClusterRoleBinding")]
    roles = [o for o in objects if o["kind"] == "Role"]
    tokens = {c: pod.get("automountServiceAccountToken") for c, (pod, _) in containers(objects).items()}
    if variant == "plaintext":  # a static server list: no access to the API at all
        assert roles == [] and not any(tokens.values())
        return
    [role] = roles
    assert role["rules"] == [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]}]
    binding = find(objects, "RoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "hr-headroom-router", "namespace": "llm"}]
    assert tokens == {"router": True, "predictor": False, "worker": False}


@pytest.mark.parametrize("variant", ["default", "secure"])
def test_containers_run_unprivileged_on_a_read_only_root(variants, variant):
    for pod, container in containers(variants[variant]).values():
        assert pod["securityContext"]["runAsNonRoot"] is True
        context = container["securityContext"]
        assert context["readOnlyRootFilesystem"] is True and context["allowPrivilegeEscalation"] is False
        assert {"/var/lib/headroom", "/tmp"} <= {m["mountPath"] for m in container["volumeMounts"]}
        assert container["resources"]["requests"]


def test_make_chart_renders_the_chart_to_a_folder(helm, tmp_path):
    done = subprocess.run(["make", "-s", "chart", f"CHART_OUT={tmp_path}", f"HELM={helm}"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    rendered = list(Path(tmp_path).rglob("*.yaml"))
    kinds = {o["kind"] for path in rendered for o in yaml.safe_load_all(path.read_text()) if o}
    assert {"Deployment", "InferencePool", "ConfigMap", "Role", "Service"} <= kinds


def test_leader_election_readies_only_the_leader_and_may_touch_only_its_lease(variants):
    objects = variants["leader"]
    pod, router = containers(objects)["router"]
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in router["env"]}
    assert env["HEADROOM_ROUTER_LEADER_ELECTION"] == "true" and env["HEADROOM_ROUTER_LEADER_LEASE"] == "hr-headroom-router"
    assert env["HEADROOM_ROUTER_IDENTITY"] == {"fieldRef": {"fieldPath": "metadata.name"}}
    assert router["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert router["livenessProbe"]["httpGet"]["path"] == "/healthz"  # a standby is alive, just not ready
    [role] = [o for o in objects if o["kind"] == "Role"]
    assert role["rules"][1:] == [
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["create"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["hr-headroom-router"],
         "verbs": ["get", "update"]}]
    assert pod["automountServiceAccountToken"] is True
