"""Sinks connect under the one address rule (trawl.egress.sinkaddr) against real servers: names are pinned to
the addresses checked, an address outside the pool's allowedCidrs is never connected to (a listening socket
records every connection), and S3 follows no redirect."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import redis.asyncio as aioredis
import urllib3
from minio import Minio

from listeners import ConnectionRecorder
from trawl.dev.postgres_server import PostgresServer
from trawl.dev.s3_server import S3Server
from trawl.egress.addresses import parse_networks
from trawl.sinks import s3 as s3sink
from trawl.sinks.base import Record, SinkError, record_key
from trawl.sinks.postgres import PgTarget, PostgresSink, ensure_table
from trawl.sinks.s3 import S3Sink, S3Target, check_bucket

LOOPBACK = parse_networks(["127.0.0.0/8"])
ONLY_127_0_0_1 = parse_networks(["127.0.0.1/32"])  # 127.0.0.2 stands for a protected address


def _rec(job: str, url: str) -> Record:
    return Record(job, url, {"key": record_key(job, url), "job": job, "url": url})


def _pg(pg: PostgresServer, host: str, port: int, allowed: Any, table: str = "t_never") -> PgTarget:
    return PgTarget(
        host=host,
        port=port,
        database=pg.database,
        user=pg.user,
        password=pg.password,
        table=table,
        ssl_mode="disable",
        connect_timeout=5,
        allowed=allowed,
    )


async def test_a_postgres_host_name_is_pinned_to_its_checked_addresses(pg_server: PostgresServer) -> None:
    # a name: resolved, checked against the pool's allowedCidrs, and connected to by address (libpq hostaddr)
    target = _pg(pg_server, "localhost", pg_server.port, LOOPBACK, table="t_" + uuid.uuid4().hex[:10])
    await ensure_table(target)
    sink = PostgresSink(target)
    try:
        assert await sink.write("j", [_rec("j", "http://a.test/1")]) == 1
    finally:
        await sink.close()


async def test_postgres_never_connects_outside_the_allowed_cidrs(pg_server: PostgresServer) -> None:
    """Issue 32: the PostgreSQL sink sent its start-up packet (and would have sent the pool's password) to
    any private or loopback address a job named."""
    with ConnectionRecorder() as protected:
        sink = PostgresSink(_pg(pg_server, "127.0.0.2", protected.port, ONLY_127_0_0_1))
        with pytest.raises(SinkError, match=r"unavailable: refused: 127\.0\.0\.2 is in blocked network 127\.0\.0\.0/8"):
            await sink.write("j", [_rec("j", "http://a.test/1")])
        with pytest.raises(OSError, match=r"refused: localhost resolves to 127\.0\.0\.1 is in blocked network"):
            await ensure_table(_pg(pg_server, "localhost", pg_server.port, ()))  # loopback: not without allowedCidrs
        assert protected.count() == 0


def _s3_target(endpoint: str, s3: S3Server, bucket: str, allowed: Any) -> S3Target:
    return S3Target(
        bucket=bucket,
        prefix="crawls/",
        endpoint=endpoint,
        region=s3.region,
        path_style=True,
        access_key=s3.access_key,
        secret_key=s3.secret_key,
        allowed=allowed,
    )


async def test_s3_never_connects_outside_the_allowed_cidrs(s3_server: S3Server, redis_client: aioredis.Redis) -> None:
    """Issue 32: the S3 sink sent HEAD, PUT and list requests, signed with the pool's access key, to any
    private or loopback address a job named. Now a refused address gets no connection at all."""
    bucket = "b-" + uuid.uuid4().hex[:10]
    Minio(f"127.0.0.1:{s3_server.port}", s3_server.access_key, s3_server.secret_key, secure=False).make_bucket(bucket)
    check_bucket(_s3_target(s3_server.endpoint, s3_server, bucket, LOOPBACK))  # allowed: the pool lists loopback

    with ConnectionRecorder() as protected:
        target = _s3_target(f"http://{protected.address}", s3_server, bucket, ONLY_127_0_0_1)
        with pytest.raises(urllib3.exceptions.MaxRetryError, match=r"refused: 127\.0\.0\.2 is in blocked network"):
            check_bucket(target)
        sink = S3Sink(redis_client, lambda job: f"trawl:{{t}}:dedupe:{job}", target)
        try:
            with pytest.raises(SinkError, match=r"failed: refused: 127\.0\.0\.2 is in blocked network 127\.0\.0\.0/8$"):
                await sink.write("j", [_rec("j", "http://a.test/1")])
        finally:
            await sink.close()
        with pytest.raises(urllib3.exceptions.MaxRetryError, match=r"refused"):
            s3sink.write_manifest(target, "j", {})
        assert protected.count() == 0
    with pytest.raises(urllib3.exceptions.MaxRetryError, match=r"refused: localhost resolves to 127\.0\.0\.1"):
        check_bucket(_s3_target(f"http://localhost:{s3_server.port}", s3_server, bucket, ()))


class _Redirect(BaseHTTPRequestHandler):
    location = ""

    def _answer(self) -> None:
        self.send_response(307)
        self.send_header("Location", self.location + self.path)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET = do_PUT = _answer

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def redirecting_store() -> Iterator[tuple[str, ConnectionRecorder]]:
    """An endpoint on 127.0.0.1 answering every request with a 307 to another allowed address, which records
    what reaches it."""
    with ConnectionRecorder(host="127.0.0.1") as elsewhere:
        handler = type("Handler", (_Redirect,), {"location": f"http://{elsewhere.address}"})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        import threading

        threading.Thread(target=server.serve_forever, daemon=True).start()
        try:
            yield f"http://127.0.0.1:{server.server_address[1]}", elsewhere
        finally:
            server.shutdown()
            server.server_close()


def test_s3_follows_no_redirect(s3_server: S3Server, redirecting_store: tuple[str, ConnectionRecorder]) -> None:
    """A redirect would send the signed request wherever the endpoint says: S3 never needs one to reach the
    bucket it was pointed at, so none is followed (even to an address the rule allows)."""
    endpoint, elsewhere = redirecting_store
    target = _s3_target(endpoint, s3_server, "bucket", LOOPBACK)
    with pytest.raises(Exception) as info:
        s3sink.write_manifest(target, "j", {})
    assert "307" in s3sink.describe_error(info.value)
    assert elsewhere.count() == 0
