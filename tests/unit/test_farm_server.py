"""bench/farm_server.py: the many-hosts farm's kernel timestamps, clocks and minimal HTTP/1.1."""

from __future__ import annotations

import socket

import pytest

from farm_server import (
    SCM_TIMESTAMPNS,
    TIMESPEC,
    BadRequest,
    Reply,
    kernel_time_ns,
    parse_request,
    realtime_to_monotonic,
    render,
)


def test_the_kernel_timestamp_is_read_from_its_control_message() -> None:
    stamp = (socket.SOL_SOCKET, SCM_TIMESTAMPNS, TIMESPEC.pack(1_795_000_000, 123_456_789))
    assert kernel_time_ns([stamp]) == 1_795_000_000_123_456_789
    other = (socket.IPPROTO_IP, 8, b"\x00" * 16)  # not a timestamp
    assert kernel_time_ns([other, stamp]) == 1_795_000_000_123_456_789
    assert kernel_time_ns([other]) is None
    assert kernel_time_ns([]) is None
    assert kernel_time_ns([(socket.SOL_SOCKET, SCM_TIMESTAMPNS, b"\x00" * 8)]) is None  # truncated


def test_a_realtime_stamp_lands_on_the_monotonic_clock_by_the_clocks_offset() -> None:
    offset = 1_795_000_000_000_000_000 - 42_000_000_000_000  # realtime - monotonic, read together
    assert realtime_to_monotonic(1_795_000_000_250_000_000, offset) == pytest.approx(42_000.25, abs=1e-9)


def test_a_request_is_parsed_once_complete_and_its_body_skipped() -> None:
    raw = b"GET /p/7?x=1 HTTP/1.1\r\nHost: 127.1.0.1:80\r\nUser-Agent: t\r\n\r\n"
    assert parse_request(raw[:-1]) == (None, 0)
    req, used = parse_request(raw + b"GET /p/8 HTTP/1.1\r\n")
    assert req is not None and used == len(raw)
    assert (req.method, req.path, req.headers["host"], req.keep_alive) == ("GET", "/p/7", "127.1.0.1:80", True)
    body = b"POST /x HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n\r\nabc"
    assert parse_request(body[:-1]) == (None, 0)
    assert parse_request(body)[1] == len(body)


def test_keep_alive_follows_the_version_and_the_connection_header() -> None:
    def alive(head: bytes) -> bool:
        req, _ = parse_request(head + b"\r\n")
        assert req is not None
        return req.keep_alive

    assert alive(b"GET / HTTP/1.1\r\nHost: h\r\n")
    assert not alive(b"GET / HTTP/1.1\r\nHost: h\r\nConnection: close\r\n")
    assert not alive(b"GET / HTTP/1.0\r\n")
    assert alive(b"GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n")


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", 400),  # no Host
        (b"GET /\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nHost h\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
        (b"GET / HTTP/1.1\r\nHost: h\r\nContent-Length: x\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nX: " + b"a" * 20000, 431),
    ],
)
def test_what_the_server_does_not_take_is_refused(raw: bytes, status: int) -> None:
    with pytest.raises(BadRequest) as e:
        parse_request(raw)
    assert e.value.status == status


def test_a_reply_carries_its_length_and_says_when_the_connection_closes() -> None:
    get, _ = parse_request(b"GET / HTTP/1.1\r\nHost: h\r\n\r\n")
    head, _ = parse_request(b"HEAD / HTTP/1.1\r\nHost: h\r\n\r\n")
    old, _ = parse_request(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
    reply = Reply(200, b"hello", "text/html")
    out = render(reply, get, True)
    assert out.startswith(b"HTTP/1.1 200 OK\r\n") and out.endswith(b"\r\n\r\nhello")
    assert b"Content-Length: 5\r\n" in out and b"Connection" not in out
    assert render(reply, head, True).endswith(b"\r\n\r\n")  # the length of the GET, no body
    assert b"Connection: keep-alive\r\n" in render(reply, old, True)
    assert b"Connection: close\r\n" in render(reply, get, False)
