"""A failing sink never makes the worker refetch: records are kept and written again, then SinkFailed.

Real worker, real queue and Redis, the bookstore over loopback; the outage is a JSON Lines directory that
cannot be created (its parent is a file) until the test repairs it, the permanent failure a webhook on an
address the SSRF guard refuses.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev.bookstore import Bookstore
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.queue.notes import JobNotes
from trawl.worker.runner import Worker, WorkerConfig
from waits import wait_for_async

PREFIX = "trawl:{test/sinkfail}"
ALLOWED = ["127.0.0.2/32"]
PAGES = 12


async def _start(
    redis: aioredis.Redis, spec: dict[str, Any], **config: Any
) -> tuple[str, Queue, Worker, asyncio.Task[None]]:
    job = ScrapeJobSpec.model_validate({"pool": "p", **spec})
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis, PREFIX, lease_seconds=10)
    await queue.register_job(build_job_config(job_id, job, None))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.mark_enqueue_done(job_id)
    worker = Worker(
        WorkerConfig(prefix=PREFIX, worker_id="w-" + job_id, concurrency=8, allowed_cidrs=ALLOWED, **config),
        queue,
        redis,
        Keys(PREFIX),
    )
    return job_id, queue, worker, asyncio.create_task(worker.run())


def _fetches(site: Bookstore, before: int) -> Counter[str]:
    return Counter(e.path for e in site.entries()[before:] if e.path != "/robots.txt")


async def test_a_sink_outage_costs_no_refetch_and_loses_no_record(
    site: Bookstore, redis_client: aioredis.Redis, tmp_path: Path
) -> None:
    blocker = tmp_path / "out"
    blocker.write_text("a file where the sink's directory should be")
    directory = blocker / "records"
    urls = [site.product_url(i) for i in range(1, PAGES + 1)]
    before = len(site.entries())
    job_id, queue, worker, runner = await _start(
        redis_client,
        {"urls": urls, "output": {"sink": "JsonLines", "jsonLines": {"directory": str(directory)}}},
        json_lines_dir=str(directory),
        sink_backoff_seconds=0.05,
        sink_retry_seconds=600,
    )
    notes = JobNotes(redis_client, Keys(PREFIX).job)
    try:
        # The outage: every page is fetched, no record can be written, and the job says why.
        trouble = await wait_for_async("the sink note", lambda: notes.sink_trouble(job_id), 60, 0.05, runner=runner)
        assert "json lines write failed" in trouble.message
        await wait_for_async(
            "every page fetched and retried",
            lambda: (
                sum(_fetches(site, before).values()) == PAGES and worker.metrics.sink_retries._value.get() >= 3 * PAGES
            ),
            60,
            0.05,
            runner=runner,
        )
        stats = await queue.job_stats(job_id)
        assert (stats.succeeded, stats.dead, stats.in_flight) == (0, 0, PAGES)  # held, not given back
        # The worker's gauge says the same as the queue (and its heartbeat): every lease it holds, not only
        # the tasks in its slots (none now: all were fetched and wait for the sink).
        assert worker.metrics.registry.get_sample_value("trawl_worker_in_flight") == worker.in_flight == PAGES

        blocker.unlink()  # the sink recovers
        await wait_for_async("the job to finish", lambda: _finished(queue, job_id), 60, 0.05, runner=runner)
    finally:
        worker.request_stop()
        await asyncio.wait_for(runner, 30)
    stats = await queue.job_stats(job_id)
    assert (stats.succeeded, stats.dead) == (PAGES, 0)
    fetched = _fetches(site, before)
    assert sorted(fetched) == sorted(u.removeprefix(site.url) for u in urls)
    assert set(fetched.values()) == {1}  # zero refetches
    lines = [json.loads(line) for line in (directory / f"{job_id}.jsonl").read_text().splitlines()]
    assert sorted(r["url"] for r in lines) == sorted(urls)  # every record, once
    assert await notes.sink_trouble(job_id) is None  # the job no longer says the sink fails


async def test_a_permanently_failing_sink_dead_letters_with_its_reason(
    site: Bookstore, redis_client: aioredis.Redis
) -> None:
    urls = [site.product_url(i) for i in range(20, 20 + 4)]
    before = len(site.entries())
    job_id, queue, worker, runner = await _start(
        redis_client,
        {"urls": urls, "output": {"sink": "Webhook", "webhook": {"url": "http://10.0.0.1/hook"}}},
        sink_backoff_seconds=0.05,
        sink_retry_seconds=1.0,
    )
    notes = JobNotes(redis_client, Keys(PREFIX).job)
    try:
        trouble = await wait_for_async("the sink note", lambda: notes.sink_trouble(job_id), 60, 0.05, runner=runner)
        assert "refused" in trouble.message
        await wait_for_async("the job to finish", lambda: _finished(queue, job_id), 60, 0.05, runner=runner)
    finally:
        worker.request_stop()
        await asyncio.wait_for(runner, 30)
    stats = await queue.job_stats(job_id)
    assert (stats.succeeded, stats.dead) == (0, len(urls))
    dead = await queue.dead_letters(job_id)
    assert {d.url for d in dead} == set(urls)
    assert all(d.error_class == "SinkFailed" and d.attempts == 1 for d in dead)
    assert all("webhook http://10.0.0.1/hook refused" in d.message for d in dead)
    assert set(_fetches(site, before).values()) == {1}  # each page fetched once, never again
    assert worker.metrics.sink_failed._value.get() == len(urls)


async def _finished(queue: Queue, job_id: str) -> bool:
    return (await queue.job_stats(job_id)).finished
