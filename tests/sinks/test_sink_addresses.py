"""Sinks connect through the address check (trawl.egress.sinkaddr) against real servers: names are
pinned to the addresses checked, and a refused peer gets no request."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
import redis.asyncio as aioredis
import urllib3
from minio import Minio

from trawl.dev.postgres_server import PostgresServer
from trawl.dev.s3_server import S3Server
from trawl.egress import sinkaddr
from trawl.sinks.base import Record, SinkError, record_key
from trawl.sinks.postgres import PgTarget, PostgresSink, ensure_table
from trawl.sinks.s3 import S3Sink, S3Target, check_bucket


def _rec(job: str, url: str) -> Record:
    return Record(job, url, {"key": record_key(job, url), "job": job, "url": url})


async def test_a_postgres_host_name_is_pinned_to_its_checked_addresses(pg_server: PostgresServer) -> None:
    table = "t_" + uuid.uuid4().hex[:10]
    target = PgTarget(
        host="localhost",  # a name: resolved, checked, and connected to by address (libpq hostaddr)
        port=pg_server.port,
        database=pg_server.database,
        user=pg_server.user,
        password=pg_server.password,
        table=table,
        ssl_mode="disable",
        connect_timeout=5,
    )
    await ensure_table(target)
    sink = PostgresSink(target)
    try:
        assert await sink.write("j", [_rec("j", "http://a.test/1")]) == 1
    finally:
        await sink.close()


def _block_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loopback stands in for the metadata service: no test may connect to a real link-local address."""
    real = sinkaddr.sink_block_reason

    def reason(address: str) -> str | None:
        if address.startswith("127.") or address == "::1":
            return f"{address} is in 127.0.0.0/8, link-local (cloud metadata), never a sink (test)"
        return real(address)

    monkeypatch.setattr(sinkaddr, "sink_block_reason", reason)


async def test_postgres_refuses_a_peer_the_check_refuses(
    pg_server: PostgresServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    _block_loopback(monkeypatch)
    target = PgTarget(
        host="localhost",
        port=pg_server.port,
        database=pg_server.database,
        user=pg_server.user,
        password=pg_server.password,
        table="t_never",
        ssl_mode="disable",
        connect_timeout=5,
    )
    sink = PostgresSink(target)
    with pytest.raises(SinkError, match=r"unavailable: refused: localhost resolves to 127\.0\.0\.1 is in"):
        await sink.write("j", [_rec("j", "http://a.test/1")])


def _s3_target(s3: S3Server, bucket: str) -> S3Target:
    return S3Target(
        bucket=bucket,
        prefix="crawls/",
        endpoint=s3.endpoint,
        region=s3.region,
        path_style=True,
        access_key=s3.access_key,
        secret_key=s3.secret_key,
    )


async def test_s3_connections_check_their_peer_before_any_request(
    s3_server: S3Server, redis_client: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = "b-" + uuid.uuid4().hex[:10]
    Minio(f"127.0.0.1:{s3_server.port}", s3_server.access_key, s3_server.secret_key, secure=False).make_bucket(bucket)
    target = _s3_target(s3_server, bucket)
    check_bucket(target)  # allowed: loopback is fine for a sink

    _block_loopback(monkeypatch)
    # urllib3 reports the refused connection once its (bounded) retries are spent.
    with pytest.raises(urllib3.exceptions.MaxRetryError, match=r"refused: 127\.0\.0\.1 is in 127\.0\.0\.0/8"):
        check_bucket(target)

    def key(job: str) -> Any:
        return f"trawl:{{t}}:dedupe:{job}"

    sink = S3Sink(redis_client, key, target)
    try:
        with pytest.raises(SinkError, match=r"refused: 127\.0\.0\.1 is in 127\.0\.0\.0/8"):
            await sink.write("j", [_rec("j", "http://a.test/1")])
    finally:
        await sink.close()
    # Nothing reached the server: the bucket holds no object.
    mc = Minio(f"127.0.0.1:{s3_server.port}", s3_server.access_key, s3_server.secret_key, secure=False)
    assert list(mc.list_objects(bucket, recursive=True)) == []
