"""A deleted job's requests stop when the first of its tasks to finish here is refused its ack, not at the
worker's next once-a-second check: the tasks it had claimed and not started are dropped then. On a real Redis,
a real worker and a real HTTP server on loopback."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest
import redis.asyncio as aioredis
from aiohttp import web

from sites import serve_handler
from trawl.api.scrapejob import ScrapeJobSpec
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.worker import runner
from trawl.worker.runner import Worker, WorkerConfig
from waits import wait_for_async

PREFIX = "trawl:{test/cancel}"
HOST = "127.0.0.1"
CONCURRENCY = 2
CLAIM = 20  # tasks per claim: most of them wait in the worker's buffer
ANSWER = 0.3  # seconds the site takes per request once open
BOUND = 30.0


@dataclass
class Site:
    url: str = ""
    arrivals: int = 0
    gate: asyncio.Event = field(default_factory=asyncio.Event)  # the site answers (ANSWER s) once it is open


@pytest.fixture
async def site() -> AsyncIterator[Site]:
    s = Site()

    async def page(request: web.Request) -> web.Response:
        s.arrivals += 1
        await s.gate.wait()
        await asyncio.sleep(ANSWER)
        return web.Response(text="<h1>ok</h1>", content_type="text/html")

    try:
        async with serve_handler(page, "/{n}", HOST) as url:
            s.url = url
            yield s
    finally:
        s.gate.set()


async def test_a_deleted_jobs_claimed_tasks_are_dropped_at_its_first_refused_ack(
    redis_client: aioredis.Redis, site: Site, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The once-a-second check out of the way: only the refused ack can stop the job's tasks in time.
    monkeypatch.setattr(runner, "CANCEL_CHECK_SECONDS", 60.0)
    queue = Queue(redis_client, PREFIX, lease_seconds=60)
    spec = ScrapeJobSpec.model_validate(
        {
            "pool": "p",
            "urls": [f"{site.url}{i}" for i in range(CLAIM)],
            "politeness": {"respectRobotsTxt": False, "requestsPerSecond": 1000, "maxConcurrencyPerDomain": 100},
        }
    )
    job_id = uuid.uuid4().hex[:12]
    await queue.register_job(build_job_config(job_id, spec, None))
    await queue.enqueue(job_id, spec.seed_urls())
    await queue.mark_enqueue_done(job_id)
    config = WorkerConfig(
        prefix=PREFIX, worker_id=f"w@{uuid.uuid4().hex[:4]}", concurrency=CONCURRENCY, claim_batch=CLAIM,
        sink_capacity=CLAIM, allowed_cidrs=[f"{HOST}/32"], drain_seconds=5, parse_processes=0,
    )  # fmt: skip
    worker = Worker(config, queue, redis_client, Keys(PREFIX))
    running = asyncio.create_task(worker.run())
    try:
        await wait_for_async("the first requests to reach the site", lambda: site.arrivals >= CONCURRENCY, BOUND)
        # The rest claimed, waiting for a place (each a request to the site once started).
        await wait_for_async(
            "the claim's other tasks in the buffer",
            lambda: len(worker._buffer) + len(worker._inflight) == CLAIM and len(worker._buffer) > 2 * CONCURRENCY,
            BOUND,
        )
        started = len(worker._inflight)  # running, or parked for their domain
        await queue.cancel(job_id)  # the ScrapeJob deleted
        site.gate.set()
        await wait_for_async(
            "the deleted job's claimed tasks to be dropped", lambda: not worker._buffer and not worker._inflight, BOUND
        )
        # Those started, and at most a few more started between their answers and their refused ack: not the
        # whole buffer (each a request to the site of a job that no longer exists; 20 before).
        assert site.arrivals <= started + 2 * CONCURRENCY, (site.arrivals, started)
    finally:
        worker.request_stop()
        await asyncio.wait_for(running, BOUND)
