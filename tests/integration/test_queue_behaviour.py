"""Behaviour of trawl.queue against a real redis-server: fairness, priority, backoff, Retry-After,
dead letters, cancel, suspend, retention, dedupe, idempotent enqueue, leases, connection errors."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import AsyncIterator

import pytest
import redis.asyncio as aioredis

from clocks import Clock
from trawl.dev.redis_server import RedisServer
from trawl.queue import JobConfig, Queue, QueueUnavailable, RetryPolicy, Task, UnknownJob
from trawl.redisconn.client import connect
from waits import wait_for_async

PREFIX = "trawl:{ns/pool}"


def urls(host: str, n: int) -> list[str]:
    return [f"https://{host}/p/{i}" for i in range(n)]


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture(params=["multiplexed", "pooled"])
def client_kind(request: pytest.FixtureRequest) -> str:
    """Each behaviour on the workers' client (one shared connection) and on the operator's (a pool)."""
    return str(request.param)


@pytest.fixture
async def redis_client(redis_server: RedisServer, client_kind: str) -> AsyncIterator[aioredis.Redis]:
    client = connect(redis_server.url, multiplex=client_kind == "multiplexed")
    await client.flushall()
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def q(redis_client: aioredis.Redis, clock: Clock) -> Queue:
    return Queue(redis_client, PREFIX, lease_seconds=10, max_stalls=2, clock=clock, rand=lambda: 0.0)


async def test_fairness_small_job_served_within_next_claims(q: Queue, redis_client: aioredis.Redis) -> None:
    await q.register_job(JobConfig("big"))
    await redis_client.config_resetstat()
    assert await q.enqueue("big", urls("big.example", 100_000)) == 100_000
    # A 100,000-URL job is enqueued in a bounded number of round trips (batches of enqueue_batch).
    stat = (await redis_client.info("commandstats"))["cmdstat_evalsha"]
    assert stat["calls"] - stat.get("failed_calls", 0) == 100_000 // q.enqueue_batch  # not counting NOSCRIPT
    first = await q.claim("w1", 50)
    assert {t.job_id for t in first} == {"big"}
    await q.register_job(JobConfig("small"))
    await q.enqueue("small", urls("small.example", 10))
    second = await q.claim("w1", 50)
    by_job = Counter(t.job_id for t in second)
    # Both jobs get an equal share of the claim; the small job is done in this one claim.
    assert by_job["small"] == 10 and by_job["big"] == 40
    stats = await q.job_stats("small")
    assert (stats.pending, stats.in_flight) == (0, 10)


async def test_fairness_round_robin_with_single_task_claims(q: Queue) -> None:
    for job in ("a", "b", "c"):
        await q.register_job(JobConfig(job))
        await q.enqueue(job, urls(f"{job}.example", 5))
    order = [(await q.claim("w1", 1))[0].job_id for _ in range(9)]
    assert order == ["a", "b", "c"] * 3


async def test_priority_higher_first_then_lower(q: Queue) -> None:
    await q.register_job(JobConfig("low", priority=1))
    await q.register_job(JobConfig("high", priority=9))
    await q.register_job(JobConfig("mid", priority=5))
    await q.enqueue("low", urls("low", 5))
    await q.enqueue("high", urls("high", 5))
    await q.enqueue("mid", urls("mid", 5))
    got = [t.job_id for t in await q.claim("w1", 12)]
    assert got == ["high"] * 5 + ["mid"] * 5 + ["low"] * 2


async def test_enqueue_is_idempotent_per_seed_index_and_batched(q: Queue, redis_client: aioredis.Redis) -> None:
    q.enqueue_batch = 1000
    await q.register_job(JobConfig("j"))
    seeds = urls("e", 5000)
    assert await q.enqueue("j", seeds[:2500], start_index=0) == 2500
    # A crashed enqueuer restarting from index 0 adds only what is new.
    assert await q.enqueue("j", seeds, start_index=0) == 2500
    assert await q.enqueue("j", seeds, start_index=0) == 0
    assert await q.enqueue("j", seeds[4000:], start_index=4000) == 0
    with pytest.raises(Exception, match="gap"):
        await q.enqueue("j", ["https://x/1"], start_index=9000)
    stats = await q.job_stats("j")
    assert (stats.total, stats.pending) == (5000, 5000)
    assert await q.enqueued_total() == 5000  # a restarted enqueuer adds nothing to the counter either
    assert await redis_client.llen(q.keys.ready("j")) == 5000
    with pytest.raises(UnknownJob):
        await q.enqueue("nope", ["https://x/1"])
    # Retries are not new tasks: a failed attempt back in the queue leaves the counter as it was.
    task = (await q.claim("w1", 1))[0]
    assert not (await q.fail(task, "w1", "Timeout", "slow")).dead_lettered
    assert await q.enqueued_total() == (await q.pool_signals()).enqueued_total == 5000


async def test_enqueue_without_start_index_appends_each_call(q: Queue) -> None:
    """The natural way to add URLs one at a time adds each one (was: 1 task out of 5 calls)."""
    await q.register_job(JobConfig("one"))
    for i in range(5):
        assert await q.enqueue("one", [f"https://one/{i}"]) == 1
    assert await q.enqueue("one", ["https://one/5", "https://one/6"]) == 2
    assert await q.enqueue("one", ["https://one/x"], start_index=0) == 0  # an explicit index stays idempotent
    stats = await q.job_stats("one")
    assert (stats.total, stats.pending) == (7, 7)
    claimed = await q.claim("w", 10)
    assert sorted(t.url for t in claimed) == sorted(f"https://one/{i}" for i in range(7))


async def test_crawl_dedupe_depth_and_max_pages(q: Queue) -> None:
    await q.register_job(JobConfig("c", max_pages=6, max_depth=2))
    assert await q.enqueue("c", ["https://a/", "https://a/", "https://a/b"]) == 2
    parent = (await q.claim("w1", 1))[0]
    assert parent.depth == 0
    assert await q.enqueue_discovered(parent, ["https://a/", "https://a/c", "https://a/c", "https://a/d"]) == 2
    child = next(t for t in await q.claim("w1", 10) if t.depth == 1)
    assert await q.enqueue_discovered(child, ["https://a/e", "https://a/f", "https://a/g"]) == 2  # cap of 6
    assert await q.enqueue_discovered(child, ["https://a/h"]) == 0
    grandchild = next(t for t in await q.claim("w1", 10) if t.depth == 2)
    assert await q.enqueue_discovered(grandchild, ["https://a/deep"]) == 0  # beyond max depth
    assert (await q.job_stats("c")).total == 6
    # The pool's enqueue counter (the autoscaler's burst check) counts what was added, nothing refused.
    assert await q.enqueued_total() == (await q.pool_signals()).enqueued_total == 6


async def test_dedupe_across_jobs_within_window(q: Queue, clock: Clock) -> None:
    await q.register_job(JobConfig("x1", dedupe_across_jobs=True, dedupe_window_seconds=60))
    await q.register_job(JobConfig("x2", dedupe_across_jobs=True, dedupe_window_seconds=60))
    await q.register_job(JobConfig("x3"))
    assert await q.enqueue("x1", ["https://d/1", "https://d/2"]) == 2
    assert await q.enqueue("x2", ["https://d/1", "https://d/3"]) == 1
    assert await q.enqueue("x3", ["https://d/1"]) == 1  # this job did not ask for cross-job dedupe
    clock.advance(61)
    await q.register_job(JobConfig("x4", dedupe_across_jobs=True, dedupe_window_seconds=60))
    assert await q.enqueue("x4", ["https://d/1"]) == 1


async def test_backoff_timing_exponential_in_real_time(redis_client: aioredis.Redis) -> None:
    q = Queue(redis_client, PREFIX, rand=lambda: 0.0)
    policy = RetryPolicy(max_attempts=4, backoff="Exponential", initial_delay=0.3, max_delay=0.6, jitter=0.0)
    await q.register_job(JobConfig("b", retry=policy))
    await q.enqueue("b", ["https://b/1"])
    waits = []
    for attempt in (1, 2, 3):
        task = (await q.claim("w", 1))[0]
        assert task.attempt == attempt
        failed_at = time.time()
        outcome = await q.fail(task, "w", "HTTP5xx", f"503 on attempt {attempt}")
        assert outcome.retry_at is not None and not outcome.dead_lettered
        assert await q.claim("w", 1) == []  # not due yet
        got: list[Task] = []
        for _ in range(500):
            got = await q.claim("w", 1)
            if got:
                break
            await asyncio.sleep(0.01)
        waits.append(time.time() - failed_at)
        assert await q.release(got[0], "w")
    assert waits[0] == pytest.approx(0.3, abs=0.08)
    assert waits[1] == pytest.approx(0.6, abs=0.08)
    assert waits[2] == pytest.approx(0.6, abs=0.08)  # capped at max_delay
    stats = await q.job_stats("b")
    assert (stats.pending, stats.retrying) == (1, 0)


async def test_retry_after_wins_and_jitter_applies(q: Queue, clock: Clock) -> None:
    q.rand = lambda: 0.5
    await q.register_job(JobConfig("r", retry=RetryPolicy(initial_delay=10, max_delay=20, jitter=0.2)))
    await q.enqueue("r", ["https://r/1", "https://r/2"])
    t1, t2 = await q.claim("w", 2)
    o1 = await q.fail(t1, "w", "HTTP429", "429", retry_after=120)
    o2 = await q.fail(t2, "w", "Timeout", "slow")
    assert o1.retry_at == pytest.approx(clock() + 120)
    assert o2.retry_at == pytest.approx(clock() + 10 * (1 - 0.2 * 0.5))
    clock.advance(9.5)
    (again,) = await q.claim("w", 5)
    assert (again.task_id, again.attempt) == (t2.task_id, 2)
    assert await q.ack(again, "w")
    clock.advance(111)
    assert [t.task_id for t in await q.claim("w", 5)] == [t1.task_id]
    stats = await q.job_stats("r")
    assert (stats.in_flight, stats.retrying, stats.succeeded) == (1, 0, 1)


async def test_dead_letters_with_history_and_requeue(q: Queue, clock: Clock) -> None:
    await q.register_job(JobConfig("d", retry=RetryPolicy(max_attempts=2, initial_delay=1, jitter=0)))
    await q.enqueue("d", ["https://d/ok", "https://d/404", "https://d/flaky"])
    await q.mark_enqueue_done("d")
    tasks = {t.url: t for t in await q.claim("w", 3)}
    assert await q.ack(tasks["https://d/ok"], "w")
    assert (await q.fail(tasks["https://d/404"], "w", "HTTP4xx", "404 Not Found")).dead_lettered
    assert not (await q.fail(tasks["https://d/flaky"], "w", "Timeout", "t1")).dead_lettered
    clock.advance(2)
    (again,) = await q.claim("w", 3)
    assert again.attempt == 2
    assert (await q.fail(again, "w", "Timeout", "t2")).dead_lettered
    stats = await q.job_stats("d")
    assert (stats.succeeded, stats.dead, stats.pending, stats.finished) == (1, 2, 0, True)
    assert [r.url for r in await q.dead_letters("d")] == ["https://d/flaky", "https://d/404"]  # latest first
    assert [r.url for r in await q.dead_letters("d", limit=1)] == ["https://d/flaky"]
    letters = {r.url: r for r in await q.dead_letters("d")}
    assert letters["https://d/404"].error_class == "HTTP4xx" and letters["https://d/404"].attempts == 1
    flaky = letters["https://d/flaky"]
    assert [h["message"] for h in flaky.history] == ["t1", "t2"] and flaky.attempts == 2
    assert (await q.pool_signals()).dead == 2
    # Requeue one selected, then the rest; attempts start again from 1.
    assert await q.requeue_dead("d", [letters["https://d/404"].task_id]) == 1
    assert await q.requeue_dead("d") == 1
    assert await q.requeue_dead("d") == 0
    stats = await q.job_stats("d")
    assert (stats.dead, stats.pending, stats.finished) == (0, 2, False)
    back = await q.claim("w", 5)
    assert sorted(t.url for t in back) == ["https://d/404", "https://d/flaky"]
    assert {t.attempt for t in back} == {1}
    assert all(await q.ack_many(back, "w"))
    assert (await q.job_stats("d")).finished
    assert (await q.pool_signals()).dead == 0
    types = [e["type"] for _, e in await q.events()]
    assert types.count("deadletter") == 2 and "requeued" in types and types.count("finished") == 2


async def test_lease_expiry_returns_tasks_and_stalls_dead_letter(q: Queue, clock: Clock) -> None:
    await q.register_job(JobConfig("s"))
    await q.enqueue("s", ["https://s/1"])
    for stall in (1, 2):
        (t,) = await q.claim("w1", 1)
        clock.advance(5)
        assert (await q.heartbeat("w1", in_flight=1)).held == 1  # extends the lease by 10 s from now
        clock.advance(9)
        assert await q.claim("w2", 1) == []  # still leased by w1
        clock.advance(2)
        assert await q.reap() == 1
        assert not await q.ack(t, "w1")  # lost lease: not counted
        assert (await q.job_stats("s")).pending == 1, stall
    (t,) = await q.claim("w1", 1)
    clock.advance(11)
    assert await q.claim("w2", 1) == []  # the third stall exceeds max_stalls=2
    stats = await q.job_stats("s")
    assert (stats.dead, stats.pending, stats.in_flight, stats.succeeded) == (1, 0, 0, 0)
    (rec,) = await q.dead_letters("s")
    assert rec.error_class == "Stalled"


async def test_restarted_pod_returns_the_dead_incarnations_leases_at_once(q: Queue, clock: Clock) -> None:
    """Same pod, new process: the old process's leases go back now (with a stall), never renewed."""
    await q.register_job(JobConfig("rp"))
    await q.enqueue("rp", urls("rp", 4))
    old = "pod-a@0001"
    assert len(await q.claim(old, 3)) == 3
    assert len(await q.claim("pod-b@0001", 1)) == 1  # another pod: untouched
    new = "pod-a@0002"
    assert await q.evict_previous("pod-a", new) == (1, 3)
    stats = await q.job_stats("rp")
    assert (stats.pending, stats.in_flight) == (3, 1)
    again = await q.claim(new, 10)
    assert len(again) == 3 and all(t.attempt == 1 for t in again)
    assert await q.evict_previous("pod-a", new) == (0, 0)  # itself is never evicted
    assert [e["worker"] for _, e in await q.events() if e["type"] == "workerlost"] == [old]
    await q.heartbeat("pod-b@0001", in_flight=1)
    assert set((await q.pool_signals(reap=False)).workers) == {"pod-b"}  # activity keyed by pod
    assert (await q.heartbeat(old, in_flight=0, held=[])).held == 0  # a zombie of the old process renews nothing


