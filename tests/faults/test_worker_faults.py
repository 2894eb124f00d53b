"""Faults of worker processes and of Redis under a running job: SIGKILL, a restart in the same pod,
SIGSTOP past the lease, Redis restarted (SIGTERM and SIGKILL) with AOF, Redis stopped (SIGSTOP) and
resumed. Each ends with the per-URL ledger: every URL has exactly one record or one dead letter, none
twice, and the job's counters add up."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from fault_harness import Job, Workers, ledger, records, restartable_redis, submit

from trawl.dev import procs
from trawl.dev.bookstore import Bookstore
from trawl.dev.redis_server import RedisServer
from trawl.queue.keys import pod_of
from trawl.worker.main import heartbeat_seconds, redis_timeout
from waits import wait_for_async

URLS = 40


def product_urls(site: Bookstore, n: int = URLS) -> list[str]:
    return [site.product_url(i) for i in range(1, n + 1)]


async def incarnations(redis: aioredis.Redis, job: Job, pod: str) -> dict[str, float]:
    """Worker id -> lease deadline of the pod's incarnations that hold leases."""
    wd = await redis.zrange(job.queue.keys.worker_deadlines, 0, -1, withscores=True)
    return {w.decode(): score for w, score in wd if pod_of(w.decode()) == pod}


async def finished_truthfully(job: Job) -> None:
    stats = await job.queue.job_stats(job.job_id)
    assert stats.finished, stats
    assert (stats.pending, stats.in_flight, stats.retrying) == (0, 0, 0), stats
    assert stats.succeeded + stats.dead == stats.total == len(job.urls), stats


def report(fault: str, **figures: object) -> None:
    print(f"\nFAULT-REPORT {fault}: " + " ".join(f"{k}={v}" for k, v in figures.items()))


async def records_at_least(redis: aioredis.Redis, job: Job, n: int) -> bool:
    return len(await records(redis, job.job_id)) >= n


async def test_worker_sigkill_another_pod_finishes_the_job(
    redis_server: RedisServer, shared_redis: aioredis.Redis, site: Bookstore, workers_factory: list[Workers],
    tmp_path: Path,
) -> None:  # fmt: skip
    w = Workers(redis_server, tmp_path, lease_seconds=3)
    workers_factory.append(w)
    job = await submit(shared_redis, product_urls(site), lease_seconds=3)
    victim = w.start("pod-a")
    await wait_for_async(
        "first records", lambda: records_at_least(shared_redis, job, 6), 60, 0.1, retry_on=(Exception,)
    )
    procs.stop(victim, sig=signal.SIGKILL)
    killed_at = time.monotonic()
    w.start("pod-b")
    await wait_for_async("stats", lambda: job.queue.job_stats(job.job_id), 5, 0.1, retry_on=(Exception,))
    await wait_for_async("the job to finish", lambda: _finished(job), 120, 0.1, retry_on=(Exception,))
    terminal = time.monotonic() - killed_at
    await finished_truthfully(job)
    book = await ledger(shared_redis, job, site)
    report("worker-sigkill", **{"terminal_s": round(terminal, 1)}, ledger=book.summary())
    assert not book.lost and not book.duplicate_records, book


async def _finished(job: Job) -> bool:
    return (await job.queue.job_stats(job.job_id)).finished


