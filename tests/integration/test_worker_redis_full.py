"""A Redis that fills up mid-job (maxmemory with noeviction, as the chart's bundled Redis runs): the worker
stops making progress without spending an attempt, failing a task or losing a record, and once Redis has
room again every URL ends with exactly one record.

Real worker, real queue and redis-server, the bookstore over loopback. The fill is made by lowering
``maxmemory`` under what Redis already holds, so it happens mid-job at a point the test chooses.
"""

from __future__ import annotations

import asyncio
import logging
import uuid

import pytest
import redis.asyncio as aioredis
from redis.exceptions import OutOfMemoryError

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev.bookstore import Bookstore
from trawl.jobspec.wire import build_job_config
from trawl.queue import JobConfig, Queue
from trawl.queue.keys import Keys
from trawl.redisconn.memory import read_memory
from trawl.worker.runner import Worker, WorkerConfig
from waits import wait_for_async

PREFIX = "trawl:{test/full}"
PAGES = 60


async def test_a_full_redis_holds_the_work_then_every_url_lands_once(
    site: Bookstore, redis_client: aioredis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="trawl")
    urls = [site.product_url(i) for i in range(1, PAGES + 1)]
    job = ScrapeJobSpec.model_validate(
        {
            "pool": "p",
            "urls": urls,
            "politeness": {"requestsPerSecond": 20, "maxConcurrencyPerDomain": 4, "respectRobotsTxt": False},
        }
    )
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis_client, PREFIX, lease_seconds=5)
    await queue.register_job(build_job_config(job_id, job, None))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.mark_enqueue_done(job_id)
    config = WorkerConfig(
        prefix=PREFIX, worker_id="w-full", concurrency=4, heartbeat_seconds=0.5, allowed_cidrs=["127.0.0.2/32"]
    )
    worker = Worker(config, queue, redis_client, Keys(PREFIX))
    runner = asyncio.create_task(worker.run())

    async def refused() -> bool:
        return any("maxmemory" in str(getattr(r, "error", "")) for r in caplog.records)

    try:
        await wait_for_async(
            "a third of the job", lambda: _succeeded_at_least(queue, job_id, PAGES // 3), 60, 0.02, runner=runner
        )
        memory = await read_memory(redis_client)
        assert memory is not None and memory.limit == 0
        await redis_client.config_set("maxmemory-policy", "noeviction")
        await redis_client.config_set("maxmemory", str(memory.used // 2))  # full now, mid-job
        full = await read_memory(redis_client)
        assert full is not None and full.full
        await wait_for_async("the worker to meet the full Redis", refused, 60, 0.02, runner=runner)
        stalled_at = (await queue.job_stats(job_id)).succeeded
        assert stalled_at < PAGES
        await redis_client.config_set("maxmemory", "0")  # room again
        await wait_for_async("the job to finish", lambda: _finished(queue, job_id), 60, 0.02, runner=runner)
    finally:
        await redis_client.config_set("maxmemory", "0")
        worker.request_stop()
        await asyncio.wait_for(runner, 30)

    stats = await queue.job_stats(job_id)
    assert (stats.succeeded, stats.dead, stats.retrying) == (PAGES, 0, 0)
    entries = await redis_client.xrange(Keys(PREFIX).results(job_id))
    landed = [fields[b"url"].decode() for _id, fields in entries]
    assert sorted(landed) == sorted(urls)  # every URL once: none lost, none twice
    # Not the page's fault: no task failed (no attempt spent as Internal), and no traceback for it.
    assert worker.metrics.outcomes.labels("failed")._value.get() == 0
    crashed = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert crashed == []


async def _succeeded_at_least(queue: Queue, job_id: str, n: int) -> bool:
    return (await queue.job_stats(job_id)).succeeded >= n


async def _finished(queue: Queue, job_id: str) -> bool:
    return (await queue.job_stats(job_id)).finished


async def test_the_remedies_run_while_redis_is_full(redis_client: aioredis.Redis) -> None:
    """Deleting a job (cancel) and starting a finished job's retention free memory, so a full Redis must
    run them: they were refused like every other write, and the user's way out was refused with them."""
    queue = Queue(redis_client, PREFIX, lease_seconds=5)
    for job_id in ("deleted", "retained"):
        await queue.register_job(JobConfig(job_id))
        await queue.enqueue(job_id, [f"https://{job_id}.test/{i}" for i in range(200)])
        await queue.mark_enqueue_done(job_id)
    memory = await read_memory(redis_client)
    assert memory is not None
    try:
        await redis_client.config_set("maxmemory-policy", "noeviction")
        await redis_client.config_set("maxmemory", str(memory.used // 2))
        with pytest.raises(OutOfMemoryError):  # Redis is full: ordinary transitions are refused whole
            await queue.enqueue("retained", ["https://retained.test/more"])
        await queue.cancel("deleted")
        await queue.expire_job("retained", 60)
    finally:
        await redis_client.config_set("maxmemory", "0")
    assert await redis_client.exists(*queue.keys.job_keys("deleted")) == 0
    assert 0 < await redis_client.ttl(queue.keys.job("retained")) <= 60
    assert (await queue.job_stats("retained")).total == 200  # the refused enqueue changed nothing
