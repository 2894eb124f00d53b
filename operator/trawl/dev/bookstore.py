"""A generated bookstore site for tests, benchmarks and the `trawl dev up` demo, plus hostile endpoints.

Site: ``/`` (home) → ``/category/<slug>/page-<n>.html`` (paginated listings) → ``/product/<id>.html``
(product pages with stable fields). Everything is derived from a deterministic catalogue
(:func:`catalog`), so tests know exactly which records a crawl must produce (:meth:`Bookstore.expected`).

Hostile endpoints (``/hostile/...``): redirects to loopback, metadata, IPv4-mapped IPv6, private and
``localhost`` targets; a gzip and a brotli decompression bomb; an oversized body; a one-byte-per-second
drip; 429 with ``Retry-After: 2`` (``times`` times per ``id``, default once; ``after`` sets the
value); 404; 503 that recovers after ``fail`` hits (per ``id``); ``/hostile/deep?n=`` (``n`` nested
``div``s, 200,000 by default: a parser trap); ``/hostile/charset/<kind>`` (Shift_JIS and ISO-8859-1
pages whose charset only the document or only the header declares, :data:`CHARSET_PAGES`);
``/hostile/headers`` (echoes the request headers as JSON: what reached this origin);
``/private/`` which robots.txt disallows; and sitemaps, good and hostile (:mod:`trawl.dev.sitemapsite`).
``?delay=S`` on any page answers ``S`` seconds later (at
most ``MAX_DELAY_SECONDS``): one slow task among fast ones keeps one worker pod busy. Every request is
written to an access log with its arrival time, so tests can measure the request rate the site saw.

Run it as a process (:class:`Bookstore` starts ``python -m trawl.dev.bookstore`` on a free loopback port
and stops it), or write the same pages as static files for a fast static server
(:func:`write_static_site`, used by ``bench/crawl_throughput.py``).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import html
import json
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from . import procs

if TYPE_CHECKING:
    from aiohttp import web

MAX_DELAY_SECONDS = 120.0  # ?delay= on any page, bounded

CATEGORY_NAMES = [
    "Travel", "Mystery", "Historical Fiction", "Sequential Art", "Classics", "Philosophy", "Romance",
    "Womens Fiction", "Fiction", "Childrens", "Religion", "Nonfiction", "Music", "Default", "Science Fiction",
    "Sports and Games", "Add a comment", "Fantasy", "New Adult", "Young Adult", "Science", "Poetry", "Paranormal",
    "Art", "Psychology", "Autobiography", "Parenting", "Adult Fiction", "Humor", "Horror", "History",
    "Food and Drink", "Christian Fiction", "Business", "Biography", "Thriller", "Contemporary", "Spirituality",
    "Academic", "Self Help",
]  # fmt: skip
_LOREM = (
    "lorem ipsum dolor sit amet consectetur adipiscing elit sed do eiusmod tempor incididunt ut labore et dolore "
    "magna aliqua enim ad minim veniam quis nostrud exercitation ullamco laboris nisi aliquip ex ea commodo "
    "consequat duis aute irure in reprehenderit voluptate velit esse cillum fugiat nulla pariatur excepteur sint "
    "occaecat cupidatat non proident sunt culpa qui officia deserunt mollit anim id est laborum"
)
_WORDS = tuple(_LOREM.split())
RATINGS = ["One", "Two", "Three", "Four", "Five"]
ROBOTS_TXT = "User-agent: *\nDisallow: /private/\n"

# The selectors a job (and the benchmark's peers) use to extract a product record.
PRODUCT_FIELDS = [
    {"name": "name", "selector": "div.product h1"},
    {"name": "price", "selector": "p.price"},
    {"name": "upc", "selector": "#upc"},
    {"name": "stock", "selector": "p.stock"},
    {"name": "category", "selector": "ul.breadcrumb li.category a"},
]
PRODUCT_XPATH_FIELD = {"name": "rating", "selector": "//p[contains(@class, 'rating')]/@data-rating", "kind": "XPath"}


def slugify(name: str) -> str:
    return "-".join(name.lower().split())


@dataclass(frozen=True, slots=True)
class Product:
    id: int
    name: str
    category: str
    price: str
    upc: str
    stock: int
    rating: str

    @property
    def path(self) -> str:
        return f"/product/{self.id}.html"


@dataclass(frozen=True)
class Catalog:
    categories: list[str]
    products: list[Product]
    per_page: int

    def in_category(self, category: str) -> list[Product]:
        return [p for p in self.products if p.category == category]

    def pages(self, category: str) -> int:
        return max(1, -(-len(self.in_category(category)) // self.per_page))


def catalog(categories: int = 4, books_per_category: int = 25, per_page: int = 10) -> Catalog:
    cats = [
        CATEGORY_NAMES[i % len(CATEGORY_NAMES)] + ("" if i < len(CATEGORY_NAMES) else f" {i}")
        for i in range(categories)
    ]
    products: list[Product] = []
    for ci, cat in enumerate(cats):
        for bi in range(books_per_category):
            pid = ci * books_per_category + bi + 1
            digest = hashlib.sha256(f"book-{pid}".encode()).hexdigest()
            words = [_WORDS[int(digest[i : i + 2], 16) % len(_WORDS)] for i in range(0, 8, 2)]
            products.append(
                Product(
                    id=pid,
                    name=" ".join(words).title() + f" {pid}",
                    category=cat,
                    price=f"£{10 + int(digest[8:12], 16) % 9000 / 100:.2f}",
                    upc=digest[12:28],
                    stock=int(digest[28:30], 16) % 25,
                    rating=RATINGS[int(digest[30:32], 16) % 5],
                )
            )
    return Catalog(cats, products, per_page)


def expected_record(p: Product) -> dict[str, str]:
    """The field values a product page yields with :data:`PRODUCT_FIELDS` (and the XPath rating)."""
    return {
        "name": p.name,
        "price": p.price,
        "upc": p.upc,
        "stock": f"In stock ({p.stock} available)",
        "category": p.category,
        "rating": p.rating,
    }


def _filler(seed: int, size: int) -> str:
    if size <= 0:
        return ""
    out: list[str] = []
    n = 0
    i = seed
    while n < size:
        para = " ".join(_WORDS[(i * 7 + j * 13) % len(_WORDS)] for j in range(60))
        out.append(f'<p class="desc">{para}.</p>\n')
        n += len(para) + 20
        i += 1
    return "".join(out)


def _page(title: str, body: str, nav: str) -> str:
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(title)} | Trawl Books</title></head>\n<body>\n"
        f'<header><a href="/">Trawl Books</a></header>\n<nav><ul>{nav}</ul></nav>\n'
        f'<main>\n{body}</main>\n<footer><a href="/">Home</a></footer>\n</body></html>\n'
    )


@dataclass
class Renderer:
    cat: Catalog
    related: int = 4  # links to other products on each product page
    filler_bytes: int = 0  # description text added to each product page
    hostile_links: bool = True  # the home page links /private/ (disallowed by robots.txt)

    def nav(self) -> str:
        return "".join(
            f'<li><a href="/category/{slugify(c)}/page-1.html">{html.escape(c)}</a></li>' for c in self.cat.categories
        )

    def home(self) -> str:
        items = "".join(
            f'<li><a href="/category/{slugify(c)}/page-1.html">{html.escape(c)}</a></li>' for c in self.cat.categories
        )
        extra = '<p><a href="/private/secret.html">Staff only</a></p>' if self.hostile_links else ""
        return _page("Home", f'<h1>All categories</h1><ul class="categories">{items}</ul>{extra}\n', self.nav())

    def listing(self, category: str, page: int) -> str | None:
        products = self.cat.in_category(category)
        pages = self.cat.pages(category)
        if not 1 <= page <= pages:
            return None
        chunk = products[(page - 1) * self.cat.per_page : page * self.cat.per_page]
        items = "".join(
            f'<li class="item"><a href="{p.path}">{html.escape(p.name)}</a> <span>{p.price}</span></li>' for p in chunk
        )
        slug = slugify(category)
        pager = ""
        if page > 1:
            pager += f'<a class="prev" href="/category/{slug}/page-{page - 1}.html">previous</a> '
        if page < pages:
            pager += f'<a class="next" href="/category/{slug}/page-{page + 1}.html">next</a>'
        body = f'<h1>{html.escape(category)}</h1><ol class="items">{items}</ol><div class="pager">{pager}</div>\n'
        return _page(f"{category} - page {page}", body, self.nav())

    def product(self, pid: int) -> str | None:
        if not 1 <= pid <= len(self.cat.products):
            return None
        p = self.cat.products[pid - 1]
        slug = slugify(p.category)
        same = self.cat.in_category(p.category)
        idx = same.index(p)
        related = [same[(idx + k) % len(same)] for k in range(1, self.related + 1) if len(same) > 1]
        rel = "".join(f'<li><a href="{r.path}">{html.escape(r.name)}</a></li>' for r in related)
        body = (
            f'<ul class="breadcrumb"><li><a href="/">Home</a></li>'
            f'<li class="category"><a href="/category/{slug}/page-1.html">{html.escape(p.category)}</a></li>'
            f'<li class="active">{html.escape(p.name)}</li></ul>\n'
            f'<div class="product"><h1>{html.escape(p.name)}</h1>\n'
            f'<p class="price">{p.price}</p>\n'
            f'<p class="stock">In stock ({p.stock} available)</p>\n'
            f'<p class="rating star-{p.rating}" data-rating="{p.rating}">{p.rating} stars</p>\n'
            f'<table id="info"><tr><th>UPC</th><td id="upc">{p.upc}</td></tr></table>\n'
            f'<div class="description">{_filler(pid, self.filler_bytes)}</div></div>\n'
            f'<section class="related"><h2>Related</h2><ul>{rel}</ul></section>\n'
        )
        return _page(p.name, body, self.nav())

    def all_pages(self) -> Iterator[tuple[str, str]]:
        """(path, html) of every page of the site: home, listings, products."""
        yield "/index.html", self.home()
        for c in self.cat.categories:
            for n in range(1, self.cat.pages(c) + 1):
                page = self.listing(c, n)
                assert page is not None
                yield f"/category/{slugify(c)}/page-{n}.html", page
        for p in self.cat.products:
            page = self.product(p.id)
            assert page is not None
            yield p.path, page


def write_static_site(directory: Path, renderer: Renderer) -> int:
    """Write every page (and robots.txt) under ``directory``; returns the number of HTML pages."""
    count = 0
    for path, text in renderer.all_pages():
        target = directory / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
        count += 1
    (directory / "robots.txt").write_text(ROBOTS_TXT)
    return count


# --- the server ------------------------------------------------------------------------------------


def build_app(
    renderer: Renderer,
    access_log: Path | None,
    latency: float = 0.0,
    redirect_port: int = 0,
    robots_txt: str = ROBOTS_TXT,
    robots_fail: int = 0,
) -> object:
    """The site as an aiohttp application: the shop's pages, then the hostile endpoints, every request written
    to ``access_log`` (when given) and answered ``?delay=`` seconds late."""
    from aiohttp import web

    from .sitemapsite import add_sitemaps

    log_file = open(access_log, "a", buffering=1) if access_log else None  # noqa: SIM115 - lives with the app
    hits = _Hits()
    app = web.Application(middlewares=[_log_requests(log_file), _delay_requests()])
    _add_shop(app, renderer, hits, latency=latency, robots_txt=robots_txt, robots_fail=robots_fail)
    _add_hostile(app, hits, redirect_port=redirect_port)
    add_sitemaps(app, renderer)
    app.router.add_get("/_hits", hits.report)
    if log_file is not None:

        async def close_log(_app: object) -> None:
            log_file.close()

        app.on_cleanup.append(close_log)
    return app


class _Hits:
    """Requests counted per endpoint and ``?id=`` (robots.txt, /hostile/429, /hostile/503); ``/_hits`` shows them."""

    def __init__(self) -> None:
        self.counters: dict[str, int] = {}

    def hit(self, request: web.Request, name: str) -> int:
        key = f"{name}:{request.query.get('id', '')}"
        self.counters[key] = self.counters.get(key, 0) + 1
        return self.counters[key]

    async def report(self, request: web.Request) -> web.Response:
        from aiohttp import web

        return web.json_response(self.counters)


def _log_requests(log_file: TextIO | None) -> Any:
    """The access log's middleware: one line per request (arrival time, method, path, status, User-Agent, time
    the answer was ready): arrival and answer bound the time a request was in flight (tests of concurrency
    quotas count the overlaps)."""
    from aiohttp import web

    @web.middleware
    async def log_requests(request: web.Request, handler: object) -> web.StreamResponse:
        arrived = time.time()
        status = 500
        try:
            resp: web.StreamResponse = await handler(request)  # type: ignore[operator]
            status = resp.status
            return resp
        except web.HTTPException as exc:
            status = exc.status
            raise
        finally:
            if log_file is not None:
                ua = request.headers.get("User-Agent", "-").replace(" ", "_")
                log_file.write(f"{arrived:.6f} {request.method} {request.path_qs} {status} {ua} {time.time():.6f}\n")

    return log_requests


def _delay_requests() -> Any:
    """``?delay=S`` on any page: the answer comes ``S`` seconds later (at most ``MAX_DELAY_SECONDS``)."""
    from aiohttp import web

    @web.middleware
    async def delay_requests(request: web.Request, handler: object) -> web.StreamResponse:
        try:
            delay = min(max(float(request.query.get("delay", "0")), 0.0), MAX_DELAY_SECONDS)
        except ValueError:
            delay = 0.0
        if delay:
            await asyncio.sleep(delay)
        resp: web.StreamResponse = await handler(request)  # type: ignore[operator]
        return resp

    return delay_requests


def _html_response(text: str | None) -> web.Response:
    from aiohttp import web

    if text is None:
        raise web.HTTPNotFound(text="not found")
    return web.Response(text=text, content_type="text/html")


def _add_shop(
    app: web.Application, renderer: Renderer, hits: _Hits, *, latency: float, robots_txt: str, robots_fail: int
) -> None:
    """The shop: home, listings and product pages (each ``latency`` seconds late), robots.txt, /private/."""
    from aiohttp import web

    by_slug = {slugify(c): c for c in renderer.cat.categories}

    async def pause() -> None:
        if latency > 0:
            await asyncio.sleep(latency)

    async def home(request: web.Request) -> web.Response:
        await pause()
        return _html_response(renderer.home())

    async def listing(request: web.Request) -> web.Response:
        await pause()
        category = by_slug.get(request.match_info["slug"])
        if category is None:
            raise web.HTTPNotFound()
        return _html_response(renderer.listing(category, int(request.match_info["n"])))

    async def product(request: web.Request) -> web.Response:
        await pause()
        return _html_response(renderer.product(int(request.match_info["id"])))

    async def robots(request: web.Request) -> web.Response:
        if hits.hit(request, "robots") <= robots_fail:  # the first robots_fail requests: a server error
            return web.Response(status=503, text="robots.txt unavailable")
        return web.Response(text=robots_txt, content_type="text/plain")

    async def private(request: web.Request) -> web.Response:
        return _html_response(_page("Secret", "<h1>Staff only</h1>", ""))

    app.router.add_get("/", home)
    app.router.add_get("/index.html", home)
    app.router.add_get("/robots.txt", robots)
    app.router.add_get(r"/category/{slug}/page-{n:\d+}.html", listing)
    app.router.add_get(r"/product/{id:\d+}.html", product)
    app.router.add_get("/private/{name}", private)


def _add_hostile(app: web.Application, hits: _Hits, *, redirect_port: int) -> None:
    """The hostile endpoints (``/hostile/...``, the module's docstring lists them)."""
    app.router.add_get("/hostile/redirect/{kind}", _redirect_handler(redirect_port))
    app.router.add_get("/hostile/bomb/{kind}", _bomb_handler())
    app.router.add_get("/hostile/huge", _huge)
    app.router.add_get("/hostile/drip", _drip)
    app.router.add_get("/hostile/429", _too_many_handler(hits))
    app.router.add_get("/hostile/503", _unavailable_handler(hits))
    app.router.add_get("/hostile/404", _not_found)
    app.router.add_get("/hostile/deep", _deep)
    app.router.add_get("/hostile/charset/{kind}", _charset)
    app.router.add_get("/hostile/headers", _echo_headers)


def _redirect_handler(redirect_port: int) -> Callable[[web.Request], Awaitable[web.Response]]:
    """``/hostile/redirect/<kind>``: 302 to an internal address (or to ``?url=`` for ``to``)."""
    from aiohttp import web

    def port_of(request: web.Request) -> int:
        return redirect_port or (request.url.port or 80)

    targets: dict[str, Callable[[web.Request], str]] = {
        "loopback": lambda r: f"http://127.0.0.1:{port_of(r)}/",
        "metadata": lambda r: "http://169.254.169.254/latest/meta-data/",
        "mapped": lambda r: "http://[::ffff:169.254.169.254]/latest/meta-data/",
        "private": lambda r: "http://10.0.0.1/",
        "localhost": lambda r: f"http://localhost:{port_of(r)}/",
        "localhost-dot": lambda r: f"http://localhost.:{port_of(r)}/",  # the root's dot: the same name
    }

    async def redirect(request: web.Request) -> web.Response:
        kind = request.match_info["kind"]
        if kind == "to":
            location = request.query.get("url", "/")
        elif kind in targets:
            location = targets[kind](request)
        else:
            raise web.HTTPNotFound()
        return web.Response(status=302, headers={"Location": location})

    return redirect


def _bomb_handler() -> Callable[[web.Request], Awaitable[web.Response]]:
    """``/hostile/bomb/<gzip|br>``: 64 MiB of zeros compressed (made once, when the app is built)."""
    from aiohttp import web

    bomb_gzip = gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9)
    try:
        import brotli

        bomb_br = brotli.compress(b"\0" * (64 * 1024 * 1024), quality=5)
    except ImportError:  # pragma: no cover
        bomb_br = b""

    async def bomb(request: web.Request) -> web.Response:
        if request.match_info["kind"] == "br":
            return web.Response(body=bomb_br, headers={"Content-Encoding": "br", "Content-Type": "text/html"})
        return web.Response(body=bomb_gzip, headers={"Content-Encoding": "gzip", "Content-Type": "text/html"})

    return bomb


