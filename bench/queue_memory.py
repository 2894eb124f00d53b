#!/usr/bin/env python3
"""Redis memory per pending task and per deduplicated crawled URL, on a fresh redis-server.

Three measurements over ``--urls`` URLs (70-byte catalogue URLs, 50,000 by default), each a delta of
``INFO memory`` ``used_memory`` taken after a warm-up cycle (scripts loaded, buffers grown):

* pending_list   -- a list job (no dedupe): bytes per pending task (its ready-list entry);
* pending_crawl  -- a crawl job: bytes per pending task including its within-job dedupe entry;
* dedupe_crawled -- the same crawl job once every task is acked: bytes per crawled URL that stay
                    until retention (the within-job dedupe set; ``MEMORY USAGE`` of the set / URLs too);
* dedupe_xjob    -- a job with dedupe across jobs: ``MEMORY USAGE`` of the pool's window zset / URLs.

    .venv/bin/python bench/queue_memory.py [--urls 50000]

Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json

import redis.asyncio as aioredis

from trawl.dev.redis_server import RedisServer
from trawl.queue import JobConfig, Queue

PREFIX = "trawl:{bench/mem}"


def urls(n: int, tag: str) -> list[str]:
    return [f"https://books.example.com/catalogue/{tag}/category-{i % 50:02d}/item-{i:07d}.html" for i in range(n)]


async def used(r: aioredis.Redis) -> int:
    return int((await r.info("memory"))["used_memory"])


async def drain(q: Queue) -> None:
    while batch := await q.claim("w", 1000):
        await q.ack_many(batch, "w")


async def measure(url: str, n: int) -> dict[str, float]:
    r = aioredis.Redis.from_url(url)
    q = Queue(r, PREFIX, enqueue_batch=2000)
    # warm-up: every script, the pool's keys, the server's buffers at these batch sizes
    for job, cfg in (("warm-l", JobConfig("warm-l")), ("warm-c", JobConfig("warm-c", max_depth=3))):
        await q.register_job(cfg)
        await q.enqueue(job, urls(5000, job))
        await q.mark_enqueue_done(job)
        await drain(q)
        await q.cancel(job)
    out: dict[str, float] = {"urls": n, "url_bytes": len(urls(1, "list-a")[0])}

    before = await used(r)
    await q.register_job(JobConfig("list"))
    await q.enqueue("list", urls(n, "list-a"))
    out["pending_list"] = (await used(r) - before) / n
    await drain(q)
    await q.cancel("list")

    before = await used(r)
    await q.register_job(JobConfig("crawl", max_depth=3))
    await q.enqueue("crawl", urls(n, "crawl-a"))
    await q.mark_enqueue_done("crawl")
    out["pending_crawl"] = (await used(r) - before) / n
    await drain(q)
    out["dedupe_crawled"] = (await used(r) - before) / n
    out["dedupe_set_memory_usage"] = int(await r.memory_usage(q.keys.seen("crawl"), samples=0) or 0) / n
    await q.cancel("crawl")

    await q.register_job(JobConfig("xjob", dedupe_across_jobs=True, dedupe_window_seconds=3600))
    await q.enqueue("xjob", urls(n, "xjob-a"))
    out["dedupe_xjob_memory_usage"] = int(await r.memory_usage(q.keys.cross_dedupe, samples=0) or 0) / n
    await r.aclose()
    return {k: round(v, 1) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--urls", type=int, default=50_000)
    args = ap.parse_args()
    with RedisServer() as server:
        print(json.dumps(asyncio.run(measure(server.url, args.urls))))


if __name__ == "__main__":
    main()
