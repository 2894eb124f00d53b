"""Headless Chromium for one worker (Debian's package, driven by Playwright; never a downloaded browser).

One :class:`BrowserPool` per worker process starts Chromium on the first Browser task and renders each
page in it (:mod:`.page`), at most ``pages_per_browser`` at a time, in the context its job shares as one
identity (:mod:`.contexts`). A browser that crashes (or whose
processes grow past the memory ceiling) is replaced, and the next page starts a new one: pages being
rendered in a crashed browser fail as :class:`~.crash.BrowserCrashed` (class Connection), and the worker
gives their tasks back without spending an attempt.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from trawl.api.plain import FailureClass
from trawl.api.render import RenderSpec
from trawl.egress.addresses import IPNetwork

from ..cookies import SessionJar
from ..fetch import FetchError, FetchLimits
from ..proxies import ProxyEndpoint
from . import procmem
from .contexts import ContextKey, ContextPool, SharedContext, context_key
from .crash import BrowserCrashed
from .metrics import BrowserMetrics
from .page import CLOSE_TIMEOUT, HeadersFor, HopHook, PageRenderer, RenderResult
from .proxy import PolicyProxy
from .settings import BrowserSettings, find_chromium

if TYPE_CHECKING:
    from playwright.async_api import Browser, Playwright

log = logging.getLogger("trawl.worker.browser")

MEMORY_CHECK_SECONDS = 2.0


class BrowserUnavailable(Exception):
    """Chromium cannot be found or started."""


@dataclass(eq=False)  # identity: held in a set
class _Browser:
    browser: Browser
    marker: str
    contexts: ContextPool
    pid: int | None = None
    active: int = 0
    crashed: bool = False
    retired: bool = False
    checked_at: float = 0.0

    def lost(self) -> bool:
        """Whether the browser is gone under its pages (crashed, or its connection closed)."""
        return self.crashed or not self.browser.is_connected()


class BrowserPool:
    """Headless Chromium for one worker: browsers started lazily, replaced on crash or memory ceiling."""

    def __init__(
        self,
        allowed: Sequence[IPNetwork] = (),
        settings: BrowserSettings | None = None,
        metrics: BrowserMetrics | None = None,
    ) -> None:
        self.allowed = tuple(allowed)
        self.settings = settings or BrowserSettings()
        self.metrics = metrics
        self._pages = PageRenderer(self.settings, metrics)
        self._slots = asyncio.Semaphore(self.settings.pages_per_browser)
        self._lock = asyncio.Lock()
        self._pw: Playwright | None = None
        self._current: _Browser | None = None
        self._browsers: set[_Browser] = set()
        self._launch_proxy: PolicyProxy | None = None
        self.launches = 0
        self.closed = False
        self._no_sandbox: bool | None = None  # decided by the first launch (see _launch)

    # --- lifecycle ------------------------------------------------------------------------------

    async def _browser(self) -> _Browser:
        async with self._lock:
            cur = self._current
            if cur is not None and not cur.crashed and not cur.retired and cur.browser.is_connected():
                return cur
            if self.closed:
                raise BrowserUnavailable("the browser pool is closed")
            self._current = await self._launch()
            return self._current

    async def _launch(self) -> _Browser:
        executable = self.settings.executable or find_chromium()
        if executable is None:
            raise BrowserUnavailable("no Chromium found (install Debian's chromium package or set TRAWL_CHROMIUM)")
        try:
            from playwright.async_api import async_playwright
        except ImportError as exc:  # the plain worker image has no Playwright
            raise BrowserUnavailable(
                "Playwright is not installed: run Browser jobs on the browser worker image"
            ) from exc
        if self._pw is None:
            self._pw = await async_playwright().start()
        if self._launch_proxy is None:
            # Browser-wide proxy: anything not belonging to a page context (there should be nothing, the
            # background services are switched off) is still held to the address policy.
            self._launch_proxy = await PolicyProxy(self.allowed).start()
        marker = uuid.uuid4().hex
        try:
            browser = await self._start_chromium(executable, marker, self._no_sandbox)
        except Exception as exc:
            if self._no_sandbox is not None or self.settings.no_sandbox is not None or "sandbox" not in str(exc):
                raise BrowserUnavailable(f"cannot start Chromium ({executable}): {exc}") from exc
            # Chromium's sandbox needs unprivileged user namespaces, which the default seccomp profile of
            # container runtimes refuses: run without it (the pod's isolation remains) and say so.
            log.warning(
                "Chromium's sandbox cannot start here; running it with --no-sandbox", extra={"error": str(exc)[:500]}
            )
            if self.metrics is not None:
                self.metrics.restarts.labels("no_sandbox").inc()
            self._no_sandbox = True
            try:
                browser = await self._start_chromium(executable, marker, True)
            except Exception as exc2:
                raise BrowserUnavailable(f"cannot start Chromium ({executable}): {exc2}") from exc2
        if self._no_sandbox is None:
            self._no_sandbox = self.settings.args(marker, no_sandbox=None).count("--no-sandbox") > 0
        b = _Browser(
            browser, marker, ContextPool(browser, self.allowed, self.settings, self.metrics), procmem.find_pid(marker)
        )
        browser.on("disconnected", lambda _b: self._on_disconnected(b))
        self._browsers.add(b)
        self.launches += 1
        if self.metrics is not None:
            self.metrics.browsers.set(len(self._browsers))
        log.info("browser started", extra={"pid": b.pid, "executable": executable, "no_sandbox": self._no_sandbox})
        return b

    async def _start_chromium(self, executable: str, marker: str, no_sandbox: bool | None) -> Browser:
        assert self._pw is not None and self._launch_proxy is not None
        return await self._pw.chromium.launch(
            executable_path=executable,
            headless=True,
            args=self.settings.args(marker, no_sandbox=no_sandbox),
            ignore_default_args=["--enable-automation"],
            proxy={"server": self._launch_proxy.url, "bypass": "<-loopback>"},
            chromium_sandbox=True,  # Playwright would add --no-sandbox otherwise; settings.args decides
            timeout=60_000,
            handle_sigint=False,
            handle_sigterm=False,
            handle_sighup=False,
        )

    def _on_disconnected(self, b: _Browser) -> None:
        self._browsers.discard(b)
        if self.metrics is not None:
            self.metrics.browsers.set(len(self._browsers))
        if not b.retired and not self.closed:
            b.crashed = True
            if self.metrics is not None:
                self.metrics.restarts.labels("crash").inc()
            log.warning("browser process ended unexpectedly; the next page starts a new one", extra={"pid": b.pid})

    async def _retire(self, b: _Browser) -> None:
        """Replace ``b`` for new pages; close it once its pages are done."""
        async with self._lock:
            if self._current is b:
                self._current = None
        b.retired = True
        if b.active == 0:
            await self._close_browser(b)

    async def _close_browser(self, b: _Browser) -> None:
        b.retired = True
        await b.contexts.close_all()  # their proxies too
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await b.browser.close()
        self._browsers.discard(b)
        if self.metrics is not None:
            self.metrics.browsers.set(len(self._browsers))

    async def close(self) -> None:
        self.closed = True
        for b in list(self._browsers):
            await self._close_browser(b)
        self._current = None
        if self._pw is not None:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await self._pw.stop()
            self._pw = None
        if self._launch_proxy is not None:
            await self._launch_proxy.close()
            self._launch_proxy = None

    def browser_pids(self) -> list[int]:
        """Main process ids of the running browsers (tests kill them to simulate a crash)."""
        return [b.pid for b in self._browsers if b.pid is not None]

    async def memory_bytes(self) -> int:
        b = self._current
        if b is None or b.pid is None:
            return 0
        return await asyncio.to_thread(procmem.tree_pss_bytes, b.pid)

    async def _check_memory(self, b: _Browser) -> None:
        now = time.monotonic()
        if b.pid is None or b.retired or now - b.checked_at < MEMORY_CHECK_SECONDS:
            return
        b.checked_at = now
        used = await asyncio.to_thread(procmem.tree_pss_bytes, b.pid)
        if self.metrics is not None:
            self.metrics.memory.set(used)
            self.metrics.memory_per_page.set(used / max(1, b.active))
        if used > self.settings.memory_limit_bytes:
            log.info("browser over its memory ceiling; replacing it", extra={"pid": b.pid, "bytes": used})
            if self.metrics is not None:
                self.metrics.restarts.labels("memory").inc()
            await self._retire(b)

    # --- one page ------------------------------------------------------------------------------

    async def render(
        self,
        url: str,
        spec: RenderSpec,
        *,
        limits: FetchLimits = FetchLimits(),
        headers_for: HeadersFor | None = None,
        user_agent: str | None = None,
        before_navigation: HopHook | None = None,
        on_held: Callable[[float], None] | None = None,
        upstream: ProxyEndpoint | None = None,
        cookies: SessionJar | None = None,
        job_id: str = "",
    ) -> RenderResult:
        """Render ``url`` and return its HTML (through ``upstream``, the job's proxy, if any);
        raises :class:`FetchError` like a fetch would. ``on_held`` is
        told the seconds the page held the browser (its page open), whatever the outcome. Pages of one
        ``job_id`` as one identity share a context; without a job a page has a context of its own."""
        async with self._slots:
            started = time.monotonic()
            outcome = "ok"
            try:
                result = await self._render(
                    url, spec, limits, headers_for, user_agent, before_navigation, started, on_held, upstream, cookies,
                    job_id,
                )  # fmt: skip
                if result.info.timed_out:
                    outcome = "timed_out"
                return result
            except FetchError as exc:
                outcome = exc.failure_class.value
                raise
            finally:
                if self.metrics is not None:
                    self.metrics.renders.labels(outcome).inc()
                    self.metrics.render_seconds.observe(time.monotonic() - started)

    async def _context(
        self,
        b: _Browser,
        url: str,
        key: ContextKey | None,
        limits: FetchLimits,
        user_agent: str | None,
        upstream: ProxyEndpoint | None,
    ) -> SharedContext:
        """The context of ``key`` in ``b`` for one more page; a browser gone meanwhile is a crash."""
        try:
            return await b.contexts.acquire(key, limits, user_agent, upstream)
        except Exception as exc:
            if b.lost():
                raise BrowserCrashed(url, str(exc).split("\n", 1)[0]) from exc
            raise

    async def _render(
        self,
        url: str,
        spec: RenderSpec,
        limits: FetchLimits,
        headers_for: HeadersFor | None,
        user_agent: str | None,
        before_navigation: HopHook | None,
        started: float,
        on_held: Callable[[float], None] | None = None,
        upstream: ProxyEndpoint | None = None,
        cookies: SessionJar | None = None,
        job_id: str = "",
    ) -> RenderResult:
        # robots.txt and the rate limit for the page URL, before the browser does anything
        if before_navigation is not None:
            await before_navigation(url)
        try:
            b = await self._browser()
        except BrowserUnavailable as exc:
            raise FetchError(FailureClass.INTERNAL, str(exc), url=url) from exc
        b.active += 1
        if self.metrics is not None:
            self.metrics.pages.inc()
        # The page's time in the browser (its tenant's browserSecondsPerDay): from here, where it has a
        # browser, until its page is closed; the waits before it (a page slot, robots.txt, the rate
        # limit) held no page.
        held_from = time.monotonic()
        try:
            key = context_key(job_id, cookies, user_agent, upstream)
            ctx = await self._context(b, url, key, limits, user_agent, upstream)
            try:
                return await self._pages.render(
                    ctx, b.lost, url, spec, limits, headers_for, before_navigation, started, cookies
                )
            finally:
                await b.contexts.release(ctx)
        finally:
            if on_held is not None:
                on_held(time.monotonic() - held_from)
            b.active -= 1
            if self.metrics is not None:
                self.metrics.pages.dec()
            if b.retired and b.active == 0 and not b.crashed:
                await self._close_browser(b)
            elif not b.crashed:
                with contextlib.suppress(Exception):
                    await self._check_memory(b)
