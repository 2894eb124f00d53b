# kopf types handlers as Protocols listing every keyword it may pass; handlers that name only
# what they use are correct at runtime (kopf passes **kwargs) but not those Protocols.
# mypy: disable-error-code="arg-type"
"""ScrapeJob's kopf registrations: create, update and resume, a watch handler feeding the periodic passes' loop
(trawl.operator.job.sweep: one loop, not a kopf timer per job), delete.

Jobs are the many, fast-changing objects: their status is applied directly (kube.apply_status), not
through kopf's patch, and derived from what this process last wrote. The function names are kopf's
handler ids (see trawl.operator.handlers): they stay as they are.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import kopf
from redis.exceptions import RedisError

from trawl.api.naming import API_VERSION, GROUP, VERSION
from trawl.operator import clock, kube, metrics, sharding
from trawl.operator.events import AGGREGATED, post_aggregated
from trawl.operator.handlers import (
    JOBS,
    connections,
    forget_object,
    object_lock,
    post,
    unexpected,
)
from trawl.redisconn.settings import RedisConfigError, RedisUnreachable

from .endwatch import EndWatch
from .oncomplete import settled as oncomplete_settled
from .reconcile import cancel_job, delete_job_object, failed_job, reconcile_job
from .status import TERMINAL, status_changed
from .sweep import Intervals, JobSweep, pass_body, tick_seconds

JOB_SYNC_SECONDS = float(os.environ.get("TRAWL_JOB_SYNC_SECONDS", "1"))
FINISHED_SYNC_SECONDS = 5.0

_written: dict[str, dict[str, Any]] = {}  # ScrapeJob uid -> the status this process last applied
# ScrapeJob uids cancelled by this process: no pass may touch Redis again. Bounded: only a pass
# already waiting on the job's lock can come after its deletion, so recent uids are enough.
_deleted: dict[str, None] = {}
DELETED_REMEMBERED = 10000

# Only this operator's shard (trawl.operator.sharding): read once, when the handlers register.
SHARD = sharding.current().handler_labels()


def _remember_deleted(uid: str) -> None:
    _deleted[uid] = None
    while len(_deleted) > DELETED_REMEMBERED:
        del _deleted[next(iter(_deleted))]


async def _job(
    body: kopf.Body,
    pool_index: kopf.Index[Any, Any],
    secret_index: kopf.Index[Any, Any],
    namespace_labels: kopf.Index[Any, Any],
) -> None:
    meta = body.metadata
    started = time.monotonic()
    async with object_lock(meta.uid):
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
                namespaces=namespace_labels,
                job_labels=meta.labels,
            )
        except Exception as exc:
            outcome = failed_job(generation, current, clock.now(), *unexpected("ScrapeJob", meta, exc))
        # Jobs are the many, fast-changing objects: their status is applied directly (see
        # kube.apply_status), and Events are posted only once the write recording them was accepted.
        if status_changed(current, outcome.status) and await _apply_job_status(meta, outcome.status):
            _written[meta.uid] = outcome.status
            metrics.STATUS_PATCHES.labels(kind="ScrapeJob").inc()
            post(body, [e for e in outcome.events if e.reason not in AGGREGATED])
            for event in (e for e in outcome.events if e.reason in AGGREGATED):
                involved = {
                    "apiVersion": API_VERSION,
                    "kind": "ScrapeJob",
                    "name": meta.name,
                    "namespace": meta.namespace or "",
                    "uid": meta.uid,
                }
                await post_aggregated(involved, event.reason, event.type, event.message)
    spec = body.spec
    pool_ns = spec.get("poolNamespace")
    metrics.record_job(
        meta.uid,
        meta.namespace or "",
        meta.name,
        str(spec.get("pool") or ""),
        outcome.status,
        pool_namespace=pool_ns if isinstance(pool_ns, str) else None,
    )
    if outcome.queue is not None and _job_active(outcome.status, spec):
        ENDS.touch(outcome.queue)  # its end is read from the queue's event stream as it happens
    if any(e.reason == "RedisUnavailable" for e in outcome.events):
        metrics.REDIS_ERRORS.labels(kind="ScrapeJob").inc()
    metrics.RECONCILE_SECONDS.labels(kind="ScrapeJob").observe(time.monotonic() - started)
    if outcome.delete_object:
        try:
            await delete_job_object(meta.namespace or "", meta.name)
        except Exception as exc:  # the TTL timer tries again
            unexpected("ScrapeJob", meta, exc)


async def _apply_job_status(meta: Any, status: dict[str, Any]) -> bool:
    """Write the status; False (with one log line, no traceback) if the API server did not take it:
    the next timer pass derives and writes it again."""
    try:
        return await kube.apply_status(JOBS, "ScrapeJob", meta.namespace or "", meta.name, status)
    except Exception as exc:
        unexpected("ScrapeJob", meta, exc)
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


@kopf.on.create(GROUP, VERSION, JOBS, labels=SHARD, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
@kopf.on.update(GROUP, VERSION, JOBS, labels=SHARD, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
@kopf.on.resume(GROUP, VERSION, JOBS, labels=SHARD, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
async def job_changed(
    body: kopf.Body,
    pool_index: kopf.Index[Any, Any],
    secret_index: kopf.Index[Any, Any],
    namespace_labels: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    SWEEP.passed(body.metadata.uid)
    await _job(body, pool_index, secret_index, namespace_labels)


def _pass_kind(raw: Mapping[str, Any]) -> str | None:
    """Which interval a job's periodic pass follows (trawl.operator.job.sweep): by the status this process
    last applied, kopf's copy lagging under load; none once its deletion began."""
    body = kopf.Body(raw)
    meta = body.metadata
    if meta.uid in _deleted or meta.get("deletionTimestamp"):
        return None
    status = _written.get(meta.uid) or body.status
    return "active" if _job_active(status, body.spec) else "finished"


