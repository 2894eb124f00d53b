"""Exactly once per (job, URL) for sinks that write a batch as whole files (S3 objects, files on a volume).

A file holds many records and a worker can die between writing it and its bookkeeping. So before the
write the batch's keys are recorded in Redis as *pending in file F* (a hash beside the job's dedupe
set), after it they move to the dedupe set. A redelivered record whose key is still pending asks the
store whether F exists: if so the record is already stored (the worker died after the write) and it is
not written again; if not it is written in a new file. A write is atomic (an S3 PUT; a rename on a
volume), so F either holds its whole part of the batch or does not exist.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

from redis.asyncio import Redis

from trawl.api.plain import FileFormat
from trawl.queue.keys import pending_key
from trawl.redisconn.client import atomic_pipeline

from .base import DEDUPE_TTL_SECONDS, Deduped, Record
from .tabular import Column, Part, parts


class PartStore(Protocol):
    def name(self, job_id: str, part: Part) -> str: ...

    async def exists(self, name: str) -> bool: ...

    async def put(self, name: str, part: Part) -> None: ...


Encoder = Callable[[Sequence[Record]], Awaitable[list[Part]]]


def encoder(fmt: FileFormat, schema: Sequence[Column]) -> Encoder:
    """The batch's files, built on a thread (Parquet encoding is CPU the event loop must not wait on)."""

    async def encode(records: Sequence[Record]) -> list[Part]:
        return await asyncio.to_thread(parts, fmt, schema, records)

    return encode


class PartWriter:
    def __init__(self, redis: Redis, dedupe_key: Any, store: PartStore, encode: Encoder) -> None:
        self.redis = redis
        self._dedupe_key = dedupe_key
        self._dedupe = Deduped(redis, dedupe_key)
        self.store = store
        self.encode = encode

    async def _settle_pending(self, job_id: str, fresh: list[Record]) -> list[Record]:
        """Drop records a dead worker's completed write already stored; mark them written."""
        pending = pending_key(self._dedupe_key(job_id))
        names = await self.redis.hmget(pending, [r.key for r in fresh])  # type: ignore[misc]
        by_name: dict[str, list[Record]] = {}
        for rec, name in zip(fresh, names, strict=True):
            if name is not None:
                by_name.setdefault(name.decode() if isinstance(name, bytes) else str(name), []).append(rec)
        stored: set[str] = set()
        for name, recs in by_name.items():
            if await self.store.exists(name):
                stored.update(r.key for r in recs)
                await self._dedupe.mark(job_id, recs)
                await self.redis.hdel(pending, *[r.key for r in recs])  # type: ignore[misc]
        return [r for r in fresh if r.key not in stored]

    async def _write_part(self, job_id: str, part: Part) -> None:
        name = self.store.name(job_id, part)
        pending = pending_key(self._dedupe_key(job_id))
        async with atomic_pipeline(self.redis) as pipe:
            pipe.hset(pending, mapping={r.key: name for r in part.records})
            pipe.expire(pending, DEDUPE_TTL_SECONDS)
            await pipe.execute()
        await self.store.put(name, part)
        await self._dedupe.mark(job_id, part.records)
        await self.redis.hdel(pending, *[r.key for r in part.records])  # type: ignore[misc]

    async def write(self, job_id: str, records: Sequence[Record]) -> int:
        """Write the records not written yet; the count written. Raises what the store raises."""
        fresh = await self._dedupe.fresh(job_id, records)
        if fresh:
            fresh = await self._settle_pending(job_id, fresh)
        if not fresh:
            return 0
        for part in await self.encode(fresh):
            await self._write_part(job_id, part)
        return len(fresh)
