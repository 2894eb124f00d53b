"""Finishing tasks in batches: discovered links, result records and acks, a few round trips per batch.

A task hands its outcome (links to enqueue, the record to write) to the :class:`Finisher` and frees its
concurrency slot. Tasks are finished in lanes, one per sink (a job always writes to one sink), so a slow
webhook holds back only its own jobs' acks. Each lane runs one batch at a time, and whatever arrives
meanwhile forms its next batch, so batches grow with load without any fixed linger. Per batch, in this
order (so a crash at any point leaves the task leased, to be redelivered, and redelivery is idempotent):

1. links: one ``enqueue_discovered`` per (job, depth) — the queue dedupes and enforces maxPages
   exactly; links this worker already submitted for the job are not sent again;
2. records: one write per (sink, job) — deduplicated by (job, URL) in the sink;
3. a refresh job's page state: one save per (job, lineage) (trawl.queue.pagestate; counted once per page);
4. one ``ack_many`` for every task whose links, record and page state were stored.

A task whose links could not be enqueued (Redis trouble) is released. A task whose record the sink
refused is *not* given back (that would refetch the page, again and again while the sink is down): the
record is kept here, its lease held, and written again on its own with exponential backoff until
``sink_retry_seconds`` after its first failure; then the task is dead-lettered as ``SinkFailed`` with the
sink's error. While a job's writes fail, the job hash says so (:mod:`trawl.queue.notes`), and the
operator shows the job ``Stalled/SinkFailing`` with the error.

An ack that fails because Redis is unreachable is kept and retried (every ``ACK_RETRY_SECONDS``) until
Redis answers: its record is stored, so the task must not be redelivered. Meanwhile the task counts as
held (the worker's heartbeat keeps its lease). A release that fails is not kept: the worker's next
heartbeat no longer lists the task, and the queue returns it (see ``heartbeat.lua``).

The number of tasks waiting here bounds claiming (backpressure when a sink or Redis is slow).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from trawl.api.plain import FailureClass
from trawl.queue.model import QueueClient, Task
from trawl.queue.notes import JobNotes
from trawl.queue.pagestate import PageStates
from trawl.sinks.base import Record, Sink, SinkError

from .metrics import WorkerMetrics
from .refresh import PageWrite

log = logging.getLogger("trawl.worker.finish")

SUBMITTED_CAP = 500_000  # links remembered in all (every job's) before the memory is reset
RELEASE_DELAY = 5.0
SINK_RETRY_SECONDS = 300.0  # a sink outage shorter than this costs no refetch and loses no record
SINK_BACKOFF_FIRST = 1.0
SINK_BACKOFF_MAX = 30.0
ACK_RETRY_SECONDS = 1.0
SINK_OK_REFRESH = 10.0  # seconds between clears of a job's sink-failing note by a worker that writes fine


@dataclass(slots=True)
class Finish:
    task: Task
    links: list[str]
    record: Record | None
    sink: Sink | None
    page: PageWrite | None = None  # a refresh job's page state, saved after the record and before the ack
    sink_failures: int = 0  # failed writes of this record so far
    first_failure: float = 0.0  # monotonic time of the first


def sink_backoff(failures: int, first: float = SINK_BACKOFF_FIRST, cap: float = SINK_BACKOFF_MAX) -> float:
    """Seconds before the next write of a record whose write failed ``failures`` times (>= 1)."""
    return float(min(cap, first * 2 ** (failures - 1)))


class Finisher:
    def __init__(
        self,
        queue: QueueClient,
        worker_id: str,
        metrics: WorkerMetrics,
        *,
        max_batch: int = 512,
        on_finished: Callable[[int], None] | None = None,
        on_refused: Callable[[], None] | None = None,
        notes: JobNotes | None = None,
        pages: PageStates | None = None,
        sink_retry_seconds: float = SINK_RETRY_SECONDS,
        sink_backoff_first: float = SINK_BACKOFF_FIRST,
    ) -> None:
        self.queue = queue
        self.worker_id = worker_id
        self.metrics = metrics
        self.max_batch = max_batch
        self.on_finished = on_finished
        self.on_refused = on_refused  # called when Redis refuses an ack: the job cancelled, or the lease lost
        self.notes = notes
        self.pages = pages
        self.sink_retry_seconds = sink_retry_seconds
        self.sink_backoff_first = sink_backoff_first
        self._waiting: dict[int, tuple[Finish, asyncio.TimerHandle]] = {}  # records waiting to be written again
        self._sink_noted: dict[str, float] = {}  # job -> when this worker last set or cleared its sink note
        self._sink_noted_bad: set[str] = set()  # jobs this worker marked as failing
        self._pending: dict[int, list[Finish]] = {}  # lane (the sink's id, 0 for none) -> waiting items
        self._busy: dict[int, list[Finish]] = {}  # lane -> the batch it is finishing
        self._unacked: list[Task] = []  # stored, but their ack failed: retried until Redis answers
        self._retry_at = 0.0
        self._lanes: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._closing = False
        self._submitted: dict[str, set[str]] = {}
        self._loop_task: asyncio.Task[None] | None = None

    @property
    def count(self) -> int:
        """Tasks handed over and not yet acked or released (their leases are still held)."""
        busy = sum(map(len, self._busy.values()))
        return sum(len(p) for p in self._pending.values()) + busy + len(self._waiting) + len(self._unacked)

    def held(self) -> list[Task]:
        """The tasks counted by :attr:`count` (their leases must stay held)."""
        items = [i for p in (*self._pending.values(), *self._busy.values()) for i in p]
        items += [item for item, _handle in self._waiting.values()]
        return [i.task for i in items] + self._unacked

    def submitted(self, job_id: str) -> set[str]:
        """Canonical URLs this worker already enqueued for the job (the queue said added or duplicate)."""
        return self._submitted.setdefault(job_id, set())

    def _remember(self, job_id: str, urls: list[str]) -> None:
        """Links the queue took for the job, not sent again. Bounded across jobs, not per job: a worker serves
        many jobs in its life and a finished job's links stayed behind. Past the bound every memory is
        dropped at once (the queue dedupes anyway: forgetting costs only links sent again)."""
        if sum(map(len, self._submitted.values())) > SUBMITTED_CAP:
            self._submitted.clear()
        self._submitted.setdefault(job_id, set()).update(urls)

    def start(self) -> None:
        if self._loop_task is None:
            self._loop_task = asyncio.create_task(self._run(), name="finisher")

    def submit(self, item: Finish) -> None:
        self._pending.setdefault(_lane_of(item), []).append(item)
        self._wake.set()

    def _resubmit(self, key: int) -> None:
        entry = self._waiting.pop(key, None)
        if entry is not None:
            self.submit(entry[0])

    async def close(self) -> None:
        """Finish everything handed over, then stop. Records still waiting for a failing sink are tried
        once more now; those that fail again are given back (their pages will be fetched again)."""
        self._closing = True
        for item, handle in list(self._waiting.values()):
            handle.cancel()
            self._pending.setdefault(_lane_of(item), []).append(item)
        self._waiting.clear()
        self._wake.set()
        if self._loop_task is not None:
            await self._loop_task
            self._loop_task = None

    async def _run(self) -> None:
        while True:
            # Cleared before looking, so a submit or a lane finishing meanwhile wakes the wait below.
            self._wake.clear()
            for lane, pending in list(self._pending.items()):
                if lane in self._busy:
                    continue
                if not pending:
                    del self._pending[lane]
                    continue
                batch = pending[: self.max_batch]
                del pending[: self.max_batch]
                self._busy[lane] = batch
                task = asyncio.create_task(self._lane(lane, batch), name=f"finisher-lane-{lane}")
                self._lanes.add(task)
                task.add_done_callback(self._lanes.discard)
            if self._closing and not self._busy and not any(self._pending.values()):
                if self._unacked:
                    await self._retry_unacked()  # once more; then the leases expire (records are deduped)
                return
            if self._unacked:
                if time.monotonic() >= self._retry_at:
                    self._retry_at = time.monotonic() + ACK_RETRY_SECONDS
                    await self._retry_unacked()
                    continue
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(max(0.0, self._retry_at - time.monotonic())):
                        await self._wake.wait()
                continue
            await self._wake.wait()

    async def _retry_unacked(self) -> None:
        tasks, self._unacked = self._unacked, []
        await self._ack(tasks)
        if self.on_finished is not None and len(self._unacked) < len(tasks):
            self.on_finished(len(tasks) - len(self._unacked))

    async def _lane(self, lane: int, batch: list[Finish]) -> None:
        try:
            await self._flush(batch)
        except Exception:  # never lose the lane; the tasks' leases expire and they are redelivered
            log.exception("finishing a batch failed", extra={"worker": self.worker_id, "tasks": len(batch)})
        finally:
            del self._busy[lane]
            if self.on_finished is not None:
                self.on_finished(len(batch))
            self._wake.set()

    async def _flush(self, batch: list[Finish]) -> None:
        failed: dict[int, str] = {}  # index in batch -> reason

        # 1. discovered links, one call per (job, depth)
        groups: dict[tuple[str, int], list[int]] = {}
        for i, item in enumerate(batch):
            if item.links:
                groups.setdefault((item.task.job_id, item.task.depth), []).append(i)
        calls = []
        for (job_id, _depth), idxs in groups.items():
            submitted = self._submitted.setdefault(job_id, set())
            urls = list(dict.fromkeys(u for i in idxs for u in batch[i].links if u not in submitted))
            calls.append((job_id, idxs, urls))
        results = await asyncio.gather(
            *(self.queue.enqueue_discovered(batch[idxs[0]].task, urls) for _job, idxs, urls in calls if urls),
            return_exceptions=True,
        )
        it = iter(results)
        for job_id, idxs, urls in calls:
            if not urls:
                continue
            res = next(it)
            if isinstance(res, BaseException):
                for i in idxs:
                    failed[i] = f"enqueue of discovered links failed: {res!r}"
                continue
            self.metrics.discovered.inc(int(res))
            self._remember(job_id, urls)

        # 2. records, one write per (sink, job)
        writes: dict[tuple[int, str], tuple[Sink, list[int]]] = {}
        for i, item in enumerate(batch):
            if i not in failed and item.record is not None and item.sink is not None:
                writes.setdefault((id(item.sink), item.task.job_id), (item.sink, []))[1].append(i)
        write_calls = list(writes.items())
        written = await asyncio.gather(
            *(sink.write(job_id, _records(batch, idxs)) for (_sid, job_id), (sink, idxs) in write_calls),
            return_exceptions=True,
        )
        sink_failed: dict[int, str] = {}
        for ((_sid, job_id), (_sink, idxs)), res in zip(write_calls, written, strict=True):
            if isinstance(res, BaseException):
                reason = str(res) if isinstance(res, SinkError) else f"{type(res).__name__}: {res}"
                for i in idxs:
                    sink_failed[i] = reason
                await self._note_sink(job_id, reason)
            else:
                self.metrics.results.inc(int(res))
                # the sink writes each (job, URL) once: what it left out was stored by an earlier fetch
                keys = {r.key for r in _records(batch, idxs)}
                self.metrics.duplicates.inc(max(0, len(keys) - int(res)))
                await self._note_sink(job_id, None)

        # 3. refresh jobs' page state, once their records are stored
        await self._save_pages(batch, failed, sink_failed)

        # 4. acks for the stored, releases for the rest
        ok = [batch[i].task for i in range(len(batch)) if i not in failed and i not in sink_failed]
        if ok:
            await self._ack(ok)
        for i, reason in failed.items():
            item = batch[i]
            log.warning(
                "could not store the task's results; given back",
                extra={"job": item.task.job_id, "url": item.task.url, "error": reason},
            )
            with contextlib.suppress(Exception):
                await self.queue.release(item.task, self.worker_id, delay=RELEASE_DELAY)
            self.metrics.outcomes.labels("released").inc()
        for i, reason in sink_failed.items():
            await self._sink_failed(batch[i], reason)

    async def _save_pages(self, batch: list[Finish], failed: dict[int, str], sink_failed: dict[int, str]) -> None:
        """Save the page state of the stored items, one call per (job, lineage). An item whose save fails
        is released: its record is stored, and its page is fetched and labelled again from the state as it
        was (the sink keeps one record per URL and job)."""
        groups: dict[tuple[str, str], list[int]] = {}
        for i, item in enumerate(batch):
            if item.page is not None and i not in failed and i not in sink_failed:
                groups.setdefault((item.task.job_id, item.page.lineage), []).append(i)
        if not groups or self.pages is None:
            return
        pages = self.pages
        calls = list(groups.items())

        def save(job_id: str, idxs: list[int]) -> Awaitable[int]:
            first = batch[idxs[0]].page
            assert first is not None
            saves = [p.save for p in (batch[i].page for i in idxs) if p is not None]
            return pages.save(job_id, first.lineage, first.tag_prefix, saves, first.retain_seconds)

        results = await asyncio.gather(*(save(job_id, idxs) for (job_id, _), idxs in calls), return_exceptions=True)
        for (_key, idxs), res in zip(calls, results, strict=True):
            if isinstance(res, BaseException):
                for i in idxs:
                    failed[i] = f"saving the page state failed: {res!r}"

    async def _sink_failed(self, item: Finish, reason: str) -> None:
        """Keep the record and write it again later, or, once its budget is spent, dead-letter the task."""
        now = time.monotonic()
        item.links = []  # enqueued already
        item.sink_failures += 1
        if item.sink_failures == 1:
            item.first_failure = now
        extra = {"job": item.task.job_id, "url": item.task.url, "error": reason, "failures": item.sink_failures}
        delay = sink_backoff(item.sink_failures, self.sink_backoff_first)
        if not self._closing and now + delay - item.first_failure <= self.sink_retry_seconds:
            self.metrics.sink_retries.inc()
            log.warning("sink write failed; the record is kept and written again", extra={**extra, "delay": delay})
            key = id(item)
            handle = asyncio.get_running_loop().call_later(delay, self._resubmit, key)
            self._waiting[key] = (item, handle)
            return
        if self._closing and now - item.first_failure <= self.sink_retry_seconds:
            # Shutting down with budget left: give the task back rather than spend it on our exit.
            log.warning("sink write failed while draining; given back", extra=extra)
            with contextlib.suppress(Exception):
                await self.queue.release(item.task, self.worker_id, delay=RELEASE_DELAY)
            self.metrics.outcomes.labels("released").inc()
            return
        message = f"sink failed for {now - item.first_failure:.0f}s ({item.sink_failures} writes): {reason}"
        log.warning("sink retry budget spent; dead-lettered", extra=extra)
        try:
            outcome = await self.queue.fail(item.task, self.worker_id, FailureClass.SINK_FAILED.value, message)
        except Exception as exc:  # the lease expires and the task is redelivered: nothing is lost
            log.warning("could not dead-letter the task", extra={**extra, "fail_error": repr(exc)})
            return
        self.metrics.sink_failed.inc()
        self.metrics.outcomes.labels("dead" if outcome.dead_lettered else "failed").inc()

    async def _note_sink(self, job_id: str, error: str | None) -> None:
        """Tell the operator the job's sink fails (``error``) or works again (None); cheap when unchanged."""
        if self.notes is None:
            return
        now = time.monotonic()
        last = self._sink_noted.get(job_id)
        fresh = last is not None and now - last < SINK_OK_REFRESH
        if error is None and fresh and job_id not in self._sink_noted_bad:
            return
        try:
            if error is None:
                await self.notes.sink_ok(job_id)
                self._sink_noted_bad.discard(job_id)
            else:
                await self.notes.sink_failing(job_id, error)
                self._sink_noted_bad.add(job_id)
        except Exception as exc:
            log.warning("could not record the sink's state", extra={"job": job_id, "error": repr(exc)})
            return
        self._sink_noted[job_id] = now
        while len(self._sink_noted) > 10_000:
            self._sink_noted.pop(next(iter(self._sink_noted)))

    async def _ack(self, tasks: Sequence[Task]) -> None:
        ack_many = getattr(self.queue, "ack_many", None)
        try:
            if ack_many is not None:
                acked = list(await ack_many(tasks, self.worker_id))
            else:
                acked = [await self.queue.ack(t, self.worker_id) for t in tasks]
        except Exception as exc:
            log.warning("ack failed; retried until Redis answers", extra={"error": repr(exc), "tasks": len(tasks)})
            if not self._unacked:
                self._retry_at = time.monotonic() + ACK_RETRY_SECONDS
            self._unacked.extend(tasks)
            return
        n = sum(1 for a in acked if a)
        self.metrics.outcomes.labels("acked").inc(n)
        if n < len(tasks):
            self.metrics.outcomes.labels("lease_lost").inc(len(tasks) - n)
            if self.on_refused is not None:
                self.on_refused()


def _lane_of(item: Finish) -> int:
    return id(item.sink) if item.sink is not None else 0


def _records(batch: list[Finish], idxs: list[int]) -> list[Record]:
    return [rec for rec in (batch[i].record for i in idxs) if rec is not None]
