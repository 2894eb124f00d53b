"""The bookstore's listing pages three ways, for browser rendering tests and the render benchmark.

- ``/static/...``: the HTML as the plain bookstore serves it;
- ``/js/...``: an empty list filled by a script from data inlined in the page;
- ``/xhr/...``: an empty list filled by a script from ``/api/...json`` fetched after load;
plus hostile pages: ``/hostile/ssrf.html?target=URL`` (a script, an image, an iframe, a WebSocket, a
popup and a beacon all aimed at ``target`` and at the cloud metadata address) and
``/hostile/never-idle.html`` (polls and scrolls for ever, so the network is never idle), and
``/media/page.html`` (a stylesheet and an image, for resource blocking).

All three flavours of a listing yield the same records with :data:`LISTING_FIELDS`.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from aiohttp import web

from .bookstore import ROBOTS_TXT, Renderer, catalog, slugify

LISTING_FIELDS = [
    {"name": "names", "selector": "ol.items li.item a", "multiple": True},
    {"name": "prices", "selector": "ol.items li.item span", "multiple": True},
    {"name": "links", "selector": "ol.items li.item a", "attribute": "href", "multiple": True},
    {"name": "heading", "selector": "main h1"},
]
FLAVOURS = ("static", "js", "xhr")

_BUILD_LIST = """
function trawlFill(items) {
  var ol = document.querySelector('ol.items');
  items.forEach(function (p) {
    var li = document.createElement('li'); li.className = 'item';
    var a = document.createElement('a'); a.href = p.path; a.textContent = p.name;
    var s = document.createElement('span'); s.textContent = p.price;
    li.appendChild(a); li.appendChild(document.createTextNode(' ')); li.appendChild(s); ol.appendChild(li);
  });
}
"""


@dataclass
class Hits:
    """Requests seen per path (the tests read it in-process)."""

    paths: list[str] = field(default_factory=list)


def _items(renderer: Renderer, category: str, page: int) -> list[dict[str, str]]:
    products = renderer.cat.in_category(category)
    chunk = products[(page - 1) * renderer.cat.per_page : page * renderer.cat.per_page]
    return [{"path": p.path, "name": p.name, "price": p.price} for p in chunk]


def _shell(static_html: str, script: str) -> str:
    start = static_html.index('<ol class="items">') + len('<ol class="items">')
    end = static_html.index("</ol>", start)
    return static_html[:start] + static_html[end:].replace(
        "</body>", f"<script>{_BUILD_LIST}{script}</script>\n</body>", 1
    )


def listing_paths(renderer: Renderer, flavour: str) -> list[str]:
    return [
        f"/{flavour}/category/{slugify(c)}/page-{n}.html"
        for c in renderer.cat.categories
        for n in range(1, renderer.cat.pages(c) + 1)
    ]


def build_app(renderer: Renderer, hits: Hits | None = None) -> web.Application:
    """The site as an aiohttp application: the listings three ways and their JSON, the media page, the hostile
    pages; every request's path appended to ``hits`` (when given)."""
    listing, api = _listing_handlers(renderer)
    app = web.Application(middlewares=[_count(hits)])
    app.router.add_get("/{flavour}/category/{slug}/page-{page:\\d+}.html", listing)
    app.router.add_get("/api/category/{slug}/page-{page:\\d+}.json", api)
    app.router.add_get("/api/tick", _tick)
    app.router.add_get("/media/page.html", _media_page)
    app.router.add_get("/media/{name}", _media_file)
    app.router.add_get("/hostile/ssrf.html", _ssrf)
    app.router.add_get("/hostile/never-idle.html", _never_idle)
    app.router.add_get("/sw.js", _service_worker)
    app.router.add_get("/robots.txt", _robots)
    return app


def _count(hits: Hits | None) -> Any:
    """The middleware that appends each request's path to ``hits``."""

    @web.middleware
    async def count(
        request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
    ) -> web.StreamResponse:
        if hits is not None:
            hits.paths.append(request.path)
        return await handler(request)

    return count


def _html(text: str) -> web.Response:
    return web.Response(text=text, content_type="text/html", charset="utf-8")


_Handler = Callable[[web.Request], Awaitable[web.Response]]


def _listing_handlers(renderer: Renderer) -> tuple[_Handler, _Handler]:
    """``/<flavour>/category/<slug>/page-<n>.html`` (static, js, xhr) and ``/api/category/<slug>/page-<n>.json``."""
    by_slug = {slugify(c): c for c in renderer.cat.categories}

    def lookup(request: web.Request) -> tuple[str, int, str]:
        category = by_slug.get(request.match_info["slug"])
        page = int(request.match_info["page"])
        static = renderer.listing(category, page) if category else None
        if category is None or static is None:
            raise web.HTTPNotFound()
        return category, page, static

    async def listing(request: web.Request) -> web.Response:
        flavour = request.match_info["flavour"]
        category, page, static = lookup(request)
        if flavour == "static":
            return _html(static)
        if flavour == "js":
            data = json.dumps(_items(renderer, category, page)).replace("</", "<\\/")
            return _html(_shell(static, f"trawlFill({data});"))
        if flavour == "xhr":
            api = f"/api/category/{request.match_info['slug']}/page-{page}.json"
            return _html(
                _shell(static, f"fetch({json.dumps(api)}).then(function (r) {{ return r.json(); }}).then(trawlFill);")
            )
        raise web.HTTPNotFound()

    async def api(request: web.Request) -> web.Response:
        category, page, _static = lookup(request)
        return web.json_response(_items(renderer, category, page))

    return listing, api


