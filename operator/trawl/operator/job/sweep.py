"""The ScrapeJobs' periodic passes: one loop for every job of this operator, not a kopf timer per job.

A kopf timer is a task per object, and each tick goes through kopf's handler machinery (kwargs, outcome,
patch, log context) before our pass begins. At 10,000 jobs that was 10,000 tasks waking every second (the
finished ones every 5 s), the operator saturated by ticks alone, and passes came minutes late for every
job at once. This loop keeps, per job, the part of the body the watch last delivered that a pass reads
(:func:`pass_body`: not managedFields, not kopf's copy of the spec) and when its last pass began;
``due_passes`` (pure) picks the jobs whose interval has passed, the longest-waiting first; at most
``concurrency`` passes run at once, each a task of its own, so a pass that waits (Redis, the API server)
holds back no other job, and under overload every job still gets its turn (round-robin by age) rather
than some never.

What is due follows the status this process last applied (the caller's ``status_of``), not kopf's copy of
the object, which lags under load: a job that just finished moves to the slower interval at once.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger("trawl.operator")

# Passes of different jobs run at once up to this: the API thread pool (16) and the Redis clients' pools
# bound the I/O below it anyway; this bounds the tasks and the memory of passes in flight.
DEFAULT_CONCURRENCY = 64


@dataclass(slots=True)  # one per job: 10,000 of them
class Tracked:
    """A job the loop knows: its slim body as the watch last delivered it, its last pass's start (monotonic)."""

    body: Any
    last_pass: float = float("-inf")
    running: bool = False
    kind: str | None = "active"  # which interval applies: kept, not asked every tick (it changes with a pass)
    nudged: bool = False  # something happened during its running pass: the next one is due when it ends


@dataclass(frozen=True)
class Intervals:
    """How often a job gets a pass: ``active`` while it runs or what follows its end is not done (hooks, a
    manifest), ``finished`` after (its TTL, and a Redis that lost its data told within seconds)."""

    active: float
    finished: float


def due_passes(tracked: Mapping[str, Tracked], now: float, intervals: Intervals, room: int) -> list[str]:
    """The uids whose pass is due at ``now``, longest-waiting first, at most ``room``. A job's ``kind``:
    "active", "finished" or None (no periodic pass: e.g. a job being deleted)."""
    if room <= 0:
        return []
    waiting: list[tuple[float, str]] = []
    for uid, job in tracked.items():
        if job.running or job.kind is None:
            continue
        every = intervals.active if job.kind == "active" else intervals.finished
        if now - job.last_pass >= every:
            waiting.append((job.last_pass, uid))
    return [uid for _, uid in heapq.nsmallest(room, waiting)]


class JobSweep:
    """The loop. ``run_pass(body)`` is one pass over a job (its errors are its own: a pass that raises is
    logged and the job's next pass comes at its interval); ``kind_of(body)`` says which interval applies,
    asked when the watch delivers the job and after each of its passes (what can change it)."""

    def __init__(
        self,
        run_pass: Callable[[Any], Awaitable[None]],
        kind_of: Callable[[Any], str | None],
        intervals: Intervals,
        *,
        concurrency: int = DEFAULT_CONCURRENCY,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.run_pass = run_pass
        self.kind_of = kind_of
        self.intervals = intervals
        self.concurrency = concurrency
        self.clock = clock
        self.jobs: dict[str, Tracked] = {}
        self.in_flight: set[asyncio.Task[None]] = set()
        self.loop: asyncio.Task[None] | None = None

    def seen(self, uid: str, body: Any) -> None:
        """The watch delivered the job (any event but its deletion): keep its newest body."""
        job = self.jobs.get(uid)
        if job is None:
            self.jobs[uid] = Tracked(body, kind=self.kind_of(body))
        else:
            job.body = body
            job.kind = self.kind_of(body)

    def passed(self, uid: str) -> None:
        """A pass began outside the loop (a create or update handler): the next periodic one waits its interval."""
        job = self.jobs.get(uid)
        if job is not None:
            job.last_pass = self.clock()

    def nudge(self, uid: str) -> None:
        """Something the job's pass reads changed (the queue says the job finished, trawl.operator.job.endwatch):
        its pass is due now, not at its interval; one running now is followed by another as soon as it ends
        (it may have read the queue before the change). A job this loop does not hold is left alone."""
        job = self.jobs.get(uid)
        if job is None or job.kind is None:
            return
        if job.running:
            job.nudged = True
            return
        job.last_pass = float("-inf")  # without room now, the loop's next tick starts it first of all
        if len(self.in_flight) < self.concurrency:
            self._start(uid)  # this job only: a tick walks every job, and ends come one by one

    def forget(self, uid: str) -> None:
        self.jobs.pop(uid, None)

    def tick(self) -> list[str]:
        """Start the passes that are due and have room; returns their uids."""
        room = self.concurrency - len(self.in_flight)
        started = due_passes(self.jobs, self.clock(), self.intervals, room)
        for uid in started:
            self._start(uid)
        return started

    def _start(self, uid: str) -> None:
        job = self.jobs[uid]
        job.running = True
        job.last_pass = self.clock()
        task = asyncio.create_task(self._pass(uid, job))
        self.in_flight.add(task)
        task.add_done_callback(self.in_flight.discard)

    async def _pass(self, uid: str, job: Tracked) -> None:
        try:
            await self.run_pass(job.body)
        except Exception:  # the pass reports its own problems on the job's status; this is a bug's last stop
            log.exception("ScrapeJob pass %s failed", uid)
        finally:
            job.running = False
            job.kind = self.kind_of(job.body)  # the pass may have finished the job, or its hooks
            if job.nudged:
                job.nudged = False
                job.last_pass = float("-inf")

    def start(self, every: float) -> None:
        """Run the loop (once: later calls do nothing), ticking every ``every`` seconds until ``stop``."""
        if self.loop is None:
            self.loop = asyncio.create_task(self._run(every))

    async def stop(self) -> None:
        """Stop the loop and cancel the passes in flight."""
        if self.loop is not None:
            self.loop.cancel()
            await asyncio.gather(self.loop, return_exceptions=True)
            self.loop = None
        for task in list(self.in_flight):
            task.cancel()
        await asyncio.gather(*self.in_flight, return_exceptions=True)

    async def _run(self, every: float) -> None:
        while True:
            self.tick()
            await asyncio.sleep(every)


def tick_seconds(intervals: Intervals) -> float:
    """How often the loop looks: a quarter of the active interval, at most 0.25 s, so a pass is at most that
    late; the look itself is a walk over the jobs in memory (about a millisecond per 10,000)."""
    return min(0.25, intervals.active / 4)


# kopf's own annotations (its last-handled configuration is a copy of the spec) are not a pass's input.
KOPF_ANNOTATIONS = "kopf.trawl.dev/"
PASS_METADATA = ("name", "namespace", "uid", "generation", "labels", "deletionTimestamp")


def pass_body(body: Mapping[str, Any], *, keep_status: bool) -> dict[str, Any]:
    """The part of a ScrapeJob a periodic pass reads (and an Event names): identity, labels, its own
    annotations, spec, and the stored status when asked (the pass derives from what it last wrote)."""
    meta = body.get("metadata") or {}
    slim: dict[str, Any] = {k: meta[k] for k in PASS_METADATA if k in meta}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if not k.startswith(KOPF_ANNOTATIONS)}
    if annotations:
        slim["annotations"] = annotations
    return {
        "apiVersion": body.get("apiVersion"),
        "kind": body.get("kind"),
        "metadata": slim,
        "spec": body.get("spec") or {},
        "status": (body.get("status") or {}) if keep_status else {},
    }
