"""Rendering one page in a running Chromium: its page in a shared context, the hop hook, navigation, waits, snapshot.

Each page opens in the browser context its job shares as one identity (:mod:`.contexts`: never another
job's, nor another session's) whose only way out is the context's :class:`PolicyProxy` on loopback: the
address policy is checked on every connection the page makes, the context's traffic is capped, and
closing the proxy with the context cuts whatever is still open. The page reads the proxy's counters as a
window (its start to its end) and counts as its own only the refusals of destinations it asked for.
Service workers, downloads and popups are off; navigations of the page's main frame to anything but
http(s) are refused, and every main-frame navigation passes robots.txt and the domain's rate limit like
a fetch hop. Without job headers only documents and blocked resource types are paused for those
decisions (:meth:`PageRenderer._intercept_navigations`); the rest go straight to the proxy. The job's
headers are added request by request (every request routed), to the requests whose origin is one of
the job's own (``headers_for``), never to the whole context: a page's third-party subresources (an
analytics script, a CDN, a site of the author's choosing) get none of them, nor a redirect away from the
origin. Which browser a page runs in, and its replacement after a crash, is the pool's business
(:mod:`.pool`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from trawl.api.plain import FailureClass
from trawl.api.render import RenderSpec, RenderWait

from ..cookies import SessionJar
from ..fetch import FetchError, FetchLimits, FetchResult, classify_status, parse_retry_after
from .contexts import SharedContext
from .crash import BrowserCrashed
from .metrics import BrowserMetrics
from .proxy import MAX_BLOCKED_KEPT, PolicyProxy
from .settings import BrowserSettings

if TYPE_CHECKING:
    from playwright.async_api import CDPSession, Page, Request, Response, Route

log = logging.getLogger("trawl.worker.browser")

HopHook = Callable[[str], Awaitable[None]]
HeadersFor = Callable[[str], dict[str, str] | None]  # the headers a request to a URL carries (None: none)
CLOSE_TIMEOUT = 10.0  # closing a context, a browser or Playwright takes at most this long
SNAPSHOT_GRACE = 5.0  # the snapshot (HTML, screenshot) of a page at its time cap gets this much longer
MAX_AUTHORITIES = 1024  # destinations remembered per page, to tell its refusals from its siblings'
# The blockable resource types (RenderSpec.block_resources) as Chromium's Fetch domain names them
CDP_RESOURCE_TYPES = {"image": "Image", "font": "Font", "media": "Media", "stylesheet": "Stylesheet"}


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


def is_closed_error(exc: BaseException) -> bool:
    """Whether Playwright's error says the page, its context or the browser went away under it."""
    text = str(exc).lower()
    return any(s in text for s in ("target closed", "has been closed", "browser closed", "crash", "disconnected"))


def _remaining_ms(deadline: float) -> float:
    return max(1.0, (deadline - time.monotonic()) * 1000)


