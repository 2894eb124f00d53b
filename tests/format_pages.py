"""Pages for the output-format tests (extract.formats): an article with navigation, ads, a table and
embedded structured data, and hostile pages; served by :func:`serve` on loopback for the worker tests."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web

from trawl.dev.procs import free_port

PARAGRAPH = (
    "The lighthouse keeper wrote every evening about the weather, the ships that passed and the birds that "
    "rested on the gallery rail before the long flight south across the grey water."
)
GRAPHS = [
    {
        "@context": "https://schema.org",
        "@graph": [{"@type": "Book", "name": "Keeper"}, {"@type": "Person", "name": "Ada"}],
    },
    {"@context": "https://schema.org", "@graph": [{"@type": "Organization", "name": "Harbour Press"}]},
]

ARTICLE = f"""<!doctype html><html><head><title>The keeper's log</title>
<meta property="og:title" content="The keeper's log"><meta property="og:type" content="article">
<script type="application/ld+json">{json.dumps(GRAPHS[0])}</script>
<script type="application/ld+json">{{"@context": "https://schema.org", "@type": </script>
<script type="application/ld+json">{json.dumps(GRAPHS[1])}</script>
</head><body>
<nav class="menu"><ul><li><a href="/">Home</a></li><li><a href="/shop?x=1">Shop</a></li>
<li><a href="/about">About</a></li></ul></nav>
<div class="ad advertisement" id="banner-ad"><a href="https://ads.example/click">Cheap flights now!</a></div>
<main><article>
<h1>The keeper's log</h1>
<p>{PARAGRAPH}</p>
<p>{PARAGRAPH.replace("evening", "morning")}</p>
<table><tr><th>Day</th><th>Ships</th></tr><tr><td>Monday</td><td>12</td></tr><tr><td>Tuesday</td><td>9</td></tr></table>
<p>Read <a href="/log/2.html">the next entry</a> or <a href="/log/2.html#top">its top</a>.</p>
<div itemscope itemtype="https://schema.org/Product"><span itemprop="name">Brass lantern</span>
<span itemprop="price">40</span></div>
</article></main>
<footer><p>Copyright Harbour Press. All rights reserved.</p><a href="/about">About</a></footer>
</body></html>"""

TEXT_NODE_CHARS = 5_000_000
JSON_LD_ENTRIES = 100_000


def huge_text() -> str:
    """One text node of TEXT_NODE_CHARS characters."""
    return f"<html><head><title>huge</title></head><body><p>{'word ' * (TEXT_NODE_CHARS // 5)}</p></body></html>"


def many_json_ld() -> str:
    """A JSON-LD array of JSON_LD_ENTRIES entries, and a block nested far deeper than any item needs."""
    entries = ",".join(f'{{"@type":"Offer","price":{i}}}' for i in range(JSON_LD_ENTRIES))
    deep = "[" * 100 + "1" + "]" * 100
    return (
        f'<html><head><script type="application/ld+json">[{entries}]</script>'
        f'<script type="application/ld+json">{deep}</script></head><body><p>offers</p></body></html>'
    )


@asynccontextmanager
async def serve(host: str) -> AsyncIterator[str]:
    """The pages above at ``http://host:port`` (/article, /huge-text, /many-json-ld); stopped on exit."""
    pages = {"/article": ARTICLE, "/huge-text": huge_text(), "/many-json-ld": many_json_ld()}

    async def page(request: web.Request) -> web.Response:
        return web.Response(text=pages[request.path], content_type="text/html", charset="utf-8")

    app = web.Application()
    for path in pages:
        app.router.add_get(path, page)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port(host)
    site = web.TCPSite(runner, host, port)
    await site.start()
    try:
        yield f"http://{host}:{port}"
    finally:
        await runner.cleanup()
