#!/usr/bin/env python3
"""Sessions through proxies on a site that bans per identity: Trawl's sessions vs Python Crawlee's SessionPool +
ProxyConfiguration, same proxies, same site, side by side in one run.

The proxies: 10 tinyproxy instances on loopback (Debian's ``tinyproxy``, Basic auth), each adding ``X-Proxy:
p<n>`` to what it forwards, so the site knows which address a request came from. The site
(trawl.dev.banfarm.BanFarm, in this process, on 127.0.0.2) hands each new visitor a cookie and bans an
identity (its cookie) after ``--ban-after`` requests within a minute, and at once when the cookie comes back
through another proxy than it was handed to (a cookie and its address belong together); a banned identity
gets 403 for good. A fresh farm for each crawler.

* ``trawl``: a worker in this process (``--concurrency``), a real redis-server, a ScrapeJob over the
  ``--pages`` pages with ``session`` (poolSize ``--pool-size``, maxUses 50 like Crawlee's default, block on
  403, maxBlockedRetries 10), robots.txt off, through the pool's proxy group of the 10 proxies;
* ``crawlee``: Crawlee's ``HttpCrawler`` (its default impit client) with ``ProxyConfiguration(proxy_urls=…)``
  (the same 10) and ``SessionPool(max_pool_size=--pool-size)``, max_request_retries 2 (3 attempts, as the
  job's maxAttempts) and max_session_rotations 10, the same concurrency, storage in memory. Crawlee treats
  401/403/429 as blocked: it retires the session and rotates.

Printed per crawler: pages that succeeded, requests the site saw, identities it banned, wall seconds. Last
line: ``success=… crawlee_success=… requests_per_page=… crawlee_requests_per_page=…`` (success: pages that
succeeded over pages; requests per page: requests the site answered over pages that succeeded).

    .venv/bin/python bench/proxies.py            # 600 pages (~1 min)
    .venv/bin/python bench/proxies.py --quick    # 150 pages
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
import tempfile
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "operator"))

from trawl.dev.banfarm import BanFarm  # noqa: E402
from trawl.dev.proxy_servers import TinyProxy  # noqa: E402

PREFIX = "trawl:{bench/proxies}"
PROXIES = 10
USER, PASSWORD = "bench", "bench-proxy-pw"


@dataclass
class Outcome:
    name: str
    pages: int
    succeeded: int
    requests: int
    banned: int
    seconds: float
    proxies: int
    with_cookie: float

    @property
    def success(self) -> float:
        return self.succeeded / self.pages if self.pages else 0.0

    @property
    def requests_per_page(self) -> float:
        return self.requests / self.succeeded if self.succeeded else float("inf")

    def line(self) -> str:
        return (
            f"{self.name:8} pages={self.pages} succeeded={self.succeeded} requests={self.requests} "
            f"banned_identities={self.banned} success={self.success:.3f} "
            f"requests_per_page={self.requests_per_page:.3f} seconds={self.seconds:.1f} "
            f"proxies_seen={self.proxies} with_cookie={self.with_cookie:.2f}"
        )


def _outcome(name: str, farm: BanFarm, pages: int, succeeded: int, seconds: float) -> Outcome:
    banned = len({v.sid for v in farm.visits if v.banned and v.sid})
    proxies = len({v.proxy for v in farm.visits})
    with_cookie = sum(1 for v in farm.visits if v.sid) / max(1, len(farm.visits))
    return Outcome(name, pages, succeeded, len(farm.visits), banned, seconds, proxies, with_cookie)


async def run_trawl(args: argparse.Namespace, proxy_urls: list[str], farm: BanFarm) -> Outcome:
    from trawl.api.scrapejob import ScrapeJobSpec
    from trawl.api.scrapepool import ScrapePoolSpec
    from trawl.dev.redis_server import RedisServer
    from trawl.jobspec.wire import build_job_config
    from trawl.queue import Queue
    from trawl.queue.keys import Keys
    from trawl.redisconn.client import connect
    from trawl.worker.runner import Worker, WorkerConfig

    secrets = Path(tempfile.mkdtemp(prefix="trawl-bench-proxies-"))
    (secrets / "proxies").mkdir()
    (secrets / "proxies" / "urls").write_text("\n".join(proxy_urls) + "\n")
    os.environ["TRAWL_SECRETS_DIR"] = str(secrets)
    pool = ScrapePoolSpec.model_validate(
        {
            "redis": {"url": "redis://unused"},
            "worker": {"secrets": ["proxies"]},
            "proxies": {
                "groups": [
                    {
                        "name": "bench",
                        "secretRef": {"name": "proxies", "key": "urls"},
                        "default": True,
                        "maxConcurrencyPerProxy": args.concurrency,
                    }
                ]
            },
        }
    )
    job = ScrapeJobSpec.model_validate(
        {
            "pool": "p",
            "urls": [farm.page_url(i) for i in range(args.pages)],
            "politeness": {
                "requestsPerSecond": 10000,
                "maxConcurrencyPerDomain": args.concurrency,
                "respectRobotsTxt": False,
            },
            "retry": {"maxAttempts": 3, "initialDelaySeconds": 0.1, "maxDelaySeconds": 1},
            "session": {
                "poolSize": args.pool_size,
                "maxUses": 50,
                "maxAgeSeconds": 3000,
                "block": {"statusCodes": [403]},
                "maxBlockedRetries": 10,
            },
        }
    )
    with RedisServer() as server:
        redis = connect(server.url, multiplex=True)
        queue = Queue(redis, PREFIX, lease_seconds=30)
        job_id = uuid.uuid4().hex[:12]
        await queue.register_job(build_job_config(job_id, job, pool))
        await queue.enqueue(job_id, job.seed_urls())
        await queue.mark_enqueue_done(job_id)
        config = WorkerConfig(
            prefix=PREFIX,
            worker_id="bench-proxies",
            concurrency=args.concurrency,
            allowed_cidrs=["127.0.0.2/32"],
            breaker_failures=args.breaker_failures,
        )
        worker = Worker(config, queue, redis, Keys(PREFIX))
        started = time.monotonic()
        runner = asyncio.create_task(worker.run())
        try:
            deadline = started + args.timeout
            while time.monotonic() < deadline:  # the job's end is in Redis: polled
                if (await queue.job_stats(job_id)).finished:
                    break
                await asyncio.sleep(0.1)
            seconds = time.monotonic() - started
            stats = await queue.job_stats(job_id)
        finally:
            worker.request_stop()
            await asyncio.wait_for(runner, 60)
            await redis.aclose()
    return _outcome("trawl", farm, args.pages, stats.succeeded, seconds)


async def run_crawlee(args: argparse.Namespace, proxy_urls: list[str], farm: BanFarm) -> Outcome:
    from crawlee import ConcurrencySettings
    from crawlee.crawlers import HttpCrawler, HttpCrawlingContext
    from crawlee.proxy_configuration import ProxyConfiguration
    from crawlee.sessions import SessionPool
    from crawlee.storage_clients import MemoryStorageClient

    succeeded = 0
    crawler = HttpCrawler(
        proxy_configuration=ProxyConfiguration(proxy_urls=list(proxy_urls)),
        session_pool=SessionPool(max_pool_size=args.pool_size),
        use_session_pool=True,
        max_request_retries=2,
        max_session_rotations=10,
        concurrency_settings=ConcurrencySettings(
            min_concurrency=args.concurrency, desired_concurrency=args.concurrency, max_concurrency=args.concurrency
        ),
        storage_client=MemoryStorageClient(),
        configure_logging=False,
    )

    @crawler.router.default_handler
    async def handle(context: HttpCrawlingContext) -> None:
        nonlocal succeeded
        body = await context.http_response.read()
        if b"<h1>Page" in body:
            succeeded += 1

    started = time.monotonic()
    await asyncio.wait_for(crawler.run([farm.page_url(i) for i in range(args.pages)]), args.timeout)
    return _outcome("crawlee", farm, args.pages, succeeded, time.monotonic() - started)


async def main_async(args: argparse.Namespace) -> None:
    with ExitStack() as stack:
        proxies = [
            stack.enter_context(TinyProxy(username=USER, password=PASSWORD, add_headers=(("X-Proxy", f"p{i}"),)))
            for i in range(PROXIES)
        ]
        urls = [p.url(USER, PASSWORD) for p in proxies]
        outcomes: dict[str, Outcome] = {}
        for name, run in (("trawl", run_trawl), ("crawlee", run_crawlee)):
            async with BanFarm(host="127.0.0.2", ban_after=args.ban_after, window=60.0) as farm:
                outcomes[name] = await run(args, urls, farm)
            print(outcomes[name].line(), flush=True)
    trawl, crawlee = outcomes["trawl"], outcomes["crawlee"]
    print(
        f"success={trawl.success:.3f} crawlee_success={crawlee.success:.3f} "
        f"requests_per_page={trawl.requests_per_page:.3f} crawlee_requests_per_page={crawlee.requests_per_page:.3f}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pages", type=int, default=600)
    parser.add_argument("--quick", action="store_true", help="150 pages")
    parser.add_argument("--ban-after", type=int, default=10, help="requests per identity per minute")
    parser.add_argument("--pool-size", type=int, default=20, help="sessions in rotation (both crawlers)")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--breaker-failures", type=int, default=5, help="Trawl's circuit breaker (0: off)")
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per crawler at most")
    args = parser.parse_args(argv)
    if args.quick:
        args.pages = 150
    logging.basicConfig(level=logging.WARNING)
    asyncio.run(main_async(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
