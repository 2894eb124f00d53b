"""Dramatiq (Redis broker; at-least-once: messages are acked after the actor returns)."""

from __future__ import annotations

import dramatiq
from common import URL, mark_done
from dramatiq.brokers.redis import RedisBroker
from dramatiq.middleware import default_middleware

broker = RedisBroker(url=URL, middleware=[m() for m in default_middleware if m.__name__ != "Prometheus"])
dramatiq.set_broker(broker)


@dramatiq.actor(max_retries=0, queue_name="bench")
def noop(i: int) -> None:
    mark_done()


def enqueue(n: int) -> None:
    for i in range(n):
        noop.send(i)
