"""Browser contexts shared by the pages of one job rendered as one identity, each behind its own policy proxy.

A context (cookies, storage, cache, the renderer processes of its sites) is what a page can leave behind
for the next one, so it is never shared beyond what already shares that state: its key is the job, the
session (``SessionJar.owner``: a session's own id, "" without a session), the user agent and the upstream
proxy. Two jobs (two tenants) never render in one context; neither do two sessions of one job, so a
session's rotation and retirement mean what they mean for plain fetching. A page without a job (a direct
call) gets a context of its own, closed with it.

Sharing pays because Chromium keeps the pages of one context and one site in the renderer processes it
already has, where a context per page starts a new renderer for every page (docs/benchmarks.md, "Browser
rendering"). The bounds: a context serves at most ``pages_per_context`` pages (then it is retired: new
pages get a new one, it closes when its last page is done), closes once idle for ``IDLE_SECONDS``, and is
retired at once when its traffic overran the budget (every page it served granted ``traffic_factor`` x the
job's ``maxResponseBytes``); the browser's memory ceiling (pool.py) still replaces the whole browser.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trawl.api.plain import DEFAULT_USER_AGENT
from trawl.egress.addresses import IPNetwork

from ..cookies import SessionJar
from ..fetch import FetchLimits
from ..proxies import ProxyEndpoint
from .metrics import BrowserMetrics
from .proxy import PolicyProxy
from .settings import BrowserSettings

if TYPE_CHECKING:
    from playwright.async_api import Browser, BrowserContext

log = logging.getLogger("trawl.worker.browser")

IDLE_SECONDS = 5.0  # an idle context (no page in it) is closed after this long
CLOSE_TIMEOUT = 10.0


@dataclass(frozen=True)
class ContextKey:
    """Who may share a context: one job, as one identity. ``upstream`` holds the proxy's URL with its
    credentials (two accounts on one proxy are two identities); it lives in memory only, never logged."""

    job_id: str
    owner: str = field(default="")
    user_agent: str = field(default="")
    upstream: str = field(default="", repr=False)


def context_key(
    job_id: str, cookies: SessionJar | None, user_agent: str | None, upstream: ProxyEndpoint | None
) -> ContextKey | None:
    """The key of the context a page renders in; None (a context of its own) for a page of no job."""
    if not job_id:
        return None
    return ContextKey(
        job_id,
        cookies.owner if cookies is not None else "",
        user_agent or DEFAULT_USER_AGENT,
        upstream.url if upstream is not None else "",
    )


@dataclass(eq=False)
class SharedContext:
    """A browser context, its policy proxy and its pages in flight."""

    key: ContextKey | None
    context: BrowserContext
    proxy: PolicyProxy
    max_pages: int
    active: int = 0
    served: int = 0
    retired: bool = False
    closed: bool = False
    idle_timer: asyncio.TimerHandle | None = None

    def usable(self) -> bool:
        """Whether a new page may still start here."""
        return not (self.retired or self.closed or self.served >= self.max_pages or self.proxy.stats.over_budget)


class ContextPool:
    """The shared contexts of one browser."""

    def __init__(
        self,
        browser: Browser,
        allowed: Sequence[IPNetwork],
        settings: BrowserSettings,
        metrics: BrowserMetrics | None = None,
    ) -> None:
        self.browser = browser
        self.allowed = tuple(allowed)
        self.settings = settings
        self.metrics = metrics
        self._by_key: dict[ContextKey, SharedContext] = {}
        self._all: set[SharedContext] = set()
        self._lock = asyncio.Lock()
        self.opened = 0

    async def acquire(
        self,
        key: ContextKey | None,
        limits: FetchLimits,
        user_agent: str | None,
        upstream: ProxyEndpoint | None,
    ) -> SharedContext:
        """A context for one more page of ``key`` (its share of traffic granted), opened if need be."""
        async with self._lock:
            ctx = self._by_key.get(key) if key is not None else None
            if ctx is None or not ctx.usable():
                if ctx is not None:
                    self._retire(ctx)
                ctx = await self._open(key, limits, user_agent, upstream)
            ctx.active += 1
            ctx.served += 1
            if ctx.idle_timer is not None:
                ctx.idle_timer.cancel()
                ctx.idle_timer = None
            ctx.proxy.grant(limits.max_bytes * self.settings.traffic_factor)
            return ctx

    async def _open(
        self, key: ContextKey | None, limits: FetchLimits, user_agent: str | None, upstream: ProxyEndpoint | None
    ) -> SharedContext:
        proxy = await PolicyProxy(
            self.allowed, connect_timeout=limits.connect_timeout, max_bytes=0, upstream=upstream
        ).start()
        try:
            context = await self.browser.new_context(
                proxy={"server": proxy.url, "bypass": "<-loopback>"},
                service_workers="block",
                accept_downloads=False,
                user_agent=user_agent or DEFAULT_USER_AGENT,
                viewport={"width": 1280, "height": 800},
            )
        except BaseException:
            await proxy.close()
            raise
        ctx = SharedContext(key, context, proxy, self.settings.pages_per_context if key is not None else 1)
        self._all.add(ctx)
        if key is not None:
            self._by_key[key] = ctx
        self.opened += 1
        if self.metrics is not None:
            self.metrics.contexts_opened.inc()
            self.metrics.contexts.set(len(self._all))
        return ctx

    def _retire(self, ctx: SharedContext) -> None:
        """No new page in ``ctx``; it closes once its pages are done."""
        ctx.retired = True
        if ctx.key is not None and self._by_key.get(ctx.key) is ctx:
            del self._by_key[ctx.key]

    async def release(self, ctx: SharedContext, *, broken: bool = False) -> None:
        """A page of ``ctx`` is done (``broken``: it could not be closed cleanly, so the context goes too)."""
        ctx.active -= 1
        if broken or not ctx.usable():
            self._retire(ctx)
        if ctx.active > 0:
            return
        if ctx.retired:
            await self._close(ctx)
        else:
            loop = asyncio.get_running_loop()
            ctx.idle_timer = loop.call_later(IDLE_SECONDS, lambda: self._spawn_idle_close(ctx))

    def _spawn_idle_close(self, ctx: SharedContext) -> None:
        ctx.idle_timer = None
        if ctx.active == 0 and not ctx.closed:
            self._retire(ctx)
            task = asyncio.ensure_future(self._close(ctx))
            task.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _close(self, ctx: SharedContext) -> None:
        if ctx.closed:
            return
        ctx.closed = True
        self._retire(ctx)
        if ctx.idle_timer is not None:
            ctx.idle_timer.cancel()
            ctx.idle_timer = None
        with contextlib.suppress(Exception):
            async with asyncio.timeout(CLOSE_TIMEOUT):
                await ctx.context.close()
        await ctx.proxy.close()  # cuts whatever is still open
        self._all.discard(ctx)
        if self.metrics is not None:
            self.metrics.contexts.set(len(self._all))

    def open_count(self) -> int:
        return len(self._all)

    async def close_all(self) -> None:
        for ctx in list(self._all):
            await self._close(ctx)
