"""Two 2,041-page crawls by the same real worker processes, one into PostgreSQL and one into S3 (MinIO):
each URL lands exactly once in each although both servers are stopped for 30 s mid-crawl (no page is
refetched for it) and then a worker is SIGKILLed with tasks in flight and records waiting for the sinks.

Takes about 90-120 s (the 30 s outage and the 10 s lease of the killed worker are much of it).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

import psycopg
import redis.asyncio as aioredis
from minio import Minio

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev import procs
from trawl.dev.bookstore import Bookstore
from trawl.dev.postgres_server import PostgresServer
from trawl.dev.redis_server import RedisServer
from trawl.dev.s3_server import S3Server
from trawl.egress.addresses import parse_networks
from trawl.jobspec.podfiles import secret_env_name
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import pod_of
from trawl.sinks import s3 as s3sink
from trawl.sinks.postgres import ensure_table, target_from_spec
from trawl.sinks.s3 import S3Target
from waits import wait_for_async
from worker_procs import start_worker

PREFIX = "trawl:{test/sinkcrawl}"
# The sites on 127.0.0.2, the sinks on 127.0.0.1: both in the pool's allowedCidrs (the one address rule).
ALLOWED = "127.0.0.1/32,127.0.0.2/32"
SINKS = parse_networks(["127.0.0.1/32"])
OUTAGE_SECONDS = 30


def sink_env(pg: PostgresServer, s3: S3Server) -> dict[str, str]:
    # The password as the pool's mounted Secret would give it (the env fallback of read_secret).
    return dict(os.environ) | {
        secret_env_name("pg", "password"): pg.password,
        secret_env_name("s3", "id"): s3.access_key,
        secret_env_name("s3", "secret"): s3.secret_key,
    }


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
    async def enough() -> bool:
        return (await count_rows(pg, table, job_id))[0] >= at_least

    await wait_for_async(
        f"{at_least} rows of job {job_id}", enough, limit, 0.2, diag=lambda: count_rows(pg, table, job_id)
    )


def crawl(site: Bookstore, output: dict[str, Any]) -> ScrapeJobSpec:
    return ScrapeJobSpec.model_validate(
        {
            "pool": "sinkcrawl",
            "urls": [site.url + "/"],
            "crawl": {"maxDepth": 10, "maxPages": 5000, "exclude": ["/private/"]},
            "politeness": {"requestsPerSecond": 5000, "maxConcurrencyPerDomain": 16},
            "output": output,
        }
    )


async def submit(queue: Queue, spec: ScrapeJobSpec) -> str:
    job_id = uuid.uuid4().hex[:12]
    await queue.register_job(build_job_config(job_id, spec, None))
    await queue.enqueue(job_id, spec.seed_urls())
    await queue.mark_enqueue_done(job_id)
    return job_id


def s3_count(s3: S3Server, target: S3Target, job_id: str) -> tuple[int, int]:
    """Records across the job's objects, and distinct URLs among them."""
    records = s3sink.read_records(target, job_id)
    return len(records), len({r["url"] for r in records})


