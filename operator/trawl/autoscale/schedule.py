"""When a pool's autoscaler looks again: its regular poll, a follow-up, or a burst.

The controller's pool timer ticks every :data:`TICK_SECONDS`. At each tick it asks
:meth:`PassSchedule.regular_due` (``pollSeconds`` after the last scheduled pass, or
:data:`~trawl.autoscale.policy.FOLLOW_UP_SECONDS` after a decision that asked for a follow-up: a
scale-up while a burst still waits, or a hold for new work's first results, policy rule 10); if no
pass is due it reads the pool's enqueue counter (one ``HGET`` per shard) and asks
:meth:`PassSchedule.burst_due` (rule 11). The simulator ticks the same way and calls the same
methods, so both bring passes forward at the same moments.

**Rule 11, burst.** A pass comes early when, since the last pass, at least one worker's slots
(``concurrency``) of new tasks were enqueued beyond what the measured arrival rate accounts for (and
beyond its Poisson noise, :data:`NOISE_SIGMAS` standard deviations): a job
of ten thousand URLs applied two seconds after a poll gets its workers asked for at the next tick, not
three seconds later. Steady arrivals, however fast, never trigger it (the rate accounts for them), so a
busy pool is not polled every second. A burst pass leaves the regular cadence where it was: the next
regular poll still comes ``pollSeconds`` after the last scheduled one.

Pure: no clock, no I/O; times are seconds on any one clock.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from .policy import FOLLOW_UP_SECONDS

# The controller's pool timer: how often it checks whether a pass is due.
TICK_SECONDS = 1.0
# Arrivals this many standard deviations (Poisson) above the measured rate's count are no noise.
NOISE_SIGMAS = 3.0


@dataclass(frozen=True, slots=True)
class PassSchedule:
    """Per pool, between ticks. Start with ``PassSchedule()``: the first tick is a pass."""

    scheduled_at: float | None = None  # the last regular (or follow-up) pass
    follow_up: bool = False  # the last pass's decision asked for a follow-up (rule 10)
    # At the last pass of any kind: its time, the pool's enqueue counter and the measured arrival rate.
    # None until a pass has read the counter: no burst can be told from steady arrivals before.
    baseline_at: float | None = None
    baseline_enqueued: int = 0
    arrival_rate: float = 0.0
    concurrency: int = 1

    def interval(self, poll_seconds: float) -> float:
        """Seconds from the last scheduled pass to the next one."""
        return min(poll_seconds, FOLLOW_UP_SECONDS) if self.follow_up else poll_seconds

    def regular_due(self, now: float, poll_seconds: float) -> bool:
        """Whether the tick at ``now`` is a scheduled pass. Half a tick of slack: a timer firing slightly
        early does not skip a whole interval."""
        return self.scheduled_at is None or now - self.scheduled_at >= self.interval(poll_seconds) - TICK_SECONDS / 2

    def burst_due(self, now: float, enqueued: int) -> bool:
        """Rule 11: whether ``enqueued`` (the pool's enqueue counter now) holds a worker's slots of new
        tasks beyond the arrivals the rate measured at the last pass accounts for."""
        if self.baseline_at is None:
            return False
        expected = self.arrival_rate * max(0.0, now - self.baseline_at)
        # Beyond three standard deviations of Poisson noise on the expected count: a fast steady stream
        # (a thousand a second varies by about 60 in four seconds) is no burst.
        return enqueued - self.baseline_enqueued >= expected + NOISE_SIGMAS * math.sqrt(expected) + self.concurrency

    def started(self, now: float, *, scheduled: bool) -> PassSchedule:
        """A pass begins. A scheduled one restarts the cadence; any pass is the follow-up, if one was asked
        for, and drops the burst baseline until it decides: a pass that fails before deciding leaves the
        pool neither polled every second nor checked against an old baseline."""
        return replace(self, scheduled_at=now if scheduled else self.scheduled_at, follow_up=False, baseline_at=None)

    def decided(
        self, now: float, *, follow_up: bool, enqueued: int | None, arrival_rate: float, concurrency: int
    ) -> PassSchedule:
        """A pass decided: remember whether it asked for a follow-up, and the burst baseline (``enqueued``
        None: the counter was not read, no baseline)."""
        if enqueued is None:
            return replace(self, follow_up=follow_up, baseline_at=None)
        return replace(
            self,
            follow_up=follow_up,
            baseline_at=now,
            baseline_enqueued=enqueued,
            arrival_rate=max(0.0, arrival_rate),
            concurrency=max(1, concurrency),
        )
