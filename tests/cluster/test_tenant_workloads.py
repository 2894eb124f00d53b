"""Issue 32, "workloads only as the platform allows": what a job author (the tenant: ScrapeJob and
CronScrapeJob rights only) or a pool author writes never runs with an identity or privileges the
platform did not grant.

- A tenant's ``onComplete.jobTemplate`` (the operator's ServiceAccount, privileged, hostPath /) creates
  no Job, directly or through a CronScrapeJob: the hook is Failed with the reason on the job's status and
  one Warning Event.
- A pool whose worker pod or onComplete template breaks the operator's floor (its own ServiceAccount,
  privileged) is Stalled and nothing is created.
- A Deployment named ``<pool>-workers`` that the pool does not own is left alone, and deleting the pool
  does not delete it.
- ``worker.env`` cannot set the operator's ``TRAWL_*`` variables.
About 2-3 minutes (the CronScrapeJob waits for its next minute).
"""

from __future__ import annotations

import json
from typing import Any

from operator_fixtures import apply, condition, events_for, exists, get, job, pool, wait_complete

from trawl.api.naming import deployment_name, pool_selector
from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from waits import wait_for

OPERATOR_SA = "trawl-operator"  # the operator fixture's ServiceAccount, as the chart's is the release's

# The security review's template: the operator's token, a privileged container, the node's root filesystem.
TAKEOVER: dict[str, Any] = {
    "spec": {
        "backoffLimit": 0,
        "template": {
            "spec": {
                "serviceAccountName": OPERATOR_SA,
                "restartPolicy": "Never",
                "hostPID": True,
                "containers": [
                    {
                        "name": "own",
                        "image": "busybox",
                        "command": ["sh", "-c", "cat /var/run/secrets/kubernetes.io/serviceaccount/token"],
                        "securityContext": {"privileged": True},
                        "volumeMounts": [{"name": "host", "mountPath": "/host"}],
                    }
                ],
                "volumes": [{"name": "host", "hostPath": {"path": "/"}}],
            }
        },
    }
}


def _batch_jobs(cp: ControlPlane, namespace: str) -> list[str]:
    """Every batch/v1 Job of the namespace, with the pod identity and privileges its template asks for."""
    items = json.loads(cp.kubectl("get", "jobs", "-n", namespace, "-o", "json").stdout)["items"]
    out = []
    for item in items:
        pod = item["spec"]["template"]["spec"]
        privileged = [c["name"] for c in pod["containers"] if (c.get("securityContext") or {}).get("privileged")]
        host = [v["name"] for v in pod.get("volumes") or [] if "hostPath" in v]
        out.append(
            f"{item['metadata']['name']}: serviceAccountName={pod.get('serviceAccountName')} "
            f"privileged={privileged} hostPath={host}"
        )
    return out


def _job_hook(cp: ControlPlane, name: str, namespace: str) -> Any:
    return ((get(cp, "scrapejob", name, namespace).get("status") or {}).get("onComplete") or {}).get("job")


def _refused_with_reason(cp: ControlPlane, namespace: str, name: str, diag: Any) -> None:
    """The job's hook is Failed, says why and what to use instead, in one Warning Event; no Job exists."""
    hook = wait_for("status.onComplete.job", lambda: _job_hook(cp, name, namespace), timeout=60, diag=diag)
    created = _batch_jobs(cp, namespace)
    assert not created, f"a Job was created from the tenant's jobTemplate: {created}"
    assert (hook["state"], hook.get("reason")) == ("Failed", "JobTemplateNotAllowed"), hook
    assert "onComplete.job" in hook["message"] and "onCompleteJobs" in hook["message"], hook

    def warning() -> list[dict[str, Any]]:
        return [e for e in events_for(cp, namespace, name) if e["reason"] == "JobTemplateNotAllowed"]

    events = wait_for("the JobTemplateNotAllowed Event", warning, timeout=30, diag=diag)
    assert len(events) == 1 and events[0]["type"] == "Warning" and events[0].get("count", 1) == 1, events
    assert events[0]["message"] == f"onComplete.job: {hook['message']}"


def test_tenant_job_template_creates_no_job(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
    tenant: Any,
) -> None:
    apply(control_plane, pool("shared", redis_server.url), namespace=namespace)  # the pool author's
    urls = list(bookstore.expected())[:1]
    tenant.apply(job("takeover", "shared", urls, onComplete={"jobTemplate": TAKEOVER}))
    wait_complete(control_plane, "takeover", namespace, 120, operator.log_tail)
    _refused_with_reason(control_plane, namespace, "takeover", operator.log_tail)
    # Nothing was tried: the operator never sends a tenant's template to the API server.
    assert _job_hook(control_plane, "takeover", namespace)["attempts"] == 0


