"""Result sinks against a real Redis and a real HTTP receiver: dedupe by (job, URL), batching, HMAC, retries."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from aiohttp import web

from trawl.dev.procs import free_port
from trawl.queue.keys import Keys, digests_key
from trawl.sinks.base import Record, SinkError, batch_key, record_key
from trawl.sinks.jsonlines import JsonLinesSink
from trawl.sinks.redisstream import RedisStreamSink
from trawl.sinks.webhook import WebhookSink

KEYS = Keys("trawl:{test/sinks}")


def dedupe_key(job_id: str) -> str:
    return KEYS.results(job_id) + ":keys"


def written_key(job_id: str) -> str:
    """The hash of the digests of a job's written records (the set of hex keys is only read)."""
    return digests_key(dedupe_key(job_id))


def rec(job: str, url: str, **data: Any) -> Record:
    return Record(job, url, {"key": record_key(job, url), "job": job, "url": url, **data})


async def test_stream_sink_never_duplicates_a_job_url(redis_client: aioredis.Redis) -> None:
    sink = RedisStreamSink(redis_client, KEYS.results, max_len=1000)
    first = [rec("j1", f"http://s.test/{i}", n=i) for i in range(5)]
    assert await sink.write("j1", first) == 5
    # a redelivered task writes its record again, in another batch with new records
    again = [rec("j1", "http://s.test/3", n=33), rec("j1", "http://s.test/9", n=9), rec("j1", "http://s.test/9", n=9)]
    assert await sink.write("j1", again) == 1
    assert await sink.write("j2", [rec("j2", "http://s.test/3")]) == 1  # the same URL in another job is new
    entries = await redis_client.xrange(KEYS.results("j1"))
    urls = [f[b"url"].decode() for _id, f in entries]
    assert sorted(urls) == sorted([f"http://s.test/{i}" for i in (0, 1, 2, 3, 4, 9)])
    assert json.loads(entries[3][1][b"data"])["n"] == 3  # the first write wins
    assert await redis_client.ttl(written_key("j1")) > 0  # the dedupe record expires


async def test_stream_dedupe_set_follows_the_job_retention(redis_client: aioredis.Redis) -> None:
    sink = RedisStreamSink(redis_client, KEYS.results)
    await sink.write("j3", [rec("j3", "http://s.test/a")])
    await redis_client.expire(KEYS.results("j3"), 120)  # the queue's expire_job sets the retention
    await sink.write("j3", [rec("j3", "http://s.test/b")])
    assert 100 < await redis_client.ttl(written_key("j3")) <= 120


async def test_json_lines_sink(redis_client: aioredis.Redis, tmp_path: Path) -> None:
    sink = JsonLinesSink(redis_client, dedupe_key, str(tmp_path / "out"))
    assert await sink.write("j1", [rec("j1", "http://s.test/1"), rec("j1", "http://s.test/2")]) == 2
    assert await sink.write("j1", [rec("j1", "http://s.test/2"), rec("j1", "http://s.test/3")]) == 1
    lines = [json.loads(line) for line in (tmp_path / "out" / "j1.jsonl").read_text().splitlines()]
    assert [x["url"] for x in lines] == ["http://s.test/1", "http://s.test/2", "http://s.test/3"]
    assert all(x["key"] == record_key("j1", x["url"]) for x in lines)