async def _huge(request: web.Request) -> web.StreamResponse:
    """64 MiB of HTML (``?length=1``: announced in Content-Length)."""
    from aiohttp import web

    resp = web.StreamResponse(headers={"Content-Type": "text/html"})
    if request.query.get("length") == "1":
        resp.content_length = 64 * 1024 * 1024
    await resp.prepare(request)
    block = b"<p>" + b"x" * 65530 + b"</p>"
    try:
        for _ in range(1024):
            await resp.write(block)
    except (ConnectionResetError, RuntimeError):
        pass
    return resp


async def _drip(request: web.Request) -> web.StreamResponse:
    """120 bytes, one a second."""
    from aiohttp import web

    resp = web.StreamResponse(headers={"Content-Type": "text/html"})
    resp.content_length = 120
    await resp.prepare(request)
    try:
        for _ in range(120):
            await resp.write(b"x")
            await asyncio.sleep(1.0)
    except (ConnectionResetError, RuntimeError):
        pass
    return resp


def _too_many_handler(hits: _Hits) -> Callable[[web.Request], Awaitable[web.Response]]:
    """429 with ``Retry-After`` (``?after=``, 2 by default) the first ``?times=`` times per ``?id=``."""
    from aiohttp import web

    async def too_many(request: web.Request) -> web.Response:
        if hits.hit(request, "429") <= int(request.query.get("times", "1")):
            return web.Response(status=429, text="slow down", headers={"Retry-After": request.query.get("after", "2")})
        return _html_response(_page("Recovered", "<h1>OK after 429</h1>", ""))

    return too_many


