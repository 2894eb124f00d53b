"""A minimal no-op worker process over :mod:`trawl.queue`, used by the crash test and the benchmark.

With ``--concurrency N`` it works like ``trawl worker``: N task slots, claims sized by
:mod:`trawl.queue.claimsize` (``--claim-batch auto|N``), and each task on its own: its completion mark is
its own round trip (``INCR``), then its ack is its own round trip. With ``--ack-behind`` a task's slot is
free once its work is done, as the worker's is once it hands the task to its finisher: its ack (still its
own call) goes out behind it, at most N acks in flight; without it the slot waits for the ack's reply.
Without ``--concurrency`` (the batch mode below):
``python -m trawl.queue.loadgen --url redis://... --prefix 'trawl:{ns/pool}' --worker-id w1`` claims
batches, runs a no-op task per task, writes the tasks' Redis side effects in one pipeline per batch (a
result per task keyed by (job, task) plus a log entry, and/or a completion mark), then acks the batch
in one call. A heartbeat loop extends its leases. It runs until killed or, with ``--idle-exit``, until
it has found nothing to claim for that many seconds.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time
from collections import deque

import redis.asyncio as aioredis

from trawl.boot import eventloop
from trawl.redisconn.client import connect

from .claimsize import ClaimState, TaskTimer, claim_size, parse_setting
from .client import Queue
from .model import Task


async def run(args: argparse.Namespace) -> None:
    redis = connect(args.url, multiplex=True)  # the client the worker builds
    q = Queue(redis, args.prefix, lease_seconds=args.lease, max_stalls=args.max_stalls)
    stop = asyncio.Event()

    async def heartbeats() -> None:
        while not stop.is_set():
            await q.heartbeat(args.worker_id, in_flight=await redis.hlen(q.keys.worker(args.worker_id)))  # type: ignore[misc]
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), args.lease / 4)

    hb = asyncio.create_task(heartbeats())
    try:
        if args.concurrency:
            await slots(q, redis, args)
        else:
            await asyncio.gather(*(loop(q, redis, args, i) for i in range(args.loops)))
    finally:
        stop.set()
        hb.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await hb
        await redis.aclose()


async def loop(q: Queue, redis: aioredis.Redis, args: argparse.Namespace, index: int) -> None:
    """One claim loop: claim a batch, run it, write its side effects in one pipeline, ack it in one call."""
    idle_since = time.monotonic()
    poll = args.poll
    while True:
        tasks = await q.claim(args.worker_id, args.batch)
        if not tasks:
            if args.idle_exit and time.monotonic() - idle_since > args.idle_exit:
                return
            await asyncio.sleep(poll)
            poll = min(poll * 2, args.max_poll)  # back off while idle: empty claims cost Redis CPU too
            continue
        poll = args.poll
        idle_since = time.monotonic()
        ids = [f"{t.job_id}|{t.task_id}" for t in tasks]
        pipe = redis.pipeline(transaction=False)
        if args.claims_key:
            pipe.rpush(f"{args.claims_key}:{args.worker_id}", *ids)
        if args.results_key:
            pipe.hset(args.results_key, mapping=dict.fromkeys(ids, args.worker_id))
            pipe.rpush(f"{args.results_key}:log", *(f"{i} {args.worker_id}" for i in ids))
        if args.mark_key and args.mark_roundtrip:
            for _ in tasks:  # each task marks its own completion with its own round trip, one after another
                await redis.incr(args.mark_key)
        elif args.mark_key:
            for _ in tasks:  # each task marks its own completion; the batch sends them in one round trip
                pipe.incr(args.mark_key)
        if args.task_seconds:
            await asyncio.sleep(args.task_seconds)  # the batch's simulated work
        if len(pipe):
            await pipe.execute()
        await q.ack_many(tasks, args.worker_id)


async def slots(q: Queue, redis: aioredis.Redis, args: argparse.Namespace) -> None:
    """``--concurrency`` slots, each task on its own (as the worker runs them): its mark, then its ack."""
    conc = args.concurrency
    setting = parse_setting(args.claim_batch)
    timer = TaskTimer()
    buffer: deque[Task] = deque()
    running: set[asyncio.Task[None]] = set()  # the tasks' coroutines, acks behind included
    busy = 0  # slots taken: tasks started whose work (or, without --ack-behind, ack) is not done
    ack_room = asyncio.Semaphore(conc)  # --ack-behind: acks in flight, bounded as the finisher's capacity is
    freed = asyncio.Event()
    wid = args.worker_id

    async def one(task: Task) -> None:
        t0 = time.perf_counter()
        held = True
        try:
            if args.mark_key:
                await redis.incr(args.mark_key)
            if args.task_seconds:
                await asyncio.sleep(args.task_seconds)
            if args.ack_behind:
                async with ack_room:
                    timer.observe(time.perf_counter() - t0)  # the worker's task time also ends at the hand-off
                    held = False
                    free_slot()  # the next task starts while this one's ack is in flight, in this coroutine
                    await q.ack(task, wid)
            else:
                await q.ack(task, wid)
                timer.observe(time.perf_counter() - t0)
        finally:
            if held:
                free_slot()

    def start(task: Task) -> None:
        nonlocal busy
        busy += 1
        t = asyncio.create_task(one(task))
        running.add(t)
        t.add_done_callback(running.discard)

    def free_slot() -> None:
        nonlocal busy
        busy -= 1
        if buffer:
            start(buffer.popleft())
        freed.set()

    idle_since = time.monotonic()
    poll = args.poll
    while True:
        n = claim_size(ClaimState(conc, busy, len(buffer), args.lease, timer.mean), setting)
        if n == 0:
            freed.clear()
            await freed.wait()
            continue
        tasks = await q.claim(wid, n)
        if not tasks:
            if not running and args.idle_exit and time.monotonic() - idle_since > args.idle_exit:
                return
            freed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(freed.wait(), poll)  # a task finishing frees room to claim for
            poll = min(poll * 2, args.max_poll)
            continue
        poll = args.poll
        idle_since = time.monotonic()
        for task in tasks:
            if busy < conc:
                start(task)
            else:
                buffer.append(task)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--url", required=True)
    p.add_argument("--prefix", required=True)
    p.add_argument("--worker-id", required=True)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--loops", type=int, default=1, help="concurrent claim loops in the process")
    p.add_argument("--concurrency", type=int, default=0, help="task slots, each task acked on its own (0: batches)")
    p.add_argument("--claim-batch", default="auto", help="with --concurrency: claim size, 'auto' or a number")
    p.add_argument(
        "--ack-behind", action="store_true", help="with --concurrency: a slot is free before its ack's reply"
    )
    p.add_argument("--lease", type=float, default=30.0)
    p.add_argument("--max-stalls", type=int, default=3)
    p.add_argument("--poll", type=float, default=0.002, help="first wait after an empty claim")
    p.add_argument("--max-poll", type=float, default=0.1, help="longest wait between empty claims")
    p.add_argument("--idle-exit", type=float, default=0.0)
    p.add_argument("--task-seconds", type=float, default=0.0, help="simulated work per claimed batch")
    p.add_argument("--claims-key", default="")
    p.add_argument("--results-key", default="")
    p.add_argument("--mark-key", default="")
    p.add_argument("--mark-roundtrip", action="store_true", help="one round trip per task's mark (no pipeline)")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    eventloop.run(run(parse_args(argv)))  # the worker's loop, so the benchmark measures what runs


if __name__ == "__main__":
    main()
