"""What an S3 sink's failure says and leaves behind, against an endpoint the job's author controls: the S3
error code and HTTP status, never the body it answered (issue 32: S3 errors' bodies were copied into the
job's status, an oracle for whatever answers at an address), and a check that gives up leaves nothing
running."""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
import redis.asyncio as aioredis

from listeners import ConnectionRecorder
from trawl.api.common import SecretKeyRef
from trawl.api.scrapejob import ScrapeJobSpec
from trawl.egress.addresses import parse_networks
from trawl.operator.job.sinkcheck import CHECK_TIMEOUT, finish_sink, sink_problem
from trawl.sinks.base import Record, SinkError, record_key
from trawl.sinks.s3 import S3Sink, S3Target
from waits import wait_for

LOOPBACK = parse_networks(["127.0.0.0/8"])
SECRET = "internal-db.cluster.local:5432 says hello"  # what some service behind the endpoint answered


class _Talkative(BaseHTTPRequestHandler):
    """An S3 endpoint that refuses a PUT with an S3 error whose message is the service's own text, and
    answers a listing with an HTML page (not S3 at all)."""

    def _send(self, status: int, content_type: str, body: str) -> None:
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_PUT(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        xml = f"<Error><Code>AccessDenied</Code><Message>{SECRET}</Message><Resource>/b</Resource></Error>"
        self._send(403, "application/xml", xml)

    def do_GET(self) -> None:
        self._send(400, "text/html", f"<html><body>{SECRET}</body></html>")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def talkative() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Talkative)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _spec(endpoint: str) -> ScrapeJobSpec:
    s3 = {
        "bucket": "bucket",
        "endpoint": endpoint,
        "pathStyle": True,
        "accessKeyIdSecretRef": {"name": "s3", "key": "id"},
        "secretAccessKeySecretRef": {"name": "s3", "key": "secret"},
    }
    return ScrapeJobSpec.model_validate({"pool": "p", "urls": ["http://s.test/"], "output": {"sink": "S3", "s3": s3}})


async def _keys(namespace: str, ref: SecretKeyRef) -> str:
    return {"id": "AKIAPLATFORM", "secret": "platform-secret"}[ref.key]


async def test_s3_errors_are_summarised_without_the_answers_body(talkative: str, redis_client: aioredis.Redis) -> None:
    target = S3Target(
        bucket="bucket",
        prefix="crawls/",
        endpoint=talkative,
        region="us-east-1",
        path_style=True,
        access_key="a",
        secret_key="s",
        allowed=LOOPBACK,
    )
    sink = S3Sink(redis_client, lambda job: f"trawl:{{t}}:dedupe:{job}", target)
    record = Record("j", "http://s.test/1", {"key": record_key("j", "http://s.test/1"), "url": "http://s.test/1"})
    try:
        with pytest.raises(SinkError) as info:
            await sink.write("j", [record])
    finally:
        await sink.close()
    assert str(info.value) == f"s3 write to {target.describe('j')} failed: S3 AccessDenied (HTTP 403)"

    closing = await finish_sink("ns", "books", "j", _spec(talkative), {"phase": "Succeeded"}, _keys, allowed=LOOPBACK)
    assert closing == {"manifestError": "not an S3 answer (HTTP 400)"}
    assert SECRET not in str(info.value) + str(closing)


async def test_an_s3_check_that_gets_no_answer_ends_and_leaves_no_connection() -> None:
    """Issue 32: a sink check kept running in a thread after the operator gave up on it (and retried,
    connecting again). Now one request, bounded by its own timeouts below the operator's, and done."""
    with ConnectionRecorder(host="127.0.0.1") as black_hole:
        started = time.monotonic()
        problem = await sink_problem("ns", _spec(f"http://{black_hole.address}"), _keys, allowed=LOOPBACK)
        took = time.monotonic() - started
        assert problem is not None and problem.reason == "SinkUnavailable"
        assert "timed out" in problem.message, problem.message
        assert took < CHECK_TIMEOUT - 2, took  # the client's own timeout ended it, not the operator's
        assert wait_for("the check's connection closed", black_hole.all_closed, timeout=5)
        assert wait_for("no thread still in the S3 client", lambda: not _threads_in_the_s3_client(), timeout=5)
        assert black_hole.count() == 1  # no retry


def _threads_in_the_s3_client() -> list[str]:
    """Threads whose stack is inside minio or urllib3 right now."""
    frames = sys._current_frames()
    return [
        thread.name
        for thread in threading.enumerate()
        if thread.ident in frames
        and any(
            "/minio/" in f.filename or "/urllib3/" in f.filename for f in traceback.extract_stack(frames[thread.ident])
        )
    ]
