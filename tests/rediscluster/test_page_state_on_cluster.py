"""Refresh jobs' page state on a real 6-node Redis Cluster: the lineage's hash sits in its pool's slot, so
the save script (the job hash and the state hash, both declared) runs on that slot's master, counts each
page once however often it is saved, and the state reads back on the cluster client."""

from __future__ import annotations

import redis.asyncio as aioredis
from redis.crc import key_slot

from trawl.queue import JobConfig, Queue
from trawl.queue.keys import Keys, pool_prefix
from trawl.queue.pagestate import PageSave, PageStates
from trawl.refresh.state import Change, PageState, decode, encode, encoded_prefix, job_tag, url_field

LINEAGE = "rc/prices"


async def test_page_state_saves_and_counts_once_on_a_cluster(cluster_client: aioredis.Redis) -> None:
    prefix = pool_prefix("rc", "refresh")
    keys = Keys(prefix)
    queue = Queue(cluster_client, prefix)
    await queue.register_job(JobConfig("job-1"))
    assert key_slot(keys.page_state(LINEAGE).encode()) == key_slot(keys.job("job-1").encode())
    pages = PageStates(cluster_client, keys)
    tag = job_tag("job-1")
    saves = [
        PageSave(url_field(f"https://shop.test/{i}"), encode(PageState(tag, change, "f" * 16, fetched_at=1)), change)
        for i, change in enumerate((Change.NEW, Change.CHANGED, Change.UNCHANGED, Change.GONE))
    ]
    for _ in range(2):  # the second save is a redelivered batch: counted once
        assert await pages.save("job-1", LINEAGE, encoded_prefix(tag), saves, 3600) == 4
    assert (await queue.job_stats("job-1")).changes == (1, 1, 1, 1)
    state = decode(await pages.get(LINEAGE, url_field("https://shop.test/1")))
    assert state is not None and (state.tag, state.change) == (tag, Change.CHANGED)
    # The sweep's scan and forget run on the slot too; its task is added once, beside the job's queue.
    cursor, found = await pages.scan(LINEAGE, "0", 100)
    assert cursor == "0" and len(found) == 4
    gone = {k: v for k, v in found.items() if decode(v) is not None and decode(v).change == Change.GONE}  # type: ignore[union-attr]
    assert await pages.forget(LINEAGE, gone) == 1
    await queue.enqueue("job-1", ["https://shop.test/1"])
    await queue.mark_enqueue_done("job-1")
    assert await queue.enqueue_sweep("job-1") == 1 and await queue.enqueue_sweep("job-1") == 0
    await cluster_client.delete(keys.page_state(LINEAGE))
    await queue.cancel("job-1")
