"""What this worker keeps of one domain, shared by the rate limit, the concurrency slots and the adaptive
delay, and the wait they refuse.

One flat record per domain: the request path reads it a few times per request, so each concern's fields
sit side by side rather than in records of their own (no extra lookup per request).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

from .adaptive import AdaptiveDelay
from .backlog import Backlog


@dataclass
class DomainState:
    # The rate limit (.rate): tokens Redis granted and this worker has not used yet.
    tokens: int = 0
    tokens_at: float = 0.0
    tokens_rate: float = 0.0  # the rate the held tokens were granted at
    tokens_due: int = 0  # when the last granted were due on Redis's clock (microseconds: .rate.before_send)
    tokens_margin: int = 0  # ... and the margin they reserved after that (microseconds: .lateness)
    # Where this worker's latest strict grant left the domain's GCRA timeline (TAT, Redis's clock, µs): while
    # Redis's TAT is no later, every token granted after a late request's is this worker's (.rate: rate_late).
    timeline_us: int = 0
    token_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    token_waiters: int = 0  # tasks waiting here for one of the domain's tokens (.backlog's estimate)
    hold: float = 0.0  # running mean of the seconds a request holds one of the domain's slots here (.backlog)
    # The concurrency slots (.slots).
    slots: list[str] = field(default_factory=list)  # leased members not in use
    slots_all: dict[str, float] = field(default_factory=dict)  # member -> monotonic time leased
    # Given back while Redis did not answer: returned by the next refresh, or their leases would hold the
    # domain's slots for up to SLOT_LEASE_MS after Redis (or a promoted replica) is back.
    unreturned: set[str] = field(default_factory=set)
    # Given back by their requests, returned to Redis by the next batch (.slots: RETURN_SECONDS): still leased
    # (in ``slots_all``) until then, and taken again by a request of the domain here that comes meanwhile.
    returning: list[str] = field(default_factory=list)
    # Given back by requests abandoned after they left (their tasks cancelled), with how long (milliseconds)
    # their host likely still answers them: the next batch cuts their leases to that instead (.slots: linger).
    lingering: list[tuple[str, int]] = field(default_factory=list)
    # Running mean of the seconds from a request leaving here to its answer read (.slots: linger).
    answer: float = 0.0
    waiters: int = 0
    slot_event: asyncio.Event = field(default_factory=asyncio.Event)
    slot_lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    limit: int = 0
    # This worker's adaptive delay (.adaptive), and when it lets the domain's next request start.
    adaptive: AdaptiveDelay = field(default_factory=AdaptiveDelay)
    next_start: float = 0.0
    # When the domain's last request left this worker's fetcher (monotonic): under strict spacing the next
    # one leaves one interval after it (.rate.before_send), however early Redis granted its token.
    sent_at: float = 0.0
    # ... and when the domain's next request may leave here (sent_at plus its interval): the record is kept
    # until then, or a new one (sent_at 0) would let the next request leave unspaced.
    spaced_until: float = 0.0
    # The domain's tasks this worker holds, and when the next one given back is due (.backlog).
    backlog: Backlog = field(default_factory=Backlog)

    def granted(self, due_us: int, interval_us: int, margin_us: int) -> None:
        """Redis granted this worker a strict token of the domain due at ``due_us``: the timeline now ends an
        interval plus the token's margin after it (rate_take, slots_acquire and rate_late set TAT so)."""
        self.timeline_us = max(self.timeline_us, due_us + interval_us + margin_us)

    def left(self, now: float, interval: float) -> None:
        """A request of the domain left this worker at ``now`` (monotonic): the next leaves ``interval``
        seconds after it. Never moves the stamp back (a request stamped again once written, .rate.Leaving)."""
        if now > self.sent_at:
            self.sent_at = now
            self.spaced_until = now + interval

    def idle(self) -> bool:
        """Nothing here worth keeping once no slot is leased: no one waits for a slot, no tokens are left,
        no task of the domain is held here, the adaptive delay has faded to nothing, and the send-time spacing
        of the domain's last request here is over."""
        return (
            self.waiters == 0
            and self.tokens <= 0
            and self.backlog.held == 0
            and self.adaptive.delay == 0
            and self.spaced_until <= time.monotonic()
        )


def running_mean(mean: float, sample: float, weight: float) -> float:
    """An exponentially weighted mean of a domain's timings (``mean`` 0: no sample yet, so the first is it)."""
    return sample if mean == 0 else mean + weight * (sample - mean)


class RateWaitTooLong(Exception):
    """The domain's rate limit would keep the task waiting longer than the worker holds a lease for it."""

    def __init__(self, wait: float) -> None:
        super().__init__(f"rate limit: next slot in {wait:.2f}s")
        self.wait = wait
