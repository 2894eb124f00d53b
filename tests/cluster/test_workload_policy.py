"""The chart's workload policy (templates/workload-policy.yaml) on a real kube-apiserver: the rendered
ValidatingAdmissionPolicy refuses, at admission, the pools its defaults do not allow (images,
ServiceAccounts, volumes, Secret references, tolerate-all) with its message and lets the others through
(so no expression fails to evaluate), while a pool made before it can still be labelled and deleted. No
operator runs here (nor the controller manager that would write the policy's type-checking status).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from operator_fixtures import pool

from helm_chart import dump_all, render
from trawl.dev.controlplane import ControlPlane
from waits import wait_for

LOADER: dict[str, Any] = {
    "spec": {
        "template": {
            "spec": {"restartPolicy": "Never", "containers": [{"name": "load", "image": "ghcr.io/trawl-dev/trawl:1"}]}
        }
    }
}


def _job_template(**pod: Any) -> list[dict[str, Any]]:
    spec = {**LOADER["spec"]["template"]["spec"], **pod}
    return [{"name": "load", "template": {"spec": {"template": {"spec": spec}}}}]


def _policy_objects(namespace: str) -> list[dict[str, Any]]:
    """The chart's policy and binding, the binding limited to the test's namespace (watchNamespaces), so no
    other test of the session meets it."""
    watch = {"watchNamespaces": f"{{{namespace}}}"}
    docs = render(namespace=namespace, release=f"t{uuid.uuid4().hex[:6]}", set_values=watch)
    objs = [d for d in docs if d["kind"].startswith("ValidatingAdmissionPolicy")]
    assert [d["kind"] for d in objs] == ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    return objs


@pytest.fixture
def policy(control_plane: ControlPlane, namespace: str) -> Iterator[dict[str, Any]]:
    """The chart's policy, applied for real; removed afterwards."""
    objs = _policy_objects(namespace)
    control_plane.kubectl("apply", "-f", "-", input=dump_all(objs))
    try:
        yield objs[0]
    finally:
        control_plane.kubectl("delete", "-f", "-", "--ignore-not-found", input=dump_all(objs), check=False)


def _apply(cp: ControlPlane, namespace: str, obj: dict[str, Any], **kw: Any) -> Any:
    return cp.kubectl("apply", "-n", namespace, "-f", "-", input=json.dumps(obj), check=False, **kw)


def _refused_dry_run(cp: ControlPlane, namespace: str, obj: dict[str, Any], **kw: Any) -> str | None:
    """The policy's refusal of ``obj`` (a server-side dry run: nothing is stored), None if it went through."""
    out = cp.kubectl("create", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(obj), check=False, **kw)
    return out.stderr if out.returncode != 0 and "ValidatingAdmissionPolicy" in out.stderr else None


def test_policy_refuses_what_the_platform_did_not_allow(
    control_plane: ControlPlane, namespace: str, policy: dict[str, Any]
) -> None:
    cp = control_plane
    name = policy["metadata"]["name"]

    # Until the API server has loaded the policy, a server-side dry run of a pool it refuses goes through.
    probe = pool("probe", "redis://127.0.0.1:6379/0")
    probe["spec"]["worker"]["image"] = "evil.example/miner:1"
    message = wait_for("the policy enforced", lambda: _refused_dry_run(cp, namespace, probe), timeout=30)
    assert f"ValidatingAdmissionPolicy '{name}'" in message and "spec.worker.image: only images of" in message

    def case(name: str, worker: dict[str, Any] | None = None, **spec: Any) -> dict[str, Any]:
        obj = pool(name, "redis://127.0.0.1:6379/0", **spec)
        obj["spec"]["worker"].update(worker or {})
        return obj

    refusals = {
        "look-alike image": (case("a", {"image": "ghcr.io/trawl-dev/trawl-evil:1"}), "spec.worker.image"),
        "worker account": (case("b", {"serviceAccountName": "builder"}), "spec.worker.serviceAccountName"),
        "csi driver": (
            case("c", {"volumes": [{"name": "v", "csi": {"driver": "secrets-store.csi.k8s.io"}}]}),
            "spec.worker.volumes",
        ),
        "tolerate all": (case("d", {"tolerations": [{"operator": "Exists"}]}), "tolerations"),
        "job image": (
            case("e", onCompleteJobs=_job_template(containers=[{"name": "x", "image": "evil.example/x:1"}])),
            "spec.onCompleteJobs: only images of",
        ),
        "job account": (case("f", onCompleteJobs=_job_template(serviceAccountName="builder")), "serviceAccountName"),
        "job hostPath": (
            case("g", onCompleteJobs=_job_template(volumes=[{"name": "h", "hostPath": {"path": "/"}}])),
            "spec.onCompleteJobs: only emptyDir",
        ),
    }
    for what, (obj, expected) in refusals.items():
        out = _apply(cp, namespace, obj)
        assert out.returncode != 0 and expected in out.stderr, (what, out.stdout, out.stderr)

    allowed = [
        case("h", {"image": "ghcr.io/trawl-dev/trawl:0.1.0", "serviceAccountName": "default"}),
        case("i", {"image": "ghcr.io/trawl-dev/trawl-browser@sha256:" + "0" * 64}),
        case("j", {"tolerations": [{"key": "dedicated", "operator": "Exists"}]}, onCompleteJobs=_job_template()),
    ]
    for obj in allowed:
        out = _apply(cp, namespace, obj)
        assert out.returncode == 0, (obj["metadata"]["name"], out.stderr)


