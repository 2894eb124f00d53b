"""Tasks waiting for their domain's politeness do not hold one of the worker's places (issue 37).

A worker runs ``concurrency`` tasks at once: its places. A task that waits for its domain's next rate token
or for one of its slots does nothing with its place, and at many hosts those waits add up to more than the
places: 1,000 hosts at 2 requests/s each keep one task on deck per host, ~0.3 s each, ~500 places' worth,
besides the slow hosts' requests in flight (bench/many_hosts.py ran at 0.32-0.55 of what the worker could
do, its CPU idle). So a task *parks* while it waits (it counts here, and the runner lets a claimed task
take its place), and takes a place back when its wait ends: it stays parked until a place is free (the
runner's ``place``; returning tasks go before claimed ones), so ``concurrency`` still bounds the requests
in progress. A task that holds one of its job's sessions does not park (``HOLD_PLACE``): its session's
cookies were read for this request, and a task started in its place would read them too, before this
one's answer set them. Parked tasks are bounded by the runner (``MAX_PARKED_PER_PLACE``): beyond it the
worker counts as crowded and :mod:`.backlog` gives back what would wait.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar

MAX_PARKED_PER_PLACE = 4  # parked tasks the runner allows per place before it counts as crowded


# Set (by the pipeline) while a task runs as one of its job's sessions: its waits keep its place.
HOLD_PLACE: ContextVar[bool] = ContextVar("trawl_parking_hold_place", default=False)


async def _no_wait() -> None:
    return None


class Parking:
    """How many tasks wait for their domain here (``async with parking:`` around a wait), who is told when
    one more does (``on_park``: the runner, which starts a claimed task in its place), and how a task whose
    wait ended gets a place back (``place``: returns once one is free; ``returning`` are waiting for it)."""

    __slots__ = ("count", "on_park", "place", "returning")

    def __init__(self) -> None:
        self.count = 0
        self.returning = 0
        self.on_park: Callable[[], None] = lambda: None
        self.place: Callable[[], Awaitable[None]] = _no_wait

    async def __aenter__(self) -> None:
        if HOLD_PLACE.get():  # the same task's context at exit: enter and exit agree
            return
        self.count += 1
        self.on_park()

    async def __aexit__(self, exc_type: type[BaseException] | None, *exc: object) -> None:
        if HOLD_PLACE.get():
            return
        try:
            if exc_type is None:  # still parked (holding no place) until one is free
                self.returning += 1
                try:
                    await self.place()
                finally:
                    self.returning -= 1
        finally:
            self.count -= 1
