"""The operator's pass reads a job's notes in one round trip (JobNotes.read): the same as the separate reads."""

from __future__ import annotations

import time

import pytest
import redis.asyncio as aioredis

from trawl.queue.keys import Keys
from trawl.queue.notes import JobNotes, NotesRead

pytestmark = pytest.mark.redis

PREFIX = "trawl:{ns/notes}"


async def test_one_read_gives_what_the_separate_reads_give(redis_client: aioredis.Redis) -> None:
    keys = Keys(PREFIX)
    notes = JobNotes(redis_client, keys.job)
    job = "j1"
    await redis_client.hset(str(keys.job(job)), "total", 20)  # the scripts note nothing for a job that is gone
    for i in range(12):
        assert await notes.skip(job, f"t{i}", f"https://example.test/{i}", "robots.txt")
    await notes.sink_failing(job, "connection refused")
    await notes.throttled(job, "open.example", "5 failures in a row", time.time() + 600)
    await notes.throttled(job, "closed.example", "5 failures in a row", time.time() - 1)
    for _ in range(3):
        await notes.truncated(job)
    for domain in ("a.example", "b.example", "b.example"):
        await notes.blocked(job, domain)
    await notes.archived(job, {"records": 4, "truncated": 1, "dropped": 0, "lost": 0})

    read = await notes.read(job, running=True, blocked=True, archive=True)
    count, sample = await notes.skipped(job)
    assert read == NotesRead(
        skipped=count,
        skipped_sample=sample,
        throttled=await notes.throttled_domains(job),
        sink_trouble=await notes.sink_trouble(job),
        truncated=await notes.truncated_count(job),
        blocked=await notes.blocked_counts(job),
        archive=await notes.archive_counts(job),
    )
    assert read.skipped == 12 and len(read.skipped_sample) == 10 and read.truncated == 3
    assert [t.domain for t in read.throttled] == ["open.example"]
    assert read.blocked == (3, [("b.example", 2), ("a.example", 1)])
    assert read.archive == {"records": 4, "truncated": 1, "dropped": 0, "lost": 0}
    assert read.sink_trouble is not None and read.sink_trouble.message == "connection refused"

    # A finished job without sessions or an archive: what only a running job shows, and the rest, left out.
    done = await notes.read(job, running=False, blocked=False, archive=False)
    assert (done.throttled, done.sink_trouble, done.blocked, done.archive) == ([], None, (0, []), None)
    assert done.skipped == 12 and done.truncated == 3


async def test_a_job_with_no_notes_reads_empty(redis_client: aioredis.Redis) -> None:
    read = await JobNotes(redis_client, Keys(PREFIX).job).read("none", running=True, blocked=True, archive=True)
    assert read == NotesRead(0, [], [], None, 0, (0, []), {"records": 0, "truncated": 0, "dropped": 0, "lost": 0})
