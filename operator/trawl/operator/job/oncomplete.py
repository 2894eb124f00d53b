"""``spec.onComplete``: what runs after a job finishes, and its outcome on ``status.onComplete``.

Two hooks, each run once per job (idempotent across passes and operator restarts, because the outcome
is read back from the status this module wrote):

- **webhook**: one POST of a CloudEvents 1.0 structured JSON event (``dev.trawl.scrapejob.finished``)
  with the job's name, phase, counts and result location, HMAC-SHA256-signed like the webhook sink
  (``X-Trawl-Signature``), the key read from the Secret the hook names (one the pool mounts and
  declares for it, checked at acceptance). The event id is stable (the job's UID), so a receiver can
  drop a repeated delivery. Retried with backoff for a bounded number of attempts; a refused address
  (the one address rule, the pool's ``worker.allowedCidrs``) and a redirect are final, never followed
  (:func:`trawl.sinks.webhook.post_once`, shared with the webhook sink).
- **jobTemplate**: a ``batch/v1`` Job created from the template, owned by the ScrapeJob, with the
  job's name, result location and counts in every container's environment (``TRAWL_*``). Its
  progress is followed until it succeeds or fails. A template the API server rejects is Failed with
  the API server's message.

The decisions (what to do next, given the previous outcome and the clock) are pure functions; the
I/O (POST, create, read) is thin.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from datetime import datetime
from typing import Any

import aiohttp

from trawl.api.common import SecretKeyRef, format_time
from trawl.api.naming import API_VERSION
from trawl.api.scrapejob import OnCompleteSpec
from trawl.egress.addresses import IPNetwork
from trawl.egress.resolver import SafeResolver
from trawl.operator import kube
from trawl.operator.events import Transition
from trawl.operator.secrets import SecretNotFound, no_secrets, unreadable
from trawl.sinks.base import sign
from trawl.sinks.webhook import Delivery, post_once

MAX_ATTEMPTS = 5
JOB_POLL_SECONDS = 10.0
EVENT_TYPE = "dev.trawl.scrapejob.finished"
DONE = ("Succeeded", "Failed")

SecretReader = Callable[[str, SecretKeyRef], Awaitable[str]]


def settled(on_complete: Mapping[str, Any] | None, spec: Mapping[str, Any]) -> bool:
    """True when every hook the spec asks for has a final outcome (no more passes are needed for it)."""
    hooks = spec.get("onComplete") or {}
    state = on_complete or {}
    return all(
        (state.get(key) or {}).get("state") in DONE
        for key, asked in (("webhook", hooks.get("webhook")), ("job", hooks.get("jobTemplate")))
        if asked
    )


def hook_events(prev: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[Transition]:
    """One Warning Event when a hook has just failed for good (its status keeps the message; no Event
    while it stays Failed)."""
    events = []
    for key, field in (("webhook", "onComplete.webhook"), ("job", "onComplete.jobTemplate")):
        before, after = (prev or {}).get(key) or {}, (new or {}).get(key) or {}
        if after.get("state") == "Failed" and before.get("state") != "Failed":
            events.append(Transition("Warning", "OnCompleteFailed", f"{field}: {after.get('message', '')}"))
    return events


def due(prev: Mapping[str, Any] | None, now: datetime, base: float = 2.0) -> bool:
    """Whether a hook should act on this pass: not finished, and its backoff since the last try spent."""
    if not prev:
        return True
    if prev.get("state") in DONE:
        return False
    last = prev.get("lastTry")
    if not last:
        return True
    wait = JOB_POLL_SECONDS if prev.get("state") == "Running" else base ** int(prev.get("attempts") or 0)
    return (now - datetime.fromisoformat(str(last).replace("Z", "+00:00"))).total_seconds() >= wait


def event(namespace: str, name: str, uid: str, status: Mapping[str, Any], now: datetime) -> dict[str, Any]:
    """The CloudEvents 1.0 structured-mode event for a finished job."""
    return {
        "specversion": "1.0",
        "type": EVENT_TYPE,
        "source": f"/apis/{API_VERSION}/namespaces/{namespace}/scrapejobs/{name}",
        "id": f"{uid}/finished",
        "time": format_time(now),
        "subject": name,
        "datacontenttype": "application/json",
        "data": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "phase": status.get("phase"),
            "completionTime": status.get("completionTime"),
            "counts": status.get("counts"),
            "results": status.get("results"),
        },
    }


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
    template: Mapping[str, Any], namespace: str, name: str, uid: str, status: Mapping[str, Any]
) -> dict[str, Any]:
    """The batch/v1 Job: the template's metadata and spec, owned by the ScrapeJob, TRAWL_* env added."""
    meta = dict(template.get("metadata") or {})
    spec = json.loads(json.dumps(template.get("spec") or {}))  # a deep copy we may change
    env = job_env(namespace, name, uid, status)
    pod = (spec.get("template") or {}).get("spec") or {}
    for container in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]:
        own = [e for e in container.get("env") or [] if e.get("name") not in {x["name"] for x in env}]
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