# Indexes reach handlers only as keyword arguments: the watch handler keeps them for the loop's passes
# (kopf hands every handler the same live objects).
_indexes: dict[str, kopf.Index[Any, Any]] = {}


async def _periodic_pass(raw: Mapping[str, Any]) -> None:
    await _job(kopf.Body(raw), _indexes["pool_index"], _indexes["secret_index"], _indexes["namespace_labels"])


# Live jobs every JOB_SYNC_SECONDS; finished ones every 5 s: ttlSecondsAfterFinished, and a Redis that lost
# their data told within seconds (DataLost).
SWEEP = JobSweep(_periodic_pass, _pass_kind, Intervals(active=JOB_SYNC_SECONDS, finished=FINISHED_SYNC_SECONDS))
# A job's end, written by the queue, brings its pass at once (not at its interval).
ENDS = EndWatch(SWEEP.nudge)


# Not filtered by kopf's labels=: a job relabelled to another shard must leave this shard's loop, and kopf
# would not call a filtered handler for the event that relabels it.
@kopf.on.event(GROUP, VERSION, JOBS)
async def job_seen(
    type: str | None,
    body: kopf.Body,
    pool_index: kopf.Index[Any, Any],
    secret_index: kopf.Index[Any, Any],
    namespace_labels: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    _indexes.update(pool_index=pool_index, secret_index=secret_index, namespace_labels=namespace_labels)
    # Started from a resource handler, not at startup: kopf.event() needs the posting context kopf sets for
    # its resource tasks only, and the loop's passes inherit this one.
    SWEEP.start(tick_seconds(SWEEP.intervals))
    if type == "DELETED" or not sharding.current().owns(body.metadata.labels):
        SWEEP.forget(body.metadata.uid)
    else:
        # What a pass reads, not the whole object: 10,000 kept bodies with their managedFields and kopf's
        # annotations were a third of the operator's memory. The status only until this process wrote one.
        uid = body.metadata.uid
        # A plain dict: kopf.Body's views cost ~0.8 KB per job kept; a pass wraps it when it runs.
        SWEEP.seen(uid, pass_body(body, keep_status=uid not in _written))


@kopf.on.cleanup()
async def stop_job_sweep(**_: Any) -> None:
    await ENDS.stop()
    await SWEEP.stop()


@kopf.on.delete(GROUP, VERSION, JOBS, labels=SHARD, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
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
    async with object_lock(meta.uid):
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
    forget_object(meta.uid)
    _written.pop(meta.uid, None)
