"""A browser task's page time, measured by a real worker rendering in real Chromium: every attempt's time
in the browser is counted against its job and its tenant's day (browserSecondsPerDay), a plain fetch's is
not, and the count reaches Redis within about a second and at the worker's stop."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import replace
from typing import Any

import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev.bookstore import Renderer
from trawl.dev.jsbookstore import LISTING_FIELDS, Hits, listing_paths
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.worker.browser.settings import BrowserSettings
from trawl.worker.runner import Worker, WorkerConfig
from waits import wait_for_async

PREFIX = "trawl:{test/browsertime}"
ALLOWED = ["127.0.0.2/32"]
POLITE = {"requestsPerSecond": 1000, "maxConcurrencyPerDomain": 8}


async def _register(queue: Queue, tenant: str, spec: dict[str, Any]) -> tuple[str, int]:
    job = ScrapeJobSpec.model_validate({"pool": "render", "politeness": POLITE, **spec})
    job_id = uuid.uuid4().hex[:12]
    await queue.register_job(replace(build_job_config(job_id, job, None), tenant=tenant))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.mark_enqueue_done(job_id)
    return job_id, len(job.seed_urls())


async def test_a_browser_tasks_page_time_counts_for_its_job_and_tenant(
    js_site: tuple[str, Renderer, Hits], redis_client: aioredis.Redis
) -> None:
    base, renderer, _hits = js_site
    queue = Queue(redis_client, PREFIX, lease_seconds=30)
    js = [base + p for p in listing_paths(renderer, "js")[:3]]
    static = [base + p for p in listing_paths(renderer, "static")[:3]]
    rendered, n_rendered = await _register(
        queue, "team-a", {"urls": js, "extract": {"fields": LISTING_FIELDS}, "render": {"mode": "Browser"}}
    )
    plain, n_plain = await _register(queue, "team-a", {"urls": static, "extract": {"fields": LISTING_FIELDS}})
    worker = Worker(
        WorkerConfig(prefix=PREFIX, worker_id="w-" + rendered, concurrency=4, allowed_cidrs=ALLOWED),
        queue,
        redis_client,
        Keys(PREFIX),
    )
    worker.renderer.settings = BrowserSettings(pages_per_browser=2)
    started = time.monotonic()
    runner = asyncio.create_task(worker.run())

    async def done() -> bool:
        return all([(await queue.job_stats(j)).finished for j in (rendered, plain)])

    async def counted() -> bool:
        return bool(await redis_client.hget(Keys(PREFIX).job(rendered), "bms"))

    try:
        await wait_for_async("both jobs finish", done, 120, 0.05, runner=runner)
        # flushed while the worker runs (about once a second), not only at its stop
        await wait_for_async("the page time reaches Redis", counted, 5, 0.05, runner=runner)
    finally:
        worker.request_stop()
        await asyncio.wait_for(runner, 60)
    wall = time.monotonic() - started
    stats = await queue.job_stats(rendered)
    assert (stats.succeeded, (await queue.job_stats(plain)).succeeded) == (n_rendered, n_plain)
    job_ms = int(await redis_client.hget(Keys(PREFIX).job(rendered), "bms") or 0)
    # Three pages rendered, each held its page a while (a real render takes tens of milliseconds at least);
    # two pages at a time, so never more than twice the worker's whole run.
    assert 3 * 10 < job_ms < 2 * wall * 1000
    assert await redis_client.hget(Keys(PREFIX).job(plain), "bms") is None  # plain fetches hold no browser
    [usage] = [u for u in await queue.tenant_usage() if u.tenant == "team-a"]
    assert usage.browser_seconds_today == job_ms / 1000
    assert worker.renderer.time.pending() == {}  # nothing left unsent at the stop
