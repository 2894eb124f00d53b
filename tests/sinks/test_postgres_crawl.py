"""A 2,041-page crawl by real worker processes into a real PostgreSQL: exactly one row per URL although
the server is stopped for 30 s mid-crawl (no page refetched for it) and a worker is SIGKILLed mid-batch.

Takes about 60-90 s (the 30 s outage and the 10 s lease of the killed worker are most of it).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev import procs
from trawl.dev.bookstore import Bookstore
from trawl.dev.postgres_server import PostgresServer
from trawl.dev.redis_server import RedisServer
from trawl.queue import Queue
from trawl.worker.jobspec import build_job_config, secret_env_name
from trawl.worker.pgsink import ensure_table, target_from_spec

PREFIX = "trawl:{test/pgcrawl}"
OUTAGE_SECONDS = 30


@pytest.fixture
def workers() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for proc in started:
        procs.stop(proc, timeout=10)


def start_worker(
    started: list[subprocess.Popen[bytes]], redis: RedisServer, pg: PostgresServer, name: str, log_dir: Path
) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable, "-m", "trawl.cli", "worker", "--redis-url", redis.url, "--prefix", PREFIX,
        "--allowed-cidrs", "127.0.0.2/32", "--worker-id", name, "--lease-seconds", "10",
        "--concurrency", "8", "--drain-seconds", "5",
    ]  # fmt: skip
    # The password as the pool's mounted Secret would give it (the env fallback of read_secret).
    env = dict(os.environ) | {secret_env_name("pg", "password"): pg.password}
    proc = procs.start(argv, log_path=log_dir / f"{name}.log", env=env)
    started.append(proc)
    return proc


async def count_rows(pg: PostgresServer, table: str, job_id: str) -> tuple[int, int]:
    async with await psycopg.AsyncConnection.connect(pg.dsn()) as conn:
        cur = await conn.execute(
            f"SELECT count(*), count(DISTINCT url) FROM {table} WHERE job = %s",
            (job_id,),
        )
        row = await cur.fetchone()
        assert row is not None
        return int(row[0]), int(row[1])


async def wait_rows(pg: PostgresServer, table: str, job_id: str, at_least: int, limit: float) -> None:
    deadline = time.monotonic() + limit
    while (await count_rows(pg, table, job_id))[0] < at_least:
        assert time.monotonic() < deadline, await count_rows(pg, table, job_id)
        await asyncio.sleep(0.2)


async def test_crawl_lands_exactly_once_through_an_outage_and_a_sigkill(
    redis_server: RedisServer,
    redis_client: aioredis.Redis,
    pg_server: PostgresServer,
    workers: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    table = "crawl_" + uuid.uuid4().hex[:8]
    with Bookstore(host="127.0.0.2", categories=8, books_per_category=250, per_page=50, latency=0.02) as site:
        spec = ScrapeJobSpec.model_validate(
            {
                "pool": "pgcrawl",
                "urls": [site.url + "/"],
                "crawl": {"maxDepth": 10, "maxPages": 5000, "exclude": ["/private/"]},
                "politeness": {"requestsPerSecond": 5000, "maxConcurrencyPerDomain": 16},
                "output": {
                    "sink": "PostgreSQL",
                    "postgres": {
                        "host": "127.0.0.1",
                        "port": pg_server.port,
                        "database": pg_server.database,
                        "user": pg_server.user,
                        "passwordSecretRef": {"name": "pg", "key": "password"},
                        "table": table,
                        "sslMode": "disable",
                    },
                },
            }
        )
        assert spec.output is not None and spec.output.postgres is not None
        await ensure_table(target_from_spec(spec.output.postgres, pg_server.password))  # what acceptance does
        job_id = uuid.uuid4().hex[:12]
        queue = Queue(redis_client, PREFIX, lease_seconds=10)
        await queue.register_job(build_job_config(job_id, spec, None))
        await queue.enqueue(job_id, spec.seed_urls())
        await queue.mark_enqueue_done(job_id)
        expected_pages = 1 + 8 * 5 + 2000  # home, 5 listing pages per category, products

        a = start_worker(workers, redis_server, pg_server, "pg-a", tmp_path)
        start_worker(workers, redis_server, pg_server, "pg-b", tmp_path)

        # 1. the server goes away for 30 s mid-crawl
        await wait_rows(pg_server, table, job_id, 200, 120)
        pg_server.stop()
        try:
            stopped = time.monotonic()
            in_outage = await queue.job_stats(job_id)
            assert not in_outage.finished
            # Workers keep their tasks leased while the sink retries; claiming stops at their capacity.
            while time.monotonic() - stopped < OUTAGE_SECONDS:
                assert all(w.poll() is None for w in workers)
                await asyncio.sleep(1)
            during = await queue.job_stats(job_id)
            assert during.dead == 0 and not during.finished
        finally:
            await asyncio.to_thread(pg_server.start)
        await wait_rows(pg_server, table, job_id, in_outage.succeeded + 300, 120)
        before_kill = len(site.entries())
        refetched = [p for p, n in Counter(e.path for e in site.entries()).items() if n > 1]
        assert refetched == []  # the outage cost no refetch

        # 2. a worker is SIGKILLed with tasks in flight and records waiting for the sink
        stats = await queue.job_stats(job_id)
        assert stats.in_flight > 0 and not stats.finished
        procs.stop(a, timeout=5, sig=signal.SIGKILL)
        start_worker(workers, redis_server, pg_server, "pg-c", tmp_path)

        deadline = time.monotonic() + 240
        while not (stats := await queue.job_stats(job_id)).finished:
            assert time.monotonic() < deadline, stats
            await asyncio.sleep(0.5)
        entries = site.entries()

    rows, distinct = await count_rows(pg_server, table, job_id)
    assert rows == distinct == stats.succeeded == stats.total == expected_pages  # zero lost, zero duplicates
    assert stats.dead == 0
    fetched = Counter(e.path for e in entries if e.path != "/robots.txt")
    assert len(fetched) == expected_pages
    # Only the killed worker's leased tasks may be fetched again (its 8 slots and 32 waiting records).
    again = sum(n - 1 for n in fetched.values())
    assert again <= 8 + 32, again
    assert len(entries) > before_kill