async def test_same_pod_restart_returns_the_dead_processs_leases_at_once(
    redis_server: RedisServer, shared_redis: aioredis.Redis, site: Bookstore, workers_factory: list[Workers],
    tmp_path: Path,
) -> None:  # fmt: skip
    """The kubelet restarts a crashed container: same pod name, new process. Without incarnations the new
    process renewed the dead one's leases for ever (job stuck Running with tasks in flight)."""
    lease = 60.0  # long, so that finishing before the old deadline proves the leases were returned at once
    w = Workers(redis_server, tmp_path, lease_seconds=lease)
    workers_factory.append(w)
    job = await submit(shared_redis, product_urls(site), lease_seconds=lease)
    first = w.start("pod-r")
    await wait_for_async(
        "first records", lambda: records_at_least(shared_redis, job, 6), 60, 0.1, retry_on=(Exception,)
    )
    old = await wait_for_async(
        "leases of pod-r", lambda: incarnations(shared_redis, job, "pod-r"), 30, 0.1, retry_on=(Exception,)
    )
    procs.stop(first, sig=signal.SIGKILL)
    restarted_at = time.time()
    w.start("pod-r")
    await wait_for_async("the job to finish", lambda: _finished(job), 120, 0.1, retry_on=(Exception,))
    await finished_truthfully(job)
    fin = float(await shared_redis.hget(job.queue.keys.job(job.job_id), "fin"))
    lost_events = [e for _, e in await job.queue.events() if e["type"] == "workerlost"]
    ((old_id, old_deadline),) = old.items()
    assert [e["worker"] for e in lost_events] == [old_id]
    assert float(lost_events[0]["t"]) < old_deadline  # evicted at the new start, not at lease expiry
    assert fin - restarted_at < lease  # the job completed within one lease period of the restart
    book = await ledger(shared_redis, job, site)
    report("same-pod-restart", recovery_to_terminal_s=round(fin - restarted_at, 1), ledger=book.summary())
    assert not book.lost and not book.duplicate_records, book


async def test_sigstop_past_the_lease_then_resumed_writes_nothing_twice(
    redis_server: RedisServer, shared_redis: aioredis.Redis, site: Bookstore, workers_factory: list[Workers],
    tmp_path: Path,
) -> None:  # fmt: skip
    w = Workers(redis_server, tmp_path, lease_seconds=2)
    workers_factory.append(w)
    job = await submit(shared_redis, product_urls(site), lease_seconds=2)
    frozen = w.start("pod-s")

    async def holding() -> bool:
        return len(await incarnations(shared_redis, job, "pod-s")) == 1 and await records_at_least(shared_redis, job, 4)

    await wait_for_async("pod-s to hold leases", holding, 60, 0.1, retry_on=(Exception,))
    procs.signal_group(frozen, signal.SIGSTOP)
    stopped_at = time.monotonic()
    w.start("pod-t")

    async def reaped() -> bool:
        return any(e["type"] == "workerlost" and pod_of(e["worker"]) == "pod-s" for _, e in await job.queue.events())

    await wait_for_async("pod-s's leases to expire and be returned", reaped, 60, 0.1, retry_on=(Exception,))
    await wait_for_async("the job to finish", lambda: _finished(job), 120, 0.1, retry_on=(Exception,))
    terminal = time.monotonic() - stopped_at
    procs.signal_group(frozen, signal.SIGCONT)  # the zombie wakes up: its late acks must not count
    assert procs.stop(frozen, timeout=20) == 0
    await finished_truthfully(job)
    book = await ledger(shared_redis, job, site)
    report("sigstop-past-lease", terminal_s=round(terminal, 1), ledger=book.summary())
    assert not book.lost and not book.duplicate_records, book


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"])
async def test_redis_restart_with_aof_mid_job(
    sig: signal.Signals, site: Bookstore, workers_factory: list[Workers], tmp_path: Path
) -> None:
    """Acks and releases that fail while Redis is down are retried or reconciled when it is back: nothing
    stays leased to a worker that thinks it holds nothing (was: stuck Running, pending 0, for ever)."""
    lease = 5.0
    data = tmp_path / "redis-data"
    data.mkdir()
    server = restartable_redis(data, aof=True)
    client = aioredis.Redis.from_url(server.url)
    try:
        w = Workers(server, tmp_path, lease_seconds=lease)
        workers_factory.append(w)
        job = await submit(client, product_urls(site), lease_seconds=lease)
        w.start("pod-a")
        await wait_for_async("first records", lambda: records_at_least(client, job, 8), 60, 0.1, retry_on=(Exception,))
        procs.stop(server.proc, sig=sig, timeout=10)  # type: ignore[arg-type]
        server = restartable_redis(data, port=server.port, aof=True)
        recovered_at = time.time()
        await wait_for_async("the job to finish", lambda: _finished(job), 120, 0.1, retry_on=(Exception,))
        fin = float(await client.hget(job.queue.keys.job(job.job_id), "fin"))
        await finished_truthfully(job)
        book = await ledger(client, job, site)
        report(
            f"redis-{sig.name.lower()}-aof", recovery_to_terminal_s=round(fin - recovered_at, 1), ledger=book.summary()
        )
        assert not book.lost and not book.duplicate_records, book
        assert fin - recovered_at < lease + 30  # one lease period, plus slack for a loaded machine
    finally:
        await client.aclose()
        server.stop()


