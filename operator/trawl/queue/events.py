"""Blocking reads of a pool's event stream: what happened in the queue, as it happens.

Every script that changes a job's life writes one entry to the pool's bounded event stream (``Keys.events``:
registered, started, enqueued, finished, deadletter, requeued, suspended, resumed, cancelled, workerlost).
An idle worker blocks on it between two claims (:mod:`trawl.worker.wakeup`) and the operator learns there
that a job finished (:mod:`trawl.operator.job.endwatch`), instead of each waiting out a polling interval.

The read blocks one pooled connection (a worker's shared, multiplexed one is never blocked:
:mod:`trawl.redisconn.mux` sends blocking commands on their own). A read that fails (Redis away, a
time-out) is a sleep for the rest of the interval: a reader never spins, and what it reads only hastens
work that a poll would have found anyway, so nothing depends on an entry being seen.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from trawl.redisconn.replies import text

# The stream's entries since the last one seen; "$": only those written after the first read started.
_FROM_NOW = "$"
COUNT = 100  # entries per read by default: a reader behind by more reads again at once


class PoolEvents:
    """Blocking reads of the event stream ``key``, from the first read's start (or ``since``) on; none missed
    between reads."""

    def __init__(self, redis: Any, key: str, *, since: float | None = None, count: int = COUNT) -> None:
        """``since``: a wall-clock time (epoch seconds) to read from instead of the first read's start (an
        entry's ID is the Redis server's clock in milliseconds); ``count``: entries per read at most."""
        self.redis = redis
        self.key = key
        self.count = count
        # once an entry is seen, reads continue after it
        self.last = _FROM_NOW if since is None else f"{max(0, int(since * 1000))}-0"

    async def read(self, seconds: float) -> list[dict[str, str]] | None:
        """The entries newer than the last one seen, waiting up to ``seconds`` for one (at once if some arrived
        since the last read): ``[]`` when none came, None when the read failed (after sleeping the rest)."""
        started = time.monotonic()
        try:
            reply = await self.redis.xread({self.key: self.last}, count=self.count, block=max(1, round(seconds * 1000)))
        except Exception:  # any failure of a best-effort read (RedisError, a cluster's errors, OSError)
            await asyncio.sleep(max(0.0, seconds - (time.monotonic() - started)))
            return None
        if not reply:
            return []
        _key, entries = reply[0]  # RESP2: [[key, [(id, fields), ...]]]
        if not entries:
            return []
        self.last = text(entries[-1][0])
        return [{text(k): text(v) for k, v in fields.items()} for _id, fields in entries]

    async def wait(self, seconds: float) -> bool:
        """True when an entry newer than the last one seen arrives within ``seconds`` (at once if one arrived
        since the last wait), False when none did or the read failed."""
        return bool(await self.read(seconds))
