"""A hypothesis state machine drives random sequences of queue operations against a real redis-server
and a model of what every task's state must be; the invariants are checked after every step:
every task is in exactly one state, the counters equal the true counts, and nothing disappears. Jobs
belong to tenants (one with an in-flight quota): a claim takes all it may (work-conserving), never more
than a quota allows, serves the least-served tenant at the top priority (fairness), and each tenant's
in-flight and queued counts are the truth."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from trawl.dev.redis_server import RedisServer
from trawl.queue import JobConfig, Queue, RetryPolicy, Task, TenantLimits, TenantPolicy

PREFIX = "trawl:{sm/pool}"
LEASE = 10
MAX_STALLS = 1
POLICY = RetryPolicy(max_attempts=2, backoff="Fixed", initial_delay=3, max_delay=3, jitter=0)
WORKERS = ("w1", "w2", "w3")
TENANTS = ("", "a", "b")
QUOTA_A = 3  # tenant a's in-flight quota
POLICY_T = TenantPolicy(
    tenants={"a": TenantLimits(weight=2, max_in_flight=QUOTA_A), "b": TenantLimits(weight=1)},
    aging_seconds=1e9,  # no aging here: strict priority is checked (test_queue_tenants.py covers aging)
)

_server: RedisServer | None = None


@dataclass
class MTask:
    job: str
    tid: str
    state: str = "ready"  # ready | delayed | inflight | dead | done
    due: float = 0.0
    worker: str = ""
    attempts: int = 0
    stalls: int = 0


@dataclass
class MJob:
    job_id: str
    priority: int
    tenant: str = ""
    cursor: int = 0
    seq: int = 0
    suspended: bool = False
    cancelled: bool = False
    tasks: dict[str, MTask] = field(default_factory=dict)


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        assert _server is not None
        self.loop = asyncio.new_event_loop()
        self.redis = aioredis.Redis.from_url(_server.url, decode_responses=True)
        self.run(self.redis.flushall())
        self.now = 1_800_000_000.0
        self.q = Queue(
            self.redis, PREFIX, lease_seconds=LEASE, max_stalls=MAX_STALLS, clock=lambda: self.now, rand=lambda: 0.0
        )
        self.jobs: dict[str, MJob] = {}
        self.held: dict[str, set[tuple[str, str]]] = {w: set() for w in WORKERS}  # incl. cancelled jobs' tasks
        self.deadline: dict[str, float] = {}
        self.claimed: list[tuple[str, Task]] = []  # every (worker, task) ever claimed, stale ones too
        self.next_job = 0

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.redis.aclose())
        self.loop.close()

    # ------------------------------------------------------------------ model helpers

    def live_jobs(self) -> list[MJob]:
        return [j for j in self.jobs.values() if not j.cancelled]

    def in_flight(self, tenant: str) -> int:
        return sum(1 for j in self.live_jobs() if j.tenant == tenant for t in j.tasks.values() if t.state == "inflight")

    def headroom(self, tenant: str) -> float:
        return QUOTA_A - self.in_flight("a") if tenant == "a" else float("inf")

    def model_reap(self) -> None:
        for w in WORKERS:
            d = self.deadline.get(w)
            if d is None or not d < self.now:
                continue
            for job_id, tid in self.held[w]:
                job = self.jobs[job_id]
                if job.cancelled:
                    continue
                t = job.tasks[tid]
                t.stalls += 1
                if t.stalls > MAX_STALLS:
                    t.state, t.attempts = "dead", t.attempts + 1
                else:
                    t.state = "ready"
            self.held[w].clear()
            del self.deadline[w]

    def model_promote(self) -> None:
        for job in self.live_jobs():
            for t in job.tasks.values():
                if t.state == "delayed" and t.due <= self.now:
                    t.state = "ready"

    def release_hold(self, worker: str, task: Task) -> MTask | None:
        """The model's view of the lease: the task if ``worker`` holds it and its job is live."""
        key = (task.job_id, task.task_id)
        if key not in self.held[worker]:
            return None
        self.held[worker].discard(key)
        job = self.jobs[task.job_id]
        return None if job.cancelled else job.tasks[task.task_id]

    # ------------------------------------------------------------------ rules

    @initialize()
    def start(self) -> None:
        self.run(self.q.set_tenant_policy(POLICY_T))
        self.register(priority=5, n=3, tenant="a")

    @precondition(lambda self: len(self.live_jobs()) < 5)
    @rule(priority=st.sampled_from([2, 5, 8]), n=st.integers(0, 6), tenant=st.sampled_from(TENANTS))
    def register(self, priority: int, n: int, tenant: str) -> None:
        job_id = f"job{self.next_job}"
        self.next_job += 1
        self.run(self.q.register_job(JobConfig(job_id, priority=priority, retry=POLICY, tenant=tenant)))
        self.jobs[job_id] = MJob(job_id, priority, tenant)
        self.enqueue_into(self.jobs[job_id], overlap=0, n=n)

    def enqueue_into(self, job: MJob, overlap: int, n: int) -> None:
        overlap = min(overlap, job.cursor)
        start = job.cursor - overlap
        urls = [f"https://{job.job_id}/{start + i}" for i in range(overlap + n)]
        added = self.run(self.q.enqueue(job.job_id, urls, start_index=start))
        assert added == n, (added, n)
        for _ in range(n):
            job.seq += 1
            job.tasks[str(job.seq)] = MTask(job.job_id, str(job.seq))
        job.cursor += n

    @precondition(lambda self: self.live_jobs())
    @rule(data=st.data(), overlap=st.integers(0, 3), n=st.integers(0, 5))
    def enqueue(self, data: st.DataObject, overlap: int, n: int) -> None:
        job = data.draw(st.sampled_from(self.live_jobs()))
        self.enqueue_into(job, overlap, n)

    @rule(worker=st.sampled_from(WORKERS), count=st.integers(1, 6))
    def claim(self, worker: str, count: int) -> None:
        self.model_reap()
        self.model_promote()
        available = [t for j in self.live_jobs() if not j.suspended for t in j.tasks.values() if t.state == "ready"]
        may_take = sum(
            min(sum(1 for t in available if self.jobs[t.job].tenant == tn), self.headroom(tn)) for tn in TENANTS
        )
        # Fairness: at the highest priority with claimable work, a tenant with the lowest pass (claims taken /
        # weight: the least served for its weight) gets at least one of the claim's tasks.
        claimable = [t for t in available if self.headroom(self.jobs[t.job].tenant) > 0]
        top = max((self.jobs[t.job].priority for t in claimable), default=None)
        least_served: set[str] = set()
        if top is not None:
            with_work = {self.jobs[t.job].tenant for t in claimable if self.jobs[t.job].priority == top}
            passes = dict(self.run(self.redis.zrange(self.q.keys.tenant_queue(top), 0, -1, withscores=True)))
            # A tenant whose tasks the claim's reaping or promotion brings back enters at the lowest pass.
            floor = min(passes.values(), default=0.0)
            low = min(passes.get(tn, floor) for tn in with_work)
            least_served = {tn for tn in with_work if passes.get(tn, floor) == low}
        got = self.run(self.q.claim(worker, count))
        if least_served:
            assert least_served & {self.jobs[t.job_id].tenant for t in got}, (least_served, got)
        # work-conserving: everything the quotas allow, up to the count
        assert len(got) == min(count, may_take), (len(got), count, may_take)
        for task in got:
            job = self.jobs[task.job_id]
            t = job.tasks[task.task_id]
            assert t.state == "ready" and not job.suspended and not job.cancelled
            assert task.attempt == t.attempts + 1
            t.state, t.worker = "inflight", worker
            self.held[worker].add((task.job_id, task.task_id))
            self.claimed.append((worker, task))
        assert self.in_flight("a") <= QUOTA_A
        if got:
            lowest_taken = min(self.jobs[t.job_id].priority for t in got)
            for t in available:
                job = self.jobs[t.job]
                if t.state == "ready" and self.headroom(job.tenant) > 0:
                    assert job.priority <= lowest_taken, "a higher priority task was left behind"
        if self.held[worker]:
            self.deadline[worker] = self.now + LEASE

    @rule(worker=st.sampled_from(WORKERS))
    def heartbeat(self, worker: str) -> None:
        n = self.run(self.q.heartbeat(worker, in_flight=len(self.held[worker]))).held
        assert n == len(self.held[worker])
        if n:
            self.deadline[worker] = self.now + LEASE

    @precondition(lambda self: self.claimed)
    @rule(data=st.data(), own=st.booleans())
    def ack(self, data: st.DataObject, own: bool) -> None:
        picks = data.draw(st.lists(st.sampled_from(self.claimed), min_size=1, max_size=4, unique_by=id))
        worker = picks[0][0] if own else data.draw(st.sampled_from(WORKERS))
        tasks = list({(t.job_id, t.task_id): t for _, t in picks}.values())
        res = self.run(self.q.ack_many(tasks, worker))
        for task, ok in zip(tasks, res, strict=True):
            t = self.release_hold(worker, task)
            assert ok == (t is not None), (task, worker, ok)
            if t is not None:
                t.state = "done"

    @precondition(lambda self: self.claimed)
    @rule(data=st.data(), error=st.sampled_from(["Timeout", "HTTP4xx"]))
    def fail(self, data: st.DataObject, error: str) -> None:
        worker, task = data.draw(st.sampled_from(self.claimed))
        out = self.run(self.q.fail(task, worker, error, "boom"))
        t = self.release_hold(worker, task)
        if t is None:
            assert out.retry_at is None and not out.dead_lettered
            return
        t.attempts += 1
        if error == "Timeout" and task.attempt < POLICY.max_attempts:
            assert not out.dead_lettered and out.retry_at == self.now + 3
            t.state, t.due = "delayed", self.now + 3
        else:
            assert out.dead_lettered
            t.state = "dead"

    @precondition(lambda self: self.claimed)
    @rule(data=st.data(), delay=st.sampled_from([0, 0, 2]))
    def release(self, data: st.DataObject, delay: int) -> None:
        worker, task = data.draw(st.sampled_from(self.claimed))
        ok = self.run(self.q.release(task, worker, delay=delay))
        t = self.release_hold(worker, task)
        assert ok == (t is not None)
        if t is not None:
            t.state, t.due = ("delayed", self.now + delay) if delay else ("ready", 0.0)

    @rule(seconds=st.sampled_from([1, 2, 4, 11]))
    def expire(self, seconds: int) -> None:
        """Time passes: leases and backoff delays run out (applied at the next claim or reap)."""
        self.now += seconds

    @rule()
    def reap(self) -> None:
        self.run(self.q.reap())
        self.model_reap()

    @precondition(lambda self: self.live_jobs())
    @rule(data=st.data())
    def cancel(self, data: st.DataObject) -> None:
        job = data.draw(st.sampled_from(self.live_jobs()))
        self.run(self.q.cancel(job.job_id))
        job.cancelled = True

    @precondition(lambda self: self.live_jobs())
    @rule(data=st.data(), selected=st.booleans())
    def requeue(self, data: st.DataObject, selected: bool) -> None:
        job = data.draw(st.sampled_from(self.live_jobs()))
        dead = [t for t in job.tasks.values() if t.state == "dead"]
        ids = [t.tid for t in dead[:1]] if selected else None
        n = self.run(self.q.requeue_dead(job.job_id, ids))
        chosen = dead[:1] if selected else dead
        assert n == len(chosen)
        for t in chosen:
            t.state, t.attempts, t.stalls = "ready", 0, 0

    @precondition(lambda self: self.live_jobs())
    @rule(data=st.data(), on=st.booleans())
    def suspend(self, data: st.DataObject, on: bool) -> None:
        job = data.draw(st.sampled_from(self.live_jobs()))
        self.run(self.q.suspend(job.job_id) if on else self.q.resume(job.job_id))
        job.suspended = on

    # ------------------------------------------------------------------ invariants

    @invariant()
    def every_task_in_exactly_one_state_and_counters_true(self) -> None:
        k = self.q.keys
        held_by: dict[str, list[tuple[str, str, str]]] = {}
        for w in WORKERS:
            fields = self.run(self.redis.hkeys(k.worker(w)))
            entries = {tuple(f.split("|", 1)) for f in fields}
            assert entries == self.held[w], (w, entries, self.held[w])
            for job_id, tid in entries:
                held_by.setdefault(job_id, []).append((job_id, tid, w))
        for job in self.jobs.values():
            stats = self.run(self.q.job_stats(job.job_id))
            if job.cancelled:
                assert not stats.exists
                for key in k.job_keys(job.job_id):
                    assert not self.run(self.redis.exists(key))
                continue
            ready = [p.split("|", 1)[0] for p in self.run(self.redis.lrange(k.ready(job.job_id), 0, -1))]
            delayed = {
                p.split("|", 1)[0]: due
                for p, due in self.run(self.redis.zrange(k.delayed(job.job_id), 0, -1, withscores=True))
            }
            dead = self.run(self.redis.hkeys(k.dead(job.job_id)))
            inflight = [tid for _, tid, _ in held_by.get(job.job_id, [])]
            done = [t.tid for t in job.tasks.values() if t.state == "done"]
            seen = Counter([*ready, *delayed, *dead, *inflight, *done])
            # exactly one state each, and nothing disappears: every task ever added is somewhere
            assert all(c == 1 for c in seen.values()), seen
            assert set(seen) == set(job.tasks), set(seen) ^ set(job.tasks)
            for tid, t in job.tasks.items():
                where = (
                    "ready"
                    if tid in ready
                    else "delayed"
                    if tid in delayed
                    else "dead"
                    if tid in dead
                    else "inflight"
                    if tid in inflight
                    else "done"
                )
                assert where == t.state, (job.job_id, tid, where, t.state)
                if where == "delayed":
                    assert delayed[tid] == t.due
            assert stats.pending == len(ready)
            assert stats.retrying == len(delayed)
            assert stats.in_flight == len(inflight)
            assert stats.dead == len(dead)
            assert stats.succeeded == len(done)
            assert stats.total == len(job.tasks) == job.seq
            assert stats.suspended == job.suspended
            ring = k.tenant_ring(job.priority, job.tenant)
            in_ring = self.run(self.redis.lrange(ring, 0, -1)).count(job.job_id)
            assert in_ring == (1 if ready and not job.suspended else 0)
        for p in (2, 5, 8):
            queued = set(self.run(self.redis.zrange(k.tenant_queue(p), 0, -1)))
            with_work = {
                j.tenant
                for j in self.live_jobs()
                if j.priority == p and not j.suspended and any(t.state == "ready" for t in j.tasks.values())
            }
            assert queued == with_work, (p, queued, with_work)
        usage = {u.tenant: u for u in self.run(self.q.tenant_usage())}
        for tn in TENANTS:
            queued = sum(
                1
                for j in self.live_jobs()
                if j.tenant == tn
                for t in j.tasks.values()
                if t.state in ("ready", "delayed")
            )
            mine = usage.get(tn)
            assert (mine.in_flight if mine else 0) == self.in_flight(tn), (tn, mine)
            assert (mine.queued if mine else 0) == queued, (tn, mine, queued)
        dead_total = sum(1 for j in self.live_jobs() for t in j.tasks.values() if t.state == "dead")
        assert self.run(self.q.pool_signals(reap=False)).dead == dead_total


def test_queue_state_machine(redis_server: RedisServer) -> None:
    global _server
    _server = redis_server
    try:
        run_state_machine_as_test(
            QueueMachine,
            settings=settings(
                max_examples=40,
                stateful_step_count=40,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
            ),
        )
    finally:
        _server = None
