"""Huey (Redis storage; a task is popped, not leased)."""

from __future__ import annotations

from common import URL, mark_done
from huey import RedisHuey

huey = RedisHuey("bench", url=URL, results=False)


@huey.task()
def noop(i: int) -> None:
    mark_done()


def enqueue(n: int) -> None:
    noop.map(range(n))  # its call for many tasks (one enqueue each: Huey has no bulk write)
