"""Celery (Redis broker, acks_late: a task is acknowledged after it ran)."""

from __future__ import annotations

from celery import Celery
from common import URL, mark_done

app = Celery("peer_celery", broker=URL)
app.conf.update(
    task_acks_late=True,
    task_ignore_result=True,
    worker_prefetch_multiplier=16,
    task_default_queue="bench",
    broker_connection_retry_on_startup=True,
    worker_hijack_root_logger=False,
)


@app.task(name="noop")
def noop(i: int) -> None:
    mark_done()


def enqueue(n: int) -> None:
    with app.producer_or_acquire() as producer:
        for i in range(n):
            noop.apply_async((i,), producer=producer)