def _unavailable_handler(hits: _Hits) -> Callable[[web.Request], Awaitable[web.Response]]:
    """503 the first ``?fail=`` times per ``?id=`` (2 by default), then a page."""
    from aiohttp import web

    async def unavailable(request: web.Request) -> web.Response:
        if hits.hit(request, "503") <= int(request.query.get("fail", "2")):
            return web.Response(status=503, text="unavailable")
        return _html_response(_page("Recovered", "<h1>OK after 503</h1>", ""))

    return unavailable


async def _not_found(request: web.Request) -> web.Response:
    from aiohttp import web

    raise web.HTTPNotFound(text="gone")


async def _deep(request: web.Request) -> web.Response:
    """``?n=`` nested divs (200,000 by default, at most a million): a parser trap."""
    from aiohttp import web

    n = min(int(request.query.get("n", "200000")), 1_000_000)
    body = "<html><head><title>deep</title></head><body>" + "<div>" * n + "x" + "</div>" * n + "</body></html>"
    return web.Response(body=body.encode(), content_type="text/html")


async def _charset(request: web.Request) -> web.Response:
    """``/hostile/charset/<kind>``: a page of :data:`CHARSET_PAGES`."""
    from aiohttp import web

    kind = request.match_info["kind"]
    if kind not in CHARSET_PAGES:
        raise web.HTTPNotFound()
    body, header = charset_page(kind)
    return web.Response(body=body, headers={"Content-Type": header})


