"""The default sink: a Redis stream per job, bounded by ``MAXLEN ~``, expiring with the job's keys.

The stream write and its dedupe (:mod:`.digests`) are one script (``lua/stream_write.lua``), so a
redelivered task never produces a second entry.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from redis.asyncio import Redis

from trawl.queue.keys import dedupe_key, digests_key
from trawl.redisconn.scripts import read_script

from .base import DEDUPE_TTL_SECONDS, Record, SinkError, dumps, packed_digests


class RedisStreamSink:
    """XADD to the job's stream (bounded by MAXLEN ~, expiring with the job's keys)."""

    def __init__(self, redis: Redis, stream_key: Any, *, max_len: int = 100_000, job_key: Any = None) -> None:
        self.redis = redis
        self.stream_key = stream_key  # job_id -> key
        self.job_key = job_key  # job_id -> the queue's job hash, whose absence means cancelled
        self.max_len = max_len
        self._script = redis.register_script(read_script("trawl.sinks", "stream_write", library="dedupe_lib"))

    async def write(self, job_id: str, records: Sequence[Record], *, max_len: int | None = None) -> int:
        stream = self.stream_key(job_id)
        args: list[Any] = [max_len or self.max_len, DEDUPE_TTL_SECONDS, packed_digests([r.key for r in records])]
        for rec in records:
            args += [rec.key, rec.url, dumps(rec.data)]
        written = dedupe_key(stream)
        try:
            keys = [stream, digests_key(written), written] + (
                [self.job_key(job_id)] if self.job_key is not None else []
            )
            return int(await self._script(keys=keys, args=args))
        except Exception as exc:
            raise SinkError(f"redis stream write failed: {exc}") from exc

    async def close(self) -> None:
        return None


def decode_entry(fields: Mapping[Any, Any]) -> dict[str, Any]:
    """A stream entry's record as readers show it (`trawl results`, the results API): the record, with the
    entry's URL field joined when the record has none."""
    raw = fields.get(b"data") or fields.get("data") or b"{}"
    record: dict[str, Any] = json.loads(raw)
    if "url" not in record:
        url = fields.get(b"url") or fields.get("url") or b""
        record["url"] = url.decode() if isinstance(url, bytes) else url
    return record
