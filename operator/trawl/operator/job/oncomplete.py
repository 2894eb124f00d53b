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
- **job**: a ``batch/v1`` Job from the template the job names among its pool's ``onCompleteJobs``,
  followed until it succeeds or fails (trawl.operator.job.hookjob: what a job author may and may not
  decide about it).

A hook that ends Failed posts one Warning Event with its reason (``hook_events``).

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
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.egress.addresses import IPNetwork
from trawl.egress.resolver import SafeResolver
from trawl.operator.events import Transition
from trawl.operator.secrets import SecretNotFound, no_secrets, unreadable
from trawl.sinks.base import sign
from trawl.sinks.webhook import Delivery, post_once

from .hookjob import run_job_hook

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
        for key, asked in (("webhook", hooks.get("webhook")), ("job", hooks.get("job") or hooks.get("jobTemplate")))
        if asked
    )


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
    pool: ScrapePoolSpec,
    pool_name: str,
    status: Mapping[str, Any],
    prev: Mapping[str, Any] | None,
    allowed: Sequence[IPNetwork],
    now: datetime,
    read_secret: SecretReader = no_secrets,
    secret_namespace: str | None = None,
) -> dict[str, Any]:
    """The new ``status.onComplete``: each hook acted on once more if due, else carried over.

    ``namespace``: the job's, where its hook Job is created (owned by the job, so the garbage collector
    removes it with the job: an owner must be in its dependent's namespace); ``secret_namespace``: its pool's,
    whose mounted Secrets the webhook's key is one of (default ``namespace``)."""
    out: dict[str, Any] = dict(prev or {})
    if spec.webhook is not None and due(out.get("webhook"), now):
        out["webhook"] = await _webhook(
            namespace, name, uid, spec, status, out.get("webhook") or {}, allowed, now, read_secret,
            secret_namespace or namespace,
        )  # fmt: skip
    if (spec.job is not None or spec.job_template is not None) and due(out.get("job"), now):
        out["job"] = await run_job_hook(
            namespace=namespace,
            name=name,
            uid=uid,
            spec=spec,
            pool=pool,
            pool_name=pool_name,
            status=status,
            prev=out.get("job") or {},
            now=now,
        )
    return out


# The reason of a failed hook's Event when its outcome names none (a webhook's deliveries ran out).
DEFAULT_FAILED_REASON = "OnCompleteFailed"


def hook_events(prev: Mapping[str, Any] | None, new: Mapping[str, Any] | None) -> list[Transition]:
    """One Warning Event per hook that has just ended Failed (none while it stays Failed): its reason, or
    OnCompleteFailed, and its message after the field it concerns (the status keeps the message)."""
    events = []
    for key in ("webhook", "job"):
        before, after = (prev or {}).get(key) or {}, (new or {}).get(key) or {}
        if after.get("state") == "Failed" and before.get("state") != "Failed":
            reason = str(after.get("reason") or DEFAULT_FAILED_REASON)
            events.append(Transition("Warning", reason, f"onComplete.{key}: {after.get('message') or reason}"))
    return events


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
    secret_namespace: str,
) -> dict[str, Any]:
    assert spec.webhook is not None
    attempts = int(prev.get("attempts") or 0) + 1
    base = {"url": spec.webhook.url, "attempts": attempts, "lastTry": format_time(now)}
    secret = None
    if spec.webhook.secret_ref is not None:
        try:
            secret = (await read_secret(secret_namespace, spec.webhook.secret_ref)).encode()
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
