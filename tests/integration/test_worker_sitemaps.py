"""Sitemap seeds end to end: a real worker (parser child included), real queue and redis-server, the bookstore
over loopback with its sitemaps (trawl.dev.sitemapsite). A sitemap index leads to a gzip sitemap whose
pages are fetched and written; robots.txt names the index; hostile sitemaps (a gzip bomb, billion laughs,
an index of 50,000 sitemaps, an HTML page, endless nesting) are each dead-lettered as BadSitemap with
the reason, while the job's other seeds and sitemaps go on."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import ResponseError

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev.bookstore import ROBOTS_TXT, Bookstore, slugify
from trawl.dev.sitemapsite import HUGE_INDEX_ENTRIES, NEW_LASTMOD
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.queue.model import JobConfig, JobStats
from trawl.queue.sharded import make_queue
from trawl.worker.runner import Worker, WorkerConfig
from trawl.worker.sitemaps import MAX_INDEX_ENTRIES

PREFIX = "trawl:{test/sitemaps}"
ALLOWED = ["127.0.0.2/32"]


@pytest.fixture(scope="module")
def site_options() -> dict[str, Any]:
    return {"robots_txt": ROBOTS_TXT + "Sitemap: /sitemap.xml\n"}


async def _run(
    redis: aioredis.Redis, spec: dict[str, Any], *, within: float = 120.0
) -> tuple[str, Queue, Worker, list[dict[str, Any]], JobStats]:
    """Run one job to its end as the operator would enqueue it (its seeds, then its sitemaps); returns its
    records and counters."""
    job = ScrapeJobSpec.model_validate({"pool": "p", "politeness": {"requestsPerSecond": 1000}, **spec})
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis, PREFIX, lease_seconds=10)
    await queue.register_job(build_job_config(job_id, job, None))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.enqueue_sitemap(job_id, -1, job.sitemap_seeds())
    await queue.mark_enqueue_done(job_id)
    worker = Worker(
        WorkerConfig(prefix=PREFIX, worker_id="w-" + job_id, concurrency=8, allowed_cidrs=ALLOWED, parse_processes=1),
        queue,
        redis,
        Keys(PREFIX),
    )
    runner = asyncio.create_task(worker.run())
    try:
        deadline = time.monotonic() + within
        while not (stats := await queue.job_stats(job_id)).finished:
            assert time.monotonic() < deadline, stats
            assert not runner.done(), runner
            await asyncio.sleep(0.05)
    finally:
        worker.request_stop()
        await asyncio.wait_for(runner, 30)
    entries = await redis.xrange(Keys(PREFIX).results(job_id))
    return job_id, queue, worker, [json.loads(f[b"data"]) for _id, f in entries], stats


def _listings(site: Bookstore) -> list[str]:
    return [f"{site.url}/category/{slugify(c)}/page-1.html" for c in site.catalog.categories]


async def test_an_index_leads_to_a_gzip_sitemap_whose_pages_are_written(
    site: Bookstore, redis_client: aioredis.Redis
) -> None:
    spec = {
        "sitemaps": {"urls": [site.url + "/sitemap.xml"]},
        "extract": {"fields": [{"name": "upc", "selector": "#upc"}]},
    }
    job_id, queue, _worker, records, stats = await _run(redis_client, spec)
    products = [site.product_url(p.id) for p in site.catalog.products]
    assert sorted(r["url"] for r in records) == sorted([*products, *_listings(site)])
    assert all(r["depth"] == 0 for r in records)
    upcs = {r["url"]: r["upc"] for r in records}
    assert upcs[site.product_url(1)] == site.catalog.products[0].upc
    # the index, its two sitemaps, and every page they list: all done, none failed
    pages = len(products) + len(_listings(site))
    assert (stats.total, stats.succeeded, stats.dead, stats.from_sitemaps) == (3 + pages, 3 + pages, 0, pages)
    assert await queue.dead_letters(job_id) == []


async def test_lastmod_after_takes_only_what_changed(site: Bookstore, redis_client: aioredis.Redis) -> None:
    spec = {"sitemaps": {"urls": [site.url + "/sitemap.xml"], "lastmodAfter": "2024-03-01T00:00:00Z"}}
    _job_id, _queue, _worker, records, stats = await _run(redis_client, spec)
    # the products with a recent lastmod (even ids: NEW_LASTMOD), and the listings, which have none
    recent = [site.product_url(p.id) for p in site.catalog.products if p.id % 2 == 0]
    assert NEW_LASTMOD > "2024-03-01"
    assert sorted(r["url"] for r in records) == sorted([*recent, *_listings(site)])
    assert stats.from_sitemaps == len(recent) + len(_listings(site))


async def test_robots_txt_names_the_index(site: Bookstore, redis_client: aioredis.Redis) -> None:
    spec = {"urls": [site.url + "/"], "sitemaps": {"fromRobotsTxt": True, "include": [r"/product/"]}}
    _job_id, _queue, _worker, records, stats = await _run(redis_client, spec)
    products = [site.product_url(p.id) for p in site.catalog.products]
    assert sorted(r["url"] for r in records) == sorted([site.url + "/", *products])
    # robots.txt, the index, its two sitemaps, the seed and the products; nothing failed
    assert (stats.total, stats.dead, stats.from_sitemaps) == (4 + 1 + len(products), 0, len(products))


async def test_hostile_sitemaps_are_dead_lettered_alone(site: Bookstore, redis_client: aioredis.Redis) -> None:
    hostile = {
        "bomb": site.url + "/hostile/sitemap/bomb.xml.gz",
        "laughs": site.url + "/hostile/sitemap/laughs.xml",
        "index": site.url + "/hostile/sitemap/huge-index.xml",
        "html": site.url + "/",
        "nest": site.url + "/hostile/sitemap/nest/1.xml",
    }
    seeds = [site.product_url(1), site.product_url(2)]
    good = site.url + "/sitemaps/categories.xml"
    spec = {"urls": seeds, "sitemaps": {"urls": [*hostile.values(), good]}}
    started = time.monotonic()
    job_id, queue, worker, records, stats = await _run(redis_client, spec)
    assert time.monotonic() - started < 60
    assert sorted(r["url"] for r in records) == sorted([*seeds, *_listings(site)])
    dead = {d.url: d for d in await queue.dead_letters(job_id)}
    nest3 = site.url + "/hostile/sitemap/nest/3.xml"
    assert sorted(dead) == sorted([*(u for k, u in hostile.items() if k != "nest"), nest3])
    assert all(d.error_class == "BadSitemap" and d.attempts == 1 for d in dead.values())
    assert "inflates to more than 52428800 bytes" in dead[hostile["bomb"]].message
    assert "declares a DTD" in dead[hostile["laughs"]].message
    assert f"more than {MAX_INDEX_ENTRIES} sitemaps in an index" in dead[hostile["index"]].message
    assert HUGE_INDEX_ENTRIES > MAX_INDEX_ENTRIES
    assert "content type text/html" in dead[hostile["html"]].message
    assert "nested more than 3 levels" in dead[nest3].message
    # the two seeds, the good sitemap and its pages, and the two levels of nesting that were read
    assert (stats.succeeded, stats.dead) == (2 + 1 + len(_listings(site)) + 2, 5)
    assert worker.parser.killed == 0  # every refusal was a reply, not a parser over its budget


@pytest.mark.parametrize("shards", [1, 3])
async def test_the_queue_keeps_sitemap_tasks_apart_and_capped(redis_client: aioredis.Redis, shards: int) -> None:
    queue = make_queue(redis_client, f"trawl:{{test/sitemapq{shards}}}", shards=shards)
    job_id = uuid.uuid4().hex[:12]
    await queue.register_job(JobConfig(job_id=job_id, max_pages=8, dedupe_seeds=True))
    await queue.enqueue(job_id, ["https://a.test/1"])
    # a sitemap whose URL a page already took is still read: sitemaps dedupe in a namespace of their own
    assert await queue.enqueue_sitemap(job_id, -1, ["https://a.test/1", "https://a.test/s.xml"]) == 2
    assert await queue.enqueue_sitemap(job_id, -1, ["https://a.test/s.xml"]) == 0
    # page URLs: the seed again adds nothing; the cap (8 tasks) stops the rest
    pages = [f"https://a.test/{i}" for i in range(1, 20)]
    assert await queue.enqueue_sitemap(job_id, 0, pages) == 5
    stats = await queue.job_stats(job_id)
    assert (stats.total, stats.from_sitemaps) == (8, 5)
    claimed = await queue.claim("w1", 10)
    assert sorted((t.depth, t.url) for t in claimed)[:2] == [(-1, "https://a.test/1"), (-1, "https://a.test/s.xml")]
    with pytest.raises(ResponseError, match=r"depth must be 0\.\.-3"):
        await queue.enqueue_sitemap(job_id, -4, ["https://a.test/deep.xml"])
