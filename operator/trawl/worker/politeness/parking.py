"""Tasks waiting for their domain's politeness hold none of the worker's places (issue 37).

A worker runs ``concurrency`` tasks at once: its places. A task waiting for its domain's next rate token
(or the adaptive delay) or for one of its slots does nothing with
its place, and at many hosts those waits take most places: 100 slow hosts keep 200 of 256 places in
requests, and the fast hosts' tasks waiting up to ``PARK_SECONDS`` for their next token take the rest
(bench/many_hosts.py: efficiency 0.49 at concurrency 256, 0.76 at 1,024). So a waiting task *parks*: it is
counted here, and the runner starts a claimed task in its place (``on_park``). When its wait ends it stays
parked until a place is free (``place``, the runner's; returning tasks go before claimed ones), so
``concurrency`` still bounds the requests in progress.

Two things parking must not do:

* Lease more than the worker may hold: a parked task is still leased here, so the runner's claims count it
  (:func:`lease_room`): buffered, running, parked and finishing tasks together stay within ``concurrency``
  plus the sink's capacity, as without parking (a slow sink stops claims, parked tasks or not).
* Let a task take what this one holds for its request. A task run as one of its job's sessions keeps its
  place while it waits (the session's cookies were read for this request: a task started in its place would
  send them again before this one's answer set them). So does a task holding one of its job's proxies or a
  browser page, or fetching robots.txt: other tasks wait for those holding their places, and this one,
  parked, could not get a place back from them. The pipeline sets ``HOLD_PLACE`` around those.

So no task waits in a place for what a parked task holds: a parked task returning to a place may hold one
of its domain's slots (it waited for its token after taking it), but every wait for a slot parks (it comes
before a session, a proxy or a page is taken), and one waiting for the domain's token lock is let in when
the parked holder releases it, before that one asks for a place.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar

MAX_PARKED_PER_PLACE = 4  # parked tasks per place before the runner counts as crowded (.backlog gives back)

# Set (by the pipeline) while a task's request holds something another task could take (see the module).
HOLD_PLACE: ContextVar[bool] = ContextVar("trawl_parking_hold_place", default=False)


def lease_room(concurrency: int, finish_capacity: int, leased: int) -> int:
    """How many more tasks a worker may lease now: ``leased`` counts every lease it holds (buffered,
    running, parked, finishing), bounded together by its places and its sink's capacity."""
    return max(0, concurrency + finish_capacity - leased)


async def _no_wait() -> None:
    return None


class Parking:
    """How many tasks wait for their domain here without holding a place (``count``), who is told when one
    more does (``on_park``: the runner, which starts a claimed task in its place), and how a task whose wait
    ended gets a place back (``place``: returns once one is free; ``returning`` tasks are waiting for it)."""

    __slots__ = ("count", "on_park", "place", "returning")

    def __init__(self) -> None:
        self.count = 0
        self.returning = 0
        self.on_park: Callable[[], None] = lambda: None
        self.place: Callable[[], Awaitable[None]] = _no_wait

    def stay(self) -> Stay:
        """One task's waits in one politeness step (a token, a slot): parked at its first wait, back in a
        place when the step is done (:class:`Stay`)."""
        return Stay(self)


class Stay:
    """``park()`` before each wait (the first one parks the task, unless it holds its place), then exactly one
    of ``await back()`` (the step is done: wait for a place) or ``drop()`` (it failed: the task is given back
    or ends, which asks no place)."""

    __slots__ = ("parked", "parking")

    def __init__(self, parking: Parking) -> None:
        self.parking = parking
        self.parked = False

    def park(self) -> None:
        if self.parked or HOLD_PLACE.get():
            return
        self.parked = True
        self.parking.count += 1
        self.parking.on_park()

    async def back(self) -> None:
        if not self.parked:
            return
        parking = self.parking
        parking.returning += 1
        try:
            await parking.place()
        finally:
            parking.returning -= 1
            self.drop()

    def drop(self) -> None:
        if self.parked:
            self.parked = False
            self.parking.count -= 1
