"""Which of a domain's tasks this worker keeps waiting for the domain's politeness, and when the others are
given back (issue 37: no head-of-line blocking).

A task waiting for a domain's slot or rate token holds one of the worker's ``concurrency`` places. Slow or
rate-limited hosts with many tasks among a claim would hold most of those places, waiting, while the pool's
other hosts could have used them: measured by ``bench/many_hosts.py``, a pool of 1,000 hosts (a tenth slow,
a tenth at 0.5 requests/s) ran at 8-23 % of what its worker did with no limit, its CPU idle. So a task is
kept only when it should start within ``PARK_SECONDS``: its next rate token is due soon (from when this
worker last got one, and how many of its tasks wait for one) and a slot is free here, or soon (from how long
the domain's requests hold one); one task per domain may wait up to ``ON_DECK_SECONDS``, so a host kept at
its limit does not idle between its requests. All of this only while the worker is crowded (a claimed task
waits for one of its places): else waiting holds a place no other task wants. The
others go back to the queue, due when their turn should come: each deferred task of a domain one request
interval after the one deferred before it, so they come back spread over the domain's rate rather than all
at once.

The estimate is local (another worker of the pool may take the domain's next token, or free a slot): a kept
task that then waits longer is still bounded by the worker's ``max_rate_wait``, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

PARK_SECONDS = 0.25  # a task expected to start within this waits here; later ones are given back
ON_DECK_SECONDS = 1.0  # ... and the domain's one task waiting for its next token or slot, within this
HOLD_WEIGHT = 0.2  # weight of one request in the running mean of how long a slot is held
MIN_DEFER = 0.25  # the shortest delay a deferred task is given back with (a release and a claim cost more)


def start_wait(
    held: int, token_waiters: int, concurrency: int, interval: float, since_grant: float | None, hold: float = 0.0
) -> float | None:
    """Seconds before a new task of the domain would start here, or None when unknown. ``held``: the domain's
    tasks held here; ``token_waiters``: those waiting for a rate token; ``interval``: seconds between the
    domain's tokens (0: no rate to wait for); ``since_grant``: seconds since this worker last got one of them
    (None: never, or longer ago than an interval); ``hold``: how long a request holds one of the domain's
    slots here, on average (0: not known yet). With all the domain's slots held by this worker's tasks the
    wait is the slots': the tasks before this one, ``concurrency`` at a time, ``hold`` each."""
    if held >= concurrency:
        return (held - concurrency + 1) * hold / concurrency if hold > 0 else None
    # (unknown: the domain's first requests here are still out; decided by keeps' on-deck rule below)
    first = 0.0 if since_grant is None else max(0.0, interval - since_grant)
    return first + token_waiters * interval


def keeps(wait: float | None, first_in_line: bool = False) -> bool:
    """Whether a task expected to start in ``wait`` seconds waits here: within PARK_SECONDS, or, as the
    domain's one task on deck (``first_in_line``: no other of its tasks waits here), within ON_DECK_SECONDS:
    without one, a host at its limit would idle for the give-back and the claim that brings the next task
    back."""
    if wait is None:  # how long the domain's slots are held is not known yet: one task waits on deck
        return first_in_line
    return wait <= PARK_SECONDS or (first_in_line and wait <= ON_DECK_SECONDS)


@dataclass
class Backlog:
    """The domain's tasks held by this worker (from before its slot to the end of its fetch), and when the
    next deferred one is due (monotonic)."""

    held: int = 0
    next_due: float = 0.0

    def defer(self, wait: float | None, interval: float, now: float) -> float:
        """Seconds to give a task back for: when it should start (``wait``; a request interval when unknown),
        and one interval after the task deferred before it."""
        step = max(interval, MIN_DEFER) if wait is None else interval
        start = max(now + (wait if wait is not None else step), self.next_due)
        self.next_due = start + step
        return max(MIN_DEFER, start - now)
