"""The operator reads a job's end from its pool's event stream (trawl.operator.job.endwatch) against a real
redis-server: a finished job is reported once its last task is acked, on one shard or three; a reader no pass
touched stops by itself; a stopped watch leaves no task behind."""

from __future__ import annotations

import asyncio
import uuid

import pytest
import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.jobspec.wire import build_job_config
from trawl.operator.job.endwatch import EndWatch
from trawl.queue import Queue
from trawl.queue.sharded import make_queue
from waits import wait_for_async


async def _run_job(queue: Queue, urls: list[str]) -> str:
    job_id = uuid.uuid4().hex[:12]
    spec = ScrapeJobSpec.model_validate({"pool": "p", "urls": urls})
    await queue.register_job(build_job_config(job_id, spec, None))
    await queue.enqueue(job_id, urls, start_index=0)
    await queue.mark_enqueue_done(job_id)
    tasks = await queue.claim("w1", 100)
    assert len(tasks) == len(urls)
    assert all(await queue.ack_many(tasks, "w1"))
    assert (await queue.job_stats(job_id)).finished
    return job_id


@pytest.mark.parametrize("shards", [1, 3])
async def test_a_finished_job_is_reported_from_every_shard_stream(shared_redis: aioredis.Redis, shards: int) -> None:
    ended: list[str] = []
    watch = EndWatch(ended.append, block_seconds=0.5)
    queue = make_queue(shared_redis, f"trawl:{{test/ends{shards}}}", shards)
    try:
        watch.touch(queue)
        assert len(watch.readers) == shards  # one reader per stream the queue's scripts write
        await wait_for_async("readers blocked", lambda: _blocked(shared_redis, shards), 30, 0.02)
        urls = [f"http://127.0.0.1/{i}" for i in range(12)]  # spread over the shards
        job_id = await _run_job(queue, urls)
        await wait_for_async("the job's end read", lambda: _true(job_id in ended), 30, 0.02)
        assert set(ended) == {job_id}
    finally:
        await watch.stop()
    assert watch.readers == {}


async def test_an_end_just_before_the_reader_started_is_read(shared_redis: aioredis.Redis) -> None:
    """The pass that starts a reader saw the job unfinished; its end may come before the reader's first read."""
    ended: list[str] = []
    watch = EndWatch(ended.append, block_seconds=0.5)
    queue = Queue(shared_redis, "trawl:{test/before}")
    try:
        job_id = await _run_job(queue, ["http://127.0.0.1/a"])
        watch.touch(queue)
        await wait_for_async("the earlier end read", lambda: _true(job_id in ended), 30, 0.02)
    finally:
        await watch.stop()


async def test_a_reader_no_pass_touched_stops_and_a_new_touch_starts_another(shared_redis: aioredis.Redis) -> None:
    watch = EndWatch(lambda uid: None, idle_seconds=0.3, block_seconds=0.1)
    queue = Queue(shared_redis, "trawl:{test/idle}")
    try:
        watch.touch(queue)
        first = next(iter(watch.readers.values())).task
        assert first is not None
        await asyncio.wait_for(first, 30)  # idle for 0.3 s: it ends by itself
        assert watch.readers == {}
        watch.touch(queue)
        assert len(watch.readers) == 1
    finally:
        await watch.stop()


async def _blocked(client: aioredis.Redis, n: int) -> bool:
    info = await client.info("clients")
    return int(info.get("blocked_clients", 0)) >= n


async def _true(value: bool) -> bool:
    return value


class _CountingReads:
    """The client with its XREAD calls counted (everything else passed through)."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.client = client
        self.reads = 0

    async def xread(self, *args: object, **kwargs: object) -> object:
        self.reads += 1
        return await self.client.xread(*args, **kwargs)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> object:
        return getattr(self.client, name)


async def test_a_reader_far_behind_catches_up_in_few_reads(shared_redis: aioredis.Redis) -> None:
    """A storm of creates writes hundreds of entries a second while each read of a busy operator takes many
    turns of its loop: a reader taking 100 entries a read fell minutes behind (and lost what the stream's
    bound trimmed). Here 1,500 jobs' 3,000 entries written before the reader starts are read in two reads, and
    a third waits for more (at 100 a read: 30)."""
    ended: list[str] = []
    counting = _CountingReads(shared_redis)
    queue = Queue(counting, "trawl:{test/storm}")  # type: ignore[arg-type]
    (key,) = queue.event_keys()
    ids = [f"job{i}" for i in range(1500)]
    pipe = shared_redis.pipeline(transaction=False)
    for uid in ids:
        pipe.xadd(key, {"type": "started", "job": uid})
        pipe.xadd(key, {"type": "finished", "job": uid})
    await pipe.execute()
    watch = EndWatch(ended.append, block_seconds=0.2)
    try:
        watch.touch(queue)
        await wait_for_async("every end read", lambda: _true(len(ended) == len(ids)), 30, 0.02)
        assert ended == ids
        assert counting.reads <= 3
    finally:
        await watch.stop()
