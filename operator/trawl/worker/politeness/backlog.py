"""Which of a domain's tasks this worker keeps waiting for the domain's politeness, and when the others are
given back (issue 37: no head-of-line blocking).

A task waiting for a domain's slot or rate token holds one of the worker's ``concurrency`` places. Slow or
rate-limited hosts with many tasks among a claim would hold most of those places, waiting, while the pool's
other hosts could have used them: measured by ``bench/many_hosts.py``, a pool of 1,000 hosts (a tenth slow,
a tenth at 0.5 requests/s) ran at 8-13 % of what its worker did with no limit, its CPU idle. So a task is
kept only when it should start within ``PARK_SECONDS``: one of the domain's slots is free here and its next
rate token is due soon (from when this worker last got one, and how many of its tasks wait for one); one
task per domain may wait up to ``ON_DECK_SECONDS`` for the next token, so a host kept at its rate does not
idle between its requests. The
others go back to the queue, due when their turn should come: each deferred task of a domain one request
interval after the one deferred before it, so they come back spread over the domain's rate rather than all
at once.

The estimate is local (another worker of the pool may take the domain's next token, or free a slot): a kept
task that then waits longer is still bounded by the worker's ``max_rate_wait``, as before.
"""

from __future__ import annotations

from dataclasses import dataclass

PARK_SECONDS = 0.25  # a task expected to start within this waits here; later ones are given back
ON_DECK_SECONDS = 1.0  # ... and the domain's one task waiting for its next token, within this
MIN_DEFER = 0.5  # the shortest delay a deferred task is given back with (a release and a claim cost more)


def start_wait(
    held: int, token_waiters: int, concurrency: int, interval: float, since_grant: float | None
) -> float | None:
    """Seconds before a new task of the domain would start here, or None when all of the domain's slots are
    held by this worker's tasks (how long they take is the site's). ``held``: the domain's tasks held here;
    ``token_waiters``: those waiting for a rate token; ``interval``: seconds between the domain's tokens (0:
    no rate to wait for); ``since_grant``: seconds since this worker last got one of them (None: never, or
    longer ago than an interval)."""
    if held >= concurrency:
        return None
    first = 0.0 if since_grant is None else max(0.0, interval - since_grant)
    return first + token_waiters * interval


def keeps(wait: float | None, token_waiters: int = 0) -> bool:
    """Whether a task expected to start in ``wait`` seconds waits here: within PARK_SECONDS, or, as the
    domain's one task on deck (none other waits for its token), within ON_DECK_SECONDS: without one, a host
    at its rate would idle for the give-back and the claim that brings the next task back."""
    if wait is None:
        return False
    return wait <= PARK_SECONDS or (token_waiters == 0 and wait <= ON_DECK_SECONDS)


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