async def test_heartbeat_returns_leases_the_process_does_not_hold(q: Queue, clock: Clock) -> None:
    """A claim whose reply was lost, or an ack/release lost in an outage, leaves a lease the worker does
    not know: its heartbeat gives it back at once instead of renewing it for ever."""
    await q.register_job(JobConfig("hb"))
    await q.enqueue("hb", urls("hb", 3))
    t1, t2, t3 = await q.claim("w@1", 3)
    assert (await q.heartbeat("w@1", in_flight=1, held=[(t1.job_id, t1.task_id)])).held == 1
    stats = await q.job_stats("hb")
    assert (stats.pending, stats.in_flight) == (2, 1)
    again = await q.claim("w@2", 5)
    assert sorted(t.task_id for t in again) == sorted([t2.task_id, t3.task_id])
    assert all(t.attempt == 1 for t in again)  # no attempt or stall spent
    clock.advance(9)
    assert (await q.heartbeat("w@1", in_flight=1, held=[(t1.job_id, t1.task_id)])).held == 1
    assert (await q.heartbeat("w@2", in_flight=2, held=[(t.job_id, t.task_id) for t in again])).held == 2
    clock.advance(9)
    assert await q.reap() == 0  # the held leases were renewed
    assert await q.ack(t1, "w@1")
    assert not await q.ack(t2, "w@1")


