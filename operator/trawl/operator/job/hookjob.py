"""``spec.onComplete.job``: the Job a finished ScrapeJob runs, from a template its pool offers.

The operator creates the Job with its own credentials, so a job's author must not decide what it runs
or as whom: the pool's author writes the templates (``ScrapePool.spec.onCompleteJobs``), the job names
one and passes parameters, which reach every container as ``TRAWL_PARAM_<NAME>`` beside the job's facts
(``TRAWL_JOB_*``, ``TRAWL_RESULTS_*``, ``TRAWL_COUNT_*``) and nothing else of the pod. An
``onComplete.jobTemplate`` of the earlier API (a whole Job written by the job's author) is never sent to
the API server: the hook is Failed, saying what to use instead.

Every refusal is final (Failed with a reason, no retry): a template the pool does not have, one that
breaks the operator's pod floor (trawl.operator.podfloor), one the API server rejects. The Job once
created is followed until it succeeds or fails. Deciding is pure (``plan``, ``render_job``); the I/O
(create, read) is thin.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from trawl.api.common import format_time
from trawl.api.naming import API_VERSION
from trawl.api.scrapejob import OnCompleteSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.operator import kube
from trawl.operator.podfloor import broken_rules, job_template_pod, operator_service_account, refusal

MAX_ATTEMPTS = 5
NOT_ALLOWED = "JobTemplateNotAllowed"
JOB_TEMPLATE_REFUSED = (
    "onComplete.jobTemplate is not allowed: a ScrapeJob cannot say what a Job runs or as whom, and no Job was "
    "created; use onComplete.job to run one of the Jobs its pool offers (the pool's spec.onCompleteJobs), by "
    "name, with parameters"
)


def job_env(namespace: str, name: str, uid: str, status: Mapping[str, Any]) -> list[dict[str, str]]:
    counts = status.get("counts") or {}
    results = status.get("results") or {}
    values = {
        "TRAWL_JOB_NAME": name,
        "TRAWL_JOB_NAMESPACE": namespace,
        "TRAWL_JOB_UID": uid,
        "TRAWL_JOB_PHASE": str(status.get("phase") or ""),
        "TRAWL_RESULTS_SINK": str(results.get("sink") or ""),
        "TRAWL_RESULTS_LOCATION": str(results.get("location") or ""),
        "TRAWL_RESULTS_MANIFEST": str(results.get("manifest") or ""),
        "TRAWL_RESULTS_COUNT": str(results.get("count") or 0),
        "TRAWL_COUNT_TOTAL": str(counts.get("total") or 0),
        "TRAWL_COUNT_SUCCEEDED": str(counts.get("succeeded") or 0),
        "TRAWL_COUNT_DEAD_LETTERED": str(counts.get("deadLettered") or 0),
    }
    return [{"name": k, "value": v} for k, v in values.items()]


def job_name(name: str) -> str:
    suffix = "-on-complete"
    return name[: 63 - len(suffix)].rstrip("-.") + suffix


def render_job(
    template: Mapping[str, Any],
    namespace: str,
    name: str,
    uid: str,
    status: Mapping[str, Any],
    parameters: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    """The batch/v1 Job: the template's metadata and spec, owned by the ScrapeJob, in its namespace, with the
    job's facts and ``parameters`` added to every container's env (over the template's own of those names)."""
    meta = dict(template.get("metadata") or {})
    spec = json.loads(json.dumps(template.get("spec") or {}))  # a deep copy we may change
    env = job_env(namespace, name, uid, status) + list(parameters or [])
    ours = {x["name"] for x in env}
    pod = (spec.get("template") or {}).get("spec") or {}
    for container in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]:
        own = [e for e in container.get("env") or [] if e.get("name") not in ours]
        container["env"] = own + env
    labels = {**(meta.get("labels") or {}), "trawl.dev/scrapejob": name[:63]}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {
            "name": job_name(name),
            "namespace": namespace,
            "labels": labels,
            "annotations": meta.get("annotations") or {},
            "ownerReferences": [{"apiVersion": API_VERSION, "kind": "ScrapeJob", "name": name, "uid": uid}],
        },
        "spec": spec,
    }


