"""Render the Helm chart with a real ``helm`` binary and pick objects out of the result.

Shared by the chart tests (tests/unit/test_chart*.py, tests/cluster/test_chart*.py) and by any cluster
test that wants to run the operator with exactly the permissions the chart grants::

    docs = render(namespace="trawl-system")
    for obj in operator_rbac_objects(docs):
        control_plane.kubectl("apply", "-f", "-", input=json.dumps(obj))
    kubeconfig = control_plane.service_account_kubeconfig("trawl-system", service_account_name(docs))

``helm`` is built once from the Go module proxy by hack/build-helm.sh (cached under
~/.cache/trawl/k8s/helm-<version>); set TRAWL_HELM to use another binary.
"""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "charts" / "trawl"
CI_VALUES = CHART / "ci"

# The value sets every chart test runs: name -> values files (relative to the chart's ci/ folder).
VALUE_SETS: dict[str, list[str]] = {
    "default": [],
    "external-redis": ["external-redis-values.yaml"],
    "external-redis-secret": ["external-redis-secret-values.yaml"],
    "external-redis-sentinel": ["external-redis-sentinel-values.yaml"],
    "external-redis-cluster": ["external-redis-cluster-values.yaml"],
    "namespaced": ["namespaced-values.yaml"],
    "no-redis": ["no-redis-values.yaml"],
    "metrics": ["metrics-values.yaml"],
    "minimal": ["minimal-values.yaml"],
    "openshift": ["openshift-values.yaml"],
}

# The Prometheus Operator's API: the monitoring objects render only where it exists (as in a cluster
# running it). render() assumes it by default; pass api_versions=() for a cluster without it.
MONITORING_APIS = (
    "monitoring.coreos.com/v1/ServiceMonitor",
    "monitoring.coreos.com/v1/PodMonitor",
    "monitoring.coreos.com/v1/PrometheusRule",
)

RBAC_KINDS = ("ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding")


class HelmError(RuntimeError):
    """helm exited non-zero; the message carries its stderr."""


@functools.cache
def helm_binary() -> str:
    """Path of the helm binary (built and cached on first use)."""
    explicit = os.environ.get("TRAWL_HELM")
    if explicit:
        return explicit
    out = subprocess.run(
        [str(ROOT / "hack" / "build-helm.sh")], capture_output=True, text=True, check=False, timeout=1800
    )
    if out.returncode != 0:
        raise HelmError(f"hack/build-helm.sh failed:\n{out.stderr[-4000:]}")
    return out.stdout.strip().splitlines()[-1]