class PageRenderer:
    """Renders pages in the shared context it is given, behind that context's policy proxy."""

    def __init__(self, settings: BrowserSettings, metrics: BrowserMetrics | None) -> None:
        self.settings = settings
        self.metrics = metrics

    async def render(
        self,
        ctx: SharedContext,
        lost: Callable[[], bool],
        url: str,
        spec: RenderSpec,
        limits: FetchLimits,
        headers_for: HeadersFor | None,
        before_navigation: HopHook | None,
        started: float,
        cookies: SessionJar | None = None,
    ) -> RenderResult:
        """Render ``url`` in a new page of ``ctx`` (with ``cookies``, a session's jar: its cookies put in the
        context first, the context's taken back at the end); ``lost`` says whether the browser itself is
        gone (crashed or disconnected), which makes any error of the page a :class:`BrowserCrashed`. A page
        that cannot be closed cleanly retires its context."""
        state = _PageState(ctx.proxy)
        try:
            try:
                async with asyncio.timeout(spec.timeout_seconds + SNAPSHOT_GRACE + CLOSE_TIMEOUT):
                    return await self._in_page(
                        ctx, state, url, spec, limits, headers_for, before_navigation, started, cookies
                    )
            except TimeoutError as exc:
                raise FetchError(
                    FailureClass.TIMEOUT, f"render of {url} exceeded {spec.timeout_seconds:g}s", url=url
                ) from exc
            except FetchError:
                raise
            except Exception as exc:
                if lost() or state.crashed or is_closed_error(exc):
                    raise BrowserCrashed(url, str(exc).split("\n", 1)[0]) from exc
                raise
        finally:
            if state.page_left_open:
                ctx.retired = True  # a page that would not close: its context goes, and every connection with it
            if self.metrics is not None:
                self.metrics.blocked.inc(len(state.refused()))

    async def _in_page(
        self,
        ctx: SharedContext,
        state: _PageState,
        url: str,
        spec: RenderSpec,
        limits: FetchLimits,
        headers_for: HeadersFor | None,
        before_navigation: HopHook | None,
        started: float,
        cookies: SessionJar | None = None,
    ) -> RenderResult:
        context = ctx.context
        if cookies is not None:
            if ctx.active == 1:  # alone in its context: exactly the session's jar, nothing older
                await context.clear_cookies()
            if jar := cookies.for_browser():
                await context.add_cookies(jar)  # type: ignore[arg-type]
        page = await context.new_page()
        state.page_left_open = True
        try:
            page.on("crash", lambda _p: state.mark_crashed())
            page.on("popup", lambda p: state.spawn(p.close()))
            blocked_types = {str(r.value) for r in spec.block_resources or ()}
            if headers_for is None:
                await self._intercept_navigations(page, state, blocked_types, before_navigation)
            else:  # the job's headers go request by request: every request of the page is routed
                # a redirect's next request is not routed: a failed one still names the destination it was for
                page.on("requestfailed", lambda r: state.asked(r.url))
                await page.route(
                    "**/*",
                    lambda route: self._on_route(route, page, state, blocked_types, before_navigation, headers_for),
                )
            deadline = state.deadline = started + spec.timeout_seconds
            response, timed_out = await self._navigate(page, state, url, spec, deadline)
            if not timed_out:
                timed_out = await self._wait(page, url, spec, deadline)
            return await self._snapshot(page, state, url, spec, limits, response, timed_out, started)
        finally:
            state.cancel_all()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(CLOSE_TIMEOUT):
                    if cookies is not None:  # what the page's responses and scripts set, back to the session
                        cookies.take_browser(await context.cookies())  # type: ignore[arg-type]
                    await page.close()
                    state.page_left_open = False

    async def _on_route(
        self,
        route: Route,
        page: Page,
        state: _PageState,
        blocked_types: set[str],
        before_navigation: HopHook | None,
        headers_for: HeadersFor | None,
    ) -> None:
        request: Request = route.request
        state.asked(request.url)
        try:
            if request.resource_type in blocked_types:
                self._aborted("resource_type")
                await route.abort("blockedbyclient")
                return
            main_frame_navigation = request.is_navigation_request() and request.frame == page.main_frame
            if main_frame_navigation and await self._navigation_refused(request.url, state, before_navigation):
                await route.abort("blockedbyclient")
                return
            extra = headers_for(request.url) if headers_for is not None else None
            if extra:
                await self._with_headers(route, request, extra, state)
            else:
                await route.continue_()
        except Exception as exc:  # the page or context closed meanwhile
            log.debug("route handling ended", extra={"error": repr(exc)})

    async def _intercept_navigations(
        self, page: Page, state: _PageState, blocked_types: set[str], before_navigation: HopHook | None
    ) -> None:
        """Pause only what needs a decision: documents (the main frame's navigations, redirects included)
        and the blocked resource types, through Chromium's Fetch domain with patterns by resource type.

        Playwright's ``page.route`` can only filter by URL, so it pauses every request of the page (a round
        trip Chromium -> Playwright's driver -> this process and back for each script, XHR and fetch) and
        turns the HTTP cache off while it is set. The address policy does not need it: the context's
        policy proxy checks every connection at connect time. What the hook adds is decided on documents
        (a main-frame navigation's scheme, robots.txt and the rate limit) and on resource types (blocking),
        so only those are paused; the destinations the page asks for (for its count of refusals) come from
        its request events, which do not hold the request."""
        session = await page.context.new_cdp_session(page)
        page.on("request", lambda r: state.asked(r.url))  # every request, a redirect's next one included
        blocked = {CDP_RESOURCE_TYPES[t] for t in blocked_types if t in CDP_RESOURCE_TYPES}
        session.on(
            "Fetch.requestPaused",
            lambda event: state.spawn(self._on_paused(session, event, state, blocked, before_navigation)),
        )
        patterns = [{"urlPattern": "*", "resourceType": t, "requestStage": "Request"} for t in ("Document", *blocked)]
        await session.send("Fetch.enable", {"patterns": patterns})

    async def _on_paused(
        self,
        session: CDPSession,
        event: dict[str, Any],
        state: _PageState,
        blocked: set[str],
        before_navigation: HopHook | None,
    ) -> None:
        request_id = event["requestId"]
        url = str(event.get("request", {}).get("url", ""))
        state.asked(url)
        try:
            resource_type = event.get("resourceType")
            refused = False
            if resource_type in blocked:
                self._aborted("resource_type")
                refused = True
            elif resource_type == "Document":
                frame = event.get("frameId")
                if state.main_frame is None:  # a new page's first document is its main frame's navigation
                    state.main_frame = frame
                if frame == state.main_frame:
                    refused = await self._navigation_refused(url, state, before_navigation)
            if refused:
                await session.send("Fetch.failRequest", {"requestId": request_id, "errorReason": "BlockedByClient"})
            else:
                await session.send("Fetch.continueRequest", {"requestId": request_id})
        except Exception as exc:  # the page or context closed meanwhile
            log.debug("paused request handling ended", extra={"error": repr(exc)})

    async def _navigation_refused(self, url: str, state: _PageState, before_navigation: HopHook | None) -> bool:
        """Whether a main-frame navigation to ``url`` is refused: anything but http(s), or (after the page's
        first) one that robots.txt or the rate limit refuses, as for a fetch's hop (``state.navigation_error``)."""
        if not url.startswith(("http://", "https://")):
            self._aborted("scheme")
            return True
        if state.first_navigation_seen and before_navigation is not None:
            # a script, a meta refresh or a redirect moved the page: robots.txt and the rate limit apply again
            try:
                await before_navigation(url)
            except FetchError as exc:
                state.navigation_error = exc
                self._aborted("navigation")
                return True
        state.first_navigation_seen = True
        return False

    async def _with_headers(self, route: Route, request: Request, extra: dict[str, str], state: _PageState) -> None:
        """Send a request of the job's own origin with the job's headers, and hand the page its answer.

        Chromium keeps a request's added headers on the redirects it follows, to any origin: so the request
        is made by Playwright (through the page's policy proxy, as the context's own requests are) without
        following redirects, and a redirect goes back to the page, whose next request is routed anew."""
        from playwright.async_api import Error as PlaywrightError

        names = {k.lower() for k in extra}
        headers = {k: v for k, v in (await request.all_headers()).items() if k.lower() not in names}
        headers.update({k: v for k, v in extra.items() if k.lower() != "user-agent"})  # the context's UA stays
        try:
            response = await route.fetch(headers=headers, max_redirects=0, timeout=_remaining_ms(state.deadline))
        except PlaywrightError as exc:
            log.debug("request failed", extra={"url": request.url, "error": str(exc).split("\n", 1)[0]})
            await route.abort("failed")
            return
        await route.fulfill(response=response)

    def _aborted(self, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.aborted.labels(reason).inc()

    async def _navigate(
        self, page: Page, state: _PageState, url: str, spec: RenderSpec, deadline: float
    ) -> tuple[Response | None, bool]:
        """Load ``url``: its main response (None when the page took the time cap to load, which a network-idle
        or delay wait accepts), and whether it timed out."""
        from playwright.async_api import Error as PlaywrightError
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        timed_out = False
        try:
            response = await page.goto(url, wait_until="load", timeout=_remaining_ms(deadline))
        except PlaywrightTimeout as exc:
            if spec.wait_for not in (RenderWait.NETWORK_IDLE, RenderWait.DELAY) or page.url in ("", "about:blank"):
                raise FetchError(
                    FailureClass.TIMEOUT, f"page {url} did not load within {spec.timeout_seconds:g}s", url=url
                ) from exc
            response, timed_out = None, True  # the document is there; its subresources are not all done
        except PlaywrightError as exc:
            raise self._navigation_failure(url, state, exc) from exc
        if response is not None:
            status = response.status
            # the header is read (one more round trip to the browser) only for the statuses that use it
            retry_after = (
                parse_retry_after(await _header(response, "retry-after")) if status == 429 or status >= 500 else None
            )
            failure = classify_status(status, retry_after)
            if failure is not None:
                failure.url = url
                raise failure
        return response, timed_out

    async def _wait(self, page: Page, url: str, spec: RenderSpec, deadline: float) -> bool:
        """The spec's wait after the load; whether the time cap cut it short."""
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        try:
            if spec.wait_for == RenderWait.NETWORK_IDLE:
                await page.wait_for_load_state("networkidle", timeout=_remaining_ms(deadline))
            elif spec.wait_for == RenderWait.SELECTOR:
                assert spec.selector is not None
                # a locator's wait returns nothing: no element handle adopted into the page's main world
                # and sent here (what wait_for_selector does on success, three more round trips)
                await page.locator(spec.selector).first.wait_for(state="attached", timeout=_remaining_ms(deadline))
            elif spec.wait_for == RenderWait.DELAY:
                pause = min(spec.delay_seconds, max(0.0, deadline - time.monotonic()))
                await asyncio.sleep(pause)
                return pause < spec.delay_seconds
        except PlaywrightTimeout as exc:
            if spec.wait_for == RenderWait.SELECTOR:
                raise FetchError(
                    FailureClass.TIMEOUT,
                    f"selector {spec.selector!r} did not appear on {url} within {spec.timeout_seconds:g}s",
                    url=url,
                ) from exc
            return True  # never idle: the page is taken as it is at the time cap
        return False

    async def _snapshot(
        self,
        page: Page,
        state: _PageState,
        url: str,
        spec: RenderSpec,
        limits: FetchLimits,
        response: Response | None,
        timed_out: bool,
        started: float,
    ) -> RenderResult:
        """The page as it is now, as a fetch result, unless it crashed, overran its traffic or left http(s)."""
        from playwright.async_api import Error as PlaywrightError

        if state.crashed:
            raise BrowserCrashed(url, "the page's renderer process crashed")
        proxy = state.proxy
        if proxy.stats.over_budget:
            raise FetchError(
                FailureClass.TOO_LARGE, f"traffic of {url} and its context exceeded {proxy.max_bytes} bytes", url=url
            )
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
            wire_bytes=proxy.stats.bytes_down - state.bytes0,
        )
        refused = state.refused()
        info = RenderInfo(
            timed_out=timed_out,
            blocked=refused[:MAX_BLOCKED_KEPT],
            blocked_count=len(refused),
            requests=proxy.stats.connections - state.connections0,
            seconds=elapsed,
            screenshot=shot,
        )
        return RenderResult(fetch, info)

    def _navigation_failure(self, url: str, state: _PageState, exc: Exception) -> FetchError:
        proxy = state.proxy
        if state.navigation_error is not None:
            return state.navigation_error
        if state.crashed or is_closed_error(exc):
            return BrowserCrashed(url, str(exc).split("\n", 1)[0])
        if refused := state.refused():
            return FetchError(FailureClass.BLOCKED_ADDRESS, f"refused {url}: {refused[0]}", url=url)
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


