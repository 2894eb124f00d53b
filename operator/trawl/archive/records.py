"""One fetched response as a WARC/1.1 request record and response record (pure: bytes in, bytes out).

The worker keeps the body it decoded (gzip/br undone, at most the job's maxBytes), so the response record
carries that body with the ``Content-Encoding`` and ``Transfer-Encoding`` headers renamed (``X-Trawl-Original-``)
and ``Content-Length`` set to what is stored: a WARC reader then gets exactly the bytes the extraction saw.
A body over ``max_payload`` bytes is cut to it and the record says ``WARC-Truncated: length`` (WARC 1.1,
section 5.13), so one hostile page cannot make a record of hundreds of MB.

Trawl's own fields ride in ``Trawl-Requested-URI`` (the task's URL when it redirected) and ``Trawl-Depth``:
WARC allows named fields of its own beside the ``WARC-`` ones, and re-extraction needs both to rebuild the
record a crawl wrote.
"""

from __future__ import annotations

import io
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

from warcio.statusandheaders import StatusAndHeaders
from warcio.warcwriter import WARCWriter

from .capture import Capture

DEFAULT_MAX_PAYLOAD = 8 * 1024 * 1024  # bytes of a response body kept in one record
REWRITTEN = ("content-encoding", "transfer-encoding")  # the stored body is decoded and whole
DROPPED = ("content-length",)  # replaced by the stored body's length
REQUESTED_URI = "Trawl-Requested-URI"
DEPTH = "Trawl-Depth"


@dataclass(frozen=True, slots=True)
class Encoded:
    data: bytes  # two gzip members: request, response
    truncated: bool


def warc_date(ts: float) -> str:
    """WARC 1.1 date with microseconds (``2026-11-28T09:52:20.123456Z``)."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def http_status_line(status: int) -> str:
    from http import HTTPStatus

    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = "Unknown"
    return f"{status} {phrase}"


def response_headers(headers: Mapping[str, str], length: int) -> list[tuple[str, str]]:
    """The headers stored with a decoded body: encodings renamed, the stored length."""
    out: list[tuple[str, str]] = []
    for name, value in headers.items():
        low = name.lower()
        if low in DROPPED:
            continue
        out.append((f"X-Trawl-Original-{name}" if low in REWRITTEN else name, value))
    out.append(("Content-Length", str(length)))
    return out


def request_line(url: str) -> tuple[str, str]:
    """``GET <path?query> HTTP/1.1`` and the Host of ``url``."""
    parts = urlsplit(url)
    target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    return f"GET {target} HTTP/1.1", parts.netloc


def encode(capture: Capture, *, max_payload: int = DEFAULT_MAX_PAYLOAD) -> Encoded:
    """The request and response records of ``capture`` as gzip members (each record its own member, as
    indexers and replay tools expect), the body cut to ``max_payload`` bytes."""
    body = capture.body
    truncated = len(body) > max_payload
    if truncated:
        body = body[:max_payload]
    buf = io.BytesIO()
    writer = WARCWriter(buf, gzip=True, warc_version="1.1")
    date = warc_date(capture.fetched_at)
    extra = {DEPTH: str(capture.depth)}
    if capture.url != capture.final_url:
        extra[REQUESTED_URI] = capture.url
    response_fields = {"WARC-Date": date, **extra}
    if truncated:
        response_fields["WARC-Truncated"] = "length"
    http = StatusAndHeaders(
        http_status_line(capture.status), response_headers(capture.headers, len(body)), protocol="HTTP/1.1"
    )
    response = writer.create_warc_record(
        capture.final_url,
        "response",
        payload=io.BytesIO(body),
        length=len(body),
        http_headers=http,
        warc_headers_dict=response_fields,
    )
    line, host = request_line(capture.final_url)
    method, target, proto = line.split(" ", 2)
    req_headers = [("Host", host)] + ([("User-Agent", capture.user_agent)] if capture.user_agent else [])
    request = writer.create_warc_record(
        capture.final_url,
        "request",
        http_headers=StatusAndHeaders(f"{method} {target}", req_headers, protocol=proto, is_http_request=True),
        warc_headers_dict={
            "WARC-Date": date,
            "WARC-Concurrent-To": response.rec_headers.get_header("WARC-Record-ID"),
        },
    )
    writer.write_record(request)
    writer.write_record(response)
    return Encoded(buf.getvalue(), truncated)