async def test_crawls_land_exactly_once_through_an_outage_and_a_sigkill(
    redis_server: RedisServer,
    redis_client: aioredis.Redis,
    pg_server: PostgresServer,
    s3_server: S3Server,
    workers: list[subprocess.Popen[bytes]],
    tmp_path: Path,
) -> None:
    table = "crawl_" + uuid.uuid4().hex[:8]
    bucket = "crawl-" + uuid.uuid4().hex[:8]
    Minio(f"127.0.0.1:{s3_server.port}", s3_server.access_key, s3_server.secret_key, secure=False).make_bucket(bucket)
    shape = {"categories": 8, "books_per_category": 250, "per_page": 50, "latency": 0.02}
    with Bookstore(host="127.0.0.2", **shape) as pg_site, Bookstore(host="127.0.0.2", **shape) as s3_site:  # type: ignore[arg-type]
        pg_spec = crawl(
            pg_site,
            {
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
        )
        s3_spec = crawl(
            s3_site,
            {
                "sink": "S3",
                "s3": {
                    "bucket": bucket,
                    "endpoint": s3_server.endpoint,
                    "pathStyle": True,
                    "accessKeyIdSecretRef": {"name": "s3", "key": "id"},
                    "secretAccessKeySecretRef": {"name": "s3", "key": "secret"},
                },
            },
        )
        assert pg_spec.output is not None and pg_spec.output.postgres is not None
        assert s3_spec.output is not None and s3_spec.output.s3 is not None
        pg_target = target_from_spec(pg_spec.output.postgres, pg_server.password, allowed=SINKS)
        await ensure_table(pg_target)  # what acceptance does
        s3_target = s3sink.target_from_spec(
            s3_spec.output.s3, s3_server.access_key, s3_server.secret_key, allowed=SINKS
        )
        queue = Queue(redis_client, PREFIX, lease_seconds=10)
        pg_job = await submit(queue, pg_spec)
        s3_job = await submit(queue, s3_spec)
        expected_pages = 1 + 8 * 5 + 2000  # home, 5 listing pages per category, products

        a = start_worker(
            workers,
            ["--redis-url", redis_server.url],
            PREFIX,
            "sink-a",
            tmp_path,
            env=sink_env(pg_server, s3_server),
            allowed=ALLOWED,
        )
        start_worker(
            workers,
            ["--redis-url", redis_server.url],
            PREFIX,
            "sink-b",
            tmp_path,
            env=sink_env(pg_server, s3_server),
            allowed=ALLOWED,
        )

        # 1. both servers go away for 30 s mid-crawl
        await wait_rows(pg_server, table, pg_job, 200, 120)
        pg_server.stop()
        s3_server.stop()
        try:
            stopped = time.monotonic()
            in_outage = {job: await queue.job_stats(job) for job in (pg_job, s3_job)}
            assert not any(st.finished for st in in_outage.values())
            # Workers keep the records and their leases while the sinks fail; claiming stops at capacity.
            while time.monotonic() - stopped < OUTAGE_SECONDS:
                assert all(w.poll() is None for w in workers)
                await asyncio.sleep(1)
            for job in (pg_job, s3_job):
                during = await queue.job_stats(job)
                assert during.dead == 0 and not during.finished
        finally:
            await asyncio.to_thread(pg_server.start)
            await asyncio.to_thread(s3_server.start)
        await wait_rows(pg_server, table, pg_job, in_outage[pg_job].succeeded + 300, 120)
        for site in (pg_site, s3_site):
            refetched = [p for p, n in Counter(e.path for e in site.entries()).items() if n > 1]
            assert refetched == []  # the outage cost no refetch

        # 2. a worker is SIGKILLed with tasks in flight and records waiting for the sinks
        stats = await queue.job_stats(pg_job)
        assert stats.in_flight > 0 and not stats.finished
        procs.stop(a, timeout=5, sig=signal.SIGKILL)
        # What it held when it died (its leases stay until their deadline, lease_seconds away): claimed and
        # waiting for a slot, running, or fetched with the record waiting for the sinks.
        ids = [m.decode() for m in await redis_client.zrange(queue.keys.worker_deadlines, 0, -1)]
        held = sum([await redis_client.hlen(queue.keys.worker(w)) for w in ids if pod_of(w) == "sink-a"])
        start_worker(
            workers,
            ["--redis-url", redis_server.url],
            PREFIX,
            "sink-c",
            tmp_path,
            env=sink_env(pg_server, s3_server),
            allowed=ALLOWED,
        )

        deadline = time.monotonic() + 300
        for job in (pg_job, s3_job):
            while not (stats := await queue.job_stats(job)).finished:
                assert time.monotonic() < deadline, stats
                await asyncio.sleep(0.5)
            assert stats.succeeded == stats.total == expected_pages and stats.dead == 0
        logs = [pg_site.entries(), s3_site.entries()]

    # zero lost, zero duplicates
    assert await count_rows(pg_server, table, pg_job) == (expected_pages, expected_pages)
    assert await asyncio.to_thread(s3_count, s3_server, s3_target, s3_job) == (expected_pages, expected_pages)
    # Only the killed worker's leased tasks may be fetched again. It holds few: it claims while fewer
    # than 4 x 8 records wait for the sinks, so at most 31 of those, plus its 8 slots and its claim
    # buffer (at most one more round of 8, trawl.queue.claimsize), which still start after claiming stops.
    concurrency = 8
    assert 0 < held <= 4 * concurrency - 1 + 2 * concurrency, held
    again = 0
    for log in logs:
        fetched = Counter(e.path for e in log if e.path != "/robots.txt")
        assert len(fetched) == expected_pages
        again += sum(n - 1 for n in fetched.values())
    assert again <= held, (again, held)
    print(f"the killed worker held {held} leases; {again} pages were fetched again")
