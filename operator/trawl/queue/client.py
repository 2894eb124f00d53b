"""The asyncio client of Trawl's Redis queue: every state change is one Lua script (see ``lua/``).

Usage::

    q = Queue(redis, keys.pool_prefix("ns", "pool"), lease_seconds=30)
    await q.register_job(JobConfig(job_id=uid, priority=5))
    await q.enqueue(uid, urls, start_index=0)  # batched, idempotent per seed index
    await q.enqueue_seeds(uid, await q.seeds_enqueued(uid), batch)  # or the seeds a batch at a time
    await q.enqueue(uid, more_urls)            # appends after what is there
    await q.mark_enqueue_done(uid)
    wid = incarnation_id("pod-1")              # one id per process start
    await q.evict_previous("pod-1", wid)       # leases of the pod's earlier processes go back at once
    tasks = await q.claim(wid, 100)            # leases; heartbeat() extends them
    await q.ack_many(tasks, wid)               # or ack / fail / release one by one
"""

from __future__ import annotations

import asyncio
import functools
import json
import os
import random
import time
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import redis.asyncio as aioredis

from trawl.redisconn.client import TRANSIENT_ERRORS
from trawl.redisconn.luashake import shake
from trawl.redisconn.replies import text
from trawl.redisconn.scripts import read_script

from . import backoff
from .bloom import BloomSize
from .errors import QueueUnavailable, UnknownJob, WorkerCordoned
from .keys import PRIORITIES, Keys, pod_of
from .model import (
    SWEEP_DEPTH,
    DeadLetterRecord,
    FailOutcome,
    Heartbeat,
    JobConfig,
    JobStats,
    PoolSignals,
    QueueClient,
    RetryPolicy,
    Task,
    TenantPolicy,
    TenantUsage,
    WorkerActivity,
    sweep_url,
)
from .tenants import check_tenant_name, encode_limits, tenant_usage_of

T = TypeVar("T")

SCRIPT_NAMES = (
    "register",
    "enqueue",
    "enqueue_discovered",
    "enqueue_sitemap",
    "enqueue_sweep",
    "mark_enqueue_done",
    "claim",
    "heartbeat",
    "ack",
    "fail",
    "release",
    "requeue_dead",
    "suspend",
    "resume",
    "cancel",
    "expire_job",
    "reap",
    "evict",
    "retire_worker",
    "signals",
    "cordon",
    "add_browser_seconds",
)

_FORBIDDEN_ID_CHARS = frozenset("|{}")
_RETRYABLE_ERRORS: tuple[type[Exception], ...] = (*TRANSIENT_ERRORS, OSError)


# Scripts that free memory, so they must run when Redis is full (maxmemory with noeviction): deleting a
# job and starting its retention are the remedies for a full Redis, and were refused by it. Every other
# script is refused whole under OOM, before it runs (the shebang's default), so nothing is half-done.
ALLOW_OOM_SCRIPTS = frozenset({"cancel", "expire_job"})


@functools.cache
def load_script_source(name: str) -> str:
    """The full source of a transition's script: the helpers of ``lib.lua`` it uses, then ``<name>.lua``.

    The ``#!lua`` shebang (Redis 7) makes a cluster-mode server enforce that every key a script touches
    is in the slot of its declared keys (scripts without it may cross slots on one node unnoticed).
    """
    shebang = "#!lua flags=allow-oom" if name in ALLOW_OOM_SCRIPTS else "#!lua"
    return shebang + "\n" + shake(read_script("trawl.queue", "lib"), read_script("trawl.queue", name))


def _check_id(kind: str, value: str) -> str:
    if not value or any(c in _FORBIDDEN_ID_CHARS for c in value):
        raise ValueError(f"invalid {kind} {value!r}: must be non-empty without '|', '{{' or '}}'")
    return value


def _parse_task(job_id: str, payload: str, deadline: float) -> Task:
    tid, attempts, _stalls, depth, url = payload.split("|", 4)
    return Task(
        job_id=job_id, task_id=tid, url=url, depth=int(depth), attempt=int(attempts) + 1, lease_deadline=deadline
    )