async def test_release_gives_back_without_spending_an_attempt(q: Queue, clock: Clock) -> None:
    await q.register_job(JobConfig("rel"))
    await q.enqueue("rel", ["https://r/1", "https://r/2"])
    t1, t2 = await q.claim("w", 2)
    assert await q.release(t1, "w", delay=30)
    assert await q.release(t2, "w")
    assert not await q.release(t1, "w")  # no longer held
    stats = await q.job_stats("rel")
    assert (stats.retrying, stats.in_flight, stats.pending) == (1, 0, 1)
    (first,) = await q.claim("w", 2)
    assert (first.task_id, first.attempt) == (t2.task_id, 1)
    assert await q.ack(first, "w")
    clock.advance(31)
    (again,) = await q.claim("w", 2)
    assert (again.task_id, again.attempt) == (t1.task_id, 1)


async def test_cancel_removes_everything_and_discards_late_acks(q: Queue, redis_client: aioredis.Redis) -> None:
    await q.register_job(JobConfig("keep"))
    await q.enqueue("keep", urls("k", 3))
    await q.register_job(JobConfig("gone", retry=RetryPolicy(initial_delay=100)))
    await q.enqueue("gone", urls("g", 1000))
    claimed = [t for t in await q.claim("w", 20) if t.job_id == "gone"]
    await q.fail(claimed[0], "w", "Timeout", "x")
    await redis_client.xadd(q.keys.results("gone"), {"url": "https://g/p/0"})
    await q.cancel("gone")
    for key in q.keys.job_keys("gone"):
        assert not await redis_client.exists(key), key
    assert not await redis_client.zscore(q.keys.delayed_jobs, "gone")
    assert not await q.ack(claimed[1], "w")
    assert (await q.fail(claimed[2], "w", "Timeout", "x")).retry_at is None
    assert not await q.release(claimed[3], "w")
    assert not any(await q.ack_many(claimed[4:], "w"))
    assert not (await q.job_stats("gone")).exists
    assert await redis_client.exists(q.keys.worker("w"))  # the other job's leases remain
    left = await q.claim("w", 100)
    assert {t.job_id for t in left} <= {"keep"}
    assert await q.enqueue_discovered(claimed[1], ["https://g/new"]) == 0


