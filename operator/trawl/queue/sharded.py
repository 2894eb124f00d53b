"""One pool's queue spread over N hash tags (``spec.redis.shards``), so N Redis Cluster masters share it.

Each shard is a whole queue of its own (:class:`Queue`, the same Lua scripts) under its own hash tag;
shard 0 is the pool's usual prefix (its *home*: results, notes, politeness state, the data epoch stay
there, and a pool going from 1 to N shards keeps its data). A job is registered on every shard; its
tasks are placed by URL (a hash of the URL modulo N), so within-job and cross-job dedupe stay exact — a
URL always lands on the same shard — and the operator's seeds and the workers' discovered links agree
on the placement without talking.

Seeds are placed a batch at a time (:meth:`ShardedQueue.enqueue_seeds`), each shard's part at that shard's
own seed cursor; the home records the stream position with every shard's cursor there (``sm``), so a pass
continues where the last stopped and every URL keeps the shard and index one whole-list call gave it.
The records of dead letters a job keeps (``max_dead_letters_kept``) are split over the shards like its
page cap.

A crawl's ``maxPages`` is split into per-shard quotas (each enforced exactly by its shard's script, so the
sum never exceeds the cap). A shard whose quota is used up while links for it keep coming takes unused
quota from the other shards (``take`` there, then ``give`` here: a crash in between loses that quota, so
a crawl may end below its cap, never above it). The shard's scripts say which links or seeds its quota
refused -- the tail of each batch from the first one the cap stopped, never examined -- and only those are
offered again, after quota moved (:meth:`ShardedQueue._add_on`): whatever other calls of the job did
meanwhile, a link is lost only when no shard has quota left, when the crawl is at its cap. A seed refused
for the quota holds its shard's seed cursor until quota moves there (or none is left anywhere).

Claims go round-robin over the shards (each call starts one shard further; an empty shard passes to the
next within the same call), so every master serves its share and the priorities and round-robin
fairness of each shard hold for the whole pool as far as the jobs' URLs spread evenly. Counters are the
sum over the shards (each exact); a job is finished when every shard says so, read twice with the same
totals (a link added to one shard by a task of another between the reads changes a total).

Task ids carry their shard (``<task>.<shard>``) so a worker's (job, task) pairs stay unique.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable, Collection, Iterable, Sequence
from dataclasses import replace
from typing import Any

import redis.asyncio as aioredis
from redis.crc import key_slot

from trawl.redisconn.scripts import read_script

from .bloom import BloomSize
from .client import Queue
from .errors import WorkerCordoned
from .keys import hash_tag
from .model import (
    DeadLetterRecord,
    FailOutcome,
    Heartbeat,
    JobConfig,
    JobStats,
    PoolSignals,
    Task,
    TenantLimits,
    TenantPolicy,
    TenantUsage,
    WorkerActivity,
)

SLOTS = 16384
MAX_SHARDS = 16
# Rounds in a row that add nothing (each lost its room to another call of the job) before a shard's add gives
# up its tail (ShardedQueue._add_on).
_IDLE_ROUNDS = 32


def shard_prefixes(prefix: str, shards: int) -> list[str]:
    """The prefixes of a pool's shards: the home prefix, then one per further shard whose hash tag's slot
    lies in the middle of the next N-th of the slot ring (the home's N-th first), so that with a cluster's
    usual contiguous, even slot ranges (``redis-cli --cluster create``) N shards land on N masters.
    Deterministic: it depends on names only, never on the cluster's current layout."""
    if not 1 <= shards <= MAX_SHARDS:
        raise ValueError(f"shards must be 1..{MAX_SHARDS}")
    tag = hash_tag(prefix)
    start, end = prefix.index("{"), prefix.index("}")
    segment = key_slot(prefix.encode()) * shards // SLOTS
    out = [prefix]
    for i in range(1, shards):
        middle = ((segment + i) % shards * 2 + 1) * SLOTS // (2 * shards)
        for k in range(100_000):
            candidate = f"{prefix[:start]}{{{tag}~{i}.{k}}}{prefix[end + 1 :]}"
            if abs(key_slot(candidate.encode()) - middle) <= SLOTS // (4 * shards):
                out.append(candidate)
                break
        else:  # pragma: no cover - CRC16 reaches a window of 1/(2N) of the ring within a few dozen tries
            raise RuntimeError("no hash tag found for a shard")
    return out


def shard_of(url: str, shards: int) -> int:
    return int.from_bytes(hashlib.blake2b(url.encode(), digest_size=8).digest(), "big") % shards


def place(urls: Iterable[str], present: Sequence[bool]) -> dict[int, list[str]]:
    """Each URL's shard, in order: by the URL's hash, or the home for a shard the job is not on."""
    out: dict[int, list[str]] = {}
    for url in urls:
        i = shard_of(url, len(present))
        out.setdefault(i if present[i] else 0, []).append(url)
    return out


def seed_parts(
    urls: Sequence[str], present: Sequence[bool], cursors: Sequence[int]
) -> tuple[dict[int, tuple[int, list[str]]], list[int]]:
    """One batch of the seed stream over the shards: shard -> (the shard's seed index of its first URL,
    its URLs), and every shard's cursor after the batch. Each shard's seeds are numbered in stream order
    on that shard alone, so batch after batch every URL gets the shard and the index that placing the
    whole list at once gives it (and a pass that resumes from the cursors adds only what is missing)."""
    after = list(cursors)
    parts: dict[int, tuple[int, list[str]]] = {}
    for i, part in place(urls, present).items():
        parts[i] = (after[i], part)
        after[i] += len(part)
    return parts, after


def _split_task_id(task_id: str) -> tuple[str, int]:
    tid, _, shard = task_id.rpartition(".")
    if not tid or not shard.isdigit():
        raise ValueError(f"task id {task_id!r} has no shard")
    return tid, int(shard)


class ShardedQueue(Queue):
    """The pool's queue over ``shards`` hash tags; the same calls as :class:`Queue` (which it is for the
    home shard's keys: ``redis``, ``keys``, ``prefix``)."""

    def __init__(self, redis: aioredis.Redis, prefix: str, *, shards: int, **kwargs: Any) -> None:
        super().__init__(redis, prefix, **kwargs)
        self.shards = [Queue(redis, p, **kwargs) for p in shard_prefixes(prefix, shards)]
        self._next = 0
        self._take = redis.register_script(read_script("trawl.queue", "take_quota"))
        self._give = redis.register_script(read_script("trawl.queue", "give_quota"))
        self._mark = redis.register_script(read_script("trawl.queue", "seed_mark"))
        self._registered: dict[str, list[bool]] = {}

    # ------------------------------------------------------------------ placement

    def _tag(self, task: Task, shard: int) -> Task:
        return replace(task, task_id=f"{task.task_id}.{shard}")

    def _untag(self, task: Task) -> tuple[Task, int]:
        tid, shard = _split_task_id(task.task_id)
        return replace(task, task_id=tid), shard

    async def _present(self, job_id: str) -> list[bool]:
        """The shards the job is registered on: all of them, except for a job that began before the pool's
        shard count grew (it lives on the shards it had; URLs of the others go to the home shard)."""
        known = self._registered.get(job_id)
        if known is None or not all(known):
            known = [
                bool(n)
                for n in await self._each(
                    self._retrying(lambda k=s.keys.job(job_id): self.redis.exists(k))  # type: ignore[misc]
                    for s in self.shards
                )
            ]
            self._registered[job_id] = known
        return known

    async def _place(self, job_id: str, urls: Sequence[str]) -> dict[int, list[str]]:
        return place(urls, await self._present(job_id))

    async def _cap(self, shard: int, job_id: str) -> tuple[int | None, int]:
        """The job's quota on a shard (None: uncapped or gone) and the tasks it holds there."""
        q = self.shards[shard]
        raw = await self._retrying(lambda: self.redis.hmget(q.keys.job(job_id), ["maxp", "tot"]))  # type: ignore[arg-type,return-value]
        return (None if raw[0] is None else int(raw[0])), int(raw[1] or 0)

    async def _room(self, shard: int, job_id: str, wanted: int) -> bool:
        """Whether ``shard`` may take more of the job's tasks, for ``wanted`` of them refused by its quota:
        room its quota has (another call's borrowing may have moved some in since), else quota borrowed
        from the other shards. False when no shard has any left (the crawl is at its cap) or the job is
        gone."""
        cap, held = await self._cap(shard, job_id)
        if cap is None:
            return False
        room = max(0, cap - held)
        if room >= wanted:
            return True
        return await self._borrow(shard, job_id, wanted - room) > 0 or room > 0

    async def _borrow(self, shard: int, job_id: str, wanted: int) -> int:
        """Move up to ``wanted`` unused quota of the job from the other shards to ``shard``."""
        got = 0
        for other in range(len(self.shards)):
            if other == shard or got >= wanted:
                continue
            key = self.shards[other].keys.job(job_id)
            taken = int(await self._retrying(lambda k=key, w=wanted - got: self._take(keys=[k], args=[w])))  # type: ignore[misc]
            if taken:
                home = self.shards[shard].keys.job(job_id)
                await self._retrying(lambda k=home, t=taken: self._give(keys=[k], args=[t]))  # type: ignore[misc]
                got += taken
        return got

    async def _each(self, calls: Iterable[Any]) -> list[Any]:
        return list(await asyncio.gather(*calls))

    # ------------------------------------------------------------------ jobs

    async def register_job(self, job: JobConfig) -> None:
        """Register on every shard, the home last; a capped job gets its quota split. A job whose home
        has it already is left as it is: fully registered before (its shards may hold moved quota), or
        begun before the pool's shard count grew (it stays on the shards it had)."""
        n = len(self.shards)
        present = await self._each(s.job_stats(job.job_id) for s in self.shards)
        if not present[0].exists:

            def share(cap: int | None, i: int) -> int | None:
                return None if cap is None else cap // n + (1 if i < cap % n else 0)

            def part(i: int) -> JobConfig:
                kept = share(job.max_dead_letters_kept, i)
                return replace(job, max_pages=share(job.max_pages, i), max_dead_letters_kept=kept)

            await self._each(self.shards[i].register_job(part(i)) for i in range(1, n) if not present[i].exists)
            await self.shards[0].register_job(part(0))
        self._policies[job.job_id] = job.retry
        self._registered.pop(job.job_id, None)

    async def enqueue(self, job_id: str, urls: Sequence[str], *, start_index: int | None = None) -> int:
        """Seeds, placed by URL. ``start_index`` must be 0 (the whole seed list, so each shard's part is
        the same at every call and its own seed indexes make the call idempotent) or None (append)."""
        if start_index not in (None, 0):
            raise ValueError("a sharded queue enqueues the whole seed list at once (start_index 0) or appends")
        placed = await self._place(job_id, urls)
        added = await self._each(self._seed_on(i, job_id, start_index, part) for i, part in placed.items())
        return sum(added)

    async def _seed_on(self, shard: int, job_id: str, start: int | None, urls: list[str]) -> int:
        """Seeds for ``shard`` from its seed index ``start`` (None: its cursor). Its cursor stops at a seed its
        quota refuses (a seed is idempotent by index: one the cursor passed is never offered again), the
        refused ones go in once quota moved here (:meth:`_add_on`), and the cursor passes those still
        refused only when no shard has quota left, as one queue's does at the job's cap."""
        q = self.shards[shard]
        at = start

        async def add(part: list[str]) -> tuple[int, list[str]]:
            nonlocal at
            n, left, cursor = await q._enqueue(job_id, part, at, hold_at_cap=True)
            at = cursor if left else at
            return n, left

        added, left = await self._add_on(shard, job_id, urls, add)
        if left:  # the crawl is at its cap: the shard's cursor passes them (and the seed mark says so)
            added += await q.enqueue(job_id, left, start_index=at)
        return added

    async def _seed_mark(self, job_id: str) -> tuple[int, list[int]]:
        """(position in the job's seed stream, each shard's seed cursor there), as recorded in Redis (read
        at every batch: a Redis that lost the job's data, or another operator, is never taken for what this
        client last wrote)."""
        raw = await self._retrying(lambda: self.redis.hget(self.keys.job(job_id), "sm"))  # type: ignore[arg-type,return-value]
        fields = [int(x) for x in (raw.decode() if isinstance(raw, bytes) else str(raw or "")).split(",") if x]
        if len(fields) == len(self.shards) + 1:
            return fields[0], fields[1:]
        # No mark (nothing enqueued yet, or an operator that placed the whole seed list in one call, or
        # another shard count): start from the first seed; each shard's cursor skips what it holds.
        return 0, [0] * len(self.shards)

    async def seeds_enqueued(self, job_id: str) -> int:
        return (await self._seed_mark(job_id))[0]

    async def enqueue_seeds(self, job_id: str, position: int, urls: Sequence[str]) -> int:
        """Seeds placed by URL, a batch at a time: each shard's part goes at that shard's own seed cursor,
        so every URL lands on the shard, at the shard's seed index, that one :meth:`enqueue` of the whole
        list from 0 gave it. ``position`` must be where the recorded mark says (:meth:`seeds_enqueued`)."""
        at, cursors = await self._seed_mark(job_id)
        if position != at:
            raise ValueError(f"the job's seeds continue at position {at}, not {position}")
        parts, after = seed_parts(urls, await self._present(job_id), cursors)
        added = await self._each(self._seed_on(i, job_id, start, part) for i, (start, part) in parts.items())
        mark = ",".join(str(n) for n in (position + len(urls), *after))
        await self._retrying(lambda: self._mark(keys=[self.keys.job(job_id)], args=[mark]))  # type: ignore[arg-type,return-value]
        return sum(added)

    async def mark_enqueue_done(self, job_id: str) -> None:
        await self._each(s.mark_enqueue_done(job_id) for s in self.shards)

    async def enqueue_discovered(self, parent: Task, urls: Sequence[str]) -> int:
        return await self._links("enqueue_discovered", parent.job_id, parent.depth + 1, urls)

    async def enqueue_sitemap(self, job_id: str, depth: int, urls: Sequence[str]) -> int:
        return await self._links("enqueue_sitemap", job_id, depth, urls)

    async def _links(self, script: str, job_id: str, depth: int, urls: Sequence[str]) -> int:
        """Links or sitemap URLs (``script`` and ``depth`` as :meth:`Queue._add_links`), placed by URL."""
        if not urls:
            return 0
        placed = await self._place(job_id, urls)

        def on(i: int, part: list[str]) -> Awaitable[tuple[int, list[str]]]:
            q = self.shards[i]
            return self._add_on(i, job_id, part, lambda rest: q._add_links(script, job_id, depth, rest))

        return sum(n for n, _ in await self._each(on(i, part) for i, part in placed.items()))

    async def enqueue_sweep(self, job_id: str, cursor: str = "0", *, first: bool = True) -> int:
        # On the home shard, with the page state it scans (trawl.queue.pagestate).
        return await self.shards[0].enqueue_sweep(job_id, cursor, first=first)

    async def _add_on(
        self,
        shard: int,
        job_id: str,
        urls: list[str],
        add: Callable[[list[str]], Awaitable[tuple[int, list[str]]]],
    ) -> tuple[int, list[str]]:
        """``add`` (links, sitemap URLs or seeds for ``shard``: (number added, those left for the shard's
        quota)), then, while the quota leaves some, the ones left again once the shard has room (its own, or
        borrowed): (number added, those still left when no shard has quota to give).

        Only the left tail is offered again: the URLs before it were added or refused as duplicates (or
        beyond max depth), those in it never examined. Another call of the job may take the room between
        this call's check and its add (it used it, or it borrowed it for its own tail and uses it next): a
        round that adds nothing is bounded by what that other call adds, so the loop ends with the cap. At
        most ``_IDLE_ROUNDS`` such rounds in a row are spent; past them the tail is dropped as a crash
        between a take and a give loses quota (below the cap, never above it)."""
        added, left = await add(urls)
        idle = 0
        while left and idle < _IDLE_ROUNDS and await self._room(shard, job_id, len(left)):
            n, rest = await add(left)
            idle = idle + 1 if len(rest) == len(left) else 0
            added, left = added + n, rest
        return added, left

    # ------------------------------------------------------------------ workers

    async def claim(self, worker_id: str, count: int) -> list[Task]:
        n = len(self.shards)
        first = self._next
        self._next = (self._next + 1) % n
        got: list[Task] = []
        for step in range(n):
            if len(got) >= count:
                break
            i = (first + step) % n
            try:
                tasks = await self.shards[i].claim(worker_id, count - len(got))
            except WorkerCordoned:
                if got:  # cordoned between two shards' claims: keep what was leased, the next claim says so
                    return got
                raise
            got.extend(self._tag(t, i) for t in tasks)
        return got

    async def heartbeat(
        self,
        worker_id: str,
        *,
        in_flight: int,
        draining: bool = False,
        held: Iterable[tuple[str, str]] | None = None,
    ) -> Heartbeat:
        per: list[list[tuple[str, str]] | None] = [None if held is None else [] for _ in self.shards]
        for job_id, task_id in held or ():
            tid, shard = _split_task_id(task_id)
            bucket = per[shard]
            assert bucket is not None
            bucket.append((job_id, tid))
        beats = await self._each(
            s.heartbeat(worker_id, in_flight=in_flight, draining=draining, held=per[i])
            for i, s in enumerate(self.shards)
        )
        return Heartbeat(sum(b.held for b in beats), any(b.cordoned for b in beats))

    async def set_cordoned(self, pods: Collection[str], ttl_seconds: float) -> None:
        await self._each(s.set_cordoned(pods, ttl_seconds) for s in self.shards)

    async def evict_previous(self, pod: str, worker_id: str) -> tuple[int, int]:
        res = await self._each(s.evict_previous(pod, worker_id) for s in self.shards)
        return max(r[0] for r in res), sum(r[1] for r in res)

    async def ack_many(self, tasks: Sequence[Task], worker_id: str) -> list[bool]:
        groups: dict[int, list[tuple[int, Task]]] = {}
        for pos, task in enumerate(tasks):
            raw, shard = self._untag(task)
            groups.setdefault(shard, []).append((pos, raw))
        out = [False] * len(tasks)
        results = await self._each(self.shards[i].ack_many([t for _, t in g], worker_id) for i, g in groups.items())
        for g, oks in zip(groups.values(), results, strict=True):
            for (pos, _), ok in zip(g, oks, strict=True):
                out[pos] = ok
        return out

    async def fail(
        self, task: Task, worker_id: str, error_class: str, message: str, *, retry_after: float | None = None
    ) -> FailOutcome:
        raw, shard = self._untag(task)
        return await self.shards[shard].fail(raw, worker_id, error_class, message, retry_after=retry_after)

    async def release(self, task: Task, worker_id: str, *, delay: float = 0.0) -> bool:
        raw, shard = self._untag(task)
        return await self.shards[shard].release(raw, worker_id, delay=delay)

    async def reap(self) -> int:
        return sum(await self._each(s.reap() for s in self.shards))

    async def retire_worker(self, worker_id: str) -> bool:
        return all(await self._each(s.retire_worker(worker_id) for s in self.shards))

    # ------------------------------------------------------------------ status

    async def _stats_once(self, job_id: str) -> list[JobStats]:
        return await self._each(s.job_stats(job_id) for s in self.shards)

    async def job_stats(self, job_id: str) -> JobStats:
        parts = await self._stats_once(job_id)
        for _ in range(5):
            if not _merge_stats(parts).finished:
                break
            # Every shard said finished: read again and trust it only with the same totals, or a task of
            # one shard may have added a link to another that was read before it.
            again = await self._stats_once(job_id)
            if [p.total for p in again] == [p.total for p in parts]:
                break
            parts = again
        return _merge_stats(parts)

    async def dead_letters(self, job_id: str, limit: int = 100) -> list[DeadLetterRecord]:
        parts = await self._each(s.dead_letters(job_id, limit) for s in self.shards)
        tagged = [d._replace(task_id=f"{d.task_id}.{i}") for i, part in enumerate(parts) for d in part]
        return sorted(tagged, key=lambda d: d.time, reverse=True)[:limit]

    async def requeue_dead(self, job_id: str, task_ids: Sequence[str] | None = None) -> int:
        if task_ids is None:
            return sum(await self._each(s.requeue_dead(job_id) for s in self.shards))
        groups: dict[int, list[str]] = {}
        for task_id in task_ids:
            tid, shard = _split_task_id(task_id)
            groups.setdefault(shard, []).append(tid)
        return sum(await self._each(self.shards[i].requeue_dead(job_id, ids) for i, ids in groups.items()))

    async def suspend(self, job_id: str) -> None:
        await self._each(s.suspend(job_id) for s in self.shards)

    async def resume(self, job_id: str) -> None:
        await self._each(s.resume(job_id) for s in self.shards)

    async def cancel(self, job_id: str) -> None:
        await self._each(s.cancel(job_id) for s in self.shards)
        self._policies.pop(job_id, None)
        self._registered.pop(job_id, None)

    async def expire_job(self, job_id: str, ttl_seconds: int) -> None:
        await self._each(s.expire_job(job_id, ttl_seconds) for s in self.shards)

    async def pool_signals(self, *, due_soon_seconds: float = 5.0, reap: bool = True) -> PoolSignals:
        parts = await self._each(s.pool_signals(due_soon_seconds=due_soon_seconds, reap=reap) for s in self.shards)
        workers: dict[str, WorkerActivity] = {}
        for part in parts:
            for pod, activity in part.workers.items():
                if pod not in workers or workers[pod].last_seen < activity.last_seen:
                    workers[pod] = activity
        return PoolSignals(
            ready=sum(p.ready for p in parts),
            delayed=sum(p.delayed for p in parts),
            delayed_due_soon=sum(p.delayed_due_soon for p in parts),
            in_flight=sum(p.in_flight for p in parts),
            dead=sum(p.dead for p in parts),
            completed_total=sum(p.completed_total for p in parts),
            failed_total=sum(p.failed_total for p in parts),
            service_seconds_total=sum(p.service_seconds_total for p in parts),
            workers=workers,
            time=parts[0].time,
            enqueued_total=sum(p.enqueued_total for p in parts),
            held=sum(p.held for p in parts),
        )

    def event_keys(self) -> list[str]:
        return [s.keys.events for s in self.shards]

    async def enqueued_total(self) -> int:
        return sum(await self._each(s.enqueued_total() for s in self.shards))

    async def set_tenant_policy(self, policy: TenantPolicy) -> None:
        """Each shard enforces an N-th of every quota (rounded down, at least 1), so the pool's sum never
        exceeds the tenant's quota; weights and aging are the same on every shard."""
        n = len(self.shards)
        shard_policy = TenantPolicy(
            tenants={name: _split_limits(lim, n) for name, lim in policy.tenants.items()},
            default=_split_limits(policy.default, n),
            aging_seconds=policy.aging_seconds,
        )
        await self._each(s.set_tenant_policy(shard_policy) for s in self.shards)

    async def tenant_usage(self) -> list[TenantUsage]:
        merged: dict[str, TenantUsage] = {}
        for part in await self._each(s.tenant_usage() for s in self.shards):
            for u in part:
                prev = merged.get(u.tenant)
                merged[u.tenant] = u if prev is None else _merge_usage(prev, u)
        return [merged[name] for name in sorted(merged)]


def _split_limits(limits: TenantLimits, shards: int) -> TenantLimits:
    def part(value: int | None) -> int | None:
        return None if value is None else max(1, value // shards)

    rps = limits.requests_per_second
    return TenantLimits(
        weight=limits.weight,
        max_in_flight=part(limits.max_in_flight),
        requests_per_second=None if rps is None else rps / shards,
        pages_per_day=part(limits.pages_per_day),
        # A sharded pool's seeds are placed over every shard at positions the home records: a shard stopping
        # short would break that, so the URLs-queued quota is not enforced there (docs/architecture.md).
        max_queued=None,
        # Enforced by the operator against the sum over the shards (tenant_usage), never by a shard: whole.
        browser_seconds_per_day=limits.browser_seconds_per_day,
    )


def _merge_usage(a: TenantUsage, b: TenantUsage) -> TenantUsage:
    held = a if a.throttled else b
    return TenantUsage(
        tenant=a.tenant,
        weight=a.weight,
        in_flight=a.in_flight + b.in_flight,
        claimed_total=a.claimed_total + b.claimed_total,
        pages_today=a.pages_today + b.pages_today,
        queued=a.queued + b.queued,
        browser_seconds_today=a.browser_seconds_today + b.browser_seconds_today,
        throttled=held.throttled,
        throttled_message=held.throttled_message,
        throttled_since=held.throttled_since,
    )


def _merge_stats(all_parts: Sequence[JobStats]) -> JobStats:
    home = all_parts[0]
    # a job that began before the pool's shard count grew is on the shards it had
    parts = [p for p in all_parts if p.exists] or [home]
    firsts = [p.first_claim_at for p in parts if p.first_claim_at is not None]
    fins = [p.finished_at for p in parts]
    return JobStats(
        total=sum(p.total for p in parts),
        pending=sum(p.pending for p in parts),
        in_flight=sum(p.in_flight for p in parts),
        retrying=sum(p.retrying for p in parts),
        succeeded=sum(p.succeeded for p in parts),
        dead=sum(p.dead for p in parts),
        enqueue_done=all(p.enqueue_done for p in parts),
        suspended=home.suspended,
        first_claim_at=min(firsts) if firsts else None,
        exists=home.exists,
        finished_at=max(f for f in fins if f is not None) if all(f is not None for f in fins) else None,
        dead_dropped=sum(p.dead_dropped for p in parts),
        changes=(
            sum(p.changes[0] for p in parts),
            sum(p.changes[1] for p in parts),
            sum(p.changes[2] for p in parts),
            sum(p.changes[3] for p in parts),
        ),
        from_sitemaps=sum(p.from_sitemaps for p in parts),
        not_revisited=sum(p.not_revisited for p in parts),
        possibly_skipped=sum(p.possibly_skipped for p in parts),
        bloom=_filters(parts),
    )


def _filters(parts: Sequence[JobStats]) -> BloomSize | None:
    """A crawl's Bloom filters as its status counts them: every shard holds one sized for the whole maxPages
    (a shard may borrow all of the job's quota, and the rate must hold there too), so the bits are the sum
    of theirs -- what the pool's Redis holds -- and the bits set per URL are one filter's."""
    sizes = [p.bloom for p in parts if p.bloom is not None]
    return BloomSize(sum(s.bits for s in sizes), sizes[0].hashes) if sizes else None


def make_queue(redis: aioredis.Redis, prefix: str, shards: int = 1, **kwargs: Any) -> Queue:
    """The pool's queue client: one hash tag, or ``shards`` of them."""
    if shards <= 1:
        return Queue(redis, prefix, **kwargs)
    return ShardedQueue(redis, prefix, shards=shards, **kwargs)