async def _ssrf(request: web.Request) -> web.Response:
    """A script, an image, an iframe, a WebSocket, a popup and a beacon aimed at ``?target=`` and at the cloud
    metadata address; then two navigations away (data:, file:)."""
    target = json.dumps(request.query.get("target", "http://127.0.0.1:1"))
    ws = json.dumps(request.query.get("target", "http://127.0.0.1:1").replace("http", "ws", 1))
    script = f"""
var t = {target};
fetch(t + '/fetch').catch(function () {{}});
var x = new XMLHttpRequest(); x.open('GET', t + '/xhr'); x.onerror = function () {{}}; x.send();
fetch('http://169.254.169.254/latest/meta-data/').catch(function () {{}});
try {{ new WebSocket({ws} + '/ws'); }} catch (e) {{}}
try {{ navigator.sendBeacon(t + '/beacon', 'x'); }} catch (e) {{}}
try {{ window.open(t + '/popup'); }} catch (e) {{}}
var f = document.createElement('iframe'); f.src = t + '/frame'; document.body.appendChild(f);
var i = document.createElement('img'); i.src = t + '/img.png'; document.body.appendChild(i);
if (navigator.serviceWorker) {{ navigator.serviceWorker.register('/sw.js').catch(function () {{}}); }}
document.getElementById('state').textContent = 'tried';
setTimeout(function () {{
  try {{ location.href = 'data:text/html,<p id="state">hijacked</p>'; }} catch (e) {{}}
  try {{ location.href = 'file:///etc/passwd'; }} catch (e) {{}}
}}, 10);
"""
    body = (
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>SSRF</title></head><body>'
        f'<p id="state">loading</p><script>{script}</script></body></html>'
    )
    return _html(body)


_NEVER_IDLE_SCRIPT = """
var n = 0;
function more() {
  fetch('/api/tick?n=' + n).then(function () {
    var p = document.createElement('p'); p.className = 'row'; p.textContent = 'row ' + (n++);
    document.body.appendChild(p); window.scrollTo(0, document.body.scrollHeight);
  }).catch(function () {});
}
setInterval(more, 100);
"""


async def _never_idle(request: web.Request) -> web.Response:
    """Polls ``/api/tick`` and scrolls for ever: the network is never idle."""
    return _html(
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>Endless</title></head><body>'
        f'<h1 id="top">Endless</h1><script>{_NEVER_IDLE_SCRIPT}</script></body></html>'
    )


async def _tick(request: web.Request) -> web.Response:
    return web.json_response({"ok": True})


async def _media_page(request: web.Request) -> web.Response:
    """A page with a stylesheet and an image (for resource blocking)."""
    return _html(
        '<!DOCTYPE html><html><head><meta charset="utf-8"><title>Media</title>'
        '<link rel="stylesheet" href="/media/style.css"></head><body><h1 id="top">Media</h1>'
        '<img src="/media/pic.png" alt="pic"></body></html>'
    )


async def _media_file(request: web.Request) -> web.Response:
    name = request.match_info["name"]
    if name == "style.css":
        return web.Response(text="h1 { color: red; }", content_type="text/css")
    # a 1x1 transparent PNG
    png = bytes.fromhex(
        "89504e470d0a1a0a0000000d49484452000000010000000108060000001f15c4890000000d4944415478da63"
        "f8ffff3f0005fe02fea73581e40000000049454e44ae426082"
    )
    return web.Response(body=png, content_type="image/png")


async def _service_worker(request: web.Request) -> web.Response:
    return web.Response(text="self.addEventListener('fetch', function () {});", content_type="text/javascript")


async def _robots(request: web.Request) -> web.Response:
    return web.Response(text=ROBOTS_TXT, content_type="text/plain")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the bookstore's listings static, JS-rendered and XHR-fed.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--categories", type=int, default=4)
    parser.add_argument("--books-per-category", type=int, default=25)
    parser.add_argument("--per-page", type=int, default=10)
    args = parser.parse_args(argv)
    renderer = Renderer(catalog(args.categories, args.books_per_category, args.per_page))
    web.run_app(build_app(renderer), host=args.host, port=args.port, print=None, access_log=None)


if __name__ == "__main__":
    main()