def helm(*args: str, check: bool = True, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run helm with an isolated, empty configuration (no repositories, no plugins, no cache)."""
    home = Path(tempfile.gettempdir()) / f"trawl-helm-home-{os.getuid()}"
    env = {
        **os.environ,
        "HELM_CONFIG_HOME": str(home / "config"),
        "HELM_CACHE_HOME": str(home / "cache"),
        "HELM_DATA_HOME": str(home / "data"),
    }
    env.pop("KUBECONFIG", None)
    result = subprocess.run([helm_binary(), *args], capture_output=True, text=True, env=env, timeout=timeout)
    if check and result.returncode != 0:
        raise HelmError(f"helm {' '.join(args)} exited {result.returncode}:\n{result.stderr}")
    return result


def values_args(value_set: str | None = None, values_files: Iterable[Path] = (), **set_values: str) -> list[str]:
    """helm arguments for a named value set, extra values files and --set-string overrides."""
    args: list[str] = []
    for name in VALUE_SETS.get(value_set or "default", []) if value_set else []:
        args += ["-f", str(CI_VALUES / name)]
    for path in values_files:
        args += ["-f", str(path)]
    for key, value in set_values.items():
        args += ["--set", f"{key}={value}"]
    return args


def render(
    value_set: str | None = None,
    *,
    namespace: str = "trawl-system",
    release: str = "trawl",
    values_files: Iterable[Path] = (),
    set_values: Mapping[str, str] | None = None,
    include_crds: bool = False,
    api_versions: Iterable[str] = MONITORING_APIS,
) -> list[dict[str, Any]]:
    """``helm template`` the chart and return the rendered objects (empty documents dropped)."""
    args = ["template", release, str(CHART), "--namespace", namespace]
    if include_crds:
        args.append("--include-crds")
    for api in api_versions:
        args += ["--api-versions", api]
    args += values_args(value_set, values_files, **dict(set_values or {}))
    text = helm(*args).stdout
    return [doc for doc in yaml.safe_load_all(text) if doc]


def by_kind(docs: Iterable[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in docs if d.get("kind") == kind]


def one(docs: Iterable[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    """The single object of ``kind`` (and ``name``); fails loudly if there are none or several."""
    found = [d for d in by_kind(docs, kind) if name is None or d["metadata"]["name"] == name]
    if len(found) != 1:
        names = [d["metadata"]["name"] for d in by_kind(docs, kind)]
        raise AssertionError(f"expected one {kind} {name or ''}, found {len(found)} among {names}")
    return found[0]


def operator_rbac_objects(docs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The operator's ServiceAccount, (Cluster)Roles and bindings, in an order that applies cleanly."""
    order = {kind: i for i, kind in enumerate(RBAC_KINDS)}
    picked = [d for d in docs if d.get("kind") in order and not is_hook(d) and not is_user_role(d)]
    return sorted(picked, key=lambda d: order[d["kind"]])


def is_user_role(doc: Mapping[str, Any]) -> bool:
    """The results API's reader and retrier ClusterRoles: for users to be bound to, not the operator's."""
    return (doc.get("metadata", {}).get("labels") or {}).get("app.kubernetes.io/component") == "results-api"


def is_hook(doc: Mapping[str, Any]) -> bool:
    """A Helm hook (the pre-delete Job, the Redis Secret's pre-install Job, each with its own RBAC): run by helm
    around an install, not part of it."""
    return "helm.sh/hook" in (doc.get("metadata", {}).get("annotations") or {})


def hook_objects(docs: Iterable[dict[str, Any]], phase: str) -> list[dict[str, Any]]:
    """The hooks that run at ``phase`` (``pre-delete``, ``pre-install``, ...)."""
    return [d for d in docs if is_hook(d) and phase in d["metadata"]["annotations"]["helm.sh/hook"].split(",")]


def service_account_name(docs: Iterable[dict[str, Any]]) -> str:
    """The ServiceAccount the rendered operator Deployment runs as."""
    deployment = operator_deployment(docs)
    return str(deployment["spec"]["template"]["spec"]["serviceAccountName"])


def operator_deployment(docs: Iterable[dict[str, Any]]) -> dict[str, Any]:
    deployments = [
        d
        for d in by_kind(docs, "Deployment")
        if d["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "operator"
    ]
    if len(deployments) != 1:
        raise AssertionError(f"expected one operator Deployment, found {len(deployments)}")
    return deployments[0]


def pod_from_template(owner: dict[str, Any], name: str | None = None) -> dict[str, Any]:
    """A bare Pod made from a Deployment's or StatefulSet's pod template (no controller manager runs in
    the test control plane, so Pod Security admission is exercised by creating the pod directly)."""
    template = owner["spec"]["template"]
    metadata = {
        "name": name or f"{owner['metadata']['name']}-pod",
        "labels": dict(template.get("metadata", {}).get("labels", {})),
        "annotations": dict(template.get("metadata", {}).get("annotations", {})),
    }
    spec = dict(template["spec"])
    if owner["kind"] == "StatefulSet":
        # volumeClaimTemplates become PVCs the controller would create; an emptyDir stands in.
        claims = {c["metadata"]["name"] for c in owner["spec"].get("volumeClaimTemplates", [])}
        spec["volumes"] = [*spec.get("volumes", []), *({"name": c, "emptyDir": {}} for c in sorted(claims))]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


def dump_all(docs: Iterable[dict[str, Any]]) -> str:
    """Objects as one multi-document YAML stream (for ``kubectl apply -f -``)."""
    return yaml.safe_dump_all(list(docs), sort_keys=False)
