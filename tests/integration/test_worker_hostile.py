"""The worker against hostile pages of the fixture site: parser traps and declared character sets.

Real worker (parser child processes included), real queue and Redis, the bookstore over loopback.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import time
import uuid
from typing import Any

import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev.bookstore import CHARSET_PAGES, CHARSET_TITLE, Bookstore
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from trawl.queue.model import Heartbeat
from trawl.worker.runner import Worker, WorkerConfig

PREFIX = "trawl:{test/hostile}"
ALLOWED = ["127.0.0.2/32"]


async def _run(
    redis: aioredis.Redis, urls: list[str], *, within: float = 120.0, spec: dict[str, Any] | None = None, **config: Any
) -> tuple[str, Queue, Worker, list[dict[str, Any]], dict[str, float]]:
    """Run one job (``spec``: more of its spec) to its end; returns its records and what a probe saw of the
    event loop meanwhile."""
    job = ScrapeJobSpec.model_validate(
        {"pool": "p", "urls": urls, "politeness": {"requestsPerSecond": 1000}, **(spec or {})}
    )
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis, PREFIX, lease_seconds=10)
    await queue.register_job(build_job_config(job_id, job, None))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.mark_enqueue_done(job_id)
    config.setdefault("parse_processes", 1)  # one parser child: enough here, and quicker to start
    worker = Worker(
        WorkerConfig(prefix=PREFIX, worker_id="w-" + job_id, concurrency=8, allowed_cidrs=ALLOWED, **config),
        queue,
        redis,
        Keys(PREFIX),
    )
    beats: list[float] = []
    real_heartbeat = queue.heartbeat

    async def heartbeat(worker_id: str, **kw: Any) -> Heartbeat:
        beats.append(time.monotonic())
        return await real_heartbeat(worker_id, **kw)

    queue.heartbeat = heartbeat  # type: ignore[method-assign]
    runner = asyncio.create_task(worker.run())
    probe = {"max_gap": 0.0}
    try:
        deadline = time.monotonic() + within
        last = time.monotonic()
        while not (await queue.job_stats(job_id)).finished:
            assert time.monotonic() < deadline, await queue.job_stats(job_id)
            assert not runner.done(), runner
            await asyncio.sleep(0.02)
            now = time.monotonic()
            probe["max_gap"] = max(probe["max_gap"], now - last)
            last = now
    finally:
        worker.request_stop()
        await asyncio.wait_for(runner, 30)
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    probe["max_heartbeat_gap"] = max(gaps) if gaps else float("inf")
    probe["heartbeats"] = len(beats)
    entries = await redis.xrange(Keys(PREFIX).results(job_id))
    return job_id, queue, worker, [json.loads(f[b"data"]) for _id, f in entries], probe


async def test_a_deeply_nested_page_dead_letters_alone_and_the_loop_keeps_running(
    site: Bookstore, redis_client: aioredis.Redis
) -> None:
    deep = site.url + "/hostile/deep?n=200000"
    products = [site.product_url(i) for i in range(1, 9)]
    budget = 3.0
    started = time.monotonic()
    job_id, queue, worker, records, probe = await _run(
        redis_client, [deep, *products], parse_seconds=budget, heartbeat_seconds=0.2
    )
    elapsed = time.monotonic() - started
    stats = await queue.job_stats(job_id)
    assert (stats.succeeded, stats.dead) == (len(products), 1)
    assert sorted(r["url"] for r in records) == sorted(products)
    [dead] = await queue.dead_letters(job_id)
    assert (dead.url, dead.error_class, dead.attempts) == (deep, "ParseLimit", 1)
    assert f"budget of {budget:g}s" in dead.message
    assert worker.parser.killed == 1
    # While the page was being parsed the event loop never waited for it (inline it takes minutes),
    # and heartbeats went on being sent.
    assert probe["max_gap"] < budget, probe
    assert probe["heartbeats"] >= 3 and probe["max_heartbeat_gap"] < budget, probe
    assert elapsed < 60


async def test_pages_over_the_size_or_tag_limit_are_refused_before_parsing(
    site: Bookstore, redis_client: aioredis.Redis
) -> None:
    job_id, queue, worker, _records, _probe = await _run(
        redis_client, [site.url + "/hostile/deep?n=5000", site.product_url(1)], parse_max_tags=4000
    )
    [dead] = await queue.dead_letters(job_id)
    assert dead.error_class == "ParseLimit" and "over the parse limit of 4000" in dead.message
    assert (await queue.job_stats(job_id)).succeeded == 1
    assert worker.parser.killed == 0


# A job author's pattern that makes a backtracking engine exponential: Python's re takes ~10 s (twice as
# long for each more "a") to find that it does not match the URL below; RE2 answers in microseconds.
CATASTROPHIC = "(a+)+$"


async def test_a_catastrophic_pattern_does_not_stall_the_loop(site: Bookstore, redis_client: aioredis.Redis) -> None:
    # The author writes the pattern and the URLs it is matched against (a seed's query is theirs to choose).
    hostile = site.product_url(1) + "?q=" + "a" * 27 + "!"
    products = [site.product_url(i) for i in range(2, 6)]
    job_id, queue, _worker, records, probe = await _run(
        redis_client,
        [hostile, *products],
        spec={"extract": {"onlyMatching": CATASTROPHIC}},
        heartbeat_seconds=0.2,
    )
    stats = await queue.job_stats(job_id)
    assert (stats.succeeded, stats.dead) == (len(products) + 1, 0)
    assert records == []  # no URL matches the pattern: nothing is written
    assert probe["max_gap"] < 1.0 and probe["max_heartbeat_gap"] < 1.0, probe


# Each div counts its div ancestors that count theirs, and so on: ~N^4/24 steps, about 20 s on a page of 400
# nested divs (809 tags: small enough to have been parsed on the event loop), microseconds on a product page.
SLOW_XPATH = "//div[count(ancestor::div[count(ancestor::div[count(ancestor::div) > 0]) > 0]) > 0]"


async def test_a_slow_xpath_dead_letters_its_page_and_the_loop_keeps_running(
    site: Bookstore, redis_client: aioredis.Redis
) -> None:
    deep = site.url + "/hostile/deep?n=400"
    products = [site.product_url(i) for i in range(1, 7)]
    budget = 2.0
    fields = [{"name": "nested", "selector": SLOW_XPATH, "kind": "XPath", "multiple": True}]
    job_id, queue, worker, records, probe = await _run(
        redis_client,
        [deep, *products],
        spec={"extract": {"fields": fields}},
        parse_seconds=budget,
        heartbeat_seconds=0.2,
    )
    stats = await queue.job_stats(job_id)
    assert (stats.succeeded, stats.dead) == (len(products), 1)
    assert sorted(r["url"] for r in records) == sorted(products)
    [dead] = await queue.dead_letters(job_id)
    assert (dead.url, dead.error_class) == (deep, "ParseLimit") and f"budget of {budget:g}s" in dead.message
    assert worker.parser.killed == 1
    assert probe["max_gap"] < budget and probe["max_heartbeat_gap"] < budget, probe


async def test_declared_character_sets_decode_as_a_browser_would(site: Bookstore, redis_client: aioredis.Redis) -> None:
    urls = [f"{site.url}/hostile/charset/{kind}" for kind in CHARSET_PAGES]
    _job_id, _queue, _worker, records, _probe = await _run(redis_client, urls)
    titles = {r["url"].rsplit("/", 1)[1]: r["title"] for r in records}
    assert titles == CHARSET_TITLE


async def test_robots_crawl_delay_is_honoured(redis_client: aioredis.Redis) -> None:
    robots = "User-agent: *\nCrawl-delay: 0.5\nDisallow: /private/\n"
    with Bookstore(host="127.0.0.2", robots_txt=robots, categories=1, books_per_category=5) as slow:
        urls = [slow.product_url(i) for i in range(1, 6)]
        _job_id, _queue, _worker, records, _probe = await _run(redis_client, urls)
        times = sorted(e.time for e in slow.entries() if e.path.startswith("/product/"))
    assert len(records) == len(urls) and len(times) == len(urls)
    # The job asked for 1000 requests/s; the site's Crawl-delay of 0.5 s spaced them (a lower bound:
    # a busy machine only spaces them further).
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert min(gaps) >= 0.45, gaps


async def test_a_5xx_robots_txt_is_a_temporary_disallow(redis_client: aioredis.Redis) -> None:
    with Bookstore(host="127.0.0.2", robots_fail=1, categories=1, books_per_category=3) as flaky:
        urls = [flaky.product_url(i) for i in range(1, 4)]
        job_id, queue, _worker, records, _probe = await _run(redis_client, urls, robots_unavailable_seconds=1.0)
        log = [(e.path, e.status) for e in flaky.entries()]
    stats = await queue.job_stats(job_id)
    assert (stats.succeeded, stats.dead) == (len(urls), 0)
    assert [r["attempt"] for r in records] == [1] * len(urls)  # waited without spending an attempt
    robots = [i for i, (path, _status) in enumerate(log) if path == "/robots.txt"]
    assert [log[i][1] for i in robots] == [503, 200]
    pages = [i for i, (path, _status) in enumerate(log) if path.startswith("/product/")]
    assert min(pages) > robots[1]  # nothing of the origin was fetched while its robots.txt failed
