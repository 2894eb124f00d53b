"""Parsing and extraction in child processes, with limits: no page can stall the worker's event loop.

HTML parsers are super-linear on hostile input (20,000 nested ``div``s take seconds, 200,000 minutes),
and a parse on the event loop stops heartbeats, claims and every other task. So each page is parsed in
one of a few child processes (``multiprocessing`` spawn; each handles one page at a time), and:

- a body larger than ``max_bytes`` or with more tags than ``max_tags`` (counted as ``<`` bytes, which
  costs a C-speed scan) is refused before it is sent;
- a parse that takes longer than ``seconds`` kills its child (a thread cannot be stopped; a process
  can) and a fresh one takes its place; only that page fails.

A page of at most ``inline_max_tags`` tags (2,048) is parsed on the event loop instead: so few tags
cannot nest deeper than ~1,000 levels, whose worst case parses in milliseconds, and the round trip to a
child would cost more than the parse (it cost ~20% of crawl throughput on a loaded 2-core machine). Not
for a job with an XPath field (``Extractor.inline_safe``): the cost of an XPath its author wrote is not
bounded by the page's size (nested predicates are N^k in the nodes), so its pages always go to a child.

Both raise :class:`ParseLimit`, which the worker dead-letters as the permanent class ``ParseLimit``.
A child that dies for another reason (out of memory) fails its page the same way. Pages are decoded in
the child as a browser would (:func:`trawl.worker.extract.decode_html`).

Sitemaps (:meth:`ParsePool.sitemap`) go to a child always, under the same time budget: a refused one
(:class:`~trawl.worker.sitemaps.BadSitemap`) is its reply, not a dead child.

``processes=0`` parses in-process, on the event loop (tests and benchmarks that compare).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import pickle
import signal
import sys
import time
from typing import TYPE_CHECKING, Any, NamedTuple

from .extract import ExtractOptions, Extractor, Page
from .sitemaps import BadSitemap, SitemapFound, SitemapRules, read_sitemap

if TYPE_CHECKING:  # multiprocessing is imported when the first parser process starts (most workers: never)
    from multiprocessing.connection import Connection

log = logging.getLogger("trawl.worker.parse")

DEFAULT_SECONDS = 10.0
DEFAULT_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_MAX_TAGS = 1_000_000
DEFAULT_INLINE_MAX_TAGS = 2048
STARTUP_SECONDS = 60.0
_SEND_IN_THREAD = 256 * 1024  # bodies above this are written to the pipe off the event loop


class ParseLimit(Exception):
    """The page exceeded a parse limit (size, tags, time) or killed its parser; permanent."""


class ParseLimits(NamedTuple):
    seconds: float = DEFAULT_SECONDS
    max_bytes: int = DEFAULT_MAX_BYTES
    max_tags: int = DEFAULT_MAX_TAGS
    inline_max_tags: int = DEFAULT_INLINE_MAX_TAGS


def check_size(body: bytes, limits: ParseLimits) -> int:
    """Refuse a body before parsing it: too large, or more tags than the limit. Returns its tag count."""
    if len(body) > limits.max_bytes:
        raise ParseLimit(f"document of {len(body)} bytes is over the parse limit of {limits.max_bytes}")
    tags = body.count(b"<")
    if tags > limits.max_tags:
        raise ParseLimit(f"document has about {tags} tags, over the parse limit of {limits.max_tags}")
    return tags


def refuse_sockets(event: str, _args: tuple[Any, ...]) -> None:
    """An audit hook: no socket is opened, connected or resolved in a parser process. Parsing needs no network,
    and a library that would fetch (an RDFa vocabulary, a DTD) must not bypass the egress policy."""
    if event in _NETWORK_EVENTS:
        raise PermissionError(f"{event}: a parser process has no network")


_NETWORK_EVENTS = frozenset(
    {"socket.__new__", "socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "socket.sendto"}
)


def forbid_network() -> None:
    """Install :func:`refuse_sockets` in this process, for good (audit hooks cannot be removed)."""
    sys.addaudithook(refuse_sockets)


def _child_main(conn: Connection) -> None:
    """A parser process: one request at a time until the pipe closes (the worker ended or killed it)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the worker decides when its children end
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    # A spawned child re-runs its parent's main module, and `trawl worker`'s start-up (trawl.boot.worker)
    # turns the cyclic collector off while it imports: the child would otherwise never collect cycles.
    gc.enable()
    forbid_network()
    extractors: dict[tuple[ExtractOptions, bool], Extractor] = {}
    conn.send_bytes(b"ready")  # imports done: from now on the time budget measures parsing only
    while True:
        try:
            raw = conn.recv_bytes()
        except (EOFError, OSError):
            return
        request = pickle.loads(raw)
        try:
            if request[0] == "sitemap":
                reply: tuple[Any, ...] = ("ok", read_sitemap(*request[1:]))
            else:
                _kind, options, need_links, body, url, content_type = request
                key = (options, need_links)
                extractor = extractors.get(key)
                if extractor is None:
                    if len(extractors) > 64:
                        extractors.clear()
                    extractor = extractors[key] = Extractor(options, need_links=need_links)
                    extractor.timed_formats = True  # this process's main thread: SIGALRM per format
                page = extractor.extract(body, url, content_type=content_type)
                reply = ("ok", page.data, page.links, page.matched, page.fingerprint, page.format_seconds)
        except BadSitemap as exc:  # the document's fault: its task fails as BadSitemap
            reply = ("refused", str(exc))
        except Exception as exc:  # a bug in extraction: the page fails, the child lives on
            reply = ("error", f"{type(exc).__name__}: {exc}")
        try:
            conn.send_bytes(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))
        except (BrokenPipeError, OSError):
            return


