"""What every sink shares: the record and its key, the sink protocol, and the dedupe in Redis (:mod:`.digests`).

Every record carries ``key`` = a hash of (job, URL). The Redis stream sink checks and records the key
in the same Lua script that appends the entry, so a redelivered task never produces a second entry.
The file, webhook and S3 sinks skip keys already recorded in Redis and record them once written (a
worker killed between the write and the record can leave one duplicate line, which carries the same
``key`` for consumers to drop); the PostgreSQL table's primary key is its own dedupe.

Writes are batched by the worker's :class:`trawl.worker.finish.Finisher`: one ``write`` per (sink, job)
carries the records of many tasks, and the tasks are acked only after it returns.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from redis.asyncio import Redis

from trawl.queue.keys import digests_key
from trawl.redisconn.scripts import read_script

from .digests import record_digest, split, written

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


def packed_digests(keys: Sequence[str]) -> bytes:
    """The records' digests in the one argument the dedupe scripts take (16 bytes each, in order)."""
    return b"".join(record_digest(key) for key in keys)


class Deduped:
    """Skip records whose key is recorded in Redis; record keys once written (:mod:`.digests`: a hash of
    digests, and the set of hex keys older workers wrote, read but not written)."""

    def __init__(self, redis: Redis, dedupe_key: Any) -> None:
        self.redis = redis
        self.dedupe_key = dedupe_key  # job_id -> the legacy set's key; the digest hash's derives from it
        self._mark = redis.register_script(read_script("trawl.sinks", "dedupe_mark", library="dedupe_lib"))

    def _keys(self, job_id: str) -> list[str]:
        legacy = self.dedupe_key(job_id)
        return [digests_key(legacy), legacy]

    async def fresh(self, job_id: str, records: Sequence[Record]) -> list[Record]:
        unique: dict[str, Record] = {}
        for rec in records:
            unique.setdefault(rec.key, rec)
        keys = list(unique)
        if not keys:
            return []
        digests = [record_digest(k) for k in keys]
        fields = list(dict.fromkeys(split(d)[0] for d in digests))
        hashed, legacy = self._keys(job_id)
        # Plain reads, not a script: a script pays ~1 µs of Redis CPU per bucket it reads into Lua. A batch
        # that races another worker's may pass as fresh and be written twice, as with the set before (the
        # write and its mark are not one step: see the module's docstring).
        values, has_legacy = await asyncio.gather(
            self.redis.hmget(hashed, fields),  # type: ignore[arg-type]
            self.redis.exists(legacy),
        )
        seen = written(digests, dict(zip(fields, values, strict=True)))
        if has_legacy:
            old = await self.redis.smismember(legacy, keys)  # type: ignore[misc]
            seen = [a or bool(b) for a, b in zip(seen, old, strict=True)]
        return [unique[k] for k, s in zip(keys, seen, strict=True) if not s]

    async def mark(self, job_id: str, records: Sequence[Record]) -> None:
        if not records:
            return
        args: list[int | bytes] = [DEDUPE_TTL_SECONDS, packed_digests([r.key for r in records])]
        await self._mark(keys=self._keys(job_id), args=args)
