"""A job's end seen when the queue records it, not at the job's next periodic pass.

The last ack or dead letter of a job writes a ``finished`` entry to its pool's event stream
(:mod:`trawl.queue.events`). Without this module the operator learned of it at the job's next pass, up to
its interval (``TRAWL_JOB_SYNC_SECONDS``, 1 s) plus the loop's tick later; ``kubectl wait`` and every job
that follows another waited that long. Here one reader per event stream blocks on it and asks the jobs'
loop for a pass at once (:meth:`JobSweep.nudge`) for each job whose end it reads.

Readers follow the jobs: a pass over a running job keeps its pool's reader alive (:meth:`EndWatch.touch`,
started on first use), and a reader no pass touched for ``idle_seconds`` stops. So an operator shard reads
the streams of the pools its own running jobs use, and no stream once its jobs are done. Best effort by
design: the periodic passes stay, so an entry missed (a failing Redis, a reader stopping) delays a job's end
by one interval, as before, and never loses it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from trawl.queue import Queue
from trawl.queue.events import PoolEvents

log = logging.getLogger("trawl.operator")

IDLE_SECONDS = 60.0  # a reader no pass over a running job touched for this long stops
BLOCK_SECONDS = 2.0  # one read's wait: how soon a reader notices it is idle or stopped
# A new reader reads from this long before its start: the pass that started it read the job unfinished,
# and its end may come before the first read blocks; the margin also covers the operator's clock running
# ahead of Redis's (an entry's ID is Redis's time). Ends read twice only bring a pass more.
LOOKBACK_SECONDS = 30.0
# Entries per read. The operator reads every entry of its pools' streams (4-5 per job: registered, enqueued,
# started, finished, ...): 10,000 jobs created in five minutes write ~150 a second, and on an operator busy
# with those creates each read's round trip takes many turns of a crowded event loop. At 100 a read such a
# reader can fall behind for as long as the storm lasts, and one behind by more than the stream's bound loses
# the entries trimmed meanwhile (those ends wait for their periodic pass). A read of 2,000 is a few ms.
READ_COUNT = 2000


@dataclass
class _Reader:
    used: float
    task: asyncio.Task[None] | None = field(default=None)


class EndWatch:
    """Readers of pools' event streams calling ``on_end(job_uid)`` for each ``finished`` entry."""

    def __init__(
        self,
        on_end: Callable[[str], None],
        *,
        idle_seconds: float = IDLE_SECONDS,
        block_seconds: float = BLOCK_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.on_end = on_end
        self.idle_seconds = idle_seconds
        self.block_seconds = block_seconds
        self.clock = clock
        self.wall = wall
        # (the Redis client's identity, stream key): a client replaced (rotated settings) gets a reader of its own
        self.readers: dict[tuple[int, str], _Reader] = {}

    def touch(self, queue: Queue) -> None:
        """A pass over a running job of ``queue``'s pool: keep (or start) a reader of each of its streams."""
        now = self.clock()
        for key in queue.event_keys():
            ident = (id(queue.redis), key)
            reader = self.readers.get(ident)
            if reader is None or reader.task is None or reader.task.done():
                reader = self.readers[ident] = _Reader(now)
                events = PoolEvents(queue.redis, key, since=self.wall() - LOOKBACK_SECONDS, count=READ_COUNT)
                reader.task = asyncio.create_task(self._read(ident, events, reader))
            reader.used = now

    async def _read(self, ident: tuple[int, str], events: PoolEvents, reader: _Reader) -> None:
        try:
            while self.clock() - reader.used < self.idle_seconds:
                for entry in await events.read(self.block_seconds) or ():
                    if entry.get("type") == "finished" and entry.get("job"):
                        self.on_end(entry["job"])
        except Exception:  # a bug's last stop: the periodic passes still see every end, one interval later
            log.exception("reading the event stream %s failed", ident[1])
        finally:
            if self.readers.get(ident) is reader:
                del self.readers[ident]

    async def stop(self) -> None:
        """Stop every reader (the operator's cleanup)."""
        tasks = [r.task for r in self.readers.values() if r.task is not None]
        self.readers.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
