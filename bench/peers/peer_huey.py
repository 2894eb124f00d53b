"""Huey (Redis storage; a task is popped, not leased)."""

from __future__ import annotations

from common import URL, mark_done
from huey import RedisHuey

huey = RedisHuey("bench", url=URL, results=False)


@huey.task()
def noop(i: int) -> None:
    mark_done()


def enqueue(n: int) -> None:
    for i in range(n):
        noop(i)
