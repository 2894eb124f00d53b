"""The worker end to end, in-process, against the real queue, a real Redis and the bookstore site."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev.bookstore import PRODUCT_FIELDS, PRODUCT_XPATH_FIELD, Bookstore, Renderer
from trawl.jobspec.wire import build_job_config
from trawl.operator.job.reconcile import _requeue_dead
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.queue.model import JobConfig
from trawl.queue.notes import JobNotes
from trawl.worker.extract import ExtractOptions, Extractor
from trawl.worker.runner import Worker, WorkerConfig
from trawl.worker.urls import CrawlPolicy, canonicalize
from waits import wait_for_async

PREFIX = "trawl:{test/books}"
ALLOWED = ["127.0.0.2/32"]


async def run_job(
    redis: aioredis.Redis, spec: dict[str, Any], *, wait_seconds: float = 60.0, concurrency: int = 16
) -> tuple[str, Queue, list[dict[str, Any]]]:
    """Register and enqueue a job, run one in-process worker until the job finishes; returns its records."""
    job = ScrapeJobSpec.model_validate({"pool": "books", **spec})
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis, PREFIX, lease_seconds=10)
    await queue.register_job(build_job_config(job_id, job, None))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.mark_enqueue_done(job_id)
    worker = Worker(
        WorkerConfig(prefix=PREFIX, worker_id="w-" + job_id, concurrency=concurrency, allowed_cidrs=ALLOWED),
        queue,
        redis,
        Keys(PREFIX),
    )
    runner = asyncio.create_task(worker.run())

    async def finished() -> bool:
        return (await queue.job_stats(job_id)).finished

    try:
        await wait_for_async(
            "the job to finish", finished, wait_seconds, 0.05, diag=lambda: queue.job_stats(job_id), runner=runner
        )
    finally:
        worker.request_stop()
        await asyncio.wait_for(runner, 30)
    entries = await redis.xrange(Keys(PREFIX).results(job_id))
    records = [json.loads(fields[b"data"]) for _id, fields in entries]
    return job_id, queue, records


def product_extract() -> dict[str, Any]:
    return {"fields": [*PRODUCT_FIELDS, PRODUCT_XPATH_FIELD], "onlyMatching": r"/product/\d+\.html$"}


async def test_crawl_returns_exactly_the_expected_products(site: Bookstore, redis_client: aioredis.Redis) -> None:
    before = len(site.entries())
    job_id, queue, records = await run_job(
        redis_client,
        {
            "urls": [site.url + "/"],
            "crawl": {"maxDepth": 10, "maxPages": 1000},
            "extract": product_extract(),
            "politeness": {"requestsPerSecond": 1000, "maxConcurrencyPerDomain": 16},
        },
    )
    expected = site.expected()
    got = {r["url"]: {k: r[k] for k in ("name", "price", "upc", "stock", "category", "rating")} for r in records}
    assert len(records) == len(expected) == 100  # one record per product, none twice
    assert got == expected
    log = site.entries()[before:]
    assert [e.path for e in log].count("/robots.txt") == 1  # fetched once, then cached
    robots_key = Keys(PREFIX).rate_limit(site.url, "robots")
    assert 3500 < await redis_client.ttl(robots_key) <= 3600  # cached in Redis for robotsCacheSeconds
    assert not [e for e in log if e.path.startswith("/private/")]  # robots.txt disallow obeyed
    stats = await queue.job_stats(job_id)
    # home + 12 listings + 100 products succeed; the discovered /private/secret.html, which robots.txt
    # disallows, is skipped (acked without a fetch, recorded with its reason), not dead-lettered
    assert (stats.succeeded, stats.dead, stats.total) == (114, 0, 114)
    count, sample = await JobNotes(redis_client, Keys(PREFIX).job).skipped(job_id)
    assert count == 1
    assert [s.url for s in sample] == [site.url + "/private/secret.html"]
    assert "robots.txt disallows" in sample[0].reason


async def test_a_seed_that_robots_disallows_is_a_dead_letter(site: Bookstore, redis_client: aioredis.Redis) -> None:
    job_id, queue, _records = await run_job(
        redis_client,
        {"urls": [site.url + "/private/secret.html", site.url + "/"], "politeness": {"requestsPerSecond": 1000}},
    )
    stats = await queue.job_stats(job_id)
    assert (stats.succeeded, stats.dead) == (1, 1)
    assert [d.error_class for d in await queue.dead_letters(job_id)] == ["RobotsDisallowed"]
    assert (await JobNotes(redis_client, Keys(PREFIX).job).skipped(job_id))[0] == 0


async def test_max_pages_is_exact(site: Bookstore, redis_client: aioredis.Redis) -> None:
    before = len(site.entries())
    job_id, queue, records = await run_job(
        redis_client,
        {
            "urls": [site.url + "/"],
            "crawl": {"maxDepth": 10, "maxPages": 23},
            "politeness": {"requestsPerSecond": 1000, "maxConcurrencyPerDomain": 16, "respectRobotsTxt": False},
        },
    )
    stats = await queue.job_stats(job_id)
    assert stats.total == 23 and stats.succeeded + stats.dead == 23
    assert len(records) == stats.succeeded
    pages = [e for e in site.entries()[before:] if e.path != "/robots.txt"]
    assert len(pages) == 23  # not one request more than maxPages


async def test_depth_is_exact(site: Bookstore, redis_client: aioredis.Redis) -> None:
    seed = site.url + "/category/mystery/page-1.html"
    _job_id, _queue, records = await run_job(
        redis_client,
        {
            "urls": [seed],
            "crawl": {"maxDepth": 1, "maxPages": 1000, "exclude": ["/private/"]},
            "politeness": {"requestsPerSecond": 1000, "maxConcurrencyPerDomain": 16},
        },
    )
    renderer = Renderer(site.catalog)
    seed_html = renderer.listing("Mystery", 1)
    assert seed_html is not None
    links = Extractor(ExtractOptions(), need_links=True).extract(seed_html, seed).links
    expected = {seed} | set(CrawlPolicy.build(max_depth=1, exclude=["/private/"]).select(links, seed, 0))
    assert {r["url"] for r in records} == expected
    assert max(r["depth"] for r in records) == 1
    assert canonicalize(site.url + "/category/mystery/page-2.html") in expected  # one hop is followed...
    assert site.url + "/category/mystery/page-3.html" not in {r["url"] for r in records}  # ...two are not


async def test_failures_retry_after_backoff_and_dead_letters(site: Bookstore, redis_client: aioredis.Redis) -> None:
    tag = uuid.uuid4().hex[:6]
    urls = {
        "429": f"{site.url}/hostile/429?id={tag}",
        "503": f"{site.url}/hostile/503?id={tag}&fail=2",
        "404": f"{site.url}/hostile/404?id={tag}",
        "ok": site.product_url(7),
    }
    job_id, queue, records = await run_job(
        redis_client,
        {
            "urls": list(urls.values()),
            "retry": {"maxAttempts": 4, "initialDelaySeconds": 0.5, "jitter": 0, "backoff": "Exponential"},
            "politeness": {"requestsPerSecond": 100},
        },
    )
    by_url = {r["url"]: r for r in records}
    assert set(by_url) == {urls["429"], urls["503"], urls["ok"]}
    assert by_url[urls["429"]]["attempt"] == 1  # Retry-After deferred the task without spending an attempt
    assert by_url[urls["503"]]["attempt"] == 3  # two failed attempts, then success
    log = site.entries()

    def times(url: str) -> list[float]:
        path = url.removeprefix(site.url)
        return [e.time for e in log if e.path == path]

    t429 = times(urls["429"])
    assert len(t429) == 2 and 1.9 <= t429[1] - t429[0] <= 3.5  # Retry-After: 2 honoured, about 2 s
    t503 = times(urls["503"])
    assert len(t503) == 3
    first_gap, second_gap = t503[1] - t503[0], t503[2] - t503[1]
    assert 0.45 <= first_gap < 1.5 and second_gap >= 0.95  # exponential backoff: 0.5 s then 1 s
    assert len(times(urls["404"])) == 1  # permanent: no retry
    dead = await queue.dead_letters(job_id)
    assert [(d.url, d.error_class, d.attempts) for d in dead] == [(urls["404"], "HTTP4xx", 1)]


async def test_blocked_redirect_is_dead_lettered_as_blocked(site: Bookstore, redis_client: aioredis.Redis) -> None:
    job_id, queue, records = await run_job(
        redis_client, {"urls": [f"{site.url}/hostile/redirect/metadata"], "politeness": {"requestsPerSecond": 100}}
    )
    assert records == []
    dead = await queue.dead_letters(job_id)
    assert [d.error_class for d in dead] == ["BlockedAddress"]


async def test_endless_retry_after_eventually_spends_attempts(site: Bookstore, redis_client: aioredis.Redis) -> None:
    url = f"{site.url}/hostile/429?id={uuid.uuid4().hex[:6]}&times=1000&after=0"
    job_id, queue, records = await run_job(
        redis_client,
        {"urls": [url], "retry": {"maxAttempts": 2, "jitter": 0}, "politeness": {"requestsPerSecond": 100}},
    )
    assert records == []
    dead = await queue.dead_letters(job_id)
    assert [(d.error_class, d.attempts) for d in dead] == [("HTTP429", 2)]
    # five deferrals without spending an attempt, then the two attempts of the retry policy
    assert len([e for e in site.entries() if e.path == url.removeprefix(site.url)]) == 5 + 2


async def test_dlq_retry_leaves_permanent_classes_alone_unless_asked(redis_client: aioredis.Redis) -> None:
    queue = Queue(redis_client, PREFIX, lease_seconds=10)
    job_id = uuid.uuid4().hex[:12]
    await queue.register_job(JobConfig(job_id))
    classes = ["RobotsDisallowed", "HTTP4xx", "SinkFailed", "Timeout", "ParseLimit"]
    await queue.enqueue(job_id, [f"http://site.test/{c}" for c in classes])
    await queue.mark_enqueue_done(job_id)
    for task in await queue.claim("w", len(classes)):
        cls = task.url.rsplit("/", 1)[1]
        await queue.fail(task, "w", cls, f"failed as {cls}", retry_after=None)
    # max_attempts of the default policy may retry Timeout: spend the retries until all are dead
    while (await queue.job_stats(job_id)).dead < len(classes):
        await queue.redis.zadd(
            Keys(PREFIX).delayed(job_id), {m: 0 for m in await queue.redis.zrange(Keys(PREFIX).delayed(job_id), 0, -1)}
        )
        for task in await queue.claim("w", len(classes)):
            cls = task.url.rsplit("/", 1)[1]
            await queue.fail(task, "w", cls, f"failed as {cls}")
    assert await _requeue_dead(queue, job_id, len(classes), include_permanent=False) == 2
    left = {d.error_class for d in await queue.dead_letters(job_id)}
    assert left == {"RobotsDisallowed", "HTTP4xx", "ParseLimit"}
    assert await _requeue_dead(queue, job_id, 3, include_permanent=True) == 3
    assert (await queue.job_stats(job_id)).dead == 0
