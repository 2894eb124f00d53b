"""Claim sizing in a real worker: claimed tasks waiting for a slot are held (heartbeats list them), start as
slots free, and go back at once (no attempt, no stall spent) when the worker stops."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev.bookstore import Bookstore
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.worker.runner import Worker, WorkerConfig
from waits import wait_for_async

PREFIX = "trawl:{test/claims}"
ALLOWED = ["127.0.0.2/32"]
PAGES = 12


@pytest.fixture(scope="module")
def site_options() -> dict[str, Any]:
    # Every page takes 0.3 s, so tasks wait in the worker's buffer long enough to be seen there.
    return {"categories": 1, "books_per_category": PAGES, "latency": 0.3}


# The site's politeness out of the way: these tests are about the worker's own places and claims, and a
# crowded worker hands back the tasks its host's limit cannot start soon (worker/politeness/backlog.py).
FAST = {"politeness": {"requestsPerSecond": 1000, "maxConcurrencyPerDomain": 16}}


async def test_buffered_tasks_are_held_then_given_back_on_stop(site: Bookstore, redis_client: aioredis.Redis) -> None:
    job = ScrapeJobSpec.model_validate(
        {"pool": "p", "urls": [site.product_url(i) for i in range(1, PAGES + 1)], **FAST}
    )
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis_client, PREFIX, lease_seconds=10)
    await queue.register_job(build_job_config(job_id, job, None))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.mark_enqueue_done(job_id)
    # A fixed claim of 10 at concurrency 2: 2 run, 8 wait here for a slot.
    worker = Worker(
        WorkerConfig(
            prefix=PREFIX, worker_id="wc-" + job_id, concurrency=2, claim_batch=10, allowed_cidrs=ALLOWED,
            heartbeat_seconds=0.2, drain_seconds=5,
        ),
        queue,
        redis_client,
        Keys(PREFIX),
    )  # fmt: skip
    runner = asyncio.create_task(worker.run())
    try:
        await wait_for_async("the condition", lambda: len(worker._buffer) >= 7, 30, 0.02)
        assert len(worker._inflight) <= 2  # never more running than the concurrency
        held = worker.held()
        assert len(held) == worker.in_flight >= 9  # buffered tasks count as held: heartbeats keep them
        # A heartbeat with that list returns nothing as an orphan: every buffered lease stays.
        await worker._heartbeat(draining=False)
        assert (await queue.job_stats(job_id)).in_flight == worker.in_flight
        # buffered tasks start as slots free
        await wait_for_async("the condition", lambda: worker.processed >= 3, 30, 0.02)
    finally:
        worker.request_stop()
        await asyncio.wait_for(runner, 60)
    stats = await queue.job_stats(job_id)
    assert stats.in_flight == 0  # the buffered ones went back at once, not after the lease
    assert stats.succeeded + stats.pending == PAGES and stats.dead == 0 and stats.retrying == 0
    assert stats.pending >= 1
    # Given back without spending an attempt or a stall: the next claim sees them as first attempts.
    again = await queue.claim("after-" + job_id, PAGES)
    assert len(again) == stats.pending
    assert all(t.attempt == 1 for t in again)
    raw = await redis_client.hvals(Keys(PREFIX).worker("after-" + job_id))
    assert all(v.decode().split("|")[3] == "0" for v in raw)  # "<claimed>|<task>|<attempts>|<stalls>|..."


async def test_auto_claims_fill_the_slots_at_small_concurrency(site: Bookstore, redis_client: aioredis.Redis) -> None:
    job = ScrapeJobSpec.model_validate(
        {"pool": "p", "urls": [site.product_url(i) for i in range(1, PAGES + 1)], **FAST}
    )
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis_client, PREFIX, lease_seconds=10)
    await queue.register_job(build_job_config(job_id, job, None))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.mark_enqueue_done(job_id)
    worker = Worker(
        WorkerConfig(prefix=PREFIX, worker_id="wa-" + job_id, concurrency=8, allowed_cidrs=ALLOWED),
        queue,
        redis_client,
        Keys(PREFIX),
    )
    runner = asyncio.create_task(worker.run())
    try:
        await wait_for_async("the condition", lambda: (worker.metrics.claims._value.get() or 0) >= 8, 30, 0.02)
        # The first claim asked for all 8 slots at once (a quarter of the concurrency was 2 per claim).
        assert worker.metrics.claim_calls.labels("tasks")._value.get() == 1
        await wait_for_async("the condition", lambda: worker.processed >= 1, 30, 0.02)
    finally:
        worker.request_stop()
        await asyncio.wait_for(runner, 60)
    stats = await queue.job_stats(job_id)
    assert stats.succeeded >= 1 and stats.in_flight == 0
    assert stats.succeeded + stats.pending == PAGES