def _first_redis_failure(log: Path) -> dict[str, object] | None:
    """The worker's first logged heartbeat or claim failure (its JSON log line), if any."""
    for line in log.read_text(errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if entry.get("msg") in ("heartbeat failed", "claim failed"):
            return dict(entry)
    return None


async def test_a_redis_that_stops_answering_fails_the_workers_commands_within_the_bound(
    site: Bookstore, workers_factory: list[Workers], tmp_path: Path
) -> None:
    """redis-server SIGSTOPped under a running job: its socket still accepts connections and never answers
    (a hung or black-holed Redis). The worker's heartbeats and claims fail within the bound its Redis
    timeout sets (each attempt ends after the timeout, the queue retries, then reports the failure) instead
    of waiting for ever, the worker lives on, and once Redis answers again (SIGCONT) the job finishes with
    every URL once. Before the timeout, nothing failed: the commands waited as long as Redis was stopped."""
    lease = 10.0
    timeout = redis_timeout(lease)
    heartbeat = heartbeat_seconds(lease)
    attempts = 6  # the queue's: a first try and 5 retries, with backoff between them
    backoff = sum(min(0.05 * 2**k, 2.0) * 1.5 for k in range(attempts - 1))
    bound = heartbeat + attempts * timeout + backoff
    data = tmp_path / "redis-data"
    data.mkdir()
    server = restartable_redis(data, aof=False)
    client = aioredis.Redis.from_url(server.url)
    assert server.proc is not None
    try:
        w = Workers(server, tmp_path, lease_seconds=lease)
        workers_factory.append(w)
        job = await submit(client, product_urls(site), lease_seconds=lease)
        worker = w.start("pod-r")
        await wait_for_async("first records", lambda: records_at_least(client, job, 6), 60, 0.1, retry_on=(Exception,))
        procs.signal_group(server.proc, signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            failure = await wait_for_async(
                "a failed heartbeat or claim", lambda: _first_redis_failure(tmp_path / "pod-r.1.log"), bound + 30, 0.1
            )
            failed_after = time.monotonic() - stopped_at
            assert worker.poll() is None  # failing, not dead: an outage of Redis is not cured by a restart
        finally:
            procs.signal_group(server.proc, signal.SIGCONT)
        resumed_at = time.monotonic()
        print(f"first failure {failed_after:.1f}s after Redis stopped (bound {bound:.1f}s): {failure}")
        assert "Redis unreachable after" in str(failure["error"]), failure
        assert failed_after <= bound + 10, (failed_after, bound)  # what a loaded machine adds
        await wait_for_async("the job to finish", lambda: _finished(job), 120, 0.1, retry_on=(Exception,))
        report(
            "redis-sigstop", failed_after_s=round(failed_after, 1), terminal_s=round(time.monotonic() - resumed_at, 1)
        )
        await finished_truthfully(job)
        book = await ledger(client, job, site)
        assert not book.lost and not book.duplicate_records, book
    finally:
        await client.aclose()
        server.stop()
