"""An idle worker waits on the pool's event stream instead of sleeping between claims.

A worker whose claims come back empty polls again after a back-off (0.01 s doubling to ``idle_poll_max``,
0.25 s): a job that arrives at an idle pool waited up to that long for its first claim (a median of ~90 ms,
docs/benchmarks.md, issue 38). The queue writes every job's life to the pool's event stream (registered,
seeds enqueued, resumed, requeued, ...), so an idle worker blocks on that stream (``XREAD BLOCK``,
:class:`trawl.queue.events.PoolEvents`) for the same back-off instead of sleeping, and claims at once when
an entry arrives. The back-off and the polls are unchanged (tasks also become claimable without an event:
links another worker found, a retry's delay over, a lease expired): only the wait between two polls ends
sooner. A read that fails is a sleep for the rest of the interval: the worker's claims report Redis's
state, not this.
"""

from __future__ import annotations

from trawl.queue.events import PoolEvents

__all__ = ["PoolEvents"]
