"""The bookstore fixture site (trawl.dev.bookstore.Bookstore, a process on a loopback port) as a pytest fixture:
one definition, bound in the conftest of each layer that fetches it, with the layer's scope and arguments
(``site = bookstore_fixture("module", host="127.0.0.2")``). A test module that needs another shape of the
site (fewer books, slower answers) overrides the ``site_options`` fixture (tests/conftest.py): its arguments
are laid over the layer's. And :func:`serve_handler`, a site of one handler in the test's own event loop."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any, Literal

import pytest
from aiohttp import web

from trawl.dev.bookstore import AccessEntry, Bookstore


def bookstore_fixture(scope: Literal["function", "module"], *, name: str = "site", **arguments: Any) -> Any:
    """A fixture ``name`` of ``scope``: a running Bookstore(**arguments, **site_options), stopped after."""

    @pytest.fixture(scope=scope, name=name)
    def bookstore(site_options: dict[str, Any]) -> Iterator[Bookstore]:
        with Bookstore(**(arguments | site_options)) as store:
            yield store

    return bookstore


def peak_overlap(entries: list[AccessEntry]) -> int:
    """The most requests the site was answering at one instant (its access log's own times)."""
    edges = sorted([(e.time, 1) for e in entries] + [(e.finished or e.time, -1) for e in entries])
    peak = cur = 0
    for _, step in edges:  # an answer at the instant another arrives frees its slot first (-1 sorts first)
        cur += step
        peak = max(peak, cur)
    return peak


@contextlib.asynccontextmanager
async def serve_handler(
    handler: Callable[[web.Request], Awaitable[web.StreamResponse]], path: str = "/", host: str = "127.0.0.1"
) -> AsyncIterator[str]:
    """``handler`` answering GET ``path`` on ``host`` (a free port, picked by the kernel): yields the site's
    base URL (``http://host:port/``); stopped on exit. A handler runs on after its client went away, as a
    server's does (aiohttp's ``handler_cancellation`` off)."""
    app = web.Application()
    app.router.add_get(path, handler)
    runner = web.AppRunner(app, access_log=None, handler_cancellation=False)
    await runner.setup()
    await web.TCPSite(runner, host, 0).start()
    try:
        yield f"http://{host}:{runner.addresses[0][1]}/"
    finally:
        await runner.cleanup()
