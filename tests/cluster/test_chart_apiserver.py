"""The Helm chart against a real kube-apiserver: every value set passes a server-side dry run, the
operator, Redis, worker and hook pods are admitted under the "restricted" Pod Security Standard, and
``helm install`` itself succeeds with its hook and prints its notes."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import pytest

from helm_chart import (
    CHART,
    VALUE_SETS,
    dump_all,
    helm,
    hook_objects,
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
        _create_pod(
            control_plane, restricted_namespace, pod_from_template(one(hook_objects(docs, "pre-install"), "Job"))
        )
        pods = control_plane.kubectl("get", "pods", "-n", restricted_namespace, "-o", "name").stdout.split()
        assert len(pods) == 3, pods
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


class HookJobs:
    """Stands in for the Job controller and the kubelet for the Jobs created in one namespace (no controller
    manager runs here): each new Job's command runs in this process's environment (the `trawl` of this tree)
    as the Job's ServiceAccount, so its RBAC applies, and its outcome is written on the Job's status as the
    Job controller writes it, so `helm install` and `helm upgrade` run their hooks as on a cluster."""

    def __init__(self, control_plane: ControlPlane, namespace: str) -> None:
        self.cp, self.namespace = control_plane, namespace
        self.runs: list[tuple[str, int, str]] = []  # (Job, exit code, output)
        self._seen: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> HookJobs:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def _loop(self) -> None:
        while not self._stop.wait(0.2):
            out = self.cp.kubectl("get", "jobs", "-n", self.namespace, "-o", "json", check=False)
            for job in json.loads(out.stdout or '{"items": []}')["items"]:
                if job["metadata"]["uid"] not in self._seen:
                    self._seen.add(job["metadata"]["uid"])
                    self._run(job)

    def _run(self, job: dict[str, Any]) -> None:
        pod = job["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert container["command"] == ["trawl"], container["command"]
        kubeconfig = self.cp.service_account_kubeconfig(self.namespace, pod["serviceAccountName"])
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        argv = [sys.executable, "-m", "trawl.cli", *container["args"]]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
        self.runs.append((job["metadata"]["name"], done.returncode, done.stdout + done.stderr))
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        ended = ("SuccessCriteriaMet", "Complete") if done.returncode == 0 else ("FailureTarget", "Failed")
        status = {
            "startTime": now,
            **({"completionTime": now, "succeeded": 1} if done.returncode == 0 else {"failed": 1}),
            "conditions": [
                {"type": t, "status": "True", "lastTransitionTime": now, "lastProbeTime": now, "reason": "HookJobs"}
                for t in ended
            ],
        }
        self.cp.kubectl(
            "patch", "job", job["metadata"]["name"], "-n", self.namespace,
            "--subresource=status", "--type=merge", "-p", json.dumps({"status": status}),
        )  # fmt: skip


def _secret(control_plane: ControlPlane, namespace: str, name: str) -> dict[str, Any]:
    out = control_plane.kubectl("get", "secret", name, "-n", namespace, "-o", "json")
    secret: dict[str, Any] = json.loads(out.stdout)
    return secret


def test_helm_install_and_uninstall(control_plane: ControlPlane, restricted_namespace: str) -> None:
    """A real ``helm install`` into a restricted namespace (CRDs already exist, so helm skips them), its
    pre-install hook making the Redis Secret in the cluster; ``helm upgrade`` keeps the password (the
    pre-upgrade hook finds the Secret and keeps it), no render holds one, ``helm uninstall`` leaves it."""
    release = f"t{uuid.uuid4().hex[:6]}"
    ns = restricted_namespace
    kube = ["--kubeconfig", str(control_plane.kubeconfig_path), "--namespace", ns]
    secret = f"{release}-trawl-redis"
    with HookJobs(control_plane, ns) as jobs:
        out = helm("install", release, str(CHART), *kube, "--timeout", "60s", timeout=180)
        assert "STATUS: deployed" in out.stdout, out.stdout
        assert f"kubectl -n {ns} get scrapepool default" in out.stdout
        assert "would violate PodSecurity" not in out.stderr, out.stderr
        assert [(name, code) for name, code, _ in jobs.runs] == [(f"{release}-trawl-redis-secret", 0)], jobs.runs
        assert f"Secret {ns}/{secret} created with keys password, url" in jobs.runs[0][2]
        pool = json.loads(control_plane.kubectl("get", "scrapepool", "default", "-n", ns, "-o", "json").stdout)
        assert pool["spec"]["redis"]["urlSecretRef"]["name"] == secret
        made = _secret(control_plane, ns, secret)
        password = base64.b64decode(made["data"]["password"]).decode()
        assert len(password) == 32 and password.isalnum()
        url = f"redis://:{password}@{release}-trawl-redis.{ns}.svc:6379/0"
        assert base64.b64decode(made["data"]["url"]).decode() == url
        labels = made["metadata"]["labels"]
        assert labels["trawl.dev/secret"] == "true" and "app.kubernetes.io/instance" not in labels
        # The hook's Job, ServiceAccount and Role went with it (hook-succeeded).
        assert control_plane.kubectl("get", "jobs,sa,roles", "-n", ns, "-o", "name").stdout.count("redis-secret") == 0

        helm("upgrade", release, str(CHART), *kube, "--timeout", "60s", timeout=180)
        assert [code for _, code, _ in jobs.runs] == [0, 0], jobs.runs
        assert f"Secret {ns}/{secret} kept" in jobs.runs[1][2]
        assert _secret(control_plane, ns, secret)["data"] == made["data"]
    # Every render, even one that sees the cluster, is the same and holds no Secret and no password.
    server_side = ["template", release, str(CHART), *kube, "--dry-run=server"]
    rendered = [helm(*server_side).stdout for _ in range(2)]
    assert rendered[0] == rendered[1]
    assert "kind: Secret" not in rendered[0] and password not in rendered[0]
    # No controller manager runs Jobs here, so not the pre-delete hook either (no operator, no pool
    # finalizer to wait for); the hook runs on the real node (tests/e2e).
    helm("uninstall", release, *kube, "--no-hooks", "--timeout", "60s", timeout=180)
    left = control_plane.kubectl("get", "deployments", "-n", ns, "-o", "name").stdout.split()
    assert left == [], left
    # Not the release's: a reinstall finds the same password.
    assert _secret(control_plane, ns, secret)["data"] == made["data"]


def test_the_redis_secret_hook_makes_it_once_keeps_it_and_can_touch_no_other_secret(
    control_plane: ControlPlane, namespace: str
) -> None:
    """The hook's command with the hook's own RBAC, applied for real: it creates the Secret once and keeps
    its values on every later run; a Secret an older chart rendered (no label) keeps its password and gets
    the label; the hook's ServiceAccount can read or change no other Secret."""
    release = f"t{uuid.uuid4().hex[:6]}"
    docs = render(namespace=namespace, release=release)
    hooks = hook_objects(docs, "pre-install")
    control_plane.kubectl("apply", "-f", "-", input=dump_all(d for d in hooks if d["kind"] != "Job"))
    (container,) = one(hooks, "Job")["spec"]["template"]["spec"]["containers"]
    sa = one(hooks, "ServiceAccount")["metadata"]["name"]
    kubeconfig = control_plane.service_account_kubeconfig(namespace, sa)
    secret = f"{release}-trawl-redis"

    def ensure() -> str:
        argv = [sys.executable, "-m", "trawl.cli", *container["args"]]
        env = {**os.environ, "KUBECONFIG": str(kubeconfig)}
        done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=120, check=False)
        assert done.returncode == 0, done.stdout + done.stderr
        return done.stdout

    def can(*args: str) -> bool:
        out = control_plane.kubectl("auth", "can-i", *args, "-n", namespace, kubeconfig=kubeconfig, check=False)
        return out.stdout.strip() == "yes"

    assert "created" in ensure()
    first = _secret(control_plane, namespace, secret)
    assert "kept" in ensure() and "kept" in ensure()
    assert _secret(control_plane, namespace, secret)["data"] == first["data"]
    assert can("get", f"secret/{secret}") and can("patch", f"secret/{secret}") and can("create", "secrets")
    assert not can("get", "secret/another") and not can("list", "secrets") and not can("patch", "secret/another")
    assert not can("delete", f"secret/{secret}") and not can("update", f"secret/{secret}")

    # An install of an older chart: Helm rendered the Secret, without the label the operator now reads.
    control_plane.kubectl("label", "secret", secret, "-n", namespace, "trawl.dev/secret-")
    assert "label trawl.dev/secret added" in ensure()
    adopted = _secret(control_plane, namespace, secret)
    assert adopted["data"] == first["data"] and adopted["metadata"]["labels"]["trawl.dev/secret"] == "true"
