"""An idle worker waits on the pool's event stream instead of sleeping between claims.

A worker whose claims come back empty polls again after a back-off (0.01 s doubling to ``idle_poll_max``,
0.25 s): a job that arrives at an idle pool waited up to that long for its first claim (a median of ~90 ms,
docs/benchmarks.md, issue 38). The queue writes every job's life to the pool's event stream (registered,
seeds enqueued, resumed, requeued, ...), so an idle worker blocks on that stream (``XREAD BLOCK``) for the
same back-off instead of sleeping, and claims at once when an entry arrives. The back-off and the polls
are unchanged (tasks also become claimable without an event: links another worker found, a retry's
delay over, a lease expired): only the wait between two polls ends sooner.

The read blocks one pooled connection (never the worker's shared one: :mod:`trawl.redisconn.mux` sends
blocking commands on their own). A read that fails (Redis away, a time-out) is a sleep for the rest of
the interval, and a read not answered within the interval and a second is given up: the worker's claims
report Redis's state, not this.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

# The stream's entries since the last one seen; "$": only those written after the first read started.
_FROM_NOW = "$"


class PoolEvents:
    """Blocking waits for the next entry of the pool's event stream ``key``."""

    def __init__(self, redis: Any, key: str) -> None:
        self.redis = redis
        self.key = key
        self.last = _FROM_NOW  # once an entry is seen, none written between two waits is missed

    async def wait(self, seconds: float) -> bool:
        """Return True when an entry newer than the last one seen arrives within ``seconds`` (at once if one
        arrived since the last wait), False when none did or the read failed (after sleeping the rest)."""
        started = time.monotonic()
        try:
            reply = await self.redis.xread({self.key: self.last}, count=100, block=max(1, round(seconds * 1000)))
        except Exception:  # any failure of a best-effort wake (RedisError, a cluster's errors, OSError)
            await asyncio.sleep(max(0.0, seconds - (time.monotonic() - started)))
            return False
        if not reply:
            return False
        _key, entries = reply[0]  # RESP2: [[key, [(id, fields), ...]]]
        if entries:
            last_id = entries[-1][0]
            self.last = last_id.decode() if isinstance(last_id, bytes) else str(last_id)
        return True
