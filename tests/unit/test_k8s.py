"""infra/k8s checked offline: every built-in object against the Kubernetes schemas
(kubernetes-validate), the KEDA ScaledObject against KEDA's own CRD schema (vendored), and the
scaling query against the metrics the exporter serves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from farm.web.exporter import METRIC_NAMES
from tests.infra.commands import check_farm_argv
from tests.promql import ROOT, metric_names

K8S = ROOT / "infra" / "k8s"
KEDA_CRD = ROOT / "tests" / "fixtures" / "keda" / "keda.sh_scaledobjects.yaml"
KUBERNETES_VERSION = "1.31.0"


def _docs() -> list[tuple[Path, dict[str, Any]]]:
    docs = []
    for path in sorted(K8S.glob("*.yaml")):
        docs += [(path, d) for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def _one(kind: str, name: str) -> dict[str, Any]:
    [doc] = [d for _, d in _docs() if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


def _worker_container() -> dict[str, Any]:
    [container] = _one("Deployment", "farm-worker")["spec"]["template"]["spec"]["containers"]
    return container


@pytest.mark.parametrize(
    "path,doc",
    [(p, d) for p, d in _docs() if d["kind"] not in ("ScaledObject", "Kustomization")],
    ids=lambda v: v.name if isinstance(v, Path) else f"{v['kind']}/{v['metadata']['name']}",
)
def test_each_object_is_valid_kubernetes(path: Path, doc: dict[str, Any]) -> None:
    kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    listed = set(kustomization["resources"])
    assert listed == {p.name for p in K8S.glob("*.yaml")} - {"kustomization.yaml"}


def _keda_schema() -> dict[str, Any]:
    crd = yaml.safe_load(KEDA_CRD.read_text())
    [version] = [v for v in crd["spec"]["versions"] if v["name"] == "v1alpha1"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _closed(schema: Any) -> Any:
    """Structural CRD schemas prune unknown fields; reject them instead, so a typo fails here."""
    if isinstance(schema, dict):
        schema = {k: _closed(v) for k, v in schema.items()}
        if "properties" in schema and "additionalProperties" not in schema:
            schema["additionalProperties"] = False
    elif isinstance(schema, list):
        schema = [_closed(v) for v in schema]
    return schema


def test_the_scaled_object_matches_kedas_crd() -> None:
    scaled = _one("ScaledObject", "farm-worker")
    assert scaled["apiVersion"] == "keda.sh/v1alpha1"
    schema = _closed(_keda_schema())
    schema["properties"]["metadata"] = {"type": "object"}
    jsonschema.validate(scaled, schema)


def test_a_misspelt_field_is_caught_by_the_crd_check() -> None:
    scaled = _one("ScaledObject", "farm-worker")
    scaled["spec"]["minReplicas"] = 0
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(scaled, _closed(_keda_schema()))


def test_workers_scale_on_the_exporters_backlog_per_worker_through_prometheus() -> None:
    scaled = _one("ScaledObject", "farm-worker")
    assert scaled["spec"]["scaleTargetRef"]["name"] == "farm-worker"
    _one("Deployment", "farm-worker")
    [trigger] = scaled["spec"]["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "Value"
    meta = trigger["metadata"]
    assert {"serverAddress", "query", "threshold"} <= set(meta)  # the scaler's required fields
    assert metric_names(meta["query"]) == {"farm_backlog_per_worker"}
    assert "farm_backlog_per_worker" in METRIC_NAMES
    assert all(isinstance(v, str) for v in meta.values())  # KEDA's metadata is string-valued


def test_workers_get_a_gpu_with_nvenc_on_spot_nodes() -> None:
    container = _worker_container()
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert "video" in env["NVIDIA_DRIVER_CAPABILITIES"].split(",")
    pod = _one("Deployment", "farm-worker")["spec"]["template"]["spec"]
    terms = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    keys = {e["key"] for t in terms["nodeSelectorTerms"] for e in t["matchExpressions"]}
    assert {"karpenter.sh/capacity-type", "cloud.google.com/gke-spot"} <= keys
    assert {"nvidia.com/gpu", "cloud.google.com/gke-spot"} <= {t["key"] for t in pod["tolerations"]}


def test_a_stopping_worker_has_time_to_hand_its_chunk_back() -> None:
    pod = _one("Deployment", "farm-worker")["spec"]["template"]["spec"]
    config = _one("ConfigMap", "farm-config")["data"]
    grace_s = float(config["FARM_SHUTDOWN_GRACE_S"])
    assert pod["terminationGracePeriodSeconds"] >= grace_s + 30
    hook = " ".join(_worker_container()["lifecycle"]["preStop"]["exec"]["command"])
    assert "kill -TERM 1" in hook and "kill -0 1" in hook


def test_every_container_runs_a_real_farm_command() -> None:
    from farm.cli.main import cli

    farm_pods = [d for _, d in _docs() if d["kind"] == "Deployment"]
    for deployment in farm_pods:
        for container in deployment["spec"]["template"]["spec"]["containers"]:
            assert check_farm_argv(cli, container["args"]).startswith("farm ")
            probe = container.get("livenessProbe", {}).get("exec", {}).get("command", [])
            if probe[:1] == ["farm"]:
                check_farm_argv(cli, probe[1:])


def test_the_control_plane_runs_beside_the_workers() -> None:
    for name, command in (("farm-reconciler", "reconcile"), ("farm-flower", "flower"),
                          ("farm-web", "web")):  # fmt: skip
        [container] = _one("Deployment", name)["spec"]["template"]["spec"]["containers"]
        assert container["args"][0] == command
    assert _one("Service", "farm-web")["spec"]["ports"][0]["port"] == 8090


# ── Least privilege: secrets per role, NetworkPolicy, no token, seccomp ───────────────────────
ROLE_SECRET = {
    "farm-worker": "farm-worker",
    "farm-reconciler": "farm-control",
    "farm-flower": "farm-control",
    "farm-web": "farm-control",
    "redis": "farm-redis",
}
"""The one Secret each pod may reach: its role's (README.md beside the manifests)."""
PRIVATE_RANGES = {"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "169.254.0.0/16"}


def _pods() -> dict[str, dict[str, Any]]:
    """Each workload's pod template by the name its pods are labelled with."""
    pods = {}
    for _, doc in _docs():
        if doc["kind"] in ("Deployment", "StatefulSet"):
            template = doc["spec"]["template"]
            pods[template["metadata"]["labels"]["app.kubernetes.io/name"]] = template
    return pods


def _containers(pod: dict[str, Any]) -> list[dict[str, Any]]:
    return [*pod["spec"]["containers"], *pod["spec"].get("initContainers", [])]


def _secret_refs(pod: dict[str, Any]) -> dict[str, set[str]]:
    """Secret name -> the keys of it the pod can read ("*": all of them), by env, envFrom and
    volumes."""
    found: dict[str, set[str]] = {}
    for container in _containers(pod):
        for source in container.get("envFrom", []):
            if "secretRef" in source:
                found.setdefault(source["secretRef"]["name"], set()).add("*")
        for variable in container.get("env", []):
            ref = variable.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                found.setdefault(ref["name"], set()).add(ref["key"])
    for volume in pod["spec"].get("volumes", []):
        sources = [volume, *volume.get("projected", {}).get("sources", [])]
        for source in sources:
            secret = source.get("secret")
            if secret:
                name = secret.get("secretName") or secret["name"]
                found.setdefault(name, set()).add("*")
    return found


def test_each_pod_reaches_only_its_roles_secret() -> None:
    pods = _pods()
    assert set(pods) == set(ROLE_SECRET)
    for name, pod in pods.items():
        assert set(_secret_refs(pod)) == {ROLE_SECRET[name]}, name


@pytest.mark.parametrize(
    "pod,refused",
    [
        ("farm-flower", {"FARM_S3_ACCESS_KEY", "FARM_S3_SECRET_KEY", "FARM_WEBHOOK_SECRET"}),
        ("farm-web", {"FARM_WEBHOOK_SECRET"}),
        ("farm-reconciler", {"FARM_FLOWER_PASSWORD"}),
    ],
)
def test_control_pods_take_only_the_keys_they_use(pod: str, refused: set[str]) -> None:
    [keys] = _secret_refs(_pods()[pod]).values()
    assert "*" not in keys and not keys & refused, keys


def test_the_documented_worker_secret_holds_no_control_plane_secret() -> None:
    readme = (K8S / "README.md").read_text()
    command = readme.split("create secret generic farm-worker", 1)[1].split("kubectl", 1)[0]
    names = {part.split("=", 1)[0] for part in command.split("--from-literal=")[1:]}
    assert names == {"FARM_REDIS_URL", "FARM_S3_ACCESS_KEY", "FARM_S3_SECRET_KEY"}
    assert "redis://worker:" in command, "the worker's own Redis user, not the admin's"


def test_no_pod_mounts_a_service_account_token() -> None:
    for name, pod in _pods().items():
        assert pod["spec"].get("automountServiceAccountToken") is False, name


def _seccomp(pod: dict[str, Any], container: dict[str, Any]) -> str:
    profile = container.get("securityContext", {}).get("seccompProfile") or pod["spec"].get(
        "securityContext", {}
    ).get("seccompProfile", {})
    return str(profile.get("type", "unset"))


def test_every_container_but_the_workers_box_runs_with_runtime_default_seccomp() -> None:
    """The worker stays Unconfined: bubblewrap's namespaces need clone(CLONE_NEWUSER), mount
    and pivot_root, which RuntimeDefault refuses without CAP_SYS_ADMIN (worker.yaml says so)."""
    profiles = {
        (name, c["name"]): _seccomp(pod, c)
        for name, pod in _pods().items()
        for c in _containers(pod)
    }
    unconfined = {key for key, profile in profiles.items() if profile != "RuntimeDefault"}
    assert unconfined == {("farm-worker", "worker")}
    assert profiles[("farm-worker", "worker")] == "Unconfined"
    assert "CLONE_NEWUSER" in (K8S / "worker.yaml").read_text()


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    """A label selector (matchLabels, matchExpressions) applied to a pod's labels."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expression in selector.get("matchExpressions", []):
        key, operator, values = expression["key"], expression["operator"], expression.get("values")
        held = {
            "In": key in labels and labels[key] in (values or []),
            "NotIn": key not in labels or labels[key] not in (values or []),
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[operator]
        if not held:
            return False
    return True


def _policies(pod: str, direction: str) -> list[dict[str, Any]]:
    """The NetworkPolicy rules of `direction` (ingress, egress) for a pod, from every policy that
    selects it and names that direction."""
    labels = _pods()[pod]["metadata"]["labels"]
    rules = []
    for _, doc in _docs():
        if doc["kind"] != "NetworkPolicy" or not _selects(doc["spec"]["podSelector"], labels):
            continue
        if direction.capitalize() in doc["spec"]["policyTypes"]:
            rules += doc["spec"].get(direction, [])
    return rules


def _ports(rules: list[dict[str, Any]]) -> set[tuple[str, int]]:
    return {(p.get("protocol", "TCP"), p["port"]) for r in rules for p in r.get("ports", [])}


def test_the_namespace_denies_by_default() -> None:
    policies = [d for _, d in _docs() if d["kind"] == "NetworkPolicy"]
    assert all(p["metadata"]["namespace"] == "farm" for p in policies)
    [deny] = [p for p in policies if not p["spec"].get("ingress") and not p["spec"].get("egress")]
    assert deny["spec"]["podSelector"] == {}
    assert set(deny["spec"]["policyTypes"]) == {"Ingress", "Egress"}


def test_workers_reach_only_dns_redis_and_the_store_and_take_no_connection() -> None:
    egress = _policies("farm-worker", "egress")
    assert _ports(egress) == {("UDP", 53), ("TCP", 53), ("TCP", 6379), ("TCP", 443)}
    for rule in egress:
        for peer in rule["to"]:
            if "ipBlock" in peer:  # the store: public addresses only, never the metadata service
                assert _ports([rule]) == {("TCP", 443)}
                assert set(peer["ipBlock"]["except"]) >= PRIVATE_RANGES
            else:
                assert "podSelector" in peer, peer
    assert _policies("farm-worker", "ingress") == []


def test_redis_answers_only_the_farms_pods() -> None:
    [rule] = _policies("redis", "ingress")
    assert _ports([rule]) == {("TCP", 6379)}
    [peer] = rule["from"]
    assert set(peer) == {"podSelector"}  # this namespace only
    admitted = {name for name, pod in _pods().items()
                if _selects(peer["podSelector"], pod["metadata"]["labels"])}  # fmt: skip
    assert admitted == set(ROLE_SECRET) - {"redis"}
    assert _ports(_policies("redis", "egress")) == {("UDP", 53), ("TCP", 53)}  # DNS alone


def test_flower_takes_no_connection_and_farm_web_only_prometheus() -> None:
    assert _policies("farm-flower", "ingress") == []
    [rule] = _policies("farm-web", "ingress")
    assert _ports([rule]) == {("TCP", 8090)}
    [peer] = rule["from"]
    assert peer == {
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
    }
    assert (
        "prometheus-operated.monitoring.svc"
        in _one("ScaledObject", "farm-worker")["spec"]["triggers"][0]["metadata"]["serverAddress"]
    )