async def _echo_headers(request: web.Request) -> web.Response:
    """The request's headers as JSON: what reached this origin."""
    from aiohttp import web

    return web.Response(text=json.dumps(dict(request.headers)), content_type="text/html")  # fetchable


# Pages whose charset is declared only in the document, or only in the header (title, encoding, how).
CHARSET_TITLE = {"sjis-meta": "日本語のタイトル", "latin1-meta": "Café crème brûlée", "latin1-header": "Señor Müller"}
CHARSET_PAGES = {
    "sjis-meta": ("shift_jis", "meta"),  # <meta charset="Shift_JIS">, Content-Type without charset
    "latin1-meta": ("iso-8859-1", "http-equiv"),  # <meta http-equiv="Content-Type" ... charset=iso-8859-1>
    "latin1-header": ("iso-8859-1", "header"),  # Content-Type: text/html; charset=ISO-8859-1, no meta
}


def charset_page(kind: str) -> tuple[bytes, str]:
    """The body and Content-Type header of ``/hostile/charset/<kind>``."""
    encoding, how = CHARSET_PAGES[kind]
    title = CHARSET_TITLE[kind]
    meta = {
        "meta": f'<meta charset="{encoding}">',
        "http-equiv": f'<meta http-equiv="Content-Type" content="text/html; charset={encoding}">',
        "header": "",
    }[how]
    page = f"<html><head>{meta}<title>{title}</title></head><body><h1>{title}</h1></body></html>"
    header = f"text/html; charset={encoding}" if how == "header" else "text/html"
    return page.encode(encoding), header


