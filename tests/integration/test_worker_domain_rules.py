"""Per-domain politeness rules honoured across workers, measured where it matters: at the sites.

Two `trawl worker` processes run two jobs of one pool against two hosts (two fixture sites, on 127.0.0.2
and 127.0.0.3, each with its own access log). The pool has a rule for each host; one job asks for more
than the pool's defaults everywhere (which a pool rule does not let it have) and for less on one host
(which it gets). Each site's log shows that host never above its rule: the rate over every sliding
window, the concurrency as the most requests answered at one instant; and the job with the stricter rule
never above its own rate on that host, though it shares the host's pool-wide limit with the other job."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

from sites import peak_overlap
from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.dev import procs
from trawl.dev.bookstore import Bookstore
from trawl.dev.redis_server import RedisServer
from trawl.jobspec.wire import build_job_config
from trawl.queue import Queue
from waits import wait_for_async
from worker_procs import start_worker

PREFIX = "trawl:{test/domain-rules}"
FAST, SLOW = "127.0.0.2", "127.0.0.3"
# The pool's promise to each host. SLOW's rate is written as a delay (2 requests per second).
RULES = {FAST: (4.0, 2), SLOW: (2.0, 1)}
POOL = {
    "redis": {"url": "redis://unused:6379/0"},
    "defaults": {
        "politeness": {
            "requestsPerSecond": 50,
            "maxConcurrencyPerDomain": 8,
            "domains": [
                {"host": FAST, "requestsPerSecond": 4, "maxConcurrencyPerDomain": 2},
                {"host": SLOW, "delaySeconds": 0.5, "maxConcurrencyPerDomain": 1},
            ],
        }
    },
}
STRICT_RATE = 1.0  # job A's own rule for SLOW: stricter than the pool's, so it holds for job A


def worst_window(times: list[float], window: float) -> int:
    """The most requests that arrived within any ``window`` seconds (windows start at each arrival)."""
    times = sorted(times)
    return max((sum(1 for t in times[i:] if t < start + window) for i, start in enumerate(times)), default=0)


def within_rate(times: list[float], rate: float) -> None:
    """No more than ``rate`` per second over every sliding window of 1, 2 and 4 s; the one request a window
    may catch at its very end (spacing is 1/rate) is the tolerance."""
    for window in (1.0, 2.0, 4.0):
        worst = worst_window(times, window)
        assert worst <= rate * window + 1, (window, worst, rate)


async def submit(redis: aioredis.Redis, pool: ScrapePoolSpec, spec: dict[str, Any]) -> tuple[str, Queue]:
    job = ScrapeJobSpec.model_validate({"pool": "rules", **spec})
    job_id = uuid.uuid4().hex[:12]
    queue = Queue(redis, PREFIX, lease_seconds=10)
    await queue.register_job(build_job_config(job_id, job, pool))
    await queue.enqueue(job_id, job.seed_urls())
    await queue.mark_enqueue_done(job_id)
    return job_id, queue


async def test_two_workers_keep_every_host_within_its_rule_for_two_jobs_with_different_rules(
    redis_server: RedisServer, redis_client: aioredis.Redis, workers: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    pool = ScrapePoolSpec.model_validate(POOL)
    with Bookstore(host=FAST, latency=0.3) as fast, Bookstore(host=SLOW, latency=0.3) as slow:
        # Job A asks for 20/s and 6 in flight everywhere, and for 1/s on SLOW; job B asks for nothing.
        a_spec = {
            "urls": [fast.product_url(i) for i in range(1, 17)] + [slow.product_url(i) for i in range(1, 6)],
            "politeness": {
                "requestsPerSecond": 20,
                "maxConcurrencyPerDomain": 6,
                "domains": [{"host": SLOW, "requestsPerSecond": STRICT_RATE}],
            },
        }
        b_spec = {"urls": [fast.product_url(i) for i in range(17, 33)] + [slow.product_url(i) for i in range(6, 11)]}
        jobs = [await submit(redis_client, pool, a_spec), await submit(redis_client, pool, b_spec)]
        args = ["--redis-url", redis_server.url]
        allowed = f"{FAST}/32,{SLOW}/32"
        started = [start_worker(workers, args, PREFIX, f"dr-{n}", tmp_path, allowed=allowed) for n in "ab"]

        async def finished() -> bool:
            return all([(await q.job_stats(j)).finished for j, q in jobs])

        await wait_for_async("both jobs to finish", finished, 90, 0.2)
        logs = {FAST: fast.entries(), SLOW: slow.entries()}
        for job_id, queue in jobs:
            stats = await queue.job_stats(job_id)
            assert (stats.succeeded, stats.dead) == (21, 0), stats
    for proc in started:
        assert procs.stop(proc, timeout=15) == 0
    for host, (rate, concurrency) in RULES.items():
        entries = logs[host]
        assert len(entries) == (33 if host == FAST else 11), (host, len(entries))  # robots.txt once per host
        within_rate([e.time for e in entries], rate)
        assert peak_overlap(entries) <= concurrency, (host, peak_overlap(entries))
    # FAST's limits were used, not undershot: its concurrency of 2 was reached, its rate nearly.
    assert peak_overlap(logs[FAST]) == 2
    times = sorted(e.time for e in logs[FAST])
    assert (len(times) - 1) / (times[-1] - times[0]) >= 0.75 * RULES[FAST][0]
    # Job A's own rule on SLOW held for job A (products 1-5), the shared limit notwithstanding.
    a_on_slow = [e.time for e in logs[SLOW] if e.path.startswith("/product/") and int(e.path[9:-5]) <= 5]
    assert len(a_on_slow) == 5
    within_rate(a_on_slow, STRICT_RATE)
    assert a_on_slow[-1] - a_on_slow[0] >= 4 / STRICT_RATE * 0.95
