"""How many tasks a worker asks for in one claim: a pure decision, plus the running averages it reads.

A claim is one round trip and one script run whatever its size, so small claims waste both: with a fixed
quarter of the concurrency, concurrency 8 meant claims of 2. A worker therefore holds a short local
*buffer* of claimed tasks beside its running ones; a slot that frees starts the next buffered task at
once, and the claim that refills the buffer runs while the slots are busy.

``auto`` (the default) sizes that buffer from what the worker observes:

* before any task finished, or when tasks are slow, it claims just enough for its free slots;
* with a known task time ``t`` at concurrency ``c``, slots free at ``c / t`` per second, so ``a`` buffered
  tasks all start within ``a * t / c`` seconds. The buffer holds what starts within
  :data:`AHEAD_SECONDS` (and within :data:`LEASE_SHARE` of the lease: a buffered task is leased, and if
  the process dies it waits for the lease to expire), and never more than one more round of ``c``;
* with tasks buffered it waits until half of the target (running + buffered) is missing, so claims are
  large; with no task buffered and a free slot it claims at once (an idle slot is the costlier waste).

A fixed ``claimBatch`` (``worker.claimBatch``, ``--claim-batch``, ``TRAWL_CLAIM_BATCH``) asks for that many
at a time, once there is room for a whole batch: fewer than the concurrency means smaller claims, more
means a buffer of the difference (like Celery's prefetch), bounded by half the lease once the task time
is known (heartbeats keep buffered tasks leased, but a dead process holds them until its lease expires).
"""

from __future__ import annotations

import math
from typing import NamedTuple

AUTO = 0  # claimBatch "auto"
MAX_CLAIM = 1000  # the claim script's own bound
AHEAD_SECONDS = 0.1  # buffered tasks must start within this
LEASE_SHARE = 0.05  # ... and within this share of the lease
EWMA_WEIGHT = 0.05  # weight of one observation in the running mean of task time
MIN_TASK_SECONDS = 1e-6  # no task is shorter: a vanishing mean must not divide into infinity


def parse_setting(text: str | int | None) -> int:
    """``auto`` (or empty, or 0) -> :data:`AUTO`; a positive number -> that fixed claim size."""
    if text is None:
        return AUTO
    if isinstance(text, int):
        value = text
    else:
        raw = text.strip().lower()
        if raw in ("", "auto"):
            return AUTO
        try:
            value = int(raw)
        except ValueError:
            raise ValueError(f"claim batch must be 'auto' or a whole number 1..{MAX_CLAIM}, not {text!r}") from None
    if not 0 <= value <= MAX_CLAIM:
        raise ValueError(f"claim batch must be 'auto' or a whole number 1..{MAX_CLAIM}, not {value}")
    return value


class ClaimState(NamedTuple):
    concurrency: int  # task slots of the worker
    running: int  # tasks started and not finished
    buffered: int  # claimed, waiting here for a slot
    lease_seconds: float
    task_seconds: float | None = None  # observed mean time of one task; None before the first finished


def ahead_limit(state: ClaimState, setting: int = AUTO) -> int:
    """How many claimed tasks may wait here for a slot (the buffer's target size)."""
    conc = max(1, state.concurrency)
    # No task takes less than a microsecond: a vanishing mean must not divide into infinity.
    t = None if state.task_seconds is None else max(state.task_seconds, MIN_TASK_SECONDS)
    # Tasks that all start within ``horizon``; unbounded (only the setting bounds it) before t is known.
    horizon = min(AHEAD_SECONDS, LEASE_SHARE * state.lease_seconds)
    if setting != AUTO:
        wanted = max(0, setting - conc)
        if t is None or t <= 0:
            return min(wanted, MAX_CLAIM)
        # A fixed batch may buffer more, but never more than starts within half the lease.
        return min(wanted, math.floor(conc * 0.5 * state.lease_seconds / t), MAX_CLAIM)
    if t is None or t <= 0:
        return 0
    return min(conc, math.floor(conc * horizon / t))


def claim_size(state: ClaimState, setting: int = AUTO) -> int:
    """Tasks to claim now; 0 means wait until a slot frees (or the buffer drains)."""
    conc = max(1, state.concurrency)
    target = conc + ahead_limit(state, setting)
    want = min(target - state.running - state.buffered, MAX_CLAIM)
    if want <= 0:
        return 0
    if setting != AUTO:
        # Claims of ``setting`` tasks: wait for room for a whole one (a queue with fewer returns fewer).
        return min(want, setting) if want >= min(setting, target) else 0
    if state.buffered == 0 and state.running < conc:
        return want  # a slot is idle: claim now, for every free slot and the buffer
    # The buffer covers the next round trip: wait until half the target is missing, then claim it all.
    return want if want >= max(1, target // 2) else 0


class TaskTimer:
    """The running mean of a worker's task time (exponentially weighted, so it follows changes)."""

    def __init__(self, weight: float = EWMA_WEIGHT) -> None:
        self.weight = weight
        self.mean: float | None = None

    def observe(self, seconds: float) -> None:
        seconds = max(0.0, seconds)
        self.mean = seconds if self.mean is None else self.mean + self.weight * (seconds - self.mean)