async def test_suspend_and_resume(q: Queue) -> None:
    await q.register_job(JobConfig("a"))
    await q.register_job(JobConfig("b"))
    await q.enqueue("a", urls("a", 5))
    await q.enqueue("b", urls("b", 5))
    await q.suspend("a")
    assert (await q.job_stats("a")).suspended
    assert {t.job_id for t in await q.claim("w", 3)} == {"b"}
    await q.enqueue("a", urls("a", 8), start_index=0)  # still accepted while suspended, not handed out
    assert {t.job_id for t in await q.claim("w", 10)} == {"b"}
    assert await q.claim("w", 10) == []
    assert (await q.pool_signals()).ready == 0
    await q.resume("a")
    got = await q.claim("w", 10)
    assert [t.job_id for t in got] == ["a"] * 8
    assert not (await q.job_stats("a")).suspended


async def test_retention_expires_every_key_of_a_finished_job(q: Queue, redis_client: aioredis.Redis) -> None:
    await q.register_job(JobConfig("old", spec={"x": 1}))
    await q.enqueue("old", urls("o", 10))
    await q.mark_enqueue_done("old")
    tasks = await q.claim("w", 10)
    await q.fail(tasks[0], "w", "HTTP4xx", "404")
    await q.ack_many(tasks[1:], "w")
    await redis_client.xadd(q.keys.results("old"), {"url": "https://o/p/1"})
    assert (await q.job_stats("old")).finished
    await q.expire_job("old", 2)
    assert (await q.pool_signals()).dead == 0
    present = [k for k in q.keys.job_keys("old") if await redis_client.exists(k)]
    assert len(present) >= 4
    for k in present:  # milliseconds: a loaded machine may read a 2 s TTL after most of it has gone
        assert 0 < await redis_client.pttl(k) <= 2000, k

    async def all_gone() -> bool:
        return not [k for k in q.keys.job_keys("old") if await redis_client.exists(k)]

    await wait_for_async("every key of the job expired", all_gone, 30)
    assert await q.job_spec("old") is None


