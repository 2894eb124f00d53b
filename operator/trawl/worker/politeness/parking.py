"""Tasks waiting for their domain's politeness do not hold one of the worker's places (issue 37).

A worker runs ``concurrency`` tasks at once: its places. A task that waits for its domain's next rate token
or for one of its slots does nothing with its place, and at many hosts those waits add up to more than the
places: 1,000 hosts at 2 requests/s each keep one task on deck per host, ~0.3 s each, ~500 places' worth,
besides the slow hosts' requests in flight (bench/many_hosts.py ran at 0.32-0.55 of what the worker could
do, its CPU idle). So a task *parks* while it waits (it counts here, and the runner lets a claimed task
take its place), and takes a place again when its wait ends (the runner starts no new task until the
running ones are under ``concurrency`` again, so a wait that ends runs the worker over by at most the
tasks whose waits ended together). Parked tasks are bounded by the runner (``MAX_PARKED_PER_PLACE``):
beyond it the worker counts as crowded and :mod:`.backlog` gives back what would wait.
"""

from __future__ import annotations

from collections.abc import Callable

MAX_PARKED_PER_PLACE = 4  # parked tasks the runner allows per place before it counts as crowded


class Parking:
    """How many tasks wait for their domain here (``with parking:`` around a wait), and who is told when
    one more does (``on_park``: the runner, which starts a claimed task in its place)."""

    __slots__ = ("count", "on_park")

    def __init__(self) -> None:
        self.count = 0
        self.on_park: Callable[[], None] = lambda: None

    def __enter__(self) -> None:
        self.count += 1
        self.on_park()

    def __exit__(self, *exc: object) -> None:
        self.count -= 1
