"""RQ with SimpleWorker (runs jobs in the worker process, no fork per job)."""

from __future__ import annotations

import redis
from common import URL, mark_done
from rq import Queue


def noop(i: int) -> None:
    mark_done()


def enqueue(n: int) -> None:
    conn = redis.Redis.from_url(URL)
    q = Queue("bench", connection=conn)
    for start in range(0, n, 1000):
        with conn.pipeline() as pipe:
            q.enqueue_many(
                [Queue.prepare_data(noop, (i,), result_ttl=0) for i in range(start, min(n, start + 1000))],
                pipeline=pipe,
            )
            pipe.execute()
