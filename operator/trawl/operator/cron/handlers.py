# kopf types handlers as Protocols listing every keyword it may pass; handlers that name only
# what they use are correct at runtime (kopf passes **kwargs) but not those Protocols.
# mypy: disable-error-code="arg-type"
"""CronScrapeJob's kopf registrations: create, update and resume, and the timer that runs its schedule.

Status goes through kopf's patch (``write_status``), derived from what this process last derived. The
function names are kopf's handler ids (see trawl.operator.handlers): they stay as they are.
"""

from __future__ import annotations

import os
from typing import Any

import kopf

from trawl.api.naming import GROUP, VERSION
from trawl.operator import clock, sharding
from trawl.operator.handlers import (
    CRONS,
    TIMER_BACKOFF_SECONDS,
    derived_status,
    object_lock,
    post,
    previous_status,
    unexpected,
    write_status,
)

from .reconcile import failed_cron, reconcile_cron

CRON_SYNC_SECONDS = float(os.environ.get("TRAWL_CRON_SYNC_SECONDS", "10"))

# Only this operator's shard (trawl.operator.sharding): read once, when the handlers register.
SHARD = sharding.current().handler_labels()


async def _cron(
    body: kopf.Body,
    patch: kopf.Patch,
    jobs_by_cron: kopf.Index[Any, Any],
    pool_index: kopf.Index[Any, Any],
    namespace_labels: kopf.Index[Any, Any],
) -> None:
    meta = body.metadata
    async with object_lock(meta.uid):
        generation = int(meta.get("generation") or 0)
        previous = previous_status(meta.uid, body.status)
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
                namespaces=namespace_labels,
                labels=meta.labels,
            )
        except Exception as exc:
            outcome = failed_cron(previous, generation, clock.now(), *unexpected("CronScrapeJob", meta, exc))
        derived_status(meta.uid, outcome.status)
    write_status(patch, body.status, outcome.status, "CronScrapeJob")
    post(body, outcome.events)


@kopf.on.create(GROUP, VERSION, CRONS, labels=SHARD, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
@kopf.on.update(GROUP, VERSION, CRONS, labels=SHARD, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
@kopf.on.resume(GROUP, VERSION, CRONS, labels=SHARD, errors=kopf.ErrorsMode.TEMPORARY, backoff=5)
async def cron_changed(
    body: kopf.Body,
    patch: kopf.Patch,
    jobs_by_cron: kopf.Index[Any, Any],
    pool_index: kopf.Index[Any, Any],
    namespace_labels: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    await _cron(body, patch, jobs_by_cron, pool_index, namespace_labels)


@kopf.timer(
    GROUP,
    VERSION,
    CRONS,
    labels=SHARD,
    interval=CRON_SYNC_SECONDS,
    errors=kopf.ErrorsMode.TEMPORARY,
    backoff=TIMER_BACKOFF_SECONDS,
)
async def cron_sync(
    body: kopf.Body,
    patch: kopf.Patch,
    jobs_by_cron: kopf.Index[Any, Any],
    pool_index: kopf.Index[Any, Any],
    namespace_labels: kopf.Index[Any, Any],
    **_: Any,
) -> None:
    await _cron(body, patch, jobs_by_cron, pool_index, namespace_labels)
