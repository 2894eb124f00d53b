#!/usr/bin/env python3
"""A generated site of N product pages for a crawl of up to millions of pages (bench/frontier.py --crawl-pages).

No file is written: each page is made from its path when asked. ``/p/<i>`` (0 <= i < N) is a small product
page (~1.3 KB: a name, a price, a SKU, a stock line; the fields the crawl job extracts) with links:

* forward: ``/p/2i+1`` .. ``/p/2i+4`` (those below N). Every page j >= 1 is linked from its tree parent
  (j-1)//2 and from one more page beside it, so the whole site is reachable from ``/p/0``, a page is never
  reached only through one other page (a page a Bloom filter skips does not cut a subtree off), and the
  depth of page j is at most log2(j+1) (20 at 1 M: under crawl.maxDepth's 100);
* back: ``/p/i-1``, ``/p/i//2`` and three pseudo-random earlier pages: links to pages the crawl has most
  likely seen already, as a real crawl sees most links many times;
* navigation: ``/p/0`` .. ``/p/2`` on every page, as a site's header links.

So a page has about 10 links (2 forward on average: the first half of the site links 4 ahead, the second half
none; 5 back; 3 navigation) and a crawl of N pages meets ~10 N links for N new URLs: the dedupe (the worker's
memory of links it submitted, then the queue's set or filter) rejects ~9 of 10.

The server is a minimal HTTP/1.1 keep-alive responder on asyncio's protocol API (uvloop when installed), GET
only, in its own process (``python bench/crawl_site.py --pages N --port P``) so that its CPU time is its own.
It counts the pages asked, the distinct ones and the repeats (``/__/stats``, JSON): the crawl's "pages
crawled" checked at the site. Pure functions above the server, tested in tests/unit/test_crawl_site.py.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from dataclasses import dataclass, field
from typing import cast

FORWARD = 4  # /p/2i+1 .. /p/2i+FORWARD
RANDOM_BACK = 3  # pseudo-random earlier pages per page
NAV = (0, 1, 2)  # linked from every page
MULT, STEP = 2654435761, 40503  # Knuth's multiplicative hash: earlier pages spread over the whole range
FILLER = "A sturdy, well-made product for everyday use. " * 12  # ~550 bytes of description
MAX_HEAD = 16384


def links_of(i: int, n: int) -> list[int]:
    """The page indices page i of an n-page site links to (in page order; repeats possible, as on real pages)."""
    forward = [j for j in range(2 * i + 1, 2 * i + 1 + FORWARD) if j < n]
    back = [] if i == 0 else [i - 1, i // 2, *((i * MULT + k * STEP) % i for k in range(RANDOM_BACK))]
    return forward + back + [j for j in NAV if j < n]


def fields_of(i: int) -> dict[str, str]:
    """The product fields of page i, as the job extracts them (text, whitespace collapsed)."""
    return {
        "name": f"Product {i} deluxe edition",
        "price": f"${(i * 37) % 10000 / 100 + 1:.2f}",
        "sku": f"SKU-{i:08d}",
        "stock": f"In stock ({i % 50} available)",
    }


FIELDS = {"name": "div.product h1", "price": "p.price", "sku": "#sku", "stock": "p.stock"}  # name -> selector


def page_html(i: int, n: int) -> bytes:
    f = fields_of(i)
    links = "".join(f'<li><a href="/p/{j}">Product {j}</a></li>' for j in links_of(i, n))
    return (
        f"<!doctype html><html><head><title>Product {i}</title></head><body>"
        f'<nav><a href="/p/0">Home</a></nav><div class="product"><h1>{f["name"]}</h1>'
        f'<p class="price">{f["price"]}</p><span id="sku">{f["sku"]}</span><p class="stock">{f["stock"]}</p>'
        f"<p>{FILLER}</p></div><ul>{links}</ul></body></html>"
    ).encode()


def page_index(path: str, n: int) -> int | None:
    """i for ``/p/<i>`` with 0 <= i < n (digits only, no leading zero), else None."""
    if not path.startswith("/p/"):
        return None
    digits = path[3:]
    if not digits.isascii() or not digits.isdigit() or (len(digits) > 1 and digits[0] == "0"):
        return None
    i = int(digits)
    return i if i < n else None


def response(status: int, body: bytes, content_type: str = "text/html; charset=utf-8", close: bool = False) -> bytes:
    reason = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}[status]
    head = f"HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
    return (head + ("Connection: close\r\n" if close else "") + "\r\n").encode() + body


@dataclass
class Site:
    """The pages of an n-page site and what was asked of it."""

    n: int
    seen: bytearray = field(init=False)
    requests: int = 0  # page requests (/p/<i> below n)
    distinct: int = 0
    repeats: int = 0  # pages asked again
    not_found: int = 0

    def __post_init__(self) -> None:
        self.seen = bytearray(self.n)

    def answer(self, method: str, target: str, close: bool) -> bytes:
        if method != "GET":
            return response(405, b"", close=close)
        path = target.split("?", 1)[0]
        if path == "/__/stats":
            return response(200, json.dumps(self.stats()).encode(), "application/json", close)
        i = page_index(path, self.n)
        if i is None:
            self.not_found += 1
            return response(404, b"not found", "text/plain", close)
        self.requests += 1
        if self.seen[i]:
            self.repeats += 1
        else:
            self.seen[i] = 1
            self.distinct += 1
        return response(200, page_html(i, self.n), close=close)

    def stats(self) -> dict[str, int]:
        return {"pages": self.n, "requests": self.requests, "distinct": self.distinct, "repeats": self.repeats,
                "not_found": self.not_found}  # fmt: skip


def split_request(buf: bytes) -> tuple[tuple[str, str, bool] | None, int]:
    """(method, target, close) of the first request head in ``buf`` and the bytes it takes, or (None, 0) while
    it is incomplete. Requests with a body are refused (ValueError): a crawler sends GET only."""
    end = buf.find(b"\r\n\r\n")
    if end < 0:
        if len(buf) > MAX_HEAD:
            raise ValueError("request head too large")
        return None, 0
    lines = buf[:end].decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise ValueError(f"bad request line {lines[0][:80]!r}")
    headers = {name.strip().lower(): value.strip().lower() for name, _, value in (h.partition(":") for h in lines[1:])}
    if headers.get("content-length", "0") != "0" or "transfer-encoding" in headers:
        raise ValueError("a request body")
    tokens = {t.strip() for t in headers.get("connection", "").split(",")}
    close = "close" in tokens if parts[2] == "HTTP/1.1" else "keep-alive" not in tokens
    return (parts[0], parts[1], close), end + 4


class SiteProtocol(asyncio.Protocol):
    def __init__(self, site: Site) -> None:
        self.site = site
        self.buf = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass of asyncio's

    def data_received(self, data: bytes) -> None:
        assert self.transport is not None
        self.buf += data
        while self.buf:
            try:
                request, used = split_request(self.buf)
            except ValueError as e:
                self.transport.write(response(400, str(e).encode(), "text/plain", close=True))
                self.transport.close()
                return
            if request is None:
                return
            self.buf = self.buf[used:]
            method, target, close = request
            self.transport.write(self.site.answer(method, target, close))
            if close:
                self.transport.close()
                return


async def serve(n: int, port: int) -> None:
    site = Site(n)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: SiteProtocol(site), "127.0.0.1", port, backlog=1024)
    print(f"crawl_site: {n} pages on 127.0.0.1:{port}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--pages", type=int, required=True)
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args()
    try:
        import uvloop
    except ImportError:
        asyncio.run(serve(args.pages, args.port))
    else:
        uvloop.run(serve(args.pages, args.port))
    sys.exit(0)


if __name__ == "__main__":
    main()
