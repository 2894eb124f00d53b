"""The Helm chart against a real kube-apiserver: every value set passes a server-side dry run, the
operator, Redis and worker pods are admitted under the "restricted" Pod Security Standard, and
``helm install`` itself succeeds and prints its notes."""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import pytest
import yaml

from helm_chart import (
    CHART,
    VALUE_SETS,
    dump_all,
    helm,
    one,
    operator_deployment,
    operator_rbac_objects,
    pod_from_template,
    render,
    service_account_name,
)
from trawl.dev.controlplane import ControlPlane, KubectlError

RESTRICTED = {
    "pod-security.kubernetes.io/enforce": "restricted",
    "pod-security.kubernetes.io/enforce-version": "latest",
    "pod-security.kubernetes.io/warn": "restricted",
}

# Minimal stand-ins for the Prometheus Operator CRDs: enough for the API server to accept (and
# prune nothing from) the chart's ServiceMonitor, PodMonitor and PrometheusRule. The real CRDs validate more.
_MONITOR_KINDS = {"ServiceMonitor": "servicemonitors", "PodMonitor": "podmonitors", "PrometheusRule": "prometheusrules"}


def _monitor_crd(kind: str, plural: str) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.monitoring.coreos.com"},
        "spec": {
            "group": "monitoring.coreos.com",
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}},
                        }
                    },
                }
            ],
        },
    }


@pytest.fixture(scope="module")
def monitoring_crds(control_plane: ControlPlane) -> None:
    docs = [_monitor_crd(kind, plural) for kind, plural in _MONITOR_KINDS.items()]
    control_plane.kubectl("apply", "--server-side", "--field-manager=trawl-test", "-f", "-", input=dump_all(docs))
    control_plane.kubectl(
        "wait",
        "--for=condition=Established",
        "--timeout=30s",
        *(f"crd/{plural}.monitoring.coreos.com" for plural in _MONITOR_KINDS.values()),
    )


@pytest.fixture
def restricted_namespace(control_plane: ControlPlane, namespace: str) -> str:
    control_plane.kubectl("label", "namespace", namespace, *(f"{k}={v}" for k, v in RESTRICTED.items()))
    return namespace


def _dry_run(control_plane: ControlPlane, docs: list[dict[str, Any]]) -> str:
    out = control_plane.kubectl(
        "apply", "--dry-run=server", "--validate=strict", "-f", "-", input=dump_all(docs), check=False
    )
    assert out.returncode == 0, f"the API server refused the rendered chart:\n{out.stderr}"
    return out.stdout


@pytest.mark.parametrize("value_set", sorted(VALUE_SETS))
def test_value_set_passes_server_side_dry_run(
    control_plane: ControlPlane, namespace: str, monitoring_crds: None, value_set: str
) -> None:
    overrides: dict[str, str] = {}
    if value_set == "namespaced":
        # Roles go into the watched namespaces, which must exist.
        watched = [control_plane.create_namespace(f"watched-{uuid.uuid4().hex[:8]}") for _ in range(2)]
        overrides["watchNamespaces"] = "{" + ",".join(watched) + "}"
    # A unique release name: cluster-scoped objects of several dry runs never meet.
    release = f"t{uuid.uuid4().hex[:6]}"
    docs = render(value_set, namespace=namespace, release=release, set_values=overrides)
    out = _dry_run(control_plane, docs)
    for doc in docs:
        kind = doc["kind"].lower()
        assert f"{kind}" in out.lower() and doc["metadata"]["name"] in out, (doc["kind"], out)
    assert out.count("(server dry run)") == len(docs), out


def _create_pod(control_plane: ControlPlane, namespace: str, pod: dict[str, Any]) -> None:
    out = control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod), check=False)
    assert out.returncode == 0, f"pod {pod['metadata']['name']} refused:\n{out.stderr}"
    assert "would violate PodSecurity" not in out.stderr, out.stderr