@dataclass(frozen=True, slots=True)
class AccessEntry:
    time: float
    method: str
    path: str
    status: int
    user_agent: str
    finished: float | None = None  # when the answer was ready (the request's end as the site saw it)


@dataclass
class Bookstore:
    """The bookstore as a separate process on a free loopback port; :meth:`stop` always ends it."""

    host: str = "127.0.0.1"
    port: int = 0
    categories: int = 4
    books_per_category: int = 25
    per_page: int = 10
    related: int = 4
    latency: float = 0.0
    robots_txt: str = ROBOTS_TXT
    robots_fail: int = 0  # the first N robots.txt requests answer 503
    workdir: Path | None = None
    proc: object | None = None
    _tmp: object | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def access_log(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "access.log"

    @property
    def catalog(self) -> Catalog:
        return catalog(self.categories, self.books_per_category, self.per_page)

    def start(self, timeout: float = 20.0) -> Bookstore:
        import tempfile

        if self.workdir is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="trawl-bookstore-")
            self.workdir = Path(self._tmp.name)  # type: ignore[attr-defined]
        self.port = self.port or procs.free_port(self.host)
        argv = [
            sys.executable, "-m", "trawl.dev.bookstore", "--host", self.host, "--port", str(self.port),
            "--categories", str(self.categories), "--books-per-category", str(self.books_per_category),
            "--per-page", str(self.per_page), "--related", str(self.related), "--latency", str(self.latency),
            "--access-log", str(self.access_log), "--robots-txt", self.robots_txt,
            "--robots-fail", str(self.robots_fail),
        ]  # fmt: skip
        self.proc = procs.start(argv, log_path=self.workdir / "server.log")
        procs.wait_for_port(self.host, self.port, timeout, self.proc)  # type: ignore[arg-type]
        return self

    def stop(self) -> None:
        if self.proc is not None:
            procs.stop(self.proc, timeout=5)  # type: ignore[arg-type]
            self.proc = None
        if self._tmp is not None:
            self._tmp.cleanup()  # type: ignore[attr-defined]
            self._tmp = None

    def __enter__(self) -> Bookstore:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def entries(self) -> list[AccessEntry]:
        if not self.access_log.exists():
            return []
        out: list[AccessEntry] = []
        for line in self.access_log.read_text().splitlines():
            parts = line.split(" ")
            if len(parts) >= 5:
                end = float(parts[5]) if len(parts) >= 6 else None
                out.append(AccessEntry(float(parts[0]), parts[1], parts[2], int(parts[3]), parts[4], end))
        return out

    def product_url(self, pid: int) -> str:
        return f"{self.url}/product/{pid}.html"

    def expected(self) -> dict[str, dict[str, str]]:
        """URL -> expected field values, for every product."""
        return {self.product_url(p.id): expected_record(p) for p in self.catalog.products}


