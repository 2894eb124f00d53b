"""Output formats (extract.formats) end to end: a real worker (parser child processes included), real queue
and Redis, pages served over loopback; the records checked as the Redis stream sink holds them."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import redis.asyncio as aioredis
from prometheus_client import CollectorRegistry

from format_pages import GRAPHS, serve
from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.queue.notes import JobNotes
from trawl.worker.metrics import WorkerMetrics
from trawl.worker.runner import Worker, WorkerConfig

PREFIX = "trawl:{test/formats}"
HOST = "127.0.0.2"
ALLOWED = ["127.0.0.2/32"]
FORMAT_BYTES = 64 * 1024  # the pool's jobLimits.maxFormatBytes


async def _run(redis: aioredis.Redis, urls: list[str], extract: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    """One job on a pool whose format budget is FORMAT_BYTES, run to its end; its records and the metrics."""
    job = ScrapeJobSpec.model_validate(
        {"pool": "p", "urls": urls, "politeness": {"requestsPerSecond": 1000}, "extract": extract}
    )
    pool = ScrapePoolSpec.model_validate(
        {"redis": {"url": "redis://redis:6379/0"}, "jobLimits": {"maxFormatBytes": FORMAT_BYTES}}
    )
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis, PREFIX, lease_seconds=10)
    await queue.register_job(build_job_config(job_id, job, pool))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.mark_enqueue_done(job_id)
    registry = CollectorRegistry()
    config = WorkerConfig(
        prefix=PREFIX, worker_id="w-" + job_id, concurrency=4, allowed_cidrs=ALLOWED, parse_processes=1
    )
    worker = Worker(config, queue, redis, Keys(PREFIX), metrics=WorkerMetrics(registry))
    runner = asyncio.create_task(worker.run())
    try:
        deadline = time.monotonic() + 120
        while not (await queue.job_stats(job_id)).finished:
            assert time.monotonic() < deadline, await queue.job_stats(job_id)
            assert not runner.done(), runner
            await asyncio.sleep(0.05)
    finally:
        worker.request_stop()
        await asyncio.wait_for(runner, 30)
    stats = await queue.job_stats(job_id)
    assert (stats.succeeded, stats.dead) == (len(urls), 0), await queue.dead_letters(job_id)
    entries = await redis.xrange(Keys(PREFIX).results(job_id))
    truncated = await JobNotes(redis, Keys(PREFIX).job).truncated_count(job_id)  # the status's counts.truncated
    assert truncated == sum(1 for _id, f in entries if b'"truncated"' in f[b"data"])
    return [json.loads(f[b"data"]) for _id, f in entries], registry


async def test_formats_reach_the_stream_bounded_and_marked(redis_client: aioredis.Redis) -> None:
    async with serve(HOST) as base:
        urls = [base + "/article", base + "/huge-text", base + "/many-json-ld"]
        records, registry = await _run(redis_client, urls, {"formats": ["markdown", "structured", "links"]})
    by_path = {r["url"].removeprefix(base): r for r in records}
    article = by_path["/article"]
    assert "lighthouse keeper" in article["markdown"] and "| Monday | 12 |" in article["markdown"]
    assert "Cheap flights" not in article["markdown"]
    assert article["structured"]["json-ld"] == GRAPHS
    assert article["structured"]["microdata"][0]["name"] == "Brass lantern"
    assert f"{base}/log/2.html" in article["links"] and len(article["links"]) == len(set(article["links"]))
    assert "truncated" not in article

    huge = by_path["/huge-text"]
    assert huge["truncated"] == ["markdown"]
    assert 0 < len(huge["markdown"].encode()) <= FORMAT_BYTES
    offers = by_path["/many-json-ld"]
    assert offers["truncated"] == ["structured"]
    assert len(json.dumps(offers["structured"]["json-ld"]).encode()) <= FORMAT_BYTES
    assert offers["structured"]["json-ld"][0] == {"@type": "Offer", "price": 0}

    def sample(name: str, **labels: str) -> float:
        return registry.get_sample_value(name, labels) or 0.0

    assert sample("trawl_worker_format_seconds_count", format="markdown") == 3
    assert sample("trawl_worker_format_seconds_count", format="structured") == 3
    assert sample("trawl_worker_format_truncated_total", format="markdown") == 1
    assert sample("trawl_worker_format_truncated_total", format="structured") == 1
