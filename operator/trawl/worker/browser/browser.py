"""Rendering pages in headless Chromium (Debian's package, driven by Playwright; never a downloaded browser).

One :class:`BrowserPool` per worker process starts Chromium on the first Browser task. Each page is
rendered in its own browser context (no cookies, storage or cache shared between pages) whose only way
out is its own :class:`PolicyProxy` on loopback: the address policy is checked on every connection the
page makes, the page's traffic is capped, and closing the proxy at the time cap cuts whatever the page
still has open. Service workers, downloads and popups are off; navigations of the page's main frame to
anything but http(s) are refused, and every main-frame navigation passes robots.txt and the domain's
rate limit like a fetch hop.

A browser that crashes (or whose processes grow past the memory ceiling) is replaced: pages being
rendered in a crashed browser fail with class Connection, so their tasks are retried by the queue's
retry policy, never lost.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from trawl.api.policies import DEFAULT_USER_AGENT, FailureClass
from trawl.api.render import RenderSpec, RenderWait
from trawl.egress.addresses import IPNetwork

from ..fetch import FetchError, FetchLimits, FetchResult, classify_status, parse_retry_after
from . import procmem
from .crash import BrowserCrashed
from .metrics import BrowserMetrics
from .proxy import PolicyProxy
from .settings import BrowserSettings, find_chromium

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext, Page, Playwright, Request, Route

log = logging.getLogger("trawl.worker.browser")

HopHook = Callable[[str], Awaitable[None]]
CLOSE_TIMEOUT = 10.0
MEMORY_CHECK_SECONDS = 2.0
SNAPSHOT_GRACE = 5.0  # the snapshot (HTML, screenshot) of a page at its time cap gets this much longer


class BrowserUnavailable(Exception):
    """Chromium cannot be found or started."""


@dataclass
class RenderInfo:
    """What a render adds to a record besides the extracted data."""

    timed_out: bool = False
    blocked: list[str] = field(default_factory=list)
    blocked_count: int = 0
    requests: int = 0
    seconds: float = 0.0
    screenshot: bytes | None = None

    def record_fields(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "render": {
                "timedOut": self.timed_out,
                "blockedRequests": self.blocked_count,
                "connections": self.requests,
                "seconds": round(self.seconds, 3),
            }
        }
        if self.screenshot is not None:
            out["screenshot"] = base64.b64encode(self.screenshot).decode("ascii")
        return out


@dataclass
class RenderResult:
    fetch: FetchResult
    info: RenderInfo


@dataclass(eq=False)  # identity: held in a set
class _Browser:
    browser: Browser
    marker: str
    pid: int | None = None
    active: int = 0
    crashed: bool = False
    retired: bool = False
    checked_at: float = 0.0


def _is_closed_error(exc: BaseException) -> bool:
    text = str(exc).lower()
    return any(s in text for s in ("target closed", "has been closed", "browser closed", "crash", "disconnected"))


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
        self._slots = asyncio.Semaphore(self.settings.pages_per_browser)
        self._lock = asyncio.Lock()
        self._pw: Playwright | None = None
        self._current: _Browser | None = None
        self._browsers: set[_Browser] = set()
        self._launch_proxy: PolicyProxy | None = None
        self.launches = 0
        self.closed = False
        self._no_sandbox: bool | None = None  # decided by the first launch (see _launch)

    # --- lifecycle -----------------------------------------------------------------------------

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
        b = _Browser(browser, marker, pid=procmem.find_pid(marker))
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
        headers: dict[str, str] | None = None,
        user_agent: str | None = None,
        before_navigation: HopHook | None = None,
    ) -> RenderResult:
        """Render ``url`` and return its HTML; raises :class:`FetchError` like a fetch would."""
        async with self._slots:
            started = time.monotonic()
            outcome = "ok"
            try:
                result = await self._render(url, spec, limits, headers, user_agent, before_navigation, started)
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

    async def _render(
        self,
        url: str,
        spec: RenderSpec,
        limits: FetchLimits,
        headers: dict[str, str] | None,
        user_agent: str | None,
        before_navigation: HopHook | None,
        started: float,
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
        proxy = PolicyProxy(
            self.allowed,
            connect_timeout=limits.connect_timeout,
            max_bytes=limits.max_bytes * self.settings.traffic_factor,
        )
        page_state = _PageState()
        try:
            await proxy.start()
            try:
                async with asyncio.timeout(spec.timeout_seconds + SNAPSHOT_GRACE + CLOSE_TIMEOUT):
                    return await self._in_context(
                        b, proxy, page_state, url, spec, limits, headers, user_agent, before_navigation, started
                    )
            except TimeoutError as exc:
                raise FetchError(
                    FailureClass.TIMEOUT, f"render of {url} exceeded {spec.timeout_seconds:g}s", url=url
                ) from exc
            except FetchError:
                raise
            except Exception as exc:
                if b.crashed or not b.browser.is_connected() or page_state.crashed or _is_closed_error(exc):
                    raise BrowserCrashed(url, str(exc).split("\n", 1)[0]) from exc
                raise
        finally:
            await proxy.close()
            b.active -= 1
            if self.metrics is not None:
                self.metrics.pages.dec()
                self.metrics.blocked.inc(proxy.stats.blocked_count)
            if b.retired and b.active == 0 and not b.crashed:
                await self._close_browser(b)
            elif not b.crashed:
                with contextlib.suppress(Exception):
                    await self._check_memory(b)

    async def _in_context(
        self,
        b: _Browser,
        proxy: PolicyProxy,
        state: _PageState,
        url: str,
        spec: RenderSpec,
        limits: FetchLimits,
        headers: dict[str, str] | None,
        user_agent: str | None,
        before_navigation: HopHook | None,
        started: float,
    ) -> RenderResult:
        context = await b.browser.new_context(
            proxy={"server": proxy.url, "bypass": "<-loopback>"},
            service_workers="block",
            accept_downloads=False,
            user_agent=user_agent or DEFAULT_USER_AGENT,
            extra_http_headers={k: v for k, v in (headers or {}).items() if k.lower() != "user-agent"} or None,
            viewport={"width": 1280, "height": 800},
        )
        try:
            page = await context.new_page()
            page.on("crash", lambda _p: state.mark_crashed())
            page.on("popup", lambda p: state.spawn(p.close()))
            blocked_types = {str(r.value) for r in spec.block_resources or ()}
            await context.route(
                "**/*", lambda route: self._on_route(route, page, state, blocked_types, before_navigation)
            )
            deadline = started + spec.timeout_seconds
            return await self._navigate_and_wait(page, proxy, state, url, spec, limits, deadline, started)
        finally:
            state.cancel_all()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    await context.close()

    async def _on_route(
        self,
        route: Route,
        page: Page,
        state: _PageState,
        blocked_types: set[str],
        before_navigation: HopHook | None,
    ) -> None:
        request: Request = route.request
        try:
            if request.resource_type in blocked_types:
                self._aborted("resource_type")
                await route.abort("blockedbyclient")
                return
            if request.is_navigation_request() and request.frame == page.main_frame:
                if not request.url.startswith(("http://", "https://")):
                    self._aborted("scheme")
                    await route.abort("blockedbyclient")
                    return
                if state.first_navigation_seen and before_navigation is not None:
                    # a script or meta refresh moved the page: robots.txt and the rate limit apply again
                    try:
                        await before_navigation(request.url)
                    except FetchError as exc:
                        state.navigation_error = exc
                        self._aborted("navigation")
                        await route.abort("blockedbyclient")
                        return
                state.first_navigation_seen = True
            await route.continue_()
        except Exception as exc:  # the page or context closed meanwhile
            log.debug("route handling ended", extra={"error": repr(exc)})

    def _aborted(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.aborted.labels(reason).inc()

    async def _navigate_and_wait(
        self,
        page: Page,
        proxy: PolicyProxy,
        state: _PageState,
        url: str,
        spec: RenderSpec,
        limits: FetchLimits,
        deadline: float,
        started: float,
    ) -> RenderResult:
        from playwright.async_api import Error as PlaywrightError
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        def remaining_ms() -> float:
            return max(1.0, (deadline - time.monotonic()) * 1000)

        timed_out = False
        try:
            response = await page.goto(url, wait_until="load", timeout=remaining_ms())
        except PlaywrightTimeout as exc:
            if spec.wait_for not in (RenderWait.NETWORK_IDLE, RenderWait.DELAY) or page.url in ("", "about:blank"):
                raise FetchError(
                    FailureClass.TIMEOUT, f"page {url} did not load within {spec.timeout_seconds:g}s", url=url
                ) from exc
            response, timed_out = None, True  # the document is there; its subresources are not all done
        except PlaywrightError as exc:
            raise self._navigation_failure(url, proxy, state, exc) from exc
        if response is not None:
            retry_after = parse_retry_after(await _header(response, "retry-after"))
            failure = classify_status(response.status, retry_after)
            if failure is not None:
                failure.url = url
                raise failure
        if not timed_out:
            try:
                if spec.wait_for == RenderWait.NETWORK_IDLE:
                    await page.wait_for_load_state("networkidle", timeout=remaining_ms())
                elif spec.wait_for == RenderWait.SELECTOR:
                    assert spec.selector is not None
                    await page.wait_for_selector(spec.selector, state="attached", timeout=remaining_ms())
                elif spec.wait_for == RenderWait.DELAY:
                    pause = min(spec.delay_seconds, max(0.0, deadline - time.monotonic()))
                    await asyncio.sleep(pause)
                    timed_out = pause < spec.delay_seconds
            except PlaywrightTimeout as exc:
                if spec.wait_for == RenderWait.SELECTOR:
                    raise FetchError(
                        FailureClass.TIMEOUT,
                        f"selector {spec.selector!r} did not appear on {url} within {spec.timeout_seconds:g}s",
                        url=url,
                    ) from exc
                timed_out = True  # never idle: the page is taken as it is at the time cap
        if state.crashed:
            raise BrowserCrashed(url, "the page's renderer process crashed")
        if proxy.stats.over_budget:
            raise FetchError(FailureClass.TOO_LARGE, f"page traffic exceeded {proxy.max_bytes} bytes on {url}", url=url)
        final_url = page.url
        if not final_url.startswith(("http://", "https://")):
            raise FetchError(FailureClass.BAD_CONTENT, f"page {url} ended on {final_url[:100]!r}", url=url)
        # the snapshot: stop scripts from changing the page further, then read it
        async with asyncio.timeout(SNAPSHOT_GRACE + 5.0):
            with contextlib.suppress(PlaywrightError):
                await page.evaluate("window.stop()")
            html = await page.content()
            shot = await page.screenshot(type="png", timeout=SNAPSHOT_GRACE * 1000) if spec.screenshot else None
        body = html.encode("utf-8")
        if len(body) > limits.max_bytes:
            raise FetchError(
                FailureClass.TOO_LARGE, f"rendered HTML of {url} exceeds {limits.max_bytes} bytes", url=url
            )
        elapsed = time.monotonic() - started
        fetch = FetchResult(
            url=url,
            final_url=final_url,
            status=response.status if response is not None else 200,
            headers={},
            body=body,
            content_type="text/html",
            charset="utf-8",
            elapsed=elapsed,
            wire_bytes=proxy.stats.bytes_down,
        )
        info = RenderInfo(
            timed_out=timed_out,
            blocked=list(proxy.stats.blocked),
            blocked_count=proxy.stats.blocked_count,
            requests=proxy.stats.connections,
            seconds=elapsed,
            screenshot=shot,
        )
        return RenderResult(fetch, info)

    def _navigation_failure(self, url: str, proxy: PolicyProxy, state: _PageState, exc: Exception) -> FetchError:
        if state.navigation_error is not None:
            return state.navigation_error
        if state.crashed or _is_closed_error(exc):
            return BrowserCrashed(url, str(exc).split("\n", 1)[0])
        if proxy.stats.blocked:
            return FetchError(FailureClass.BLOCKED_ADDRESS, f"refused {url}: {proxy.stats.blocked[0]}", url=url)
        if proxy.stats.over_budget:
            return FetchError(FailureClass.TOO_LARGE, f"page traffic exceeded {proxy.max_bytes} bytes", url=url)
        text = str(exc).split("\n", 1)[0]
        return FetchError(FailureClass.CONNECTION, f"navigation to {url} failed: {text}", url=url)


async def _header(response: Any, name: str) -> str | None:
    try:
        value = await response.header_value(name)
    except Exception:
        return None
    return str(value) if value is not None else None


class _PageState:
    """Mutable facts about one page, set from Playwright's event callbacks."""

    def __init__(self) -> None:
        self.crashed = False
        self.first_navigation_seen = False
        self.navigation_error: FetchError | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    def mark_crashed(self) -> None:
        self.crashed = True

    def spawn(self, coro: Awaitable[Any]) -> None:
        async def run() -> None:
            with contextlib.suppress(Exception):
                await coro

        t = asyncio.ensure_future(run())
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    def cancel_all(self) -> None:
        for t in list(self._tasks):
            t.cancel()


if TYPE_CHECKING:  # keep BrowserContext referenced for readers of the types above
    _ = BrowserContext