def policy_to_json(policy: RetryPolicy) -> str:
    data = policy._asdict()
    data["retry_on"] = list(policy.retry_on)
    return json.dumps(data, separators=(",", ":"))


def policy_from_json(raw: str | bytes | None) -> RetryPolicy:
    if not raw:
        return RetryPolicy()
    data = json.loads(raw)
    data["retry_on"] = tuple(data.get("retry_on", ()))
    return RetryPolicy(**data)


class Queue:
    """Trawl's queue for one pool: implements :class:`trawl.queue.model.QueueClient` plus batch calls.

    ``prefix`` must contain the pool's hash tag (see :func:`trawl.queue.keys.pool_prefix`). All of a
    worker's leases share one deadline, pushed to now + ``lease_seconds`` by each claim and heartbeat;
    once it passes, the next claim (or :meth:`reap`) returns the worker's tasks to their queues, and a task
    whose lease expired more than ``max_stalls`` times is dead-lettered. Times come from ``clock``
    (unix seconds) so every process of a pool must have a synchronised clock (NTP), as pods do.
    Connection errors are retried ``retries`` times with exponential backoff, then :class:`QueueUnavailable`.
    """

    def __init__(
        self,
        redis: aioredis.Redis,
        prefix: str,
        *,
        lease_seconds: float = 30.0,
        max_stalls: int = 3,
        events_maxlen: int = 10000,
        history_limit: int = 20,
        enqueue_batch: int = 2000,
        retries: int = 5,
        retry_base_delay: float = 0.05,
        clock: Callable[[], float] = time.time,
        rand: Callable[[], float] = random.random,
    ) -> None:
        if lease_seconds <= 0:
            raise ValueError("lease_seconds must be positive")
        self.redis = redis
        self.keys = Keys(prefix)
        self.prefix = prefix
        self.lease_seconds = lease_seconds
        self.max_stalls = max_stalls
        self.events_maxlen = events_maxlen
        self.history_limit = history_limit
        self.enqueue_batch = enqueue_batch
        self.retries = retries
        self.retry_base_delay = retry_base_delay
        self.clock = clock
        self.rand = rand
        # Registered at first use: a process that enqueues once (a producer, the CLI) builds only the
        # scripts it runs, not the 22 a worker needs (~50 ms of start-up on a loaded machine).
        self._scripts: dict[str, AsyncScript] = {}
        self._policies: dict[str, RetryPolicy] = {}
        self._rings = [self.keys.ring(p) for p in PRIORITIES]

    @classmethod
    def for_pool(cls, redis: aioredis.Redis, namespace: str, pool: str, **kwargs: Any) -> Queue:
        from .keys import pool_prefix

        return cls(redis, pool_prefix(namespace, pool), **kwargs)

    # ------------------------------------------------------------------ plumbing

    async def _retrying(self, op: Callable[[], Awaitable[T]]) -> T:
        delay = self.retry_base_delay
        for attempt in range(self.retries + 1):
            try:
                return await op()
            except _RETRYABLE_ERRORS as exc:
                if attempt >= self.retries:
                    raise QueueUnavailable(f"Redis unreachable after {attempt + 1} attempts: {exc}") from exc
                await asyncio.sleep(delay * (0.5 + random.random()))
                delay = min(delay * 2, 2.0)
        raise AssertionError("unreachable")

    def _script(self, name: str) -> AsyncScript:
        """The transition ``name``'s script, registered on the client at its first use."""
        script = self._scripts.get(name)
        if script is None:
            if name not in SCRIPT_NAMES:
                raise KeyError(f"no queue script {name!r}")
            script = self._scripts[name] = self.redis.register_script(load_script_source(name))
        return script

    async def _run(self, name: str, keys: Sequence[str], args: Sequence[Any]) -> Any:
        script = self._scripts.get(name) or self._script(name)

        async def op() -> Any:
            return await script(keys=list(keys), args=list(args))

        return await self._retrying(op)

    def _now(self) -> str:
        return repr(float(self.clock()))

    # ------------------------------------------------------------------ jobs

    async def register_job(self, job: JobConfig) -> None:
        _check_id("job id", job.job_id)
        if not 0 <= job.priority <= 9:
            raise ValueError("priority must be 0..9")
        if job.tenant:
            check_tenant_name(job.tenant)
        k = self.keys
        await self._run(
            "register",
            [k.job(job.job_id), k.spec(job.job_id), k.events, k.tenants],
            [
                self._now(),
                self.events_maxlen,
                job.job_id,
                json.dumps(job.spec, separators=(",", ":")),
                job.priority,
                "" if job.max_pages is None else job.max_pages,
                job.max_depth,
                1 if (job.max_depth > 0 or job.max_pages is not None or job.dedupe_seeds) else 0,
                1 if job.dedupe_across_jobs else 0,
                job.dedupe_window_seconds,
                policy_to_json(job.retry),
                "" if job.max_dead_letters_kept is None else job.max_dead_letters_kept,
                job.tenant,
                job.bloom.wire() if job.bloom is not None else "",
            ],
        )
        self._policies[job.job_id] = job.retry

    async def enqueue(self, job_id: str, urls: Sequence[str], *, start_index: int | None = None) -> int:
        """Enqueue seed URLs (depth 0) in batches of ``enqueue_batch``.

        With ``start_index`` (the seed index of ``urls[0]``) it is idempotent per (job, seed index): an
        enqueuer restarting from index 0 after a crash adds nothing twice, and the job's tenant's URLs-queued
        quota may stop it short (:meth:`seeds_enqueued` says where). Without it the URLs are appended after
        the seeds already there, so calling it once per URL adds each one."""
        added, _, _ = await self._enqueue(job_id, urls, start_index, hold_at_cap=False)
        return added

    async def _enqueue(
        self, job_id: str, urls: Sequence[str], start_index: int | None, *, hold_at_cap: bool
    ) -> tuple[int, list[str], int]:
        """:meth:`enqueue`, returning (seeds added, the seeds left for the job's task cap, the job's seed cursor
        after the last batch sent). Seeds the cap refuses are skipped (the cursor passes them) unless
        ``hold_at_cap``: then the cursor stops at the first of them and they are returned, the rest of
        ``urls`` with them, to be offered again at that cursor once the cap has room (a sharded pool's shard,
        whose cap is its part of the job's, trawl.queue.sharded)."""
        k = self.keys
        keys = [k.job(job_id), k.ready(job_id), k.seen(job_id), k.cross_dedupe, k.events, *self._rings, k.stats]
        hold = "1" if hold_at_cap else ""
        added, cursor = 0, 0
        for off in range(0, len(urls), self.enqueue_batch):
            batch = urls[off : off + self.enqueue_batch]
            start = "" if start_index is None else start_index + off
            res = await self._run("enqueue", keys, [self._now(), self.events_maxlen, job_id, start, hold, *batch])
            if not isinstance(res, list):
                raise UnknownJob(job_id)
            added, cursor, left = added + int(res[0]), int(res[1]), int(res[2])
            if left:
                return added, [*batch[len(batch) - left :], *urls[off + len(batch) :]], cursor
            if start_index is not None and cursor < start_index + off + len(batch):
                break  # the tenant's URLs-queued quota: the cursor says how far; the caller comes back later
        return added, [], cursor

    async def seeds_enqueued(self, job_id: str) -> int:
        """How far the job's seed stream is enqueued (its seed cursor; 0 for a job that is not there)."""
        raw = await self._retrying(lambda: self.redis.hget(self.keys.job(job_id), "cur"))  # type: ignore[arg-type,return-value]
        return int(raw or 0)

    async def enqueue_seeds(self, job_id: str, position: int, urls: Sequence[str]) -> int:
        """Seeds ``position``.. of the job's seed stream: :meth:`enqueue` from that seed index."""
        return await self.enqueue(job_id, urls, start_index=position)

    async def mark_enqueue_done(self, job_id: str) -> None:
        k = self.keys
        n = await self._run("mark_enqueue_done", [k.job(job_id), k.events], [self._now(), self.events_maxlen, job_id])
        if int(n) == 0:
            raise UnknownJob(job_id)

    async def enqueue_discovered(self, parent: Task, urls: Sequence[str]) -> int:
        added, _ = await self._add_links("enqueue_discovered", parent.job_id, parent.depth + 1, urls)
        return added

    async def enqueue_sitemap(self, job_id: str, depth: int, urls: Sequence[str]) -> int:
        """Add what a sitemap named: page URLs at ``depth`` 0 (counted as the job's URLs from sitemaps), or
        sitemaps at -1 (the job's own), -2 or -3 (named by an index one level up). Deduplicated within the
        job, never beyond its task cap. Returns how many were added (0 for a job that is gone)."""
        added, _ = await self._add_links("enqueue_sitemap", job_id, depth, urls)
        return added

    async def _add_links(self, script: str, job_id: str, depth: int, urls: Sequence[str]) -> tuple[int, list[str]]:
        """``urls`` through ``script`` (enqueue_discovered or enqueue_sitemap) at ``depth``, in batches: (the
        number added, the URLs left for the job's task cap). Those left are the tail of ``urls`` from the
        first one the cap stopped: never examined, so never marked seen, and offered again once the cap has
        room they go in as if offered first (a sharded pool's shard borrows quota for them,
        trawl.queue.sharded); a duplicate or a link beyond max depth is refused, never left. Nothing is left
        for a job that is gone (cancelled meanwhile: nothing to add to)."""
        if not urls:
            return 0, []
        k = self.keys
        keys = [k.job(job_id), k.ready(job_id), k.seen(job_id), k.cross_dedupe, k.events, *self._rings, k.stats]
        added = 0
        for off in range(0, len(urls), self.enqueue_batch):
            batch = urls[off : off + self.enqueue_batch]
            res = await self._run(script, keys, [self._now(), self.events_maxlen, job_id, depth, *batch])
            if not isinstance(res, list):
                return added, []  # the job was cancelled meanwhile
            added, left = added + int(res[0]), int(res[1])
            if left:  # the cap is reached: the later batches would be refused whole (a shard's cap may grow)
                return added, [*batch[len(batch) - left :], *urls[off + len(batch) :]]
        return added, []

    async def enqueue_sweep(self, job_id: str, cursor: str = "0", *, first: bool = True) -> int:
        """Add a refresh job's sweep task at the page state's scan ``cursor`` (enqueue_sweep.lua): the
        operator's first (once per job), or a worker's continuation. Returns 1 added, 0 not, -1 no job, -2
        not swept because the task cap was reached, -3 because cross-job dedupe skips pages."""
        k = self.keys
        keys = [k.job(job_id), k.ready(job_id), k.seen(job_id), k.cross_dedupe, k.events, *self._rings, k.stats]
        args = [self._now(), self.events_maxlen, job_id, SWEEP_DEPTH, sweep_url(cursor), "1" if first else "0"]
        return int(await self._run("enqueue_sweep", keys, args))

    # ------------------------------------------------------------------ workers

    async def claim(self, worker_id: str, count: int) -> list[Task]:
        """Lease up to ``count`` (1..1000) tasks: highest priority first (with aging), shared by weight among
        the tenants of a priority within their quotas, round-robin over a tenant's jobs.
        Raises :class:`WorkerCordoned`, leasing nothing, while the worker's pod is cordoned."""
        _check_id("worker id", worker_id)
        count = max(0, min(int(count), 1000))
        k = self.keys
        nonce = os.urandom(8).hex()
        keys = [
            k.worker(worker_id),
            k.worker_claim(worker_id),
            k.worker_deadlines,
            k.worker_info,
            k.delayed_jobs,
            k.stats,
            k.events,
            *self._rings,
            k.cordoned,
        ]
        args = [
            self.prefix,
            self._now(),
            worker_id,
            count,
            self.lease_seconds,
            self.max_stalls,
            nonce,
            self.events_maxlen,
        ]
        out = await self._run("claim", keys, args)
        if int(out[1]):
            raise WorkerCordoned(f"the autoscaler cordoned the pod of worker {worker_id}")
        deadline = float(text(out[0]))
        return [_parse_task(text(out[i]), text(out[i + 1]), deadline) for i in range(2, len(out), 2)]

    async def heartbeat(
        self,
        worker_id: str,
        *,
        in_flight: int,
        draining: bool = False,
        held: Iterable[tuple[str, str]] | None = None,
    ) -> Heartbeat:
        """Extend the worker's leases; returns how many it holds afterwards and whether its pod is cordoned
        (:meth:`set_cordoned`).

        ``held``: the (job id, task id) of every task the process really holds. Any other lease of the worker
        is an orphan (a claim reply or a release lost in an outage) and goes back to its job at once."""
        k = self.keys
        fields = [] if held is None else [f"{job}|{task}" for job, task in held]
        res = await self._run(
            "heartbeat",
            [k.worker(worker_id), k.worker_deadlines, k.worker_info, k.cordoned],
            [
                self._now(),
                worker_id,
                self.lease_seconds,
                in_flight,
                1 if draining else 0,
                self.prefix,
                0 if held is None else 1,
                *fields,
            ],
        )
        return Heartbeat(int(res[0]), int(res[2]) == 1)

    # ------------------------------------------------------------------ tenants

    async def set_tenant_policy(self, policy: TenantPolicy) -> None:
        """Replace the pool's tenant table (one MULTI: claims see the old table or the new one)."""
        table = {name: encode_limits(limits) for name, limits in policy.tenants.items()}
        table["*"] = encode_limits(policy.default)
        table["aging"] = repr(float(policy.aging_seconds))
        key = self.keys.tenant_config

        async def op() -> Any:
            async with self.redis.pipeline(transaction=True) as pipe:
                pipe.delete(key)
                pipe.hset(key, mapping=table)  # type: ignore[arg-type]
                return await pipe.execute()

        await self._retrying(op)

    async def tenant_usage(self) -> list[TenantUsage]:
        k = self.keys
        names = sorted(text(n) for n in await self._retrying(lambda: self.redis.smembers(k.tenants)))  # type: ignore[arg-type,return-value]

        async def read() -> tuple[list[Any], Any]:
            async with self.redis.pipeline(transaction=False) as pipe:
                for name in names:
                    pipe.hgetall(k.tenant(name))
                pipe.hgetall(k.tenant_config)
                out = await pipe.execute()
                return out[:-1], out[-1]

        rows, raw_table = await self._retrying(read)
        table = {text(a): text(b) for a, b in raw_table.items()}
        today = int(float(self.clock()) // 86400)
        return [
            tenant_usage_of(name, {text(a): text(b) for a, b in row.items()}, table, today)
            for name, row in zip(names, rows, strict=True)
        ]

    # Jobs per add_browser_seconds call: a worker has few jobs at once, so one call nearly always.
    BROWSER_SECONDS_BATCH = 500

    async def add_browser_seconds(self, seconds: Mapping[str, float]) -> int:
        """Count browser page time (job id -> seconds held, as the workers measured it) against each job
        (field 'bms', milliseconds) and its tenant's UTC day (P:tn:<t> 'bday'/'bms'; the day rolls over as
        pages-per-day does). Jobs that are gone are skipped. Returns how many jobs counted time.

        Not idempotent: a call retried after a lost reply may count its time twice (the workers' time is an
        estimate of use, and the quota it feeds a soft one)."""
        items = [(_check_id("job id", job), round(s * 1000)) for job, s in seconds.items() if s > 0]
        counted = 0
        for off in range(0, len(items), self.BROWSER_SECONDS_BATCH):
            batch = items[off : off + self.BROWSER_SECONDS_BATCH]
            res = await self._run(
                "add_browser_seconds", [self.keys.job(job) for job, _ in batch], [self._now(), *(ms for _, ms in batch)]
            )
            counted += int(res)
        return counted

    async def set_cordoned(self, pods: Collection[str], ttl_seconds: float) -> None:
        """Replace the set of cordoned pods (the autoscaler's choice at this poll): their workers claim
        nothing new and learn it from their next heartbeat. The set expires after ``ttl_seconds`` unless
        written again, so workers are never left cordoned by an operator that stopped."""
        await self._run("cordon", [self.keys.cordoned], [max(1, int(ttl_seconds * 1000)), *sorted(pods)])

    async def epoch(self) -> str:
        """The pool's data epoch: a random token set the first time it is asked for, then never changed
        while Redis keeps its data. A different token later means Redis lost the pool's data."""

        async def op() -> Any:
            async with self.redis.pipeline(transaction=False) as pipe:
                pipe.set(self.keys.epoch, os.urandom(8).hex(), nx=True)
                pipe.get(self.keys.epoch)
                return await pipe.execute()

        res = await self._retrying(op)
        return text(res[1])

    async def evict_previous(self, pod: str, worker_id: str) -> tuple[int, int]:
        """At a worker's start: drop every earlier incarnation of ``pod`` (see :func:`incarnation_id`) and
        return their tasks to their jobs now. Returns (incarnations dropped, tasks returned)."""
        _check_id("pod", pod)
        k = self.keys
        res = await self._run(
            "evict",
            [k.worker_deadlines, k.worker_info, k.stats, k.events],
            [self.prefix, self._now(), self.max_stalls, self.events_maxlen, pod, worker_id],
        )
        return int(res[0]), int(res[1])

    async def ack(self, task: Task, worker_id: str) -> bool:
        return (await self.ack_many([task], worker_id))[0]

    async def ack_many(self, tasks: Sequence[Task], worker_id: str) -> list[bool]:
        """Success of many tasks in one script; False for a task whose lease was lost or job cancelled."""
        if not tasks:
            return []
        k = self.keys
        job_index: dict[str, int] = {}
        pairs: list[Any] = []
        for t in tasks:
            ji = job_index.setdefault(t.job_id, len(job_index) + 1)
            pairs.append(ji)
            pairs.append(t.task_id)
        keys = [k.worker(worker_id), k.stats, k.events]
        for job_id in job_index:
            keys.append(k.job(job_id))
            keys.append(k.history(job_id))
        args = [self._now(), self.events_maxlen, len(job_index), *job_index, *pairs]
        res = await self._run("ack", keys, args)
        return [int(x) == 1 for x in res]

    async def _policy(self, job_id: str) -> RetryPolicy:
        policy = self._policies.get(job_id)
        if policy is None:
            raw = await self._retrying(lambda: self.redis.hget(self.keys.job(job_id), "retry"))  # type: ignore[arg-type,return-value]
            policy = policy_from_json(raw)
            self._policies[job_id] = policy
        return policy

    async def fail(
        self, task: Task, worker_id: str, error_class: str, message: str, *, retry_after: float | None = None
    ) -> FailOutcome:
        """A failed attempt: rescheduled by the job's backoff policy (``retry_after`` seconds win when the
        policy honours it) or dead-lettered with its history. FailOutcome(False, None) if the lease was lost."""
        policy = await self._policy(task.job_id)
        decision = backoff.decide_failure(policy, task.attempt, error_class, self.rand, retry_after=retry_after)
        now = float(self.clock())
        retry_at = now + decision.delay
        k = self.keys
        j = task.job_id
        res = await self._run(
            "fail",
            [
                k.worker(worker_id),
                k.job(j),
                k.delayed(j),
                k.delayed_jobs,
                k.history(j),
                k.stats,
                k.events,
                k.dead(j),
                k.dead_times(j),
            ],
            [
                repr(now),
                self.events_maxlen,
                j,
                task.task_id,
                "retry" if decision.retry else "dead",
                repr(retry_at),
                error_class,
                message[:2000],
                self.history_limit,
            ],
        )
        held, dead = int(res[0]), int(res[1])
        if not held:
            return FailOutcome(dead_lettered=False, retry_at=None)
        return FailOutcome(dead_lettered=bool(dead), retry_at=None if dead else retry_at)

    async def release(self, task: Task, worker_id: str, *, delay: float = 0.0) -> bool:
        k = self.keys
        j = task.job_id
        res = await self._run(
            "release",
            [k.worker(worker_id), k.job(j), k.ready(j), k.delayed(j), k.delayed_jobs, *self._rings],
            [self._now(), j, task.task_id, repr(max(0.0, float(delay)))],
        )
        return int(res) == 1

    async def reap(self) -> int:
        """Return the tasks of workers whose lease expired (claim does this too)."""
        k = self.keys
        res = await self._run(
            "reap",
            [k.worker_deadlines, k.worker_info, k.stats, k.events],
            [self.prefix, self._now(), self.max_stalls, self.events_maxlen],
        )
        return int(res)

    async def retire_worker(self, worker_id: str) -> bool:
        """Forget a worker that holds no lease any more (after a graceful shutdown)."""
        k = self.keys
        res = await self._run(
            "retire_worker",
            [k.worker(worker_id), k.worker_claim(worker_id), k.worker_deadlines, k.worker_info],
            [worker_id],
        )
        return int(res) == 1

    # ------------------------------------------------------------------ status

    async def job_stats(self, job_id: str) -> JobStats:
        fields = (
            "tot",
            "pen",
            "inf",
            "ret",
            "suc",
            "dead",
            "ed",
            "sus",
            "fc",
            "fin",
            "dld",
            "rn",
            "rc",
            "ru",
            "rg",
            "smu",
            "rs",
            "bfp",
            "bf",
        )
        raw = await self._retrying(lambda: self.redis.hmget(self.keys.job(job_id), fields))  # type: ignore[arg-type,return-value]
        if raw[0] is None:
            return JobStats(0, 0, 0, 0, 0, 0, False, False, None, exists=False)
        v = [None if x is None else text(x) for x in raw]
        return JobStats(
            total=int(v[0] or 0),
            pending=int(v[1] or 0),
            in_flight=int(v[2] or 0),
            retrying=int(v[3] or 0),
            succeeded=int(v[4] or 0),
            dead=int(v[5] or 0),
            enqueue_done=v[6] == "1",
            suspended=v[7] == "1",
            first_claim_at=float(v[8]) if v[8] else None,
            finished_at=float(v[9]) if v[9] else None,
            dead_dropped=int(v[10] or 0),
            changes=(int(v[11] or 0), int(v[12] or 0), int(v[13] or 0), int(v[14] or 0)),
            from_sitemaps=int(v[15] or 0),
            not_revisited=int(v[16] or 0),
            possibly_skipped=float(v[17] or 0),
            bloom=BloomSize.parse(v[18]),
        )

    async def job_spec(self, job_id: str) -> dict[str, Any] | None:
        raw = await self._retrying(lambda: self.redis.get(self.keys.spec(job_id)))  # type: ignore[arg-type,return-value]
        if raw is None:
            return None
        spec: dict[str, Any] = json.loads(raw)
        return spec

    async def dead_letters(self, job_id: str, limit: int = 100) -> list[DeadLetterRecord]:
        """The job's latest ``limit`` dead letters, latest first."""
        k = self.keys

        async def read() -> tuple[list[Any], list[Any]]:
            ids = await self.redis.zrevrange(k.dead_times(job_id), 0, max(0, limit - 1))
            if not ids:
                return [], []
            return ids, await self.redis.hmget(k.dead(job_id), ids)  # type: ignore[misc]

        ids, raws = await self._retrying(read)
        records: list[DeadLetterRecord] = []
        for tid, raw in zip(ids, raws, strict=True):
            if raw is None:
                continue
            rec = json.loads(raw)
            hist = rec.get("h") or []
            records.append(
                DeadLetterRecord(
                    task_id=text(tid),
                    url=rec["u"],
                    attempts=int(rec["a"]),
                    error_class=rec["e"],
                    message=rec["m"],
                    time=float(rec["t"]),
                    history=list(hist) if isinstance(hist, list) else [],
                )
            )
        return records

    async def requeue_dead(self, job_id: str, task_ids: Sequence[str] | None = None) -> int:
        if task_ids is not None and not task_ids:
            return 0
        k = self.keys
        res = await self._run(
            "requeue_dead",
            [
                k.job(job_id),
                k.dead(job_id),
                k.ready(job_id),
                k.stats,
                k.events,
                *self._rings,
                k.dead_times(job_id),
                *k.job_keys(job_id),
            ],
            [self._now(), self.events_maxlen, job_id, *(task_ids or ())],
        )
        return int(res)

    async def suspend(self, job_id: str) -> None:
        k = self.keys
        await self._run("suspend", [k.job(job_id), k.events, *self._rings], [self._now(), self.events_maxlen, job_id])

    async def resume(self, job_id: str) -> None:
        k = self.keys
        await self._run(
            "resume",
            [k.job(job_id), k.ready(job_id), k.events, *self._rings],
            [self._now(), self.events_maxlen, job_id],
        )

    async def cancel(self, job_id: str) -> None:
        k = self.keys
        await self._run(
            "cancel",
            [*k.job_keys(job_id), k.delayed_jobs, k.stats, k.events, *self._rings],
            [self._now(), self.events_maxlen, job_id],
        )
        self._policies.pop(job_id, None)

    async def expire_job(self, job_id: str, ttl_seconds: int) -> None:
        k = self.keys
        await self._run("expire_job", [*k.job_keys(job_id), k.stats], [max(1, int(ttl_seconds))])

    async def pool_signals(self, *, due_soon_seconds: float = 5.0, reap: bool = True) -> PoolSignals:
        if reap:
            await self.reap()
        k = self.keys
        now = float(self.clock())
        res = await self._run(
            "signals",
            [k.delayed_jobs, k.worker_deadlines, k.worker_info, k.stats, *self._rings],
            [self.prefix, repr(now), repr(due_soon_seconds)],
        )
        ready, delayed, soon, in_flight = (int(x) for x in res[:4])
        info_flat = [text(x) for x in res[4]]
        stats_flat = [text(x) for x in res[5]]
        stats = dict(zip(stats_flat[::2], stats_flat[1::2], strict=True))
        leases_flat = [text(x) for x in res[8]] if len(res) > 8 else []
        leases = {w: int(n) for w, n in zip(leases_flat[::2], leases_flat[1::2], strict=True)}
        workers: dict[str, WorkerActivity] = {}
        for wid, value in zip(info_flat[::2], info_flat[1::2], strict=True):
            inflight_s, seen_s, draining_s = value.split("|")
            # A claim since the last heartbeat counts at once (signals.lua): never idle with a task in hand.
            load = max(int(inflight_s), leases.get(wid, 0))
            activity = WorkerActivity(
                worker_id=wid, in_flight=load, last_seen=float(seen_s), draining=draining_s == "1"
            )
            # Keyed by pod: a pod's newest incarnation speaks for it (older ones are evicted at its start).
            pod = pod_of(wid)
            if pod not in workers or workers[pod].last_seen < activity.last_seen:
                workers[pod] = activity
        return PoolSignals(
            ready=ready,
            delayed=delayed,
            delayed_due_soon=soon,
            in_flight=in_flight,
            dead=int(stats.get("dead", 0)),
            completed_total=int(stats.get("completed", 0)),
            failed_total=int(stats.get("failed", 0)),
            service_seconds_total=int(stats.get("svc", 0)) / 1e6,
            workers=workers,
            time=now,
            enqueued_total=int(stats.get("enq", 0)),
            held=int(res[7]) if len(res) > 7 else 0,
        )

    async def enqueued_total(self) -> int:
        """New tasks enqueued into the pool so far (seeds and discovered links; retries are not new): one
        ``HGET``, for the autoscaler's burst check between its polls. Not retried: a failed check only
        leaves the burst to the next regular poll, which reports the failure."""
        return int(await self.redis.hget(self.keys.stats, "enq") or 0)  # type: ignore[misc]

    def event_keys(self) -> list[str]:
        """The event streams this queue's scripts write (:mod:`trawl.queue.events`): one per shard."""
        return [self.keys.events]

    async def events(self, last_id: str = "0-0", count: int = 1000) -> list[tuple[str, dict[str, str]]]:
        """Events after ``last_id`` from the pool's bounded stream (registered, started, enqueued, finished,
        deadletter, requeued, suspended, resumed, cancelled, workerlost)."""
        raw = await self._retrying(lambda: self.redis.xrange(self.keys.events, min=f"({last_id}", count=count))  # type: ignore[arg-type,return-value]
        return [(text(eid), {text(a): text(b) for a, b in fields.items()}) for eid, fields in raw]


if TYPE_CHECKING:
    from redis.commands.core import AsyncScript

    def _implements_the_contract(q: Queue) -> QueueClient:
        return q  # mypy checks that Queue satisfies the QueueClient protocol