def test_job_templates_reference_secrets_only_for_who_may_read_them(
    control_plane: ControlPlane, namespace: str, policy: dict[str, Any]
) -> None:
    cp = control_plane
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "pool-author", "namespace": namespace},
        "rules": [{"apiGroups": ["trawl.dev"], "resources": ["scrapepools"], "verbs": ["get", "create", "patch"]}],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "pool-author", "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pool-author"},
        "subjects": [{"kind": "ServiceAccount", "name": "pool-author", "namespace": namespace}],
    }
    cp.kubectl("apply", "-f", "-", input=dump_all([role, binding]))
    author = cp.service_account_kubeconfig(namespace, "pool-author", impersonate=True)
    secret_env = [{"name": "PW", "valueFrom": {"secretKeyRef": {"name": "db", "key": "password"}}}]
    reads = pool(
        "reads",
        "redis://127.0.0.1:6379/0",
        onCompleteJobs=_job_template(
            containers=[{"name": "x", "image": "ghcr.io/trawl-dev/trawl:1", "env": secret_env}]
        ),
    )

    message = wait_for(
        "the policy enforced", lambda: _refused_dry_run(cp, namespace, reads, kubeconfig=author), timeout=30
    )
    assert "may reference Secrets" in message
    out = _apply(cp, namespace, reads)  # the admin may read Secrets: the same pool goes through
    assert out.returncode == 0, out.stderr


def test_a_pool_from_before_the_policy_can_still_be_labelled_and_deleted(
    control_plane: ControlPlane, namespace: str
) -> None:
    cp = control_plane
    early = pool("early", "redis://127.0.0.1:6379/0")
    early["spec"]["worker"]["image"] = "evil.example/miner:1"
    early["metadata"]["finalizers"] = ["trawl.dev/test"]
    assert _apply(cp, namespace, early).returncode == 0
    objs = _policy_objects(namespace)
    cp.kubectl("apply", "-f", "-", input=dump_all(objs))
    try:
        probe = pool("probe", "redis://127.0.0.1:6379/0")
        probe["spec"]["worker"]["image"] = "evil.example/miner:1"
        wait_for("the policy enforced", lambda: _refused_dry_run(cp, namespace, probe), timeout=30)
        # A change of its spec is judged (and refused); its metadata is not.
        changed = cp.kubectl(
            "patch",
            "scrapepool",
            "early",
            "-n",
            namespace,
            "--type=merge",
            "-p",
            '{"spec":{"replicas":2}}',
            check=False,
        )
        assert changed.returncode != 0 and "spec.worker.image" in changed.stderr, changed.stderr
        cp.kubectl("label", "scrapepool", "early", "-n", namespace, "team=data")
        cp.kubectl("delete", "scrapepool", "early", "-n", namespace, "--wait=false")
        cp.kubectl(
            "patch", "scrapepool", "early", "-n", namespace, "--type=merge", "-p", '{"metadata":{"finalizers":null}}'
        )
        wait_for(
            "the pool gone",
            lambda: cp.kubectl("get", "scrapepool", "early", "-n", namespace, check=False).returncode != 0,
        )
    finally:
        cp.kubectl("delete", "-f", "-", "--ignore-not-found", input=dump_all(objs), check=False)