async def test_dead_letters_requeued_after_retention_started_are_kept(q: Queue, redis_client: aioredis.Redis) -> None:
    """Retrying a finished job's dead letters revives it: no key keeps the retention TTL (the tasks
    would vanish mid-run) and the pool's dead-letter count stays exact through both finishes."""
    await q.register_job(JobConfig("again", spec={"x": 1}))
    await q.enqueue("again", urls("a", 5))
    await q.mark_enqueue_done("again")
    tasks = await q.claim("w", 5)
    for t in tasks[:3]:
        await q.fail(t, "w", "HTTP4xx", "404")
    await q.ack_many(tasks[3:], "w")
    assert (await q.job_stats("again")).finished
    assert (await q.pool_signals()).dead == 3
    await q.expire_job("again", 100)
    assert (await q.pool_signals()).dead == 0  # a finished job's dead letters leave the pool's count

    assert await q.requeue_dead("again", [tasks[0].task_id, tasks[1].task_id]) == 2
    for k in q.keys.job_keys("again"):
        if await redis_client.exists(k):
            assert await redis_client.ttl(k) == -1, k
    assert (await q.pool_signals()).dead == 1  # the one left dead counts again
    stats = await q.job_stats("again")
    assert (stats.dead, stats.finished) == (1, False)

    again = await q.claim("w", 5)
    assert sorted(t.url for t in again) == sorted(t.url for t in tasks[:2])
    await q.ack_many(again, "w")
    assert (await q.job_stats("again")).finished
    await q.expire_job("again", 100)
    assert (await q.pool_signals()).dead == 0
    assert 0 < await redis_client.ttl(q.keys.job("again")) <= 100


