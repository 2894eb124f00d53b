"""A webhook: records POSTed in signed batches, each connection's address checked (the SSRF guard).

What a webhook POST may do is shared with the operator's onComplete webhook (:func:`post_once`): the
address is checked where the connection is made (an IP-literal host here, a name by the resolver), a
redirect is never followed (a webhook is POSTed to the URL given; following a 3xx would send the pool's
signed request wherever the receiver says, past the check of the URL), and the outcome a status shows
is the HTTP status or the refusal, never what the receiver answered.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import aiohttp
from redis.asyncio import Redis

from trawl.boot import castore
from trawl.egress.addresses import IPNetwork, ip_literal_block_reason
from trawl.egress.resolver import SafeResolver, find_blocked

from .base import Deduped, Record, SinkError, batch_key, sign

REDIRECT_REFUSED = "redirect refused: webhooks are POSTed to the URL given"


class Delivery(NamedTuple):
    """One POST's outcome: delivered, worth another attempt, and what a status says about it."""

    delivered: bool
    retry: bool
    message: str


def answered(status: int) -> Delivery:
    """What an HTTP status means for a webhook POST: 2xx delivered, 3xx refused (not followed, not retried),
    408, 429 and 5xx worth another attempt, other 4xx final."""
    if 200 <= status < 300:
        return Delivery(True, False, "delivered")
    if 300 <= status < 400:
        return Delivery(False, False, f"{REDIRECT_REFUSED} (HTTP {status})")
    return Delivery(False, status >= 500 or status in (408, 429), f"HTTP {status}")


def _failure(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__


async def post_once(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    allowed: Sequence[IPNetwork],
    seconds: float,
) -> Delivery:
    """One POST through ``session`` (whose connector resolves with a :class:`SafeResolver` of ``allowed``).
    A refused address is final and never connected to; a redirect is not followed."""
    blocked = ip_literal_block_reason(url, allowed)  # IP-literal hosts bypass the resolver
    if blocked is not None:
        return Delivery(False, False, f"refused: {blocked}")
    try:
        async with session.post(
            url,
            data=body,
            headers=dict(headers),
            timeout=aiohttp.ClientTimeout(total=seconds),
            allow_redirects=False,
        ) as resp:
            return answered(resp.status)
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        found = find_blocked(exc)
        if found is not None:
            return Delivery(False, False, f"refused: {found}")
        return Delivery(False, True, _failure(exc))


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

    async def _post(self, body: bytes, idempotency_key: str | None = None) -> None:
        session = await self._sess()
        headers = {"Content-Type": "application/json", "User-Agent": "trawl-webhook/0.1"}
        if idempotency_key is not None:
            headers["Idempotency-Key"] = idempotency_key
        if self.secret is not None:
            headers["X-Trawl-Signature"] = sign(self.secret, body)
        outcome = Delivery(False, False, "no attempt made")
        for attempt in range(self.attempts):
            if attempt:
                await asyncio.sleep(self.backoff * (2 ** (attempt - 1)))
            outcome = await post_once(session, self.url, body, headers, allowed=self.allowed, seconds=self.timeout)
            if outcome.delivered:
                return
            if not outcome.retry:
                break
        refused = outcome.message.startswith("refused: ")  # "webhook URL refused: why", else "failed: why"
        raise SinkError(f"webhook {self.url} {outcome.message if refused else f'failed: {outcome.message}'}")

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
