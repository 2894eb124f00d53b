"""The bookstore's sitemaps, good and hostile (routes added by :func:`trawl.dev.bookstore.build_app`).

Good: ``/sitemap.xml`` is a sitemap index naming ``/sitemaps/products.xml.gz`` (a gzip file, served as
application/gzip: every product, with the ``<lastmod>`` of :func:`product_lastmod`) and
``/sitemaps/categories.xml`` (the first listing page of each category, no lastmod);
``/sitemaps/products.txt`` lists the products as a plain-text sitemap.

Hostile (``/hostile/sitemap/...``): ``bomb.xml.gz`` (a gzip of a quarter GiB of comments in a
``<urlset>``, about a quarter MiB on the wire), ``laughs.xml`` (billion laughs: nested entities in an
internal DTD), ``huge-index.xml`` (an index naming 50,000 sitemaps), ``nest/<n>.xml`` (an index naming
``nest/<n+1>.xml`` and nothing else, without end). Absolute URLs use the request's own origin.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterable
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiohttp import web

    from .bookstore import Renderer

NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
BOMB_BYTES = 256 * 1024 * 1024
HUGE_INDEX_ENTRIES = 50_000
OLD_LASTMOD = "2024-01-15"
NEW_LASTMOD = "2024-06-01T12:00:00+00:00"


def product_lastmod(pid: int) -> str:
    """The ``<lastmod>`` of a product in the sitemap: odd ids changed long ago, even ids recently."""
    return OLD_LASTMOD if pid % 2 else NEW_LASTMOD


def urlset(entries: Iterable[tuple[str, str | None]]) -> bytes:
    """A ``<urlset>`` of (loc, lastmod or None)."""
    rows = "".join(
        f"<url><loc>{loc}</loc>{f'<lastmod>{lastmod}</lastmod>' if lastmod else ''}</url>\n" for loc, lastmod in entries
    )
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<urlset xmlns="{NS}">\n{rows}</urlset>\n'.encode()


def sitemap_index(locs: Iterable[str]) -> bytes:
    """A ``<sitemapindex>`` naming ``locs``."""
    rows = "".join(f"<sitemap><loc>{loc}</loc></sitemap>\n" for loc in locs)
    return f'<?xml version="1.0" encoding="UTF-8"?>\n<sitemapindex xmlns="{NS}">\n{rows}</sitemapindex>\n'.encode()


@cache
def gzip_bomb() -> bytes:
    """A quarter GiB of empty comments in a well-formed ``<urlset>``, gzipped (made once, a chunk at a time:
    the server never holds the inflated size either). Comments: the most bytes an XML parser takes without
    an element or a text node to stop at."""
    packer = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b"<!---->" * (1024 * 1024 // 7)
    parts = [packer.compress(f'<?xml version="1.0"?><urlset xmlns="{NS}">'.encode())]
    parts += [packer.compress(block) for _ in range(BOMB_BYTES // len(block))]
    parts += [packer.compress(b"</urlset>"), packer.flush()]
    return b"".join(parts)


BILLION_LAUGHS = (
    b'<?xml version="1.0"?>\n<!DOCTYPE urlset [\n <!ENTITY lol "lol">\n'
    + b"".join(
        f' <!ENTITY lol{i} "{f"&lol{i - 1};" * 10 if i > 1 else "&lol;" * 10}">\n'.encode() for i in range(1, 10)
    )
    + b"]>\n<urlset><url><loc>&lol9;</loc></url></urlset>\n"
)


def add_sitemaps(app: web.Application, renderer: Renderer) -> None:
    """The sitemap routes (the module's docstring lists them)."""
    from aiohttp import web

    def xml(body: bytes) -> web.Response:
        return web.Response(body=body, content_type="application/xml")

    async def index(request: web.Request) -> web.Response:
        origin = str(request.url.origin())
        return xml(sitemap_index([origin + "/sitemaps/products.xml.gz", origin + "/sitemaps/categories.xml"]))

    async def products(request: web.Request) -> web.Response:
        origin = str(request.url.origin())
        body = urlset((origin + p.path, product_lastmod(p.id)) for p in renderer.cat.products)
        return web.Response(body=gzip.compress(body), content_type="application/gzip")

    async def products_text(request: web.Request) -> web.Response:
        origin = str(request.url.origin())
        return web.Response(text="".join(f"{origin}{p.path}\n" for p in renderer.cat.products))

    async def categories(request: web.Request) -> web.Response:
        origin = str(request.url.origin())
        from .bookstore import slugify

        return xml(urlset((f"{origin}/category/{slugify(c)}/page-1.html", None) for c in renderer.cat.categories))

    async def bomb(request: web.Request) -> web.Response:
        return web.Response(body=gzip_bomb(), content_type="application/gzip")

    async def laughs(request: web.Request) -> web.Response:
        return xml(BILLION_LAUGHS)

    async def huge_index(request: web.Request) -> web.Response:
        origin = str(request.url.origin())
        return xml(sitemap_index(f"{origin}/sitemaps/part-{i}.xml" for i in range(HUGE_INDEX_ENTRIES)))

    async def nest(request: web.Request) -> web.Response:
        n = int(request.match_info["n"])
        return xml(sitemap_index([f"{request.url.origin()}/hostile/sitemap/nest/{n + 1}.xml"]))

    app.router.add_get("/sitemap.xml", index)
    app.router.add_get("/sitemaps/products.xml.gz", products)
    app.router.add_get("/sitemaps/products.txt", products_text)
    app.router.add_get("/sitemaps/categories.xml", categories)
    app.router.add_get("/hostile/sitemap/bomb.xml.gz", bomb)
    app.router.add_get("/hostile/sitemap/laughs.xml", laughs)
    app.router.add_get("/hostile/sitemap/huge-index.xml", huge_index)
    app.router.add_get(r"/hostile/sitemap/nest/{n:\d+}.xml", nest)
