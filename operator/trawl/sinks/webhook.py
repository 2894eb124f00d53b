"""A webhook: records POSTed in signed batches, each connection's address checked (the SSRF guard)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Sequence
from typing import Any

import aiohttp
from redis.asyncio import Redis

from trawl.boot import castore
from trawl.egress.addresses import IPNetwork, ip_literal_block_reason
from trawl.egress.resolver import SafeResolver, find_blocked

from .base import Deduped, Record, SinkError, batch_key, sign


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
        self._dedupe = Deduped(redis, dedupe_key)
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
        reason = ip_literal_block_reason(self.url, self.allowed)
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
                blocked = find_blocked(exc)
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
