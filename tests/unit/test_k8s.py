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
