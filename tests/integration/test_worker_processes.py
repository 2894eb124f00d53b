"""`trawl worker` as real processes: a pool-wide rate limit shared by two workers; SIGTERM drain."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
import uuid
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev import procs
from trawl.dev.bookstore import PRODUCT_FIELDS, Bookstore
from trawl.dev.redis_server import RedisServer
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from waits import wait_for_async
from worker_procs import start_worker

PREFIX = "trawl:{test/procs}"


async def submit(redis: aioredis.Redis, spec: dict[str, Any]) -> tuple[str, Queue]:
    job = ScrapeJobSpec.model_validate({"pool": "procs", **spec})
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis, PREFIX, lease_seconds=10)
    await queue.register_job(build_job_config(job_id, job, None))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.mark_enqueue_done(job_id)
    return job_id, queue


async def wait_finished(queue: Queue, job_id: str, limit: float) -> None:
    async def finished() -> bool:
        return (await queue.job_stats(job_id)).finished

    await wait_for_async(f"job {job_id} to finish", finished, limit, 0.1, diag=lambda: queue.job_stats(job_id))


async def records(redis: aioredis.Redis, job_id: str) -> list[dict[str, Any]]:
    return [json.loads(f[b"data"]) for _id, f in await redis.xrange(Keys(PREFIX).results(job_id))]


def processed(log: Path) -> int:
    for line in log.read_text().splitlines():
        if line.startswith("{") and json.loads(line).get("msg") == "worker stopped":
            return int(json.loads(line)["processed"])
    raise AssertionError(f"no 'worker stopped' line in {log}:\n{log.read_text()[-2000:]}")


async def test_two_workers_share_a_domain_rate_limit(
    redis_server: RedisServer, redis_client: aioredis.Redis, workers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    with Bookstore(host="127.0.0.2") as site:
        job_id, queue = await submit(
            redis_client,
            {
                "urls": [site.product_url(i) for i in range(1, 41)],
                "politeness": {"requestsPerSecond": 5, "maxConcurrencyPerDomain": 4},
            },
        )
        a = start_worker(workers, ["--redis-url", redis_server.url], PREFIX, "rate-a", tmp_path)
        b = start_worker(workers, ["--redis-url", redis_server.url], PREFIX, "rate-b", tmp_path)
        await wait_finished(queue, job_id, 40)
        entries = site.entries()
        times = sorted(e.time for e in entries)  # every request, robots.txt included
    for proc in (a, b):
        assert procs.stop(proc, timeout=15) == 0
    assert [e.path for e in entries].count("/robots.txt") == 1
    assert len(times) == 41
    # In every one-second window the site saw at most 5 requests from the two workers together.
    worst = max(sum(1 for t in times[i:] if t < start + 1.0) for i, start in enumerate(times))
    assert worst <= 5, worst
    rate = (len(times) - 1) / (times[-1] - times[0])
    assert 4.0 <= rate <= 5.05, rate  # and the limit was used, not undershot
    # The two workers together handled every task. One may have taken all of them: a crowded worker hands
    # back what its host's rate cannot start within 0.25 s (worker/politeness/backlog.py), and the worker
    # with tasks in flight claims them again as they come due, before an idle one polls.
    assert processed(tmp_path / "rate-a.log") + processed(tmp_path / "rate-b.log") >= 40
    assert len(await records(redis_client, job_id)) == 40


async def test_sigterm_mid_crawl_drains_and_nothing_is_lost_or_repeated(
    redis_server: RedisServer, redis_client: aioredis.Redis, workers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    with Bookstore(host="127.0.0.2", latency=0.3) as site:
        job_id, queue = await submit(
            redis_client,
            {
                "urls": [site.url + "/"],
                "crawl": {"maxDepth": 10, "maxPages": 1000, "exclude": ["/private/"]},
                "extract": {"fields": PRODUCT_FIELDS, "onlyMatching": r"/product/"},
                "politeness": {"requestsPerSecond": 1000, "maxConcurrencyPerDomain": 8},
            },
        )
        first = start_worker(workers, ["--redis-url", redis_server.url], PREFIX, "drain-a", tmp_path, drain=5)
        deadline = time.monotonic() + 30
        while len(await records(redis_client, job_id)) < 20:
            assert time.monotonic() < deadline and first.poll() is None
            await asyncio.sleep(0.05)
        stats_before = await queue.job_stats(job_id)
        assert stats_before.in_flight > 0 and not stats_before.finished  # really mid-crawl
        started = time.monotonic()
        assert procs.stop(first, timeout=15) == 0  # SIGTERM: exit 0...
        assert time.monotonic() - started < 5 + 1  # ...within the grace period
        assert (await queue.job_stats(job_id)).in_flight == 0  # nothing left leased to the gone worker
        start_worker(workers, ["--redis-url", redis_server.url], PREFIX, "drain-b", tmp_path, drain=5)
        await wait_finished(queue, job_id, 90)
    recs = await records(redis_client, job_id)
    urls = [r["url"] for r in recs]
    assert len(urls) == len(set(urls)) == 100  # every product once, none twice
    assert {r["url"]: {k: r[k] for k in ("name", "price")} for r in recs} == {
        u: {"name": v["name"], "price": v["price"]} for u, v in site.expected().items()
    }
    stats = await queue.job_stats(job_id)
    assert stats.dead == 0 and stats.succeeded == stats.total == 113


async def test_sigterm_releases_what_cannot_finish_in_the_grace_period(
    redis_server: RedisServer, redis_client: aioredis.Redis, workers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    with Bookstore(host="127.0.0.2", latency=4.0) as site:
        job_id, queue = await submit(
            redis_client,
            {
                "urls": [site.product_url(i) for i in range(1, 13)],
                "politeness": {"requestsPerSecond": 1000, "maxConcurrencyPerDomain": 8, "respectRobotsTxt": False},
            },
        )
        first = start_worker(
            workers, ["--redis-url", redis_server.url], PREFIX, "slow-a", tmp_path, drain=2, concurrency=8
        )
        deadline = time.monotonic() + 20
        while (await queue.job_stats(job_id)).in_flight < 8:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)
        started = time.monotonic()
        assert procs.stop(first, timeout=15) == 0
        assert time.monotonic() - started < 2 + 1.5
        stats = await queue.job_stats(job_id)
        assert stats.in_flight == 0 and stats.pending == 12 and stats.succeeded == 0  # all given back at once
        start_worker(workers, ["--redis-url", redis_server.url], PREFIX, "slow-b", tmp_path, drain=10, concurrency=12)
        await wait_finished(queue, job_id, 40)
    recs = await records(redis_client, job_id)
    assert sorted(r["url"] for r in recs) == sorted(site.product_url(i) for i in range(1, 13))
    assert {r["attempt"] for r in recs} == {1}  # releasing spent no attempt