class _Child:
    def __init__(self, ctx: Any) -> None:
        parent, child = ctx.Pipe(duplex=True)
        self.conn: Connection = parent
        self.proc = ctx.Process(target=_child_main, args=(child,), name="trawl-parser", daemon=True)
        self.proc.start()
        child.close()
        # Wait (in the caller's thread) until the child has imported its modules, so a busy machine's
        # start-up time is not charged to the first page's budget.
        if not self.conn.poll(STARTUP_SECONDS) or self.conn.recv_bytes() != b"ready":
            self.kill()
            raise RuntimeError(f"a parser process did not start within {STARTUP_SECONDS:g}s")

    def kill(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.kill()
        with contextlib.suppress(Exception):
            self.proc.join(5)
        with contextlib.suppress(Exception):
            self.conn.close()


class ParsePool:
    """``processes`` parser children; :meth:`extract` waits for a free one (bounded by the caller's task)."""

    def __init__(self, processes: int = 2, limits: ParseLimits | None = None) -> None:
        self.processes = processes
        self.limits = limits or ParseLimits()
        self._ctx: Any = None  # the "spawn" context, on the first child
        self._idle: asyncio.Queue[_Child] | None = None
        self._start_lock = asyncio.Lock()
        self._all: set[_Child] = set()
        self.killed = 0  # children killed for running over the budget
        self.busy_since: dict[_Child, float] = {}

    async def _start(self) -> asyncio.Queue[_Child]:
        """Start the children on first need (most pages are parsed inline; many workers never need one)."""
        async with self._start_lock:
            if self._idle is None:
                if self._ctx is None:
                    import multiprocessing

                    self._ctx = multiprocessing.get_context("spawn")
                idle: asyncio.Queue[_Child] = asyncio.Queue()
                children = await asyncio.gather(*(asyncio.to_thread(self._spawn) for _ in range(self.processes)))
                for child in children:
                    idle.put_nowait(child)
                self._idle = idle
            return self._idle

    def _spawn(self) -> _Child:
        child = _Child(self._ctx)
        self._all.add(child)
        return child

    async def close(self) -> None:
        for child in list(self._all):
            await asyncio.to_thread(child.kill)
        self._all.clear()
        self._idle = None

    @property
    def oldest_busy_seconds(self) -> float:
        """How long the longest-running parse has been going (0 when idle): for the liveness report."""
        if not self.busy_since:
            return 0.0
        return time.monotonic() - min(self.busy_since.values())

    async def extract(self, extractor: Extractor, body: bytes, url: str, *, content_type: str | None = None) -> Page:
        tags = check_size(body, self.limits)
        if self.processes <= 0 or (tags <= self.limits.inline_max_tags and extractor.inline_safe):
            return extractor.extract(body, url, content_type=content_type)
        request = ("page", extractor.options, extractor.need_links, body, url, content_type)
        reply = await self._in_child(request, url)
        if reply[0] != "ok":
            raise RuntimeError(f"extraction failed: {reply[1]}")  # a bug, not the page: class Internal
        return Page(data=reply[1], links=reply[2], matched=reply[3], fingerprint=reply[4], format_seconds=reply[5])

    async def sitemap(self, body: bytes, content_type: str, url: str, rules: SitemapRules) -> SitemapFound:
        """:func:`~trawl.worker.sitemaps.read_sitemap` in a child, always (inflating and reading up to 50 MB is
        no work for the event loop), under the same time budget as a page; raises :class:`BadSitemap` or
        :class:`ParseLimit`."""
        if len(body) > self.limits.max_bytes:
            raise ParseLimit(f"document of {len(body)} bytes is over the parse limit of {self.limits.max_bytes}")
        if self.processes <= 0:
            return read_sitemap(body, content_type, url, rules)
        reply = await self._in_child(("sitemap", body, content_type, url, rules), url)
        if reply[0] == "refused":
            raise BadSitemap(reply[1])
        if reply[0] != "ok":
            raise RuntimeError(f"reading the sitemap failed: {reply[1]}")  # a bug: class Internal
        found: SitemapFound = reply[1]
        return found

    async def _in_child(self, request: tuple[Any, ...], url: str) -> tuple[Any, ...]:
        """Send ``request`` to a free child and wait for its reply within the time budget."""
        try:  # bounded: if replacements could not be started, fail the page (Internal, retried) not hang
            async with asyncio.timeout(STARTUP_SECONDS + self.limits.seconds):
                idle = await self._start()
                child = await idle.get()
        except TimeoutError:
            raise RuntimeError("no parser process became free (could they not be started?)") from None
        keep = False  # unless the child answered: over a limit, dead or cancelled mid-parse, it is replaced
        try:
            reply = await self._call(child, request, url)
            keep = True
        finally:
            self.busy_since.pop(child, None)
            if keep:
                idle.put_nowait(child)
            else:
                self._all.discard(child)
                await asyncio.shield(self._replace(child))
        return reply

    async def _replace(self, child: _Child) -> None:
        await asyncio.to_thread(child.kill)
        if self._idle is None:
            return
        try:
            self._idle.put_nowait(await asyncio.to_thread(self._spawn))
        except Exception as exc:
            log.error("could not start a parser process", extra={"error": repr(exc)})

    async def _call(self, child: _Child, request: tuple[Any, ...], url: str) -> tuple[Any, ...]:
        loop = asyncio.get_running_loop()
        data = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        self.busy_since[child] = time.monotonic()
        if len(data) > _SEND_IN_THREAD:
            await asyncio.to_thread(child.conn.send_bytes, data)
        else:
            child.conn.send_bytes(data)
        ready = loop.create_future()
        fd = child.conn.fileno()

        def readable() -> None:
            if not ready.done():
                ready.set_result(None)

        loop.add_reader(fd, readable)
        try:
            async with asyncio.timeout(self.limits.seconds):
                await ready
        except TimeoutError:
            self.killed += 1
            log.warning("parse over its time budget; parser killed", extra={"url": url})
            raise ParseLimit(f"parsing took longer than the budget of {self.limits.seconds:g}s") from None
        finally:
            loop.remove_reader(fd)
        try:
            reply: tuple[Any, ...] = pickle.loads(child.conn.recv_bytes())
        except (EOFError, OSError) as exc:
            child.proc.join(1)
            code = child.proc.exitcode
            raise ParseLimit(f"the parser died on this page (exit code {code}): {exc!r}") from None
        return reply
