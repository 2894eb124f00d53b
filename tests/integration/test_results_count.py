"""The job status's results figures against a real Redis: records written (not pages succeeded), records
the stream still holds after trimming, and a count that never rewinds when the key set expires."""

from __future__ import annotations

import redis.asyncio as aioredis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.operator.job.results import results_location, results_written
from trawl.queue import JobConfig, Queue
from trawl.sinks.base import Record, record_key
from trawl.sinks.redisstream import RedisStreamSink, dedupe_key

PREFIX = "trawl:{ns/results}"


async def test_written_and_retained_records_of_a_trimmed_stream(redis_client: aioredis.Redis) -> None:
    q = Queue(redis_client, PREFIX)
    await q.register_job(JobConfig("j"))
    spec = ScrapeJobSpec.model_validate(
        {"pool": "results", "urls": ["https://x.test/"], "output": {"redisStream": {"maxLen": 10}}}
    )
    sink = RedisStreamSink(redis_client, q.keys.results, max_len=10, job_key=q.keys.job)
    recs = [Record("j", f"https://x.test/{i}", {"key": record_key("j", f"https://x.test/{i}")}) for i in range(300)]
    for i in range(0, 300, 50):
        assert await sink.write("j", recs[i : i + 50]) == 50
    assert await sink.write("j", recs[:5]) == 0  # redelivered: not written again, not counted again
    written, retained = await results_written(q, spec, "j", {})
    assert written == 300
    assert retained is not None and retained < written  # trimmed at maxLen (approximately)
    status = results_location(q, spec, "j", "name", written, retained)
    assert (status["count"], status["retained"]) == (300, retained)
    await redis_client.delete(q.keys.results_digests("j"), dedupe_key(q.keys.results("j")))
    assert (await results_written(q, spec, "j", {"results": status}))[0] == 300  # never rewound