async def test_pool_signals(q: Queue, clock: Clock) -> None:
    await q.register_job(JobConfig("p", retry=RetryPolicy(initial_delay=2, jitter=0)))
    await q.enqueue("p", urls("p", 10))
    tasks = await q.claim("w1", 4)
    await q.heartbeat("w1", in_flight=4, draining=True)
    clock.advance(1)
    await q.ack_many(tasks[:2], "w1")
    await q.fail(tasks[2], "w1", "Timeout", "t")
    sig = await q.pool_signals(due_soon_seconds=5)
    assert (sig.ready, sig.delayed, sig.delayed_due_soon, sig.in_flight) == (6, 1, 1, 1)
    assert (sig.completed_total, sig.failed_total) == (2, 1)
    assert sig.service_seconds_total == pytest.approx(3.0, abs=0.01)
    assert sig.workers["w1"].draining and sig.workers["w1"].in_flight == 4
    await q.release(tasks[3], "w1")
    assert await q.retire_worker("w1")
    assert "w1" not in (await q.pool_signals()).workers


async def test_a_claim_since_the_last_heartbeat_counts_in_the_workers_load(q: Queue) -> None:
    """The autoscaler picks idle workers to cordon and remove from these loads: a worker that reported 0 and
    then claimed a (long) task must not read as idle until its next heartbeat, or it is removed with the task
    in hand and the page is fetched twice."""
    await q.register_job(JobConfig("l"))
    await q.enqueue("l", urls("l", 3))
    await q.heartbeat("w1", in_flight=0, draining=False)
    assert (await q.pool_signals()).workers["w1"].in_flight == 0
    await q.claim("w1", 2)
    assert (await q.pool_signals()).workers["w1"].in_flight == 2  # before any heartbeat
    await q.heartbeat("w1", in_flight=3, draining=False)  # one more buffered than leased: the report counts
    assert (await q.pool_signals()).workers["w1"].in_flight == 3


async def test_job_spec_roundtrip_and_unknown_job(q: Queue) -> None:
    await q.register_job(JobConfig("s", spec={"extract": {"title": "h1"}}))
    assert await q.job_spec("s") == {"extract": {"title": "h1"}}
    assert not (await q.job_stats("none")).exists
    with pytest.raises(UnknownJob):
        await q.mark_enqueue_done("none")


async def test_claim_retried_after_lost_reply_replays_same_tasks(q: Queue, redis_client: aioredis.Redis) -> None:
    await q.register_job(JobConfig("n"))
    await q.enqueue("n", urls("n", 10))
    script = q._script("claim")
    calls = {"n": 0}
    real_call = script.__call__

    async def flaky(keys: list[str], args: list[object]) -> object:
        calls["n"] += 1
        result = await real_call(keys=keys, args=args)
        if calls["n"] == 1:
            raise ConnectionError("reply lost")  # the script ran, the reply never arrived
        return result

    q._scripts["claim"] = flaky  # type: ignore[assignment]
    tasks = await q.claim("w", 4)
    assert calls["n"] == 2 and len(tasks) == 4
    assert await redis_client.hlen(q.keys.worker("w")) == 4  # nothing leased twice, nothing leaked
    assert (await q.job_stats("n")).pending == 6


async def test_unreachable_redis_raises_queue_unavailable() -> None:
    server = RedisServer().start()
    client = aioredis.Redis.from_url(server.url)
    try:
        q = Queue(client, PREFIX, retries=2, retry_base_delay=0.01)
        await q.register_job(JobConfig("u"))
        server.stop()
        with pytest.raises(QueueUnavailable):
            await q.enqueue("u", ["https://u/1"])
        with pytest.raises(QueueUnavailable):
            await q.claim("w", 1)
        task = Task("u", "1", "https://u/1", 0, 1, 0.0)
        with pytest.raises(QueueUnavailable):
            await q.ack(task, "w")
    finally:
        await client.aclose()
        server.stop()
