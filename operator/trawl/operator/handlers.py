# kopf types handlers as Protocols listing every keyword it may pass; handlers that name only
# what they use are correct at runtime (kopf passes **kwargs) but not those Protocols.
# mypy: disable-error-code="arg-type"
"""kopf registrations: thin, level-triggered, delegating to the reconcile modules.

Each kind has one reconcile function, called from create, update, resume and a timer. Handlers
return nothing (kopf would otherwise write return values into status), write status through
``patch.fns`` (a JSON patch guarded by resourceVersion), and post Events for transitions.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

import kopf
from redis.exceptions import RedisError

from trawl.api.naming import API_VERSION, FINALIZER, GROUP, LABEL_CRON, VERSION
from trawl.autoscale.schedule import TICK_SECONDS
from trawl.operator.cron.reconcile import failed_cron, reconcile_cron
from trawl.operator.job.oncomplete import settled as oncomplete_settled
from trawl.operator.job.reconcile import cancel_job, delete_job_object, failed_job, reconcile_job
from trawl.operator.job.status import TERMINAL, status_changed
from trawl.operator.pool.reconcile import reconcile_pool
from trawl.operator.pool.scaling import Autoscalers
from trawl.operator.pool.status import failed_pool
from trawl.operator.pool.workload import delete_deployment
from trawl.redisconn.settings import RedisConfigError, RedisUnreachable

from . import clock, kube, metrics
from .connections import RedisConnections
from .events import AGGREGATED, Transition, post_aggregated
from .indexes import controller_uid, pool_index_entry
from .problems import classify_error
from .secrets import secret_index_entry

log = logging.getLogger("trawl.operator")

JOBS, POOLS, CRONS = "scrapejobs", "scrapepools", "cronscrapejobs"

JOB_SYNC_SECONDS = float(os.environ.get("TRAWL_JOB_SYNC_SECONDS", "1"))
CRON_SYNC_SECONDS = float(os.environ.get("TRAWL_CRON_SYNC_SECONDS", "10"))
# Pools without autoscaling refresh their status this often; autoscaled pools every
# spec.autoscaling.pollSeconds, checked on a timer that ticks every POOL_TICK_SECONDS.
POOL_SYNC_SECONDS = float(os.environ.get("TRAWL_POOL_SYNC_SECONDS", "5"))
POOL_TICK_SECONDS = min(TICK_SECONDS, POOL_SYNC_SECONDS)
# A timer whose pass failed (API server or Redis unreachable) runs again after this, not after kopf's
# default 60 s: status and scaling converge within seconds of any outage's end.
TIMER_BACKOFF_SECONDS = 2.0

connections = RedisConnections()
autoscalers = Autoscalers()
_locks: dict[str, asyncio.Lock] = {}
_written: dict[str, dict[str, Any]] = {}  # ScrapeJob uid -> the status this process last applied
_last_status: dict[str, dict[str, Any]] = {}  # ScrapePool/CronScrapeJob uid -> the status last derived
# ScrapeJob uids cancelled by this process: no pass may touch Redis again. Bounded: only a pass
# already waiting on the job's lock can come after its deletion, so recent uids are enough.
_deleted: dict[str, None] = {}
DELETED_REMEMBERED = 10000


def _remember_deleted(uid: str) -> None:
    _deleted[uid] = None
    while len(_deleted) > DELETED_REMEMBERED:
        del _deleted[next(iter(_deleted))]


def _lock(uid: str) -> asyncio.Lock:
    # A timer and an event handler may run at once for one object; a reconcile must not interleave.
    return _locks.setdefault(uid, asyncio.Lock())


def _previous(uid: str, stored: Mapping[str, Any]) -> dict[str, Any]:
    """The status a pool or cron pass derives from: what this process last derived, when it has.

    kopf applies our status patch after the handler returns and sees it only when the watch
    delivers it; a pass in between (the create handler and the first timer tick) would derive from
    the older copy and repeat transitions, and with them their Events."""
    return dict(_last_status.get(uid) or stored)


def _write_status(patch: kopf.Patch, current: Mapping[str, Any], new: dict[str, Any], kind: str) -> None:
    if not status_changed(current, new):
        return

    def apply(body: Any) -> None:
        body.setdefault("status", {}).update(new)

    patch.fns.append(apply)
    metrics.STATUS_PATCHES.labels(kind=kind).inc()


def _unexpected(kind: str, meta: Any, exc: Exception) -> tuple[str, str]:
    """An error no reconcile step anticipated, as (reason, message) for the object's status.

    Logged as one line: the object's status and Event carry it, and the timer's next pass is the
    bounded retry, so a traceback every few seconds would only bury the log."""
    reason, msg = classify_error(exc)
    log.warning("%s %s/%s: %s: %s", kind, meta.namespace, meta.name, reason, msg)
    metrics.RECONCILE_ERRORS.labels(kind=kind, reason=reason).inc()
    return reason, msg


def _post(body: Any, events: list[Transition]) -> None:
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
    settings.batching.error_delays = [1, 2, 5, 10, 30, 60]


@kopf.on.cleanup()
async def cleanup(**_: Any) -> None:
    await connections.close()


# ---------------------------------------------------------------- indexes


@kopf.index(GROUP, VERSION, POOLS)
def pool_index(namespace: str, name: str, spec: Mapping[str, Any], meta: Mapping[str, Any], **_: Any) -> Any:
    return {(namespace, name): {"spec": dict(spec), "uid": meta["uid"]}}


@kopf.index(GROUP, VERSION, JOBS)
def jobs_by_pool(namespace: str, name: str, spec: Mapping[str, Any], status: Mapping[str, Any], **_: Any) -> Any:
    # An index function that raises drops the object from the index (kopf logs and moves on): the
    # pool could then be deleted under a running job. So this only reads, it never trusts the spec.
    return {(namespace, spec.get("pool")): pool_index_entry(name, spec, status)}


@kopf.index("v1", "secrets")
def secret_index(namespace: str, name: str, body: kopf.Body, **_: Any) -> Any:
    # The pools' Redis Secrets, kept current by the watch: no API read per reconcile, and a rotation
    # reaches the clients on the next pass (redisconn replaces and closes the old client).
    version = body.metadata.get("resourceVersion")
    return {(namespace, name): secret_index_entry(body.get("type"), body.get("data"), version)}


@kopf.index(GROUP, VERSION, JOBS, labels={LABEL_CRON: kopf.PRESENT})
def jobs_by_cron(
    namespace: str, name: str, labels: Mapping[str, str], status: Mapping[str, Any], meta: Mapping[str, Any], **_: Any
) -> Any:
    return {
        (namespace, labels[LABEL_CRON]): {
            "name": name,
            "phase": status.get("phase"),
            "completionTime": status.get("completionTime"),
            "owner": controller_uid(meta),
        }
    }


# ---------------------------------------------------------------- ScrapeJob


async def _job(
    body: kopf.Body, patch: kopf.Patch, pool_index: kopf.Index[Any, Any], secret_index: kopf.Index[Any, Any]
) -> None:
    meta = body.metadata
    started = time.monotonic()
    async with _lock(meta.uid):
        if meta.uid in _deleted or meta.get("deletionTimestamp"):
            # Deletion cancels the job in Redis; a pass after that would register it again.
            return
        # The operator is the only writer of a job's status, so what it last wrote is the current
        # status; kopf's copy of the object can lag by many seconds under load, and deriving from it
        # would repeat transitions (and their Events) already recorded.
        current = _written.get(meta.uid) or dict(body.status)
        generation = int(meta.get("generation") or 0)
        try:
            outcome = await reconcile_job(
                name=meta.name,
                namespace=meta.namespace or "",
                uid=meta.uid,
                generation=generation,
                spec_raw=body.spec,
                status=current,
                annotations=meta.annotations,
                pool_index=pool_index,
                connections=connections,
                now=clock.now(),
                secrets=secret_index,
            )
        except Exception as exc:
            outcome = failed_job(generation, current, clock.now(), *_unexpected("ScrapeJob", meta, exc))
        # Jobs are the many, fast-changing objects: their status is applied directly (see
        # kube.apply_status), and Events are posted only once the write recording them was accepted.
        if status_changed(current, outcome.status) and await _apply_job_status(meta, outcome.status):
            _written[meta.uid] = outcome.status
            metrics.STATUS_PATCHES.labels(kind="ScrapeJob").inc()
            _post(body, [e for e in outcome.events if e.reason not in AGGREGATED])
            for event in (e for e in outcome.events if e.reason in AGGREGATED):
                involved = {
                    "apiVersion": API_VERSION,
                    "kind": "ScrapeJob",
                    "name": meta.name,
                    "namespace": meta.namespace or "",
                    "uid": meta.uid,
                }
                await post_aggregated(involved, event.reason, event.type, event.message)
    metrics.record_job(meta.uid, meta.namespace or "", meta.name, str(body.spec.get("pool") or ""), outcome.status)
    if any(e.reason == "RedisUnavailable" for e in outcome.events):
        metrics.REDIS_ERRORS.labels(kind="ScrapeJob").inc()
    metrics.RECONCILE_SECONDS.labels(kind="ScrapeJob").observe(time.monotonic() - started)
    if outcome.delete_object:
        try:
            await delete_job_object(meta.namespace or "", meta.name)
        except Exception as exc:  # the TTL timer tries again
            _unexpected("ScrapeJob", meta, exc)


async def _apply_job_status(meta: Any, status: dict[str, Any]) -> bool:
    """Write the status; False (with one log line, no traceback) if the API server did not take it:
    the next timer pass derives and writes it again."""
    try:
        return await kube.apply_status(JOBS, "ScrapeJob", meta.namespace or "", meta.name, status)
    except Exception as exc:
        _unexpected("ScrapeJob", meta, exc)
        return False


def _job_active(status: Mapping[str, Any], spec: Mapping[str, Any], **_: Any) -> bool:
    if status.get("phase") not in TERMINAL:
        return True
    # Finished, but what comes after is not done yet: the onComplete hooks, an S3 manifest.
    output = spec.get("output") or {}
    results = status.get("results") or {}
    # A manifest that failed is retried when the job is next reconciled (update, operator restart).
    manifest_pending = output.get("sink") == "S3" and not results.get("manifest") and not results.get("manifestError")
    return manifest_pending or not oncomplete_settled(status.get("onComplete"), spec)


def _job_finished(status: Mapping[str, Any], **_: Any) -> bool:
    return status.get("phase") in TERMINAL


@kopf.on.create(GROUP, VERSION, JOBS, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
@kopf.on.update(GROUP, VERSION, JOBS, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
@kopf.on.resume(GROUP, VERSION, JOBS, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
async def job_changed(
    body: kopf.Body, patch: kopf.Patch, pool_index: kopf.Index[Any, Any], secret_index: kopf.Index[Any, Any], **_: Any
) -> None:
    await _job(body, patch, pool_index, secret_index)


@kopf.timer(
    GROUP,
    VERSION,
    JOBS,
    interval=JOB_SYNC_SECONDS,
    when=_job_active,
    errors=kopf.ErrorsMode.TEMPORARY,
    backoff=TIMER_BACKOFF_SECONDS,
)
async def job_sync(
    body: kopf.Body, patch: kopf.Patch, pool_index: kopf.Index[Any, Any], secret_index: kopf.Index[Any, Any], **_: Any
) -> None:
    await _job(body, patch, pool_index, secret_index)


# Finished jobs: ttlSecondsAfterFinished, and a Redis that lost their data told within seconds (DataLost).
@kopf.timer(
    GROUP,
    VERSION,
    JOBS,
    interval=5,
    when=_job_finished,
    errors=kopf.ErrorsMode.TEMPORARY,
    backoff=TIMER_BACKOFF_SECONDS,
)
async def job_finished_sync(
    body: kopf.Body, patch: kopf.Patch, pool_index: kopf.Index[Any, Any], secret_index: kopf.Index[Any, Any], **_: Any
) -> None:
    await _job(body, patch, pool_index, secret_index)


@kopf.on.delete(GROUP, VERSION, JOBS, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
async def job_deleted(
    body: kopf.Body,
    retry: int,
    pool_index: kopf.Index[Any, Any],
    secret_index: kopf.Index[Any, Any],
    logger: kopf.Logger,
    **_: Any,
) -> None:
    meta = body.metadata
    # Under the object's lock: a timer pass in flight finishes first, and none starts after (_deleted).
    async with _lock(meta.uid):
        try:
            outcome = await cancel_job(
                namespace=meta.namespace or "",
                uid=meta.uid,
                spec_raw=body.spec,
                pool_index=pool_index,
                connections=connections,
                secrets=secret_index,
            )
            _remember_deleted(meta.uid)
            logger.info("ScrapeJob deleted: %s", outcome)
            metrics.forget_job(meta.uid)
        except (RedisUnreachable, RedisConfigError, RedisError, OSError) as exc:
            if retry < 12:
                raise kopf.TemporaryError(f"cannot cancel the job's tasks yet: {exc}", delay=5) from None
            # A minute of trying: let the object go; retention still expires its keys.
            _remember_deleted(meta.uid)
            kopf.event(body, type="Warning", reason="CancelFailed", message=f"tasks left in Redis: {exc}")
    _locks.pop(meta.uid, None)
    _written.pop(meta.uid, None)


# ---------------------------------------------------------------- ScrapePool


def pool_poll_seconds(spec: Mapping[str, Any]) -> float:
    """How often the timer reconciles a pool: ``autoscaling.pollSeconds`` when it autoscales."""
    auto = spec.get("autoscaling") or {}
    if auto.get("enabled", True) is False:
        return POOL_SYNC_SECONDS
    try:
        return max(POOL_TICK_SECONDS, float(auto.get("pollSeconds", 5)))
    except (TypeError, ValueError):  # an invalid spec is reported by the reconcile itself
        return POOL_SYNC_SECONDS


async def _pool(
    body: kopf.Body,
    patch: kopf.Patch,
    jobs_by_pool: kopf.Index[Any, Any],
    secret_index: kopf.Index[Any, Any],
    *,
    scheduled: bool = True,
) -> None:
    """One pass of a pool. ``scheduled`` False: a burst brought it forward (the cadence stays)."""
    meta = body.metadata
    started = time.monotonic()
    autoscalers.pass_started((meta.namespace or "", meta.name), scheduled=scheduled)
    async with _lock(meta.uid):
        generation = int(meta.get("generation") or 0)
        previous = _previous(meta.uid, body.status)
        try:
            outcome = await reconcile_pool(
                name=meta.name,
                namespace=meta.namespace or "",
                uid=meta.uid,
                generation=generation,
                spec_raw=body.spec,
                status=previous,
                connections=connections,
                autoscalers=autoscalers,
                now=clock.now(),
                jobs=list(jobs_by_pool.get((meta.namespace, meta.name), [])),
                secrets=secret_index,
            )
        except Exception as exc:
            outcome = failed_pool(meta.name, previous, generation, clock.now(), *_unexpected("ScrapePool", meta, exc))
        _last_status[meta.uid] = outcome.status
    _write_status(patch, body.status, outcome.status, "ScrapePool")
    _post(body, outcome.events)
    metrics.record_pool(meta.namespace or "", meta.name, outcome.status, redis_memory=outcome.redis_memory)
    metrics.RECONCILE_SECONDS.labels(kind="ScrapePool").observe(time.monotonic() - started)
    for event in outcome.events:
        if event.reason == "Scaled":
            up = outcome.status.get("lastScale", {})
            direction = "up" if up.get("toReplicas", 0) > up.get("fromReplicas", 0) else "down"
            metrics.SCALING_DECISIONS.labels(pool=f"{meta.namespace}/{meta.name}", direction=direction).inc()
        elif event.reason == "RedisUnavailable":
            metrics.REDIS_ERRORS.labels(kind="ScrapePool").inc()


@kopf.on.create(GROUP, VERSION, POOLS, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
@kopf.on.update(GROUP, VERSION, POOLS, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
@kopf.on.resume(GROUP, VERSION, POOLS, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
async def pool_changed(
    body: kopf.Body,
    patch: kopf.Patch,
    jobs_by_pool: kopf.Index[Any, Any],
    secret_index: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    await _pool(body, patch, jobs_by_pool, secret_index)


@kopf.timer(
    GROUP, VERSION, POOLS, interval=POOL_TICK_SECONDS, errors=kopf.ErrorsMode.TEMPORARY, backoff=TIMER_BACKOFF_SECONDS
)
async def pool_sync(
    body: kopf.Body,
    patch: kopf.Patch,
    jobs_by_pool: kopf.Index[Any, Any],
    secret_index: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    key = (body.metadata.namespace or "", body.metadata.name)
    # Every pollSeconds (sooner after a burst's scale-up, rule 10), or at once when a burst was enqueued
    # since the last pass (rule 11: one counter read per tick).
    if autoscalers.pass_due(key, pool_poll_seconds(body.spec)):
        await _pool(body, patch, jobs_by_pool, secret_index)
    elif await autoscalers.burst_due(key):
        log.info("pool %s/%s: a burst of new tasks since the last pass; passing before the next poll", *key)
        await _pool(body, patch, jobs_by_pool, secret_index, scheduled=False)


@kopf.on.delete(GROUP, VERSION, POOLS, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
async def pool_deleted(body: kopf.Body, retry: int, jobs_by_pool: kopf.Index[Any, Any], **_: Any) -> None:
    meta = body.metadata
    # Any job naming the pool blocks it, finished or not: deleting a job needs the pool's Redis to
    # cancel its tasks and remove its keys, which a deleted pool could no longer reach.
    users = sorted(j["name"] for j in jobs_by_pool.get((meta.namespace, meta.name), []))
    if users:
        message = f"{len(users)} ScrapeJobs still name this pool ({', '.join(users[:5])}); delete them first"
        if retry == 0:
            kopf.event(body, type="Warning", reason="DeletionBlocked", message=message)
        raise kopf.TemporaryError(message, delay=10)
    try:
        await delete_deployment(meta.namespace or "", meta.name)
    except Exception as exc:
        raise kopf.TemporaryError(f"cannot delete the worker Deployment: {kube.api_message(exc)}", delay=10) from None
    autoscalers.forget((meta.namespace or "", meta.name))
    metrics.forget_pool(meta.namespace or "", meta.name)
    await connections.forget_pool(meta.namespace or "", meta.name)
    _locks.pop(meta.uid, None)
    _last_status.pop(meta.uid, None)


# ---------------------------------------------------------------- CronScrapeJob


async def _cron(
    body: kopf.Body, patch: kopf.Patch, jobs_by_cron: kopf.Index[Any, Any], pool_index: kopf.Index[Any, Any]
) -> None:
    meta = body.metadata
    async with _lock(meta.uid):
        generation = int(meta.get("generation") or 0)
        previous = _previous(meta.uid, body.status)
        try:
            outcome = await reconcile_cron(
                name=meta.name,
                namespace=meta.namespace or "",
                uid=meta.uid,
                generation=generation,
                created=str(meta.get("creationTimestamp") or ""),
                spec_raw=body.spec,
                status=previous,
                jobs=list(jobs_by_cron.get((meta.namespace, meta.name), [])),
                now=clock.now(),
                pool_index=pool_index,
            )
        except Exception as exc:
            reason, msg = _unexpected("CronScrapeJob", meta, exc)
            outcome = failed_cron(previous, generation, clock.now(), reason, msg)
        _last_status[meta.uid] = outcome.status
    _write_status(patch, body.status, outcome.status, "CronScrapeJob")
    _post(body, outcome.events)


@kopf.on.create(GROUP, VERSION, CRONS, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
@kopf.on.update(GROUP, VERSION, CRONS, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
@kopf.on.resume(GROUP, VERSION, CRONS, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
async def cron_changed(
    body: kopf.Body,
    patch: kopf.Patch,
    jobs_by_cron: kopf.Index[Any, Any],
    pool_index: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    await _cron(body, patch, jobs_by_cron, pool_index)


@kopf.timer(
    GROUP, VERSION, CRONS, interval=CRON_SYNC_SECONDS, errors=kopf.ErrorsMode.TEMPORARY, backoff=TIMER_BACKOFF_SECONDS
)
async def cron_sync(
    body: kopf.Body,
    patch: kopf.Patch,
    jobs_by_cron: kopf.Index[Any, Any],
    pool_index: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    await _cron(body, patch, jobs_by_cron, pool_index)
