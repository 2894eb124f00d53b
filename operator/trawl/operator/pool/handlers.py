# kopf types handlers as Protocols listing every keyword it may pass; handlers that name only
# what they use are correct at runtime (kopf passes **kwargs) but not those Protocols.
# mypy: disable-error-code="arg-type"
"""ScrapePool's kopf registrations: create, update and resume, the timer (the autoscaler's cadence), delete.

Status goes through kopf's patch (``write_status``), derived from what this process last derived. The
function names are kopf's handler ids (see trawl.operator.handlers): they stay as they are.
"""

from __future__ import annotations

import os
import time
from collections.abc import Mapping
from typing import Any

import kopf

from trawl.api.naming import GROUP, VERSION
from trawl.autoscale.schedule import TICK_SECONDS
from trawl.operator import clock, kube, metrics, sharding
from trawl.operator.handlers import (
    POOLS,
    TIMER_BACKOFF_SECONDS,
    connections,
    derived_status,
    forget_object,
    log,
    object_lock,
    post,
    previous_status,
    unexpected,
    write_status,
)
from trawl.operator.indexes import job_display_name, served_jobs

from .reconcile import reconcile_pool
from .scaling import Autoscalers
from .status import failed_pool
from .workload import delete_deployment

# Pools without autoscaling refresh their status this often; autoscaled pools every
# spec.autoscaling.pollSeconds, checked on a timer that ticks every POOL_TICK_SECONDS.
POOL_SYNC_SECONDS = float(os.environ.get("TRAWL_POOL_SYNC_SECONDS", "5"))
POOL_TICK_SECONDS = min(TICK_SECONDS, POOL_SYNC_SECONDS)

autoscalers = Autoscalers()

# Only this operator's shard (trawl.operator.sharding): read once, when the handlers register.
SHARD = sharding.current().handler_labels()


def pool_poll_seconds(spec: Mapping[str, Any]) -> float:
    """How often the timer reconciles a pool: ``autoscaling.pollSeconds`` when it autoscales."""
    auto = spec.get("autoscaling") or {}
    if auto.get("enabled", True) is False:
        return POOL_SYNC_SECONDS
    try:
        return max(POOL_TICK_SECONDS, float(auto.get("pollSeconds", 5)))
    except (TypeError, ValueError):  # an invalid spec is reported by the reconcile itself
        return POOL_SYNC_SECONDS


def _users(
    body: kopf.Body, jobs_by_pool: kopf.Index[Any, Any], namespace_labels: kopf.Index[Any, Any]
) -> list[Mapping[str, Any]]:
    """The jobs the pool serves (trawl.operator.indexes.served_jobs)."""
    meta = body.metadata
    entries: list[Mapping[str, Any]] = list(jobs_by_pool.get((meta.namespace, meta.name), []))
    return served_jobs(entries, meta.namespace or "", meta.name, body.spec, namespace_labels)


async def _pool(
    body: kopf.Body,
    patch: kopf.Patch,
    jobs_by_pool: kopf.Index[Any, Any],
    secret_index: kopf.Index[Any, Any],
    namespace_labels: kopf.Index[Any, Any],
    *,
    scheduled: bool = True,
) -> None:
    """One pass of a pool. ``scheduled`` False: a burst brought it forward (the cadence stays)."""
    meta = body.metadata
    started = time.monotonic()
    autoscalers.pass_started((meta.namespace or "", meta.name), scheduled=scheduled)
    async with object_lock(meta.uid):
        generation = int(meta.get("generation") or 0)
        previous = previous_status(meta.uid, body.status)
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
                jobs=_users(body, jobs_by_pool, namespace_labels),
                secrets=secret_index,
            )
        except Exception as exc:
            outcome = failed_pool(meta.name, previous, generation, clock.now(), *unexpected("ScrapePool", meta, exc))
        derived_status(meta.uid, outcome.status)
    write_status(patch, body.status, outcome.status, "ScrapePool")
    post(body, outcome.events)
    metrics.record_pool(meta.namespace or "", meta.name, outcome.status, redis_memory=outcome.redis_memory)
    metrics.RECONCILE_SECONDS.labels(kind="ScrapePool").observe(time.monotonic() - started)
    for event in outcome.events:
        if event.reason == "Scaled":
            up = outcome.status.get("lastScale", {})
            direction = "up" if up.get("toReplicas", 0) > up.get("fromReplicas", 0) else "down"
            metrics.SCALING_DECISIONS.labels(pool=f"{meta.namespace}/{meta.name}", direction=direction).inc()
        elif event.reason == "RedisUnavailable":
            metrics.REDIS_ERRORS.labels(kind="ScrapePool").inc()


@kopf.on.create(GROUP, VERSION, POOLS, labels=SHARD, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
@kopf.on.update(GROUP, VERSION, POOLS, labels=SHARD, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
@kopf.on.resume(GROUP, VERSION, POOLS, labels=SHARD, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
async def pool_changed(
    body: kopf.Body,
    patch: kopf.Patch,
    jobs_by_pool: kopf.Index[Any, Any],
    secret_index: kopf.Index[Any, Any],
    namespace_labels: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    await _pool(body, patch, jobs_by_pool, secret_index, namespace_labels)


@kopf.timer(
    GROUP,
    VERSION,
    POOLS,
    labels=SHARD,
    interval=POOL_TICK_SECONDS,
    errors=kopf.ErrorsMode.TEMPORARY,
    backoff=TIMER_BACKOFF_SECONDS,
)
async def pool_sync(
    body: kopf.Body,
    patch: kopf.Patch,
    jobs_by_pool: kopf.Index[Any, Any],
    secret_index: kopf.Index[Any, Any],
    namespace_labels: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    key = (body.metadata.namespace or "", body.metadata.name)
    # Every pollSeconds (sooner after a burst's scale-up, rule 10), or at once when a burst was enqueued
    # since the last pass (rule 11: one counter read per tick).
    if autoscalers.pass_due(key, pool_poll_seconds(body.spec)):
        await _pool(body, patch, jobs_by_pool, secret_index, namespace_labels)
    elif await autoscalers.burst_due(key):
        log.info("pool %s/%s: a burst of new tasks since the last pass; passing before the next poll", *key)
        await _pool(body, patch, jobs_by_pool, secret_index, namespace_labels, scheduled=False)


@kopf.on.delete(GROUP, VERSION, POOLS, labels=SHARD, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
async def pool_deleted(
    body: kopf.Body,
    retry: int,
    jobs_by_pool: kopf.Index[Any, Any],
    namespace_labels: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    meta = body.metadata
    # Any job the pool serves blocks it, finished or not: deleting a job needs the pool's Redis to
    # cancel its tasks and remove its keys, which a deleted pool could no longer reach. A job of another
    # namespace that the pool does not serve does not (any namespace may name any pool).
    users = sorted(job_display_name(j, meta.namespace) for j in _users(body, jobs_by_pool, namespace_labels))
    if users:
        message = f"{len(users)} ScrapeJobs still name this pool ({', '.join(users[:5])}); delete them first"
        if retry == 0:
            kopf.event(body, type="Warning", reason="DeletionBlocked", message=message)
        raise kopf.TemporaryError(message, delay=10)
    try:
        await delete_deployment(meta.namespace or "", meta.name, meta.uid)
    except Exception as exc:
        raise kopf.TemporaryError(f"cannot delete the worker Deployment: {kube.api_message(exc)}", delay=10) from None
    autoscalers.forget((meta.namespace or "", meta.name))
    metrics.forget_pool(meta.namespace or "", meta.name)
    await connections.forget_pool(meta.namespace or "", meta.name)
    forget_object(meta.uid)
