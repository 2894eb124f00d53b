"""Helpers of the fault-injection suite: `trawl worker` processes, the bookstore site, Redis servers
that can be killed and restarted on the same port and data directory, and the per-URL ledger every fault
test ends with (exactly one record or one dead letter per URL, duplicate fetches counted)."""

from __future__ import annotations

import json
import signal
import subprocess
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.dev import procs
from trawl.dev.bookstore import Bookstore
from trawl.dev.redis_server import RedisServer
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from trawl.queue.keys import Keys
from worker_procs import start_worker

PREFIX = "trawl:{faults/pool}"
HOST = "127.0.0.3"


@dataclass
class Workers:
    """`trawl worker` processes started by a test; all stopped at its end."""

    redis: RedisServer
    log_dir: Path
    lease_seconds: float
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)
    runs: Counter[str] = field(default_factory=Counter)

    def start(self, pod: str, *, concurrency: int = 4, lease: float | None = None) -> subprocess.Popen[bytes]:
        self.runs[pod] += 1
        return start_worker(
            self.started, ["--redis-url", self.redis.url], PREFIX, pod, self.log_dir, allowed=f"{HOST}/32",
            lease=lease or self.lease_seconds, concurrency=concurrency, drain=3, log_name=f"{pod}.{self.runs[pod]}",
        )  # fmt: skip

    def stop_all(self) -> None:
        for proc in self.started:
            procs.signal_group(proc, signal.SIGCONT)  # a stopped process would ignore SIGTERM
            procs.stop(proc, timeout=10)


def restartable_redis(workdir: Path, port: int = 0, *, aof: bool) -> RedisServer:
    """A redis-server on ``port`` with its data in ``workdir`` (kept across restarts)."""
    args = ["--appendonly", "yes", "--appendfsync", "everysec"] if aof else []
    server = RedisServer(port=port, workdir=workdir, extra_args=args)
    server.start()
    server.wait_ready()
    return server


@dataclass
class Job:
    job_id: str
    queue: Queue
    urls: list[str]


async def submit(redis: aioredis.Redis, urls: list[str], *, lease_seconds: float = 10.0, **spec: Any) -> Job:
    parsed = ScrapeJobSpec.model_validate(
        {"pool": "pool", "urls": urls, "politeness": {"requestsPerSecond": 1000, "maxConcurrencyPerDomain": 8}, **spec}
    )
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis, PREFIX, lease_seconds=lease_seconds, retries=2)
    await queue.register_job(build_job_config(job_id, parsed, None))
    await queue.enqueue(job_id, parsed.seed_urls(), start_index=0)
    await queue.mark_enqueue_done(job_id)
    return Job(job_id, queue, urls)


async def records(redis: aioredis.Redis, job_id: str) -> list[dict[str, Any]]:
    return [json.loads(f[b"data"]) for _id, f in await redis.xrange(Keys(PREFIX).results(job_id))]


@dataclass
class Ledger:
    """Per URL: records written, dead letters, fetches seen by the site."""

    lost: list[str]
    duplicate_records: list[str]
    dead: list[str]
    duplicate_fetches: int

    def summary(self) -> str:
        return (
            f"lost={len(self.lost)} duplicate_records={len(self.duplicate_records)} dead={len(self.dead)} "
            f"duplicate_fetches={self.duplicate_fetches}"
        )


async def ledger(redis: aioredis.Redis, job: Job, site: Bookstore) -> Ledger:
    recs = Counter(r["url"] for r in await records(redis, job.job_id))
    dead = Counter(d.url for d in await job.queue.dead_letters(job.job_id, limit=10_000))
    lost = [u for u in job.urls if recs[u] + dead[u] == 0]
    duplicates = [u for u in job.urls if recs[u] + dead[u] > 1]
    paths = Counter(e.path for e in site.entries() if e.path.startswith("/product/"))
    wanted = {u.removeprefix(site.url) for u in job.urls}
    dup_fetches = sum(n - 1 for p, n in paths.items() if p in wanted and n > 1)
    return Ledger(lost, duplicates, sorted(dead), dup_fetches)