async def post_event(
    url: str, body: bytes, secret: bytes | None, allowed: Sequence[IPNetwork], seconds: float = 15.0
) -> Delivery:
    """POST the event once, as the webhook sink POSTs a batch (address rule, no redirect)."""
    headers = {"Content-Type": "application/cloudevents+json; charset=utf-8", "User-Agent": "trawl-operator"}
    if secret is not None:
        headers["X-Trawl-Signature"] = sign(secret, body)
    connector = aiohttp.TCPConnector(resolver=SafeResolver(tuple(allowed)), limit=2)
    async with aiohttp.ClientSession(connector=connector, trust_env=False) as session:
        return await post_once(session, url, body, headers, allowed=allowed, seconds=seconds)


async def run_hooks(
    *,
    namespace: str,
    name: str,
    uid: str,
    spec: OnCompleteSpec,
    status: Mapping[str, Any],
    prev: Mapping[str, Any] | None,
    allowed: Sequence[IPNetwork],
    now: datetime,
    read_secret: SecretReader = no_secrets,
) -> dict[str, Any]:
    """The new ``status.onComplete``: each hook acted on once more if due, else carried over."""
    out: dict[str, Any] = dict(prev or {})
    if spec.webhook is not None and due(out.get("webhook"), now):
        out["webhook"] = await _webhook(
            namespace, name, uid, spec, status, out.get("webhook") or {}, allowed, now, read_secret
        )
    if spec.job_template is not None and due(out.get("job"), now):
        out["job"] = await _job(namespace, name, uid, spec.job_template, status, out.get("job") or {}, now)
    return out


async def _webhook(
    namespace: str,
    name: str,
    uid: str,
    spec: OnCompleteSpec,
    status: Mapping[str, Any],
    prev: Mapping[str, Any],
    allowed: Sequence[IPNetwork],
    now: datetime,
    read_secret: SecretReader,
) -> dict[str, Any]:
    assert spec.webhook is not None
    attempts = int(prev.get("attempts") or 0) + 1
    base = {"url": spec.webhook.url, "attempts": attempts, "lastTry": format_time(now)}
    secret = None
    if spec.webhook.secret_ref is not None:
        try:
            secret = (await read_secret(namespace, spec.webhook.secret_ref)).encode()
        except SecretNotFound:
            retry = attempts < MAX_ATTEMPTS
            message = f"onComplete.webhook.secretRef: {unreadable(spec.webhook.secret_ref)}"
            return base | {"state": "Pending" if retry else "Failed", "message": message}
    body = json.dumps(event(namespace, name, uid, status, now), separators=(",", ":"), default=str).encode()
    outcome = await post_event(spec.webhook.url, body, secret, allowed)
    if outcome.delivered:
        return base | {"state": "Succeeded", "message": outcome.message}
    final = not outcome.retry or attempts >= MAX_ATTEMPTS
    return base | {"state": "Failed" if final else "Pending", "message": outcome.message[:1024]}


async def _job(
    namespace: str,
    name: str,
    uid: str,
    template: Mapping[str, Any],
    status: Mapping[str, Any],
    prev: Mapping[str, Any],
    now: datetime,
) -> dict[str, Any]:
    jname = job_name(name)
    attempts = int(prev.get("attempts") or 0)
    base: dict[str, Any] = {"name": jname, "lastTry": format_time(now), "attempts": attempts}
    if prev.get("state") == "Running":
        try:
            obj = await kube.call(kube.batch().read_namespaced_job, jname, namespace)
        except Exception as exc:
            if kube.is_status(exc, 404):
                return base | {"state": "Failed", "message": f"Job {jname} was deleted before it finished"}
            return base | {"state": "Running", "message": f"cannot read Job {jname}: {exc}"[:1024]}
        st = obj.status
        for cond in (st.conditions if st is not None else None) or []:
            if cond.status == "True" and cond.type in ("Complete", "Failed"):
                state = "Succeeded" if cond.type == "Complete" else "Failed"
                return base | {"state": state, "message": f"Job {jname}: {cond.type} {cond.reason or ''}".strip()}
        return base | {"state": "Running", "message": f"Job {jname} is running"}
    attempts += 1
    base["attempts"] = attempts
    body = render_job(template, namespace, name, uid, status)
    try:
        await kube.call(kube.batch().create_namespaced_job, namespace, body)
    except Exception as exc:
        if kube.is_status(exc, 409):
            return base | {"state": "Running", "message": f"Job {jname} exists"}
        permanent = kube.is_status(exc, 422) or kube.is_status(exc, 400) or attempts >= MAX_ATTEMPTS
        message = getattr(exc, "body", None) or str(exc)
        return base | {
            "state": "Failed" if permanent else "Pending",
            "message": f"creating Job {jname}: {message}"[:1024],
        }
    return base | {"state": "Running", "message": f"Job {jname} created"}
