"""``kubectl apply -k manifests/`` against a real kube-apiserver, and the kustomize base agreeing with
the Helm chart and the generated CRDs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from helm_chart import one, operator_deployment, pod_from_template, render
from trawl.api.crd import all_crds
from trawl.dev.controlplane import ControlPlane

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "manifests"


def _built(control_plane: ControlPlane) -> list[dict[str, Any]]:
    text = control_plane.kubectl("kustomize", str(MANIFESTS)).stdout
    return [doc for doc in yaml.safe_load_all(text) if doc]


def test_apply_k_manifests_installs_trawl(control_plane: ControlPlane) -> None:
    out = control_plane.kubectl("apply", "-k", str(MANIFESTS), check=False)
    assert out.returncode == 0, out.stderr
    assert "would violate PodSecurity" not in out.stderr, out.stderr
    for line in (
        "namespace/trawl-system",
        "serviceaccount/trawl-operator",
        "clusterrole.rbac.authorization.k8s.io/trawl-operator",
        "clusterrolebinding.rbac.authorization.k8s.io/trawl-operator",
        "deployment.apps/trawl-operator",
        "poddisruptionbudget.policy/trawl-operator",
        "role.rbac.authorization.k8s.io/trawl-operator-leader-election",
        "service/trawl-operator-metrics",
        "statefulset.apps/redis",
        "service/redis",
        "networkpolicy.networking.k8s.io/redis",
        "networkpolicy.networking.k8s.io/trawl-operator",
        "networkpolicy.networking.k8s.io/trawl-workers",
    ):
        assert line in out.stdout, out.stdout
    ns = json.loads(control_plane.kubectl("get", "namespace", "trawl-system", "-o", "json").stdout)
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    # A second apply changes nothing (GitOps tools re-apply constantly).
    pdb_before = _pdb_version(control_plane)
    again = control_plane.kubectl("apply", "-k", str(MANIFESTS)).stdout
    # kubectl always sends a PodDisruptionBudget's selector (its patch strategy is "replace") and so
    # prints "configured"; the server stores nothing new, which is what matters to a GitOps tool.
    pdb = "poddisruptionbudget.policy/trawl-operator configured"
    changed = [line for line in again.splitlines() if not line.endswith(" unchanged") and line != pdb]
    assert not changed, again
    assert _pdb_version(control_plane) == pdb_before


def _pdb_version(cp: ControlPlane) -> tuple[str, int]:
    obj = json.loads(cp.kubectl("get", "pdb", "trawl-operator", "-n", "trawl-system", "-o", "json").stdout)
    return obj["metadata"]["resourceVersion"], obj["metadata"]["generation"]


def test_kustomize_pods_are_admitted_in_the_restricted_namespace(control_plane: ControlPlane) -> None:
    control_plane.kubectl("apply", "-k", str(MANIFESTS))
    # The controller manager would create the namespace's default ServiceAccount; none runs here.
    control_plane.kubectl("create", "serviceaccount", "default", "-n", "trawl-system", check=False)
    docs = _built(control_plane)
    for owner in (one(docs, "Deployment"), one(docs, "StatefulSet")):
        pod = pod_from_template(owner, f"{owner['metadata']['name']}-admission-check")
        control_plane.kubectl("delete", "pod", pod["metadata"]["name"], "-n", "trawl-system", "--ignore-not-found")
        out = control_plane.kubectl("create", "-n", "trawl-system", "-f", "-", input=json.dumps(pod), check=False)
        assert out.returncode == 0, out.stderr


def test_kustomize_crds_are_the_generated_ones(control_plane: ControlPlane) -> None:
    crds = {d["metadata"]["name"]: d for d in _built(control_plane) if d["kind"] == "CustomResourceDefinition"}
    generated = {(d := yaml.safe_load(text))["metadata"]["name"]: d for text in all_crds().values()}
    assert crds.keys() == generated.keys()
    for name, crd in crds.items():
        assert crd == generated[name], name


def test_kustomize_operator_pod_equals_the_chart_default(control_plane: ControlPlane) -> None:
    kustomized = one(_built(control_plane), "Deployment")
    charted = operator_deployment(render(namespace="trawl-system", release="trawl"))
    assert kustomized["spec"]["template"]["spec"] == charted["spec"]["template"]["spec"]
    assert kustomized["spec"]["strategy"] == charted["spec"]["strategy"]
    assert kustomized["spec"]["strategy"]["type"] == "RollingUpdate"
    assert kustomized["spec"]["replicas"] == charted["spec"]["replicas"] == 2


def test_kustomize_network_policies_equal_the_chart_default(control_plane: ControlPlane) -> None:
    """The operator's egress, the workers' egress in trawl-system, and the Redis only for those two: as the
    chart has them (issue 32: manifests/ had no worker egress policy, and its Redis admitted worker-labelled
    pods of any namespace)."""
    kustomized = {p["metadata"]["name"]: p for p in _built(control_plane) if p["kind"] == "NetworkPolicy"}
    charted = {p["metadata"]["name"]: p for p in render(namespace="trawl-system", release="trawl")
               if p["kind"] == "NetworkPolicy"}  # fmt: skip
    for name, chart_name in (("trawl-operator", "trawl-operator"), ("trawl-workers", "trawl-workers"),
                             ("redis", "trawl-redis")):  # fmt: skip
        assert kustomized[name]["spec"] == charted[chart_name]["spec"], name
        assert kustomized[name]["metadata"]["namespace"] == "trawl-system"
    redis_from = kustomized["redis"]["spec"]["ingress"][0]["from"]
    workers = next(peer for peer in redis_from if "namespaceSelector" in peer)
    assert workers["namespaceSelector"] == {
        "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["trawl-system"]}]
    }


def test_sample_pool_points_at_the_kustomize_redis(control_plane: ControlPlane) -> None:
    docs = _built(control_plane)
    service = one(docs, "Service", "redis")
    pool = yaml.safe_load((MANIFESTS / "samples" / "scrapepool.yaml").read_text())
    url = pool["spec"]["redis"].get("url", "")
    assert url.startswith(f"redis://{service['metadata']['name']}.{service['metadata']['namespace']}.svc:6379"), url
