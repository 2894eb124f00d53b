"""bench/farm_server.py on loopback: the many-hosts farm logs a request at the time the kernel received it,
even when the farm's own loop was blocked then (as under load), and serves HTTP/1.1 keep-alive to a real
client the way the bench's crawlers use it."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import aiohttp

from farm_server import Farm, StampedServer
from host_farm import address, handler_clock, violations

FAST, HARD = 0, 3  # host indices of each kind (host_farm.kind_of): 2/s and 0.5/s
SPACING = 0.6  # seconds between a crawler's two requests to a fast host (its limit: 0.5)


@contextmanager
def farm_running() -> Iterator[tuple[Farm, asyncio.AbstractEventLoop, int]]:
    """The farm on its own event loop in a thread (so that the test can block that loop) on a free port."""
    loop = asyncio.new_event_loop()
    farm = Farm()
    server = StampedServer(farm.handle)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    try:
        port = asyncio.run_coroutine_threadsafe(server.start("0.0.0.0", 0), loop).result(30)
        yield farm, loop, port
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def request(path: str, host: str, extra: str = "") -> bytes:
    return f"GET {path} HTTP/1.1\r\nHost: {host}\r\n{extra}\r\n".encode()


def read_reply(conn: socket.socket, buf: bytearray) -> tuple[int, dict[str, str], bytes]:
    """One reply from ``conn`` (``buf``: what was read past the previous one)."""
    while b"\r\n\r\n" not in buf:
        chunk = conn.recv(65536)
        assert chunk, f"connection closed mid-reply: {bytes(buf)!r}"
        buf += chunk
    end = buf.index(b"\r\n\r\n")
    lines = buf[:end].decode("latin-1").split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:])}
    total = end + 4 + int(headers["content-length"])
    while len(buf) < total:
        chunk = conn.recv(65536)
        assert chunk
        buf += chunk
    body = bytes(buf[end + 4 : total])
    del buf[:total]
    return int(lines[0].split(" ")[1]), headers, body


def test_a_request_handled_late_is_logged_when_the_kernel_received_it() -> None:
    with farm_running() as (farm, loop, port):
        host = address(FAST)
        a = socket.create_connection((host, port), timeout=30)
        b = socket.create_connection((host, port), timeout=30)
        blocked, release = threading.Event(), threading.Event()

        def stall() -> None:  # the farm's loop blocked, as by the crawler and Redis on a busy machine
            blocked.set()
            release.wait(30)

        loop.call_soon_threadsafe(stall)
        assert blocked.wait(30)
        try:
            sent_a = time.monotonic()
            a.sendall(request("/p/1", host))
            sent_a_end = time.monotonic()
            time.sleep(SPACING)  # the crawler's spacing, while the farm stays stalled: not a wait for a result
            sent_b = time.monotonic()
            b.sendall(request("/p/2", host))
            sent_b_end = time.monotonic()
        finally:
            release.set()
        assert read_reply(a, bytearray())[0] == 200
        assert read_reply(b, bytearray())[0] == 200
        a.close()
        b.close()
        first, second = sorted(farm.log[FAST])
        # Logged when each left the client (the kernel stamps it within the send on loopback), 1 ms of slack
        # for the realtime-to-monotonic conversion; the handler's own clock read the first one after the stall.
        assert sent_a - 0.001 <= first.at <= sent_a_end + 0.001
        assert sent_b - 0.001 <= second.at <= sent_b_end + 0.001
        assert first.handled >= sent_b_end and first.handled - first.at >= SPACING
        assert farm.unstamped == 0
        # Spaced 0.6 s by the client: no violation; on the handler's clock (the farm's log before kernel
        # timestamps) the two came nearly at once, a rate violation the farm's stall made.
        assert violations(farm.log) == []
        assert [(v.host, v.what) for v in violations(handler_clock(farm.log))] == [(FAST, "rate")]


def test_pipelined_requests_are_answered_in_order_and_connection_close_is_honoured() -> None:
    with farm_running() as (farm, _loop, port):
        host = address(FAST)
        conn = socket.create_connection((host, port), timeout=30)
        conn.sendall(
            request("/p/1", host) + request("/robots.txt", host) + request("/p/2", host, "Connection: close\r\n")
        )
        buf = bytearray()
        first, robots, last = read_reply(conn, buf), read_reply(conn, buf), read_reply(conn, buf)
        assert (first[0], robots[0], last[0]) == (200, 404, 200)
        assert b"page 1 of host 0" in first[2] and b"page 2 of host 0" in last[2]
        assert last[1]["connection"] == "close"
        assert conn.recv(1) == b""  # closed by the farm
        conn.close()
        assert [e.in_flight for e in farm.log[FAST]] == [1, 1]


async def test_a_keep_alive_client_gets_the_pages_on_one_connection_and_the_controller_its_log() -> None:
    with farm_running() as (farm, _loop, port):
        conn = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=conn) as http:
            for n in range(3):
                async with http.get(f"http://{address(HARD)}:{port}/p/{n}") as r:
                    assert r.status == 200 and r.content_type == "text/html"
                    assert f"<h1>page {n} of host {HARD}</h1>" in await r.text()
            async with http.head(f"http://{address(HARD)}:{port}/p/9") as r:
                assert r.status == 200 and int(r.headers["Content-Length"]) > 0
            async with http.get(f"http://127.0.0.1:{port}/p/1") as r:
                assert r.status == 404  # not a farm host
            async with http.get(f"http://127.0.0.1:{port}/__/log") as r:
                log = json.loads(await r.text())
        assert log["connections"] == 1 and log["unstamped"] == 0
        assert [n for _, n, _ in log["hosts"][str(HARD)]] == [1, 1, 1, 1]
        assert farm.log == {}  # the controller's read clears it