class Receiver:
    def __init__(self, fail_first: int = 0, status: int = 500) -> None:
        self.bodies: list[bytes] = []
        self.signatures: list[str | None] = []
        self.fail_first = fail_first
        self.status = status
        self.calls = 0
        self.idempotency_keys: list[str | None] = []  # of every call, refused ones too

    async def handle(self, request: web.Request) -> web.Response:
        self.calls += 1
        self.idempotency_keys.append(request.headers.get("Idempotency-Key"))
        body = await request.read()
        if self.calls <= self.fail_first:
            return web.Response(status=self.status)
        self.bodies.append(body)
        self.signatures.append(request.headers.get("X-Trawl-Signature"))
        return web.Response(status=204)


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[Receiver, str]]:
    recv = Receiver(fail_first=2)
    app = web.Application()
    app.router.add_post("/hook", recv.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    try:
        yield recv, f"http://127.0.0.1:{port}/hook"
    finally:
        await runner.cleanup()


async def test_webhook_batches_signs_retries_and_dedupes(
    redis_client: aioredis.Redis, receiver: tuple[Receiver, str]
) -> None:
    recv, url = receiver
    secret = b"s3cret"
    sink = WebhookSink(
        redis_client, dedupe_key, url, secret=secret, batch_size=2, backoff=0.05, allowed=[_net("127.0.0.1/32")]
    )
    try:
        records = [rec("j1", f"http://s.test/{i}") for i in range(5)]
        assert await sink.write("j1", records) == 5
        assert await sink.write("j1", records[3:]) == 0  # redelivered: not sent again
    finally:
        await sink.close()
    assert recv.calls == 2 + 3  # two 500s retried, then three batches (2 + 2 + 1)
    sent = [json.loads(b) for b in recv.bodies]
    assert [len(b["records"]) for b in sent] == [2, 2, 1]
    assert [r["url"] for b in sent for r in b["records"]] == [r.url for r in records]
    for body, signature in zip(recv.bodies, recv.signatures, strict=True):
        assert signature == "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()
    # A retried POST carries the same Idempotency-Key (a receiver drops what it stored); batches differ.
    keys = recv.idempotency_keys
    assert keys[0] == keys[1] == keys[2] == batch_key("j1", records[:2])
    assert len(set(keys[2:])) == 3


async def test_webhook_gives_up_with_a_sink_error(redis_client: aioredis.Redis) -> None:
    port = free_port()  # nothing listens
    sink = WebhookSink(
        redis_client,
        dedupe_key,
        f"http://127.0.0.1:{port}/x",
        secret=None,
        attempts=2,
        backoff=0.01,
        allowed=[_net("127.0.0.1/32")],
    )
    try:
        with pytest.raises(SinkError):
            await sink.write("j9", [rec("j9", "http://s.test/1")])
    finally:
        await sink.close()
    # not marked: the next delivery will send it
    assert not await redis_client.exists(written_key("j9"), dedupe_key("j9"))


@pytest.mark.parametrize(
    "url", ["http://169.254.169.254/hook", "http://[::ffff:10.0.0.1]/hook", "http://localhost:9/x"]
)
async def test_webhook_to_a_blocked_address_is_refused(redis_client: aioredis.Redis, url: str) -> None:
    sink = WebhookSink(redis_client, dedupe_key, url, secret=None, attempts=3, backoff=1.0)
    try:
        with pytest.raises(SinkError, match=r"refused|blocked"):
            await asyncio.wait_for(sink.write("j8", [rec("j8", "http://s.test/1")]), 1.5)  # refused, not timed out
    finally:
        await sink.close()


def _net(cidr: str) -> Any:
    import ipaddress

    return ipaddress.ip_network(cidr)


@pytest.fixture
async def redirecting() -> AsyncIterator[tuple[Receiver, str, list[str]]]:
    """A receiver on 127.0.0.1 that answers every POST with a redirect to a protected endpoint on 127.0.0.2
    (outside the allowed 127.0.0.1/32), which records every request that reaches it."""
    reached: list[str] = []

    async def protected(request: web.Request) -> web.Response:
        reached.append(f"{request.method} {request.path}")
        return web.Response(status=200, text="internal answer")

    inner = web.Application()
    inner.router.add_route("*", "/{tail:.*}", protected)
    inner_runner = web.AppRunner(inner)
    await inner_runner.setup()
    inner_port = free_port()
    await web.TCPSite(inner_runner, "127.0.0.2", inner_port).start()

    recv = Receiver()

    async def redirect(request: web.Request) -> web.Response:
        recv.calls += 1
        await request.read()
        return web.Response(status=303, headers={"Location": f"http://127.0.0.2:{inner_port}/latest/"})

    outer = web.Application()
    outer.router.add_post("/hook", redirect)
    outer_runner = web.AppRunner(outer)
    await outer_runner.setup()
    port = free_port()
    await web.TCPSite(outer_runner, "127.0.0.1", port).start()
    try:
        yield recv, f"http://127.0.0.1:{port}/hook", reached
    finally:
        await outer_runner.cleanup()
        await inner_runner.cleanup()


async def test_webhook_never_follows_a_redirect(
    redis_client: aioredis.Redis, redirecting: tuple[Receiver, str, list[str]]
) -> None:
    """Issue 32: a 303 to an address outside the pool's allowedCidrs was followed (the protected endpoint
    answered, and the write counted as delivered). A webhook is POSTed to the URL given: a 3xx fails the
    write at once (no further attempt) and nothing reaches the address it names."""
    recv, url, reached = redirecting
    sink = WebhookSink(
        redis_client, dedupe_key, url, secret=b"k", attempts=4, backoff=0.01, allowed=[_net("127.0.0.1/32")]
    )
    try:
        with pytest.raises(SinkError) as info:
            await sink.write("j10", [rec("j10", "http://s.test/1")])
    finally:
        await sink.close()
    assert str(info.value) == f"webhook {url} failed: redirect refused: webhooks are POSTed to the URL given (HTTP 303)"
    assert "internal answer" not in str(info.value)
    assert recv.calls == 1  # not retried
    assert reached == []
    # not marked: the record is kept for another write
    assert not await redis_client.exists(written_key("j10"), dedupe_key("j10"))


async def test_on_complete_event_never_follows_a_redirect(redirecting: tuple[Receiver, str, list[str]]) -> None:
    from trawl.operator.job.oncomplete import post_event

    recv, url, reached = redirecting
    outcome = await post_event(url, b"{}", b"k", [_net("127.0.0.1/32")])
    assert (outcome.delivered, outcome.retry) == (False, False)
    assert outcome.message == "redirect refused: webhooks are POSTed to the URL given (HTTP 303)"
    assert recv.calls == 1 and reached == []
