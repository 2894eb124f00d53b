"""A per-domain circuit breaker shared by a pool's workers (state in the pool's Redis).

Closed: requests flow; consecutive failures that say the *site* is in trouble (timeouts, connection
errors, 5xx) are counted, and a success resets the count. At ``threshold`` failures the breaker opens
for ``open_seconds``: the domain's tasks are given back until then without spending an attempt (the
worker releases them with that delay), while other domains run at full speed. When the time is up, one
worker's next request is the probe (half-open; the others keep waiting): its success closes the
breaker, its failure opens it again for twice as long (up to ``max_open_seconds``).

Cheap when healthy: a worker reads a domain's state from Redis at most once per ``refresh_seconds``
and writes only failures and the transitions they cause (a success is written only while the domain
has failures on record), so a healthy crawl adds about one read per domain per second. Where a request
leases the domain's concurrency slot from Redis (limits under 16: every request), the lease reads the
breaker too and hands it to :meth:`CircuitBreaker.seen`: a closed breaker read there counts as this
read (no round trip of its own), any other state has the next check read it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

from redis.asyncio import Redis

from trawl.redisconn.replies import text
from trawl.redisconn.scripts import read_script


class Verdict(NamedTuple):
    state: str  # closed, open (wait until ``until``), probe (this request decides)
    until: float = 0.0  # unix seconds
    reason: str = ""

    def wait(self, now: float | None = None) -> float:
        return max(0.0, self.until - (time.time() if now is None else now))


_CLOSED = Verdict("closed")


@dataclass(slots=True)
class _Local:
    verdict: Verdict
    read_at: float  # monotonic
    failures: bool  # failures are on record in Redis (so a success must be written)


class CircuitBreaker:
    def __init__(
        self,
        redis: Redis,
        key: Callable[[str], str],
        worker_id: str,
        *,
        threshold: int = 5,
        open_seconds: float = 30.0,
        max_open_seconds: float = 300.0,
        refresh_seconds: float = 1.0,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self.redis = redis
        self.key = key
        self.worker_id = worker_id
        self.threshold = threshold
        self.open_seconds = open_seconds
        self.max_open_seconds = max_open_seconds
        self.refresh_seconds = refresh_seconds
        self.clock = clock
        self.monotonic = monotonic  # when a domain's state was read (its age against refresh_seconds)
        self._check = redis.register_script(read_script("trawl.worker", "breaker_check"))
        self._record = redis.register_script(read_script("trawl.worker", "breaker_record"))
        self._local: dict[str, _Local] = {}

    def open_domains(self) -> dict[str, Verdict]:
        """Domains this worker last saw open (for metrics)."""
        return {d: v.verdict for d, v in self._local.items() if v.verdict.state == "open"}

    @property
    def enabled(self) -> bool:
        """A threshold of 0 turns the breaker off (the pool's ``worker.circuitBreaker.failureThreshold``)."""
        return self.threshold > 0

    async def check(self, domain: str) -> Verdict:
        if not self.enabled:
            return _CLOSED
        now_m = self.monotonic()
        local = self._local.get(domain)
        if local is not None and now_m - local.read_at < self.refresh_seconds:
            v = local.verdict
            if v.state == "closed" or (v.state == "open" and v.wait(self.clock()) > 0):
                return v
        raw = await self._check(keys=[self.key(domain)], args=[repr(self.clock()), self.worker_id])
        verdict = Verdict(text(raw[0]), float(text(raw[1])), text(raw[2]))
        self._remember(domain, verdict, verdict.state != "closed" or text(raw[3]) != "0")
        return verdict

    async def record(self, domain: str, ok: bool, reason: str = "") -> str:
        """A request's outcome: ``ok`` False for failures that count against the site."""
        if not self.enabled:
            return "closed"
        local = self._local.get(domain)
        if ok and (local is None or not local.failures):
            return "closed"  # nothing on record to clear: no write
        args: list[Any] = [
            repr(self.clock()),
            "1" if ok else "0",
            reason[:512],
            self.threshold,
            self.open_seconds,
            self.max_open_seconds,
            int(self.max_open_seconds * 4),
        ]
        state = text(await self._record(keys=[self.key(domain)], args=args))
        if state == "closed":
            self._remember(domain, Verdict("closed"), not ok)  # after a failure, a count is on record
        elif state == "open":
            raw = await self.redis.hmget(self.key(domain), ["until", "reason"])  # type: ignore[misc]
            self._remember(domain, Verdict("open", float(text(raw[0] or 0)), text(raw[1] or "")), True)
        else:
            self._remember(domain, local.verdict if local else Verdict("closed"), True)
        return state

    def seen(self, domain: str, state: str, fails: str) -> None:
        """The domain's breaker state and failure count as another round trip read them (a slot's lease:
        ``politeness.slots``). Closed is remembered as :meth:`check`'s own read would be (so the next checks
        within ``refresh_seconds`` ask Redis nothing); any other state (open, half-open) has the next check
        read it and decide, as that may make its request the probe."""
        if not self.enabled:
            return
        if state == "closed":
            self._remember(domain, _CLOSED, fails != "0")
            return
        local = self._local.get(domain)
        if local is not None:
            local.read_at = -math.inf

    def _remember(self, domain: str, verdict: Verdict, failures: bool) -> None:
        self._local[domain] = _Local(verdict, self.monotonic(), failures)
        if len(self._local) > 10_000:
            self._local.pop(next(iter(self._local)))