def start_bookstore(host: str = "127.0.0.1", **options: Any) -> Bookstore:
    """Start the bookstore on a free port of ``host`` (a loopback address); call ``.stop()`` when done."""
    return Bookstore(host=host, **options).start()


def stop_bookstore(store: Bookstore) -> None:
    store.stop()


def main(argv: list[str] | None = None) -> None:
    from aiohttp import web

    parser = argparse.ArgumentParser(description="Serve the Trawl bookstore fixture site.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--categories", type=int, default=4)
    parser.add_argument("--books-per-category", type=int, default=25)
    parser.add_argument("--per-page", type=int, default=10)
    parser.add_argument("--related", type=int, default=4)
    parser.add_argument("--latency", type=float, default=0.0)
    parser.add_argument("--robots-txt", default=ROBOTS_TXT, help="The robots.txt served.")
    parser.add_argument("--robots-fail", type=int, default=0, help="Answer 503 to the first N robots.txt requests.")
    parser.add_argument("--access-log", type=Path, default=None)
    parser.add_argument("--print-expected", action="store_true", help="Print the expected records as JSON and exit.")
    args = parser.parse_args(argv)
    renderer = Renderer(catalog(args.categories, args.books_per_category, args.per_page), related=args.related)
    if args.print_expected:
        json.dump([expected_record(p) for p in renderer.cat.products], sys.stdout, indent=1)
        return
    app = build_app(
        renderer, args.access_log, latency=args.latency, robots_txt=args.robots_txt, robots_fail=args.robots_fail
    )
    web.run_app(app, host=args.host, port=args.port, print=None, access_log=None)  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