def plan(
    spec: OnCompleteSpec,
    pool: ScrapePoolSpec,
    pool_name: str,
    namespace: str,
    name: str,
    uid: str,
    status: Mapping[str, Any],
    operator_sa: str,
) -> dict[str, Any] | tuple[str, str]:
    """The Job to create, or why none may be: (reason, message)."""
    if spec.job_template is not None:
        return NOT_ALLOWED, JOB_TEMPLATE_REFUSED
    assert spec.job is not None
    wanted = spec.job.template
    found = pool.on_complete_job(wanted)
    if found is None:
        offered = ", ".join(t.name for t in pool.on_complete_jobs or []) or "none"
        return "TemplateNotFound", (
            f"onComplete.job.template: ScrapePool {pool_name} has no onCompleteJobs template {wanted!r} "
            f"(it offers: {offered})"
        )
    body = render_job(found.template, namespace, name, uid, status, spec.job.env())
    rules = broken_rules(job_template_pod(body), operator_sa)
    if rules:
        return "PodNotAllowed", refusal(f"ScrapePool {pool_name}'s onCompleteJobs template {wanted}", rules)
    return body


async def run_job_hook(
    *,
    namespace: str,
    name: str,
    uid: str,
    spec: OnCompleteSpec,
    pool: ScrapePoolSpec,
    pool_name: str,
    status: Mapping[str, Any],
    prev: Mapping[str, Any],
    now: datetime,
) -> dict[str, Any]:
    """The hook's next outcome: follow the Job once it runs, else create it (or say why not)."""
    jname = job_name(name)
    attempts = int(prev.get("attempts") or 0)
    base: dict[str, Any] = {"name": jname, "lastTry": format_time(now), "attempts": attempts}
    if prev.get("state") == "Running":
        return base | await _follow(jname, namespace)
    body = plan(spec, pool, pool_name, namespace, name, uid, status, operator_service_account())
    if isinstance(body, tuple):
        reason, message = body
        return base | {"state": "Failed", "reason": reason, "message": message[:1024]}
    attempts += 1
    base["attempts"] = attempts
    try:
        await kube.call(kube.batch().create_namespaced_job, namespace, body)
    except Exception as exc:
        if kube.is_status(exc, 409):
            return base | {"state": "Running", "message": f"Job {jname} exists"}
        rejected = kube.is_status(exc, 400, 403, 422)
        final = rejected or attempts >= MAX_ATTEMPTS
        return base | {
            "state": "Failed" if final else "Pending",
            **({"reason": "JobRejected" if rejected else "JobNotCreated"} if final else {}),
            "message": f"creating Job {jname}: {kube.api_message(exc)}"[:1024],
        }
    return base | {"state": "Running", "message": f"Job {jname} created"}


async def _follow(jname: str, namespace: str) -> dict[str, Any]:
    try:
        obj = await kube.call(kube.batch().read_namespaced_job, jname, namespace)
    except Exception as exc:
        if kube.is_status(exc, 404):
            return {"state": "Failed", "reason": "JobDeleted", "message": f"Job {jname} was deleted before it finished"}
        return {"state": "Running", "message": f"cannot read Job {jname}: {kube.api_message(exc)}"[:1024]}
    st = obj.status
    for cond in (st.conditions if st is not None else None) or []:
        if cond.status == "True" and cond.type in ("Complete", "Failed"):
            done = {"state": "Succeeded"} if cond.type == "Complete" else {"state": "Failed", "reason": "JobFailed"}
            return done | {"message": f"Job {jname}: {cond.type} {cond.reason or ''}".strip()}
    return {"state": "Running", "message": f"Job {jname} is running"}
