"""The worker's handle on browser rendering: a :class:`BrowserPool` made on the first Browser task.

Plain workers never start Chromium or import Playwright (nor the browser pool: imported on the first
Browser task, off the start-up path of every other worker); the runner calls :meth:`Renderer.render`
instead of a fetch for jobs whose ``spec.render.mode`` is Browser.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry

from trawl.egress.addresses import IPNetwork

from ..cookies import SessionJar
from ..fetch import FetchLimits, FetchResult
from ..proxies import ProxyEndpoint
from .crash import BrowserCrashed
from .metrics import BrowserMetrics
from .settings import BrowserSettings
from .usage import BrowserTime

if TYPE_CHECKING:  # a pydantic model: only jobs that render build one (jobsettings)
    from trawl.api.render import RenderSpec

if TYPE_CHECKING:
    from .page import HeadersFor, HopHook
    from .pool import BrowserPool

__all__ = ["BrowserCrashed", "Renderer"]


class Renderer:
    def __init__(
        self,
        allowed: Sequence[IPNetwork],
        registry: CollectorRegistry,
        settings: BrowserSettings | None = None,
    ) -> None:
        self.allowed = tuple(allowed)
        self.registry = registry
        self.settings = settings
        self.pool: BrowserPool | None = None
        # Page time per job, for the tenants' browserSecondsPerDay: the runner flushes it to the queue.
        self.time = BrowserTime()

    def _pool(self) -> BrowserPool:
        if self.pool is None:
            from .pool import BrowserPool

            self.pool = BrowserPool(
                self.allowed, self.settings or BrowserSettings.from_env(), BrowserMetrics(self.registry)
            )
        return self.pool

    async def render(
        self,
        url: str,
        spec: RenderSpec,
        limits: FetchLimits,
        headers_for: HeadersFor | None,
        user_agent: str | None,
        before_hop: HopHook,
        *,
        job_id: str = "",
        proxy: ProxyEndpoint | None = None,
        cookies: SessionJar | None = None,
    ) -> tuple[FetchResult, dict[str, Any]]:
        """The rendered page as a fetch result, and the fields it adds to the record. ``headers_for``: the
        headers a request of the page to a URL carries (the job's, to its own origins), None for none.
        ``job_id``: whose page time it is (:attr:`time`), counted whether the render succeeds or not."""

        def held(seconds: float) -> None:
            if job_id:
                self.time.add(job_id, seconds)

        rendered = await self._pool().render(
            url,
            spec,
            limits=limits,
            headers_for=headers_for,
            user_agent=user_agent,
            before_navigation=before_hop,
            on_held=held,
            upstream=proxy,
            cookies=cookies,
            job_id=job_id,  # the job's pages share a context per identity (browser.contexts)
        )
        return rendered.fetch, rendered.info.record_fields()

    async def close(self) -> None:
        if self.pool is not None:
            await self.pool.close()