def test_tenant_cron_job_template_creates_no_job(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
    tenant: Any,
) -> None:
    apply(control_plane, pool("shared", redis_server.url), namespace=namespace)
    urls = list(bookstore.expected())[:1]
    cron = {
        "apiVersion": "trawl.dev/v1alpha1",
        "kind": "CronScrapeJob",
        "metadata": {"name": "nightly"},
        "spec": {
            "schedule": "* * * * *",
            "concurrencyPolicy": "Forbid",
            "jobTemplate": {"spec": {"pool": "shared", "urls": urls, "onComplete": {"jobTemplate": TAKEOVER}}},
        },
    }
    tenant.apply(cron)

    def created() -> str | None:
        out = control_plane.kubectl(
            "get", "sj", "-n", namespace, "-l", "trawl.dev/cronscrapejob=nightly", "-o", "name"
        ).stdout.split()
        return out[0].split("/", 1)[1] if out else None

    name = wait_for("the cron's first ScrapeJob", created, timeout=120, interval=1, diag=operator.log_tail)
    tenant.kubectl("patch", "csj", "nightly", "--type=merge", "-p", '{"spec":{"suspend":true}}')
    wait_complete(control_plane, name, namespace, 120, operator.log_tail)
    _refused_with_reason(control_plane, namespace, name, operator.log_tail)


def _stalled(cp: ControlPlane, name: str, namespace: str) -> dict[str, Any] | None:
    obj = get(cp, "scrapepool", name, namespace)
    cond = condition(obj, "Stalled")
    return cond if cond and cond["status"] == "True" else None


def _observed(cp: ControlPlane, name: str, namespace: str) -> bool:
    return (get(cp, "scrapepool", name, namespace).get("status") or {}).get("observedGeneration", -1) >= 1


def test_pool_breaking_the_floor_creates_nothing(
    control_plane: ControlPlane, namespace: str, operator: Any, redis_server: RedisServer
) -> None:
    as_operator = pool("as-operator", redis_server.url)
    as_operator["spec"]["worker"]["serviceAccountName"] = OPERATOR_SA
    apply(control_plane, as_operator, namespace=namespace)
    wait_for("the pool observed", lambda: _observed(control_plane, "as-operator", namespace), diag=operator.log_tail)
    assert not exists(control_plane, "deployment", "as-operator-workers", namespace), (
        "a worker Deployment runs as the operator's ServiceAccount"
    )
    cond = wait_for("Stalled", lambda: _stalled(control_plane, "as-operator", namespace), diag=operator.log_tail)
    assert cond["reason"] == "PodNotAllowed" and OPERATOR_SA in cond["message"], cond

    template = json.loads(json.dumps(TAKEOVER))
    template["spec"]["template"]["spec"].pop("serviceAccountName")
    privileged = pool("privileged", redis_server.url, onCompleteJobs=[{"name": "load", "template": template}])
    apply(control_plane, privileged, namespace=namespace)
    cond = wait_for("Stalled", lambda: _stalled(control_plane, "privileged", namespace), diag=operator.log_tail)
    assert cond["reason"] == "PodNotAllowed" and "onCompleteJobs[load]" in cond["message"], cond
    assert "privileged" in cond["message"], cond
    assert not exists(control_plane, "deployment", "privileged-workers", namespace)
    assert _batch_jobs(control_plane, namespace) == []


def test_pool_leaves_a_deployment_it_does_not_own(
    control_plane: ControlPlane, namespace: str, operator: Any, redis_server: RedisServer
) -> None:
    # Someone else's Deployment under the name (and even the selector) the pool's workers would get.
    selector = pool_selector("victim")
    theirs = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": deployment_name("victim"), "labels": {"team": "other"}},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": selector},
                "spec": {"containers": [{"name": "app", "image": "example/app:1"}]},
            },
        },
    }
    apply(control_plane, theirs, namespace=namespace)
    before = get(control_plane, "deployment", "victim-workers", namespace)
    apply(control_plane, pool("victim", redis_server.url), namespace=namespace)
    wait_for("the pool observed", lambda: _observed(control_plane, "victim", namespace), diag=operator.log_tail)
    after = get(control_plane, "deployment", "victim-workers", namespace)
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], (
        f"the pool changed a Deployment it does not own: ownerReferences={after['metadata'].get('ownerReferences')}"
    )
    cond = wait_for("Stalled", lambda: _stalled(control_plane, "victim", namespace), diag=operator.log_tail)
    assert cond["reason"] == "DeploymentNotOwned" and "victim-workers" in cond["message"], cond
    wait_for(  # the Event is posted after the status patch
        "the DeploymentNotOwned Event",
        lambda: any(e["reason"] == "DeploymentNotOwned" for e in events_for(control_plane, namespace, "victim")),
        30,
    )

    control_plane.kubectl("delete", "scrapepool", "victim", "-n", namespace, "--wait=true", "--timeout=60s")
    left = get(control_plane, "deployment", "victim-workers", namespace)
    assert left["metadata"]["uid"] == before["metadata"]["uid"], "deleting the pool deleted their Deployment"
    assert left["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_worker_env_cannot_set_the_operators_variables(control_plane: ControlPlane, namespace: str) -> None:
    # TRAWL_QUEUE_PREFIX would point the workers at another namespace's keys on a shared Redis.
    bad = pool("borrowed", "redis://127.0.0.1:6379/0")
    bad["spec"]["worker"]["env"] = [{"name": "TRAWL_QUEUE_PREFIX", "value": "trawl:other-team/pool"}]
    out = control_plane.kubectl(
        "apply", "-n", namespace, "-f", "-", input=json.dumps(bad), check=False
    )  # fmt: skip
    assert out.returncode != 0, "a pool setting TRAWL_QUEUE_PREFIX in worker.env was accepted"
    assert "TRAWL_" in out.stderr and "worker.env" in out.stderr, out.stderr
    assert not exists(control_plane, "scrapepool", "borrowed", namespace)
