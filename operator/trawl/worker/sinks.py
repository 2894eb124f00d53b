"""Result sinks: a Redis stream per job (default), JSON Lines files, and a webhook.

Every record carries ``key`` = a hash of (job, URL). The Redis stream sink checks and records the key
in the same Lua script that appends the entry, so a redelivered task never produces a second entry.
The file and webhook sinks skip keys already recorded in Redis and record them once written (a
worker killed between the write and the record can leave one duplicate line, which carries the same
``key`` for consumers to drop).

Writes are batched by the worker's :class:`trawl.worker.finish.Finisher`: one ``write`` per (sink, job)
carries the records of many tasks, and the tasks are acked only after it returns.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import logging
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlsplit

import aiohttp
from redis.asyncio import Redis

from trawl import castore
from trawl.redisclient import atomic_pipeline

from .fetch import SafeResolver, _find_blocked
from .urlpolicy import IPNetwork, address_block_reason

log = logging.getLogger("trawl.worker.sinks")

DEDUPE_TTL_SECONDS = 8 * 86400  # outlives the default finished-job retention (7 days)

# KEYS[1] stream, KEYS[2] dedupe set, KEYS[3] the job's hash (optional). ARGV: maxlen, ttl, then
# (key, url, json) triples. A job whose hash is gone was cancelled: its late results are dropped, so
# a cancelled job's stream is not re-created after cancel deleted it.
STREAM_WRITE_LUA = """
if KEYS[3] and redis.call('EXISTS', KEYS[3]) == 0 then return 0 end
local written = 0
for i = 3, #ARGV, 3 do
  if redis.call('SADD', KEYS[2], ARGV[i]) == 1 then
    redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'key', ARGV[i], 'url', ARGV[i + 1], 'data', ARGV[i + 2])
    written = written + 1
  end
end
if written > 0 then
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl > 0 then
    redis.call('PEXPIRE', KEYS[2], ttl)
  else
    redis.call('EXPIRE', KEYS[2], tonumber(ARGV[2]))
  end
end
return written
"""


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


def dedupe_key(stream_key: str) -> str:
    """The set of (job, URL) keys already written for a job, next to its results stream."""
    return stream_key + ":keys"


def _dumps(data: dict[str, Any]) -> str:
    return json.dumps(data, ensure_ascii=False, separators=(",", ":"), default=str)


class RedisStreamSink:
    """XADD to the job's stream (bounded by MAXLEN ~, expiring with the job's keys)."""

    def __init__(self, redis: Redis, stream_key: Any, *, max_len: int = 100_000, job_key: Any = None) -> None:
        self.redis = redis
        self.stream_key = stream_key  # job_id -> key
        self.job_key = job_key  # job_id -> the queue's job hash, whose absence means cancelled
        self.max_len = max_len
        self._script = redis.register_script(STREAM_WRITE_LUA)

    async def write(self, job_id: str, records: Sequence[Record], *, max_len: int | None = None) -> int:
        stream = self.stream_key(job_id)
        args: list[Any] = [max_len or self.max_len, DEDUPE_TTL_SECONDS]
        for rec in records:
            args += [rec.key, rec.url, _dumps(rec.data)]
        try:
            keys = [stream, dedupe_key(stream)] + ([self.job_key(job_id)] if self.job_key is not None else [])
            return int(await self._script(keys=keys, args=args))
        except Exception as exc:
            raise SinkError(f"redis stream write failed: {exc}") from exc

    async def close(self) -> None:
        return None


class _Deduped:
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


class JsonLinesSink:
    """Appends to ``<directory>/<job_id>.jsonl``: one line per record, written with O_APPEND."""

    def __init__(self, redis: Redis, dedupe_key: Any, directory: str) -> None:
        self.directory = Path(directory)
        self._dedupe = _Deduped(redis, dedupe_key)

    def path(self, job_id: str) -> Path:
        return self.directory / f"{job_id}.jsonl"

    def _append(self, path: Path, payload: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(payload)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)

    async def write(self, job_id: str, records: Sequence[Record]) -> int:
        try:
            fresh = await self._dedupe.fresh(job_id, records)
            if not fresh:
                return 0
            payload = "".join(_dumps(r.data) + "\n" for r in fresh).encode()
            await asyncio.to_thread(self._append, self.path(job_id), payload)
            await self._dedupe.mark(job_id, fresh)
            return len(fresh)
        except OSError as exc:
            raise SinkError(f"json lines write failed: {exc}") from exc

    async def close(self) -> None:
        return None


class WebhookSink:
    """POSTs ``{"job": ..., "records": [...]}`` in batches, HMAC-SHA256-signed, retried with backoff."""

    def __init__(
        self,
        redis: Redis,
        dedupe_key: Any,
        url: str,
        *,
        secret: bytes | None,
        batch_size: int = 50,
        attempts: int = 4,
        backoff: float = 0.5,
        timeout: float = 15.0,
        allowed: Sequence[IPNetwork] = (),
    ) -> None:
        self.url = url
        self.secret = secret
        self.batch_size = batch_size
        self.attempts = attempts
        self.backoff = backoff
        self.timeout = timeout
        self.allowed = tuple(allowed)
        self._dedupe = _Deduped(redis, dedupe_key)
        self._session: aiohttp.ClientSession | None = None

    async def _sess(self) -> aiohttp.ClientSession:
        if self._session is None:
            await castore.ready()  # aiohttp's default TLS context must hold the CA store before any handshake
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(resolver=SafeResolver(self.allowed), limit=8),
                trust_env=False,
            )
        return self._session

    def _check_target(self) -> None:
        """IP-literal hosts bypass the resolver, so they are checked here (names are checked by it)."""
        host = urlsplit(self.url).hostname or ""
        try:
            ipaddress.ip_address(host)
        except ValueError:
            return
        reason = address_block_reason(host, self.allowed)
        if reason is not None:
            raise SinkError(f"webhook {self.url} refused: {reason}")

    async def _post(self, body: bytes, idempotency_key: str | None = None) -> None:
        self._check_target()
        session = await self._sess()
        headers = {"Content-Type": "application/json", "User-Agent": "trawl-webhook/0.1"}
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        if self.secret is not None:
            headers["X-Trawl-Signature"] = sign(self.secret, body)
        last = ""
        for attempt in range(self.attempts):
            if attempt:
                await asyncio.sleep(self.backoff * (2 ** (attempt - 1)))
            try:
                async with session.post(
                    self.url, data=body, headers=headers, timeout=aiohttp.ClientTimeout(total=self.timeout)
                ) as resp:
                    if 200 <= resp.status < 300:
                        return
                    last = f"HTTP {resp.status}"
                    if 400 <= resp.status < 500 and resp.status not in (408, 429):
                        break
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                last = f"{type(exc).__name__}: {exc}"
                blocked = _find_blocked(exc)
                if blocked is not None:
                    last = f"refused: {blocked}"
                    break
        raise SinkError(f"webhook {self.url} failed: {last}")

    async def write(self, job_id: str, records: Sequence[Record]) -> int:
        fresh = await self._dedupe.fresh(job_id, records)
        for i in range(0, len(fresh), self.batch_size):
            batch = fresh[i : i + self.batch_size]
            body = json.dumps(
                {"job": job_id, "sentAt": time.time(), "records": [r.data for r in batch]},
                ensure_ascii=False,
                separators=(",", ":"),
                default=str,
            ).encode()
            await self._post(body, batch_key(job_id, batch))
            await self._dedupe.mark(job_id, batch)
        return len(fresh)

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
