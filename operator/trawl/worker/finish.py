"""Finishing tasks in batches: discovered links, result records and acks, a few round trips per batch.

A task hands its outcome (links to enqueue, the record to write) to the :class:`Finisher` and frees its
concurrency slot. Tasks are finished in lanes, one per sink (a job always writes to one sink), so a slow
webhook holds back only its own jobs' acks. Each lane runs one batch at a time, and whatever arrives
meanwhile forms its next batch, so batches grow with load without any fixed linger. Per batch, in this
order (so a crash at any point leaves the task leased, to be redelivered, and redelivery is idempotent):

1. links: one ``enqueue_discovered`` per (job, depth) — the queue dedupes and enforces maxPages
   exactly; links this worker already submitted for the job are not sent again;
2. records: one write per (sink, job) — deduplicated by (job, URL) in the sink;
3. one ``ack_many`` for every task whose links and record were stored; the others are released.

The number of tasks waiting here bounds claiming (backpressure when a sink or Redis is slow).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from trawl.queue.model import QueueClient, Task

from .metrics import WorkerMetrics
from .sinks import Record, Sink, SinkError

log = logging.getLogger("trawl.worker.finish")

SUBMITTED_CAP = 500_000  # links remembered per job before the memory is reset
RELEASE_DELAY = 5.0


@dataclass(slots=True)
class Finish:
    task: Task
    links: list[str]
    record: Record | None
    sink: Sink | None


class Finisher:
    def __init__(
        self,
        queue: QueueClient,
        worker_id: str,
        metrics: WorkerMetrics,
        *,
        max_batch: int = 512,
        on_finished: Callable[[int], None] | None = None,
    ) -> None:
        self.queue = queue
        self.worker_id = worker_id
        self.metrics = metrics
        self.max_batch = max_batch
        self.on_finished = on_finished
        self._pending: dict[int, list[Finish]] = {}  # lane (the sink's id, 0 for none) -> waiting items
        self._busy: dict[int, int] = {}  # lane -> items of the batch it is finishing
        self._lanes: set[asyncio.Task[None]] = set()
        self._wake = asyncio.Event()
        self._closing = False
        self._submitted: dict[str, set[str]] = {}
        self._loop_task: asyncio.Task[None] | None = None

    @property
    def count(self) -> int:
        """Tasks handed over and not yet acked or released (their leases are still held)."""
        return sum(len(p) for p in self._pending.values()) + sum(self._busy.values())

    def submitted(self, job_id: str) -> set[str]:
        """Canonical URLs this worker already enqueued for the job (the queue said added or duplicate)."""
        return self._submitted.setdefault(job_id, set())

    def start(self) -> None:
        if self._loop_task is None:
            self._loop_task = asyncio.create_task(self._run(), name="finisher")

    def submit(self, item: Finish) -> None:
        lane = id(item.sink) if item.sink is not None else 0
        self._pending.setdefault(lane, []).append(item)
        self._wake.set()

    async def close(self) -> None:
        """Finish everything handed over, then stop."""
        self._closing = True
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
                self._busy[lane] = len(batch)
                task = asyncio.create_task(self._lane(lane, batch), name=f"finisher-lane-{lane}")
                self._lanes.add(task)
                task.add_done_callback(self._lanes.discard)
            if self._closing and not self._busy and not any(self._pending.values()):
                return
            await self._wake.wait()

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
            submitted = self._submitted[job_id]
            if len(submitted) > SUBMITTED_CAP:
                submitted.clear()
            submitted.update(urls)

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
        for ((_sid, _job_id), (_sink, idxs)), res in zip(write_calls, written, strict=True):
            if isinstance(res, BaseException):
                reason = str(res) if isinstance(res, SinkError) else repr(res)
                for i in idxs:
                    failed[i] = reason
            else:
                self.metrics.results.inc(int(res))

        # 3. acks for the stored, releases for the rest
        ok = [batch[i].task for i in range(len(batch)) if i not in failed]
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

    async def _ack(self, tasks: Sequence[Task]) -> None:
        ack_many = getattr(self.queue, "ack_many", None)
        try:
            if ack_many is not None:
                acked = list(await ack_many(tasks, self.worker_id))
            else:
                acked = [await self.queue.ack(t, self.worker_id) for t in tasks]
        except Exception as exc:
            log.warning("ack failed; leases will expire and the tasks be redelivered", extra={"error": repr(exc)})
            return
        n = sum(1 for a in acked if a)
        self.metrics.outcomes.labels("acked").inc(n)
        if n < len(tasks):
            self.metrics.outcomes.labels("lease_lost").inc(len(tasks) - n)


def _records(batch: list[Finish], idxs: list[int]) -> list[Record]:
    return [rec for rec in (batch[i].record for i in idxs) if rec is not None]
