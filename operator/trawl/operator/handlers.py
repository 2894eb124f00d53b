# kopf types handlers as Protocols listing every keyword it may pass; handlers that name only
# what they use are correct at runtime (kopf passes **kwargs) but not those Protocols.
# mypy: disable-error-code="arg-type"
"""kopf registrations every kind shares, and what the kinds' handlers share.

Each kind registers its own handlers (job/handlers.py, pool/handlers.py, cron/handlers.py): thin,
level-triggered, delegating to its reconcile module. They return nothing (kopf would otherwise write
return values into status) and post Events for transitions. Registered here: kopf's settings
(startup), the cleanup, and the indexes, which kopf hands to handlers as keyword arguments named
after the index functions. kopf knows a handler by its function's name (``__qualname__``, stored in
the ``kopf.trawl.dev`` annotations of every object): a renamed handler or index is a new one to kopf.

kopf registers on import: trawl.operator.main imports this module and every kind's handlers.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import kopf

from trawl.api.naming import FINALIZER, GROUP, LABEL_CRON, LABEL_SECRET, SECRET_SELECTOR, VERSION

from . import metrics
from .connections import RedisConnections
from .events import Transition
from .indexes import controller_uid, job_pool_key, pool_entry, pool_index_entry
from .job.status import status_changed
from .locks import ObjectLocks
from .problems import Problem, classify_error
from .secrets import secret_index_entry

log = logging.getLogger("trawl.operator")

JOBS, POOLS, CRONS = "scrapejobs", "scrapepools", "cronscrapejobs"

# A timer whose pass failed (API server or Redis unreachable) runs again after this, not after kopf's
# default 60 s: status and scaling converge within seconds of any outage's end.
TIMER_BACKOFF_SECONDS = 2.0

connections = RedisConnections()
_locks = ObjectLocks()
_last_status: dict[str, dict[str, Any]] = {}  # ScrapePool/CronScrapeJob uid -> the status last derived


def object_lock(uid: str) -> AbstractAsyncContextManager[None]:
    """The object's lock: a timer and an event handler may run at once for one object; a reconcile must
    not interleave."""
    return _locks.hold(uid)


def previous_status(uid: str, stored: Mapping[str, Any]) -> dict[str, Any]:
    """The status a pool or cron pass derives from: what this process last derived, when it has.

    kopf applies our status patch after the handler returns and sees it only when the watch
    delivers it; a pass in between (the create handler and the first timer tick) would derive from
    the older copy and repeat transitions, and with them their Events."""
    return dict(_last_status.get(uid) or stored)


def derived_status(uid: str, status: dict[str, Any]) -> None:
    """Remember what a pool or cron pass derived (see previous_status)."""
    _last_status[uid] = status


def forget_object(uid: str) -> None:
    """A deleted object's last derived status goes (its lock goes with its last holder)."""
    _last_status.pop(uid, None)


def write_status(patch: kopf.Patch, current: Mapping[str, Any], new: dict[str, Any], kind: str) -> None:
    """Through ``patch.fns`` (a JSON patch guarded by resourceVersion), only when it changes the status."""
    if not status_changed(current, new):
        return

    def apply(body: Any) -> None:
        body.setdefault("status", {}).update(new)

    patch.fns.append(apply)
    metrics.STATUS_PATCHES.labels(kind=kind).inc()


def unexpected(kind: str, meta: Any, exc: Exception) -> Problem:
    """An error no reconcile step anticipated, as the problem for the object's status.

    Logged as one line: the object's status and Event carry it, and the timer's next pass is the
    bounded retry, so a traceback every few seconds would only bury the log."""
    problem = classify_error(exc)
    log.warning("%s %s/%s: %s: %s", kind, meta.namespace, meta.name, *problem)
    metrics.RECONCILE_ERRORS.labels(kind=kind, reason=problem.reason).inc()
    return problem


def post(body: Any, events: list[Transition]) -> None:
    for event in events:
        kopf.event(body, type=event.type, reason=event.reason, message=event.message[:1024])


@kopf.on.startup()
async def configure(settings: kopf.OperatorSettings, **_: Any) -> None:
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix="kopf.trawl.dev")
    settings.persistence.diffbase_storage = kopf.AnnotationsDiffBaseStorage(
        prefix="kopf.trawl.dev", key="last-handled-configuration"
    )
    settings.persistence.finalizer = FINALIZER
    # Only explicit Events: kopf's per-handler "succeeded" messages would flood the namespace.
    settings.posting.level = logging.WARNING
    settings.posting.reporting_component = "trawl-operator"
    # A watch that goes silent (network partition, idle LB) is restarted rather than trusted.
    settings.watching.server_timeout = 300
    settings.watching.client_timeout = 330
    settings.watching.connect_timeout = 30
    settings.networking.request_timeout = 60
    # The Secret watch asks the API server for the labelled Secrets only: the others (every team's,
    # Helm's releases) never reach this process. RBAC cannot say as much (list/watch is all or nothing).
    settings.watching.label_selectors["v1", "secrets"] = SECRET_SELECTOR
    settings.batching.error_delays = [1, 2, 5, 10, 30, 60]


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    await connections.close()


# ---------------------------------------------------------------- indexes


@kopf.index(GROUP, VERSION, POOLS)
def pool_index(
    namespace: str, name: str, spec: Mapping[str, Any], meta: Mapping[str, Any], status: Mapping[str, Any], **_: Any
) -> Any:
    return {(namespace, name): pool_entry(spec, meta["uid"], status, meta.get("generation"))}


@kopf.index(GROUP, VERSION, JOBS)
def jobs_by_pool(namespace: str, name: str, spec: Mapping[str, Any], status: Mapping[str, Any], **_: Any) -> Any:
    # An index function that raises drops the object from the index (kopf logs and moves on): the
    # pool could then be deleted under a running job. So this only reads, it never trusts the spec.
    # Keyed by the pool's namespace (a job may name a shared pool in another one).
    return {job_pool_key(namespace, spec): pool_index_entry(name, spec, status, namespace=namespace)}


@kopf.index("v1", "namespaces")
def namespace_labels(name: str, labels: Mapping[str, str], **_: Any) -> Any:
    # A pool's spec.tenancy.tenantLabel names a job's tenant by a label of its Namespace: the labels only,
    # kept current by the watch (no API read per pass; the operator may already list and watch Namespaces).
    return {name: dict(labels)}


@kopf.index("v1", "secrets", labels={LABEL_SECRET: "true"})
def secret_index(namespace: str, name: str, body: kopf.Body, labels: Mapping[str, str], **_: Any) -> Any:
    # The labelled Secrets (the watch selects them; the filter and the entry hold it too), kept current by
    # the watch: no API read per reconcile, and a rotation reaches the clients on the next pass (redisconn
    # replaces and closes the old client). A Secret whose label goes is dropped (the watch says DELETED).
    version = body.metadata.get("resourceVersion")
    entry = secret_index_entry(body.get("type"), body.get("data"), version, labels=labels)
    return {} if entry is None else {(namespace, name): entry}


@kopf.index(GROUP, VERSION, JOBS, labels={LABEL_CRON: kopf.PRESENT})
def jobs_by_cron(
    namespace: str, name: str, labels: Mapping[str, str], status: Mapping[str, Any], meta: Mapping[str, Any], **_: Any
) -> Any:
    return {
        (namespace, labels[LABEL_CRON]): {
            "name": name,
            "phase": status.get("phase"),
            "completionTime": status.get("completionTime"),
            "startTime": status.get("startTime"),
            "owner": controller_uid(meta),
        }
    }
