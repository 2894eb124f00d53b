"""An idle worker claims a new job's seeds when the queue records them, not at its next poll (worker/wakeup.py).

A real worker on the shared connection (trawl.redisconn.mux) against a real redis-server: its back-off is
made long (``idle_poll_max`` 120 s), so a claim within a few seconds of the seeds can only come from the
wake; and the wait itself (PoolEvents) against the same server."""

from __future__ import annotations

import asyncio
import time
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
from trawl.worker.wakeup import PoolEvents
from waits import wait_for_async

PREFIX = "trawl:{test/wakeup}"
ALLOWED = ["127.0.0.2/32"]


@pytest.fixture(scope="module")
def site_options() -> dict[str, Any]:
    return {"categories": 1, "books_per_category": 2}


async def test_a_wait_ends_on_a_new_entry_and_misses_none_between_waits(redis_client: aioredis.Redis) -> None:
    key = Keys(PREFIX).events
    events = PoolEvents(redis_client, key)
    assert await events.wait(0.05) is False  # nothing written: the wait times out

    async def write_soon() -> None:
        await asyncio.sleep(0.2)
        await redis_client.xadd(key, {"type": "enqueued"})

    writer = asyncio.create_task(write_soon())
    started = time.monotonic()
    assert await events.wait(30) is True
    assert time.monotonic() - started < 20  # the entry, not the 30 s bound
    await writer
    # Written while nobody waited: the next wait returns at once, from the last entry seen.
    await redis_client.xadd(key, {"type": "resumed"})
    assert await events.wait(30) is True
    assert await events.wait(0.05) is False


async def test_a_wait_on_a_failing_read_sleeps_its_interval() -> None:
    dead = aioredis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=1)  # nothing listens on port 1
    try:
        started = time.monotonic()
        assert await PoolEvents(dead, Keys(PREFIX).events).wait(0.3) is False
        assert time.monotonic() - started >= 0.25  # no busy loop of failed reads
    finally:
        await dead.aclose()


async def test_an_idle_worker_claims_new_seeds_without_waiting_for_its_poll(
    site: Bookstore, redis_client: aioredis.Redis
) -> None:
    queue = Queue(redis_client, PREFIX, lease_seconds=10)
    # Registered before the worker starts: after it, the only event is the seeds' ("enqueued").
    job = ScrapeJobSpec.model_validate(
        {"pool": "p", "urls": [site.product_url(1)], "politeness": {"requestsPerSecond": 1000}}
    )
    job_id = uuid.uuid4().hex[:12]
    await queue.register_job(build_job_config(job_id, job, None))
    worker = Worker(
        WorkerConfig(
            prefix=PREFIX, worker_id="wake-" + uuid.uuid4().hex[:6], concurrency=2, allowed_cidrs=ALLOWED,
            idle_poll_max=120.0, drain_seconds=5,
        ),
        queue,
        redis_client,
        Keys(PREFIX),
    )  # fmt: skip
    runner = asyncio.create_task(worker.run())
    try:
        # Ten empty claims: the back-off is now 0.01 s x 2^10, about 10 s to the next poll.
        def empty_claims() -> float:
            value = worker.metrics.registry.get_sample_value("trawl_worker_claim_calls_total", {"result": "empty"})
            return value or 0.0

        await wait_for_async("ten empty claims", lambda: empty_claims() >= 10, 60, 0.02)
        await queue.enqueue(job_id, job.seed_urls())
        seeded = time.time()
        await queue.mark_enqueue_done(job_id)  # the queue's "enqueued" event: the idle worker wakes
        assert empty_claims() < 12  # the back-off still runs: the next poll is seconds away

        async def claimed() -> bool:
            return (await queue.job_stats(job_id)).first_claim_at is not None

        await wait_for_async("the job's first claim", claimed, 30, 0.02)
        first_claim = (await queue.job_stats(job_id)).first_claim_at
        assert first_claim is not None and first_claim - seeded < 4.0, first_claim - seeded
        await wait_for_async("the job's end", lambda: _finished(queue, job_id), 60, 0.05)
    finally:
        worker.request_stop()
        await asyncio.wait_for(runner, 30)


async def _finished(queue: Queue, job_id: str) -> bool:
    return (await queue.job_stats(job_id)).finished


async def test_an_event_without_work_ends_one_wait_and_the_back_off_goes_on(redis_client: aioredis.Redis) -> None:
    queue = Queue(redis_client, PREFIX, lease_seconds=10)
    worker = Worker(
        WorkerConfig(
            prefix=PREFIX, worker_id="wake-" + uuid.uuid4().hex[:6], concurrency=2, allowed_cidrs=ALLOWED,
            idle_poll_max=120.0, drain_seconds=5,
        ),
        queue,
        redis_client,
        Keys(PREFIX),
    )  # fmt: skip

    def empty_claims() -> float:
        return worker.metrics.registry.get_sample_value("trawl_worker_claim_calls_total", {"result": "empty"}) or 0.0

    runner = asyncio.create_task(worker.run())
    try:
        await wait_for_async("eight empty claims", lambda: empty_claims() >= 8, 60, 0.02)
        before = empty_claims()
        await redis_client.xadd(Keys(PREFIX).events, {"type": "finished", "job": "another"})
        await wait_for_async("the claim the event brought", lambda: empty_claims() == before + 1, 30, 0.02)
        # Nothing to claim: the back-off did not restart at 0.01 s (it would make ~6 claims in half a second).
        await asyncio.sleep(0.5)
        assert empty_claims() == before + 1
    finally:
        worker.request_stop()
        await asyncio.wait_for(runner, 30)