def authority_of(url: str) -> str | None:
    """``host:port`` of ``url`` as the policy proxy names a destination (lower case, default ports filled)."""
    try:
        parts = urlsplit(url)
        port = parts.port or {"http": 80, "ws": 80, "https": 443, "wss": 443}.get(parts.scheme)
    except ValueError:
        return None
    host = parts.hostname
    if not host or port is None:
        return None
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


class _PageState:
    """Mutable facts about one page, set from Playwright's event callbacks, and its window on the
    context's proxy: the counters as they were when the page started and the destinations it asked for."""

    def __init__(self, proxy: PolicyProxy) -> None:
        self.proxy = proxy
        self.seq0 = proxy.stats.blocked_count
        self.bytes0 = proxy.stats.bytes_down
        self.connections0 = proxy.stats.connections
        self.authorities: set[str] = set()
        self.page_left_open = False
        self.crashed = False
        self.first_navigation_seen = False
        self.main_frame: str | None = None  # the main frame's id in Chromium's Fetch events
        self.navigation_error: FetchError | None = None
        self.deadline = time.monotonic() + 30.0  # the render's time cap, once it starts
        self._tasks: set[asyncio.Task[Any]] = set()

    def mark_crashed(self) -> None:
        self.crashed = True

    def asked(self, url: str) -> None:
        """The page asked for ``url`` (routed, or a redirect's request that failed)."""
        if len(self.authorities) < MAX_AUTHORITIES and (authority := authority_of(url)) is not None:
            self.authorities.add(authority)

    def refused(self) -> list[str]:
        """The proxy's refusals since the page started, of destinations this page asked for."""
        return self.proxy.stats.refused_since(self.seq0, self.authorities)

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
