"""Import aiohttp without waiting for the system CA store: it loads on a background thread instead.

``aiohttp.connector`` builds its two default TLS contexts when it is imported, and each reads and
parses the system's CA bundle (``set_default_verify_paths``): about 90 ms, a sixth of a worker's
start-up, spent before the first claim even by a crawl that never speaks TLS. :func:`import_aiohttp`
imports aiohttp with that call recorded instead of run, then runs it on a thread for the recorded
contexts that verify certificates: the other one (``ssl=False``, ``CERT_NONE``) never reads its store,
so it gets none (~35 ms of CPU less at every worker start). OpenSSL reads the bundle without the
GIL, so the load overlaps the rest of the start-up on a second core. The contexts are aiohttp's own,
built exactly as aiohttp builds them; only the verified one's CA load happens later.

Only ``trawl worker`` defers (``trawl.cli`` calls :func:`import_aiohttp` first thing in a worker
process); everywhere else aiohttp imports as usual and :func:`ready` returns at once. A context
without its CA store fails every verification (closed, never open), but nothing may handshake before
the load ends: the worker's sessions are created after ``await ready()``
(:meth:`trawl.worker.fetch.Fetcher.start`, the webhook sink). The deferral is skipped in a process
that has imported aiohttp already or runs other threads (which could build a context meanwhile).
"""

from __future__ import annotations

import asyncio
import importlib
import ssl
import sys
import threading
from concurrent.futures import Future
from typing import Any

_loaded: Future[None] | None = None


def _load(contexts: list[ssl.SSLContext], load: Any, done: Future[None]) -> None:
    try:
        for ctx in contexts:
            load(ctx)
    except BaseException as exc:  # handed to whoever waits: ready() raises it
        done.set_exception(exc)
    else:
        done.set_result(None)


def import_aiohttp() -> None:
    """Import ``aiohttp`` (its connector included), deferring its CA-store loads to a thread."""
    global _loaded
    if "aiohttp.connector" in sys.modules or threading.active_count() != 1:
        importlib.import_module("aiohttp.connector")  # as usual: loaded already, or other threads may build contexts
        return
    real = ssl.SSLContext.set_default_verify_paths
    recorded: list[ssl.SSLContext] = []

    def record(self: ssl.SSLContext) -> None:
        recorded.append(self)

    ssl.SSLContext.set_default_verify_paths = record  # type: ignore[method-assign]
    try:
        importlib.import_module("aiohttp.connector")
    finally:
        ssl.SSLContext.set_default_verify_paths = real  # type: ignore[method-assign]
    # A context that verifies nothing (aiohttp's for ``ssl=False``: CERT_NONE) never reads its store, so its
    # load (a third of a worker start's CPU besides the imports) is skipped; were it ever switched to
    # verify, its empty store would refuse every certificate (closed, never open).
    verifying = [ctx for ctx in recorded if ctx.verify_mode != ssl.CERT_NONE]
    done: Future[None] = Future()
    _loaded = done
    threading.Thread(target=_load, args=(verifying, real, done), name="trawl-ca-store", daemon=True).start()


async def ready() -> None:
    """Return once the deferred CA loads (if any) have finished; raise what they raised."""
    if _loaded is not None:
        await asyncio.wrap_future(_loaded)
