"""What every sink shares: the record and its key, the sink protocol, and the dedupe set in Redis.

Every record carries ``key`` = a hash of (job, URL). The Redis stream sink checks and records the key
in the same Lua script that appends the entry, so a redelivered task never produces a second entry.
The file, webhook and S3 sinks skip keys already recorded in Redis and record them once written (a
worker killed between the write and the record can leave one duplicate line, which carries the same
``key`` for consumers to drop); the PostgreSQL table's primary key is its own dedupe.

Writes are batched by the worker's :class:`trawl.worker.finish.Finisher`: one ``write`` per (sink, job)
carries the records of many tasks, and the tasks are acked only after it returns.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from redis.asyncio import Redis

from trawl.redisconn.client import atomic_pipeline

DEDUPE_TTL_SECONDS = 8 * 86400  # outlives the default finished-job retention (7 days)


def record_key(job_id: str, url: str) -> str:
    return hashlib.blake2b(f"{job_id}\n{url}".encode(), digest_size=16).hexdigest()


def batch_key(job_id: str, records: Sequence[Record]) -> str:
    """The Idempotency-Key of a webhook batch: the same records always give the same key, so a receiver
    can drop a POST it already stored (a retry after a lost response). Records also carry their own key."""
    digest = hashlib.blake2b(job_id.encode(), digest_size=16)
    for key in sorted(r.key for r in records):
        digest.update(b"\n" + key.encode())
    return digest.hexdigest()


def sign(secret: bytes, body: bytes) -> str:
    """The X-Trawl-Signature header value: ``sha256=<hex HMAC-SHA256 of the body>``."""
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


@dataclass(slots=True)
class Record:
    job_id: str
    url: str
    data: dict[str, Any]  # the whole record as written (includes key, job, url)

    @property
    def key(self) -> str:
        return str(self.data["key"])


class SinkError(Exception):
    """The sink could not store the records; the tasks go back to the queue without spending an attempt."""


class Sink(Protocol):
    async def write(self, job_id: str, records: Sequence[Record]) -> int: ...

    async def close(self) -> None: ...


def dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)


class Deduped:
    """Skip records whose key is recorded in Redis; record keys once written."""

    def __init__(self, redis: Redis, dedupe_key: Any) -> None:
        self.redis = redis
        self.dedupe_key = dedupe_key  # job_id -> key

    async def fresh(self, job_id: str, records: Sequence[Record]) -> list[Record]:
        unique: dict[str, Record] = {}
        for rec in records:
            unique.setdefault(rec.key, rec)
        keys = list(unique)
        if not keys:
            return []
        seen = await self.redis.smismember(self.dedupe_key(job_id), keys)  # type: ignore[misc]
        return [unique[k] for k, s in zip(keys, seen, strict=True) if not s]

    async def mark(self, job_id: str, records: Sequence[Record]) -> None:
        if not records:
            return
        key = self.dedupe_key(job_id)
        async with atomic_pipeline(self.redis) as pipe:
            pipe.sadd(key, *[r.key for r in records])
            pipe.expire(key, DEDUPE_TTL_SECONDS)
            await pipe.execute()
