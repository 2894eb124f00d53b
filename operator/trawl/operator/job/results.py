"""Where a job's results are and how many were written, for ``status.results``.

The location is what each sink writes to, said the way its user looks for it (a Redis key, a file, a
URL, a table, an S3 prefix); the count is read from the record the sinks keep beside the stream.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trawl.api.scrapejob import ScrapeJobSpec, SinkKind
from trawl.queue import Queue
from trawl.sinks.digests import COUNT_FIELD, count


def results_location(
    queue: Queue, spec: ScrapeJobSpec, uid: str, name: str, count: int, retained: int | None = None
) -> dict[str, Any]:
    output = spec.output
    sink = output.sink if output else SinkKind.REDIS_STREAM
    if sink == SinkKind.JSON_LINES and output and output.json_lines:
        location = f"{output.json_lines.directory.rstrip('/')}/{uid}.jsonl"  # the file JsonLinesSink.path writes
    elif sink == SinkKind.FILES and output and output.files:
        location = f"{output.files.directory.rstrip('/')}/{uid}/"  # FilesSink's folder, with its manifest.json
    elif sink == SinkKind.WEBHOOK and output and output.webhook:
        location = output.webhook.url
    elif sink == SinkKind.S3 and output and output.s3:
        s3 = output.s3
        location = f"s3://{s3.bucket}/{s3.prefix}{uid}/" + (f" at {s3.endpoint}" if s3.endpoint else "")
    elif sink == SinkKind.POSTGRESQL and output and output.postgres:
        pg = output.postgres
        location = f"postgresql://{pg.user}@{pg.host}:{pg.port}/{pg.database} table {pg.table} (job = '{uid}')"
    else:
        location = f"redis: {queue.keys.results(uid)}"
    out: dict[str, Any] = {"sink": sink.value, "location": location, "count": count}
    if retained is not None:
        out["retained"] = retained
    return out


async def results_written(
    queue: Queue, spec: ScrapeJobSpec, uid: str, prev: Mapping[str, Any]
) -> tuple[int | None, int | None]:
    """Records written for the job and, for the Redis stream sink, how many the stream still holds (it
    trims at maxLen). The Redis, JsonLines, Webhook, Files and S3 sinks record each written (job, URL) key
    beside the stream (:mod:`trawl.sinks.digests`): the digest hash's count plus the legacy set of hex keys
    older workers wrote (a record is in one or the other); the PostgreSQL sink's table is its own record
    (None: not known here). Never below what the status said already: a record that expired does not
    rewind the count."""
    sink = spec.output.sink if spec.output is not None else SinkKind.REDIS_STREAM
    if sink == SinkKind.POSTGRESQL:
        return None, None
    key = queue.keys.results(uid)
    stream = sink == SinkKind.REDIS_STREAM
    async with queue.redis.pipeline(transaction=False) as pipe:
        pipe.hget(queue.keys.results_digests(uid), COUNT_FIELD)
        pipe.scard(queue.keys.results_written(uid))
        if stream:
            pipe.xlen(key)
        found = await pipe.execute()
    before = int(((prev.get("results") or {}).get("count")) or 0)
    return max(count(found[0]) + int(found[1]), before), int(found[2]) if stream else None
