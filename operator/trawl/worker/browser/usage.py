"""Browser page time per job, as this worker measured it, sent to the queue about once a second.

A ScrapePool's tenants may have a quota of browser time per UTC day (``browserSecondsPerDay``): the
operator holds a tenant's browser jobs once the day's sum reaches it. The sum is what every worker sends
here: for each attempt of a browser task, the wall-clock seconds it held a browser page (from opening the
page's context to closing it; failed, timed-out and crashed renders included). Counting in memory and
flushing once a second keeps Redis out of the render path and makes one call per second per worker, not
one per page; the price is bounded: a worker that dies loses at most about a second of its counts (and
those of a flush that failed, which is kept for the next one only while Redis stays unreachable briefly).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

log = logging.getLogger(__name__)

FLUSH_SECONDS = 1.0
# What a worker keeps for jobs it could not flush (Redis away for long): beyond it the oldest counts go, so
# an outage never grows the worker's memory (the quota is soft; the time of the outage is mostly lost anyway).
MAX_PENDING_JOBS = 10_000


class BrowserTime:
    """Seconds of browser page time per job, not yet sent to the queue."""

    def __init__(self) -> None:
        self._pending: dict[str, float] = {}

    def add(self, job_id: str, seconds: float) -> None:
        if seconds <= 0:
            return
        self._pending[job_id] = self._pending.get(job_id, 0.0) + seconds
        if len(self._pending) > MAX_PENDING_JOBS:
            self._pending.pop(next(iter(self._pending)))

    def pending(self) -> Mapping[str, float]:
        return dict(self._pending)

    def take(self) -> dict[str, float]:
        """What was measured since the last take; the caller sends it, or gives it back (:meth:`restore`)."""
        taken, self._pending = self._pending, {}
        return taken

    def restore(self, taken: Mapping[str, float]) -> None:
        """A send failed: its counts go into the next one (added before what was measured meanwhile)."""
        merged = dict(taken)
        for job_id, seconds in self._pending.items():
            merged[job_id] = merged.get(job_id, 0.0) + seconds
        self._pending = {}
        for job_id, seconds in merged.items():
            self.add(job_id, seconds)

    async def flush(self, send: Callable[[dict[str, float]], Awaitable[object]]) -> None:
        """Send what is pending (nothing when nothing is); on failure keep it for the next flush and raise."""
        taken = self.take()
        if not taken:
            return
        try:
            await send(taken)
        except BaseException:
            self.restore(taken)
            raise
