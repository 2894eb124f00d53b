"""Pool-wide per-domain rate and concurrency, plus this worker's adaptive delay, over one record per domain.

:class:`DomainLimiter` owns the records (:class:`~.domain.DomainState`) and the two halves that use them:
``rate`` (:class:`~.rate.RateLimit`) and ``slots`` (:class:`~.slots.ConcurrencySlots`). A task's requests
call those halves directly; the heartbeat loop refreshes the slot leases and forgets idle domains here.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable

from redis.asyncio import Redis

from .adaptive import AdaptiveDelay
from .domain import DomainState
from .rate import RateLimit
from .slots import ConcurrencySlots, Slot


class DomainLimiter:
    """Pool-wide per-domain rate and concurrency, plus this worker's adaptive delay."""

    def __init__(
        self,
        redis: Redis,
        key: Callable[[str, str], str],
        worker_id: str,
        *,
        max_wait: float = 10.0,
        on_wait: Callable[[str, float], None] | None = None,
    ) -> None:
        self.redis = redis
        self.key = key  # (domain, kind) -> redis key
        self.worker_id = worker_id
        self.max_wait = max_wait
        self._domains: defaultdict[str, DomainState] = defaultdict(DomainState)
        self.rate = RateLimit(redis, key, self._domains, on_wait)
        self.slots = ConcurrencySlots(redis, key, worker_id, self._domains)

    def adaptive(self, domain: str) -> AdaptiveDelay:
        return self._domains[domain].adaptive

    def slot(self, domain: str, limit: int, *, deadline: float | None = None) -> Slot:
        """Hold one of the domain's pool-wide concurrency slots for the duration of the block (see
        :meth:`ConcurrencySlots.slot`)."""
        return self.slots.slot(domain, limit, deadline=deadline)

    async def refresh(self) -> None:
        """Return idle slots that are old, extend the other leases (called from the heartbeat loop), and
        forget the domains this worker keeps nothing of."""
        now = time.monotonic()
        for domain, state in list(self._domains.items()):
            if not await self.slots.refresh(domain, state, now) and state.idle():
                self._domains.pop(domain, None)

    async def release_all(self) -> None:
        await self.slots.release_all()