def test_operator_and_redis_pods_are_admitted_as_restricted(
    control_plane: ControlPlane, restricted_namespace: str, monitoring_crds: None
) -> None:
    docs = render("metrics", namespace=restricted_namespace, release=f"t{uuid.uuid4().hex[:6]}")
    # The workload policy binds every namespace: it goes with the test, not on into the session's others.
    policy = [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")]
    try:
        # Everything the chart renders, applied for real, without Pod Security warnings for its workloads.
        out = control_plane.kubectl("apply", "-f", "-", input=dump_all(docs))
        assert "would violate PodSecurity" not in out.stderr, out.stderr
        # No controller manager runs here, so create the pods those templates describe directly.
        _create_pod(control_plane, restricted_namespace, pod_from_template(operator_deployment(docs)))
        _create_pod(control_plane, restricted_namespace, pod_from_template(one(docs, "StatefulSet")))
        pods = control_plane.kubectl("get", "pods", "-n", restricted_namespace, "-o", "name").stdout.split()
        assert len(pods) == 2, pods
    finally:
        control_plane.kubectl("delete", "-f", "-", "--ignore-not-found", input=dump_all(policy), check=False)


def test_worker_pod_is_admitted_as_restricted(control_plane: ControlPlane, restricted_namespace: str) -> None:
    deployment_module = pytest.importorskip(
        "trawl.operator.pool.deployment", reason="the operator's worker Deployment builder is not there yet"
    )
    from trawl.api.scrapepool import ScrapePoolSpec

    pool = one(render(namespace=restricted_namespace), "ScrapePool")
    spec = ScrapePoolSpec.model_validate(pool["spec"])
    deployment = deployment_module.worker_deployment(
        namespace=restricted_namespace, pool="default", pool_uid=str(uuid.uuid4()), spec=spec, replicas=1
    )
    deployment["metadata"].pop("ownerReferences", None)  # the pool object does not exist here
    out = control_plane.kubectl("apply", "-f", "-", input=json.dumps(deployment))
    assert "would violate PodSecurity" not in out.stderr, out.stderr
    _create_pod(control_plane, restricted_namespace, pod_from_template(deployment, "worker-0"))


def test_pod_security_is_really_enforced(control_plane: ControlPlane, restricted_namespace: str) -> None:
    """The control case: the same operator pod without its security context is refused."""
    pod = pod_from_template(operator_deployment(render(namespace=restricted_namespace)), "unrestricted")
    pod["spec"].pop("securityContext")
    pod["spec"].pop("serviceAccountName")
    for container in pod["spec"]["containers"]:
        container.pop("securityContext")
    with pytest.raises(KubectlError) as info:
        control_plane.kubectl("create", "-n", restricted_namespace, "-f", "-", input=json.dumps(pod))
    assert 'violates PodSecurity "restricted:latest"' in info.value.stderr


def test_rendered_rbac_lets_the_service_account_do_its_job(control_plane: ControlPlane, namespace: str) -> None:
    """The chart's RBAC, applied for real: the operator's ServiceAccount can do what the operator does
    and nothing more (the full run of the operator as that account lives with the operator tests)."""
    release = f"t{uuid.uuid4().hex[:6]}"
    docs = render(namespace=namespace, release=release)
    control_plane.kubectl("apply", "-f", "-", input=dump_all(operator_rbac_objects(docs)))
    sa = service_account_name(docs)
    kubeconfig = control_plane.service_account_kubeconfig(namespace, sa)

    def can(*args: str) -> bool:
        out = control_plane.kubectl("auth", "can-i", *args, kubeconfig=kubeconfig, check=False)
        return out.stdout.strip() == "yes"

    assert can("patch", "scrapejobs.trawl.dev/status", "-n", "anywhere")
    assert can("create", "deployments.apps", "-n", "anywhere")
    assert can("patch", "deployments.apps", "--subresource=scale", "-n", "anywhere")
    assert can("watch", "secrets", "-n", "anywhere") and can("list", "secrets", "-n", "anywhere")
    assert can("watch", "customresourcedefinitions.apiextensions.k8s.io")
    assert not can("get", "secrets", "-n", "anywhere") and not can("patch", "secrets", "-n", "anywhere")
    assert not can("create", "pods", "-n", "anywhere")
    assert not can("delete", "namespaces")
    assert not can("create", "clusterroles.rbac.authorization.k8s.io")


def test_namespaced_rbac_confines_the_operator(control_plane: ControlPlane, namespace: str) -> None:
    watched = control_plane.create_namespace(f"watched-{uuid.uuid4().hex[:8]}")
    other = control_plane.create_namespace(f"other-{uuid.uuid4().hex[:8]}")
    release = f"t{uuid.uuid4().hex[:6]}"
    docs = render("namespaced", namespace=namespace, release=release, set_values={"watchNamespaces": f"{{{watched}}}"})
    control_plane.kubectl("apply", "-f", "-", input=dump_all(operator_rbac_objects(docs)))
    kubeconfig = control_plane.service_account_kubeconfig(namespace, service_account_name(docs))

    def can(*args: str) -> bool:
        out = control_plane.kubectl("auth", "can-i", *args, kubeconfig=kubeconfig, check=False)
        return out.stdout.strip() == "yes"

    assert can("watch", "secrets", "-n", watched) and can("patch", "scrapepools.trawl.dev/status", "-n", watched)
    assert not can("watch", "secrets", "-n", other) and not can("list", "secrets", "-n", other)
    assert not can("list", "scrapejobs.trawl.dev", "-n", other)
    assert can("list", "namespaces") and can("list", "customresourcedefinitions.apiextensions.k8s.io")


def test_helm_install_and_uninstall(control_plane: ControlPlane, restricted_namespace: str) -> None:
    """A real ``helm install`` into a restricted namespace (CRDs already exist, so helm skips them)."""
    release = f"t{uuid.uuid4().hex[:6]}"
    kube = ["--kubeconfig", str(control_plane.kubeconfig_path), "--namespace", restricted_namespace]
    out = helm("install", release, str(CHART), *kube, "--timeout", "60s", timeout=180)
    assert "STATUS: deployed" in out.stdout, out.stdout
    assert f"kubectl -n {restricted_namespace} get scrapepool default" in out.stdout
    assert "would violate PodSecurity" not in out.stderr, out.stderr
    pool = json.loads(
        control_plane.kubectl("get", "scrapepool", "default", "-n", restricted_namespace, "-o", "json").stdout
    )
    assert pool["spec"]["redis"]["urlSecretRef"]["name"] == f"{release}-trawl-redis"
    # An upgrade keeps the generated Redis password (looked up from the live Secret).
    secret = f"{release}-trawl-redis"
    before = control_plane.kubectl(
        "get", "secret", secret, "-n", restricted_namespace, "-o", "jsonpath={.data.password}"
    ).stdout
    helm("upgrade", release, str(CHART), *kube, "--timeout", "60s", timeout=180)
    after = control_plane.kubectl(
        "get", "secret", secret, "-n", restricted_namespace, "-o", "jsonpath={.data.password}"
    ).stdout
    assert before and before == after
    # Every render that can see the cluster (helm upgrade, Flux's helm-controller, `helm template
    # --dry-run=server`) gives the same Secret: the live password, twice.
    server_side = ["template", release, str(CHART), *kube, "--dry-run=server"]
    rendered = [one([d for d in yaml.safe_load_all(helm(*server_side).stdout) if d], "Secret") for _ in range(2)]
    assert rendered[0] == rendered[1]
    assert base64.b64encode(rendered[0]["stringData"]["password"].encode()).decode() == before
    # No controller manager runs Jobs here, so not the pre-delete hook either (no operator, no pool
    # finalizer to wait for); the hook runs on the real node (tests/e2e).
    helm("uninstall", release, *kube, "--no-hooks", "--timeout", "60s", timeout=180)
    left = control_plane.kubectl("get", "deployments", "-n", restricted_namespace, "-o", "name").stdout.split()
    assert left == [], left
