"""One task, from its job's spec to an outcome: the per-task path of the worker.

Per task: look up the job (:mod:`.jobcache`), check the domain's circuit breaker, take a pool-wide
concurrency slot for the domain, fetch or render the page (robots.txt and the pool-wide rate limit are
checked before every hop), extract, select the discovered links to enqueue (crawl mode), build the
record, and hand links and record to the finisher, which writes and acks in batches. Failures are
classified: ``Retry-After`` on 429/503, long rate-limit waits, an open breaker and a crashed browser give
the task back with a delay (no attempt spent, no lease held while waiting); a link robots.txt disallows
is skipped; everything else goes to ``fail``, where the queue applies the job's retry policy. What each
failure class means to the breaker, the adaptive delay and the queue is decided by the pure functions
and tables at the top.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from redis.exceptions import OutOfMemoryError

from trawl.api.plain import FailureClass
from trawl.jobspec.podfiles import MissingSecret
from trawl.queue.claimsize import TaskTimer
from trawl.queue.errors import QueueUnavailable
from trawl.queue.model import QueueClient, Task, sweep_cursor
from trawl.queue.notes import JobNotes
from trawl.queue.pagestate import PageStates
from trawl.queue.proxyusage import ProxyUsage
from trawl.redisconn.client import TRANSIENT_ERRORS
from trawl.sinks.base import Record, record_key
from trawl.worker.browser.hook import BrowserCrashed, Renderer

from .archiving import JobArchives, capture_of
from .breaker import CircuitBreaker, Verdict
from .extract import Page
from .fetch import HTML_TYPES, Fetcher, FetchError, FetchResult
from .finish import Finish, Finisher
from .formats import bound_screenshot
from .identity import Identities
from .jobcache import Job, JobCache
from .jobsettings import BadSpec, WorkerJobSpec
from .metrics import WorkerMetrics
from .parsepool import ParseLimit, ParsePool
from .politeness import DomainLimiter, RateWaitTooLong, RobotsCache
from .politeness.parking import HOLD_PLACE
from .proxies import ProxyBusy, ProxyConfigError, ProxyDirectory
from .reextract import reextract_task
from .refresh import RefreshPage
from .refresh import begin as refresh_begin
from .sessions import SessionStore
from .sitemaps import INDEX, MAX_SITEMAP_LEVEL, BadSitemap, SitemapRules, is_robots_task, robots_sitemaps
from .sweep import sweep
from .urls import host_of

log = logging.getLogger("trawl.worker")

# Redis could not take a task's writes, through no fault of the page: an outage, a failover, or a full
# Redis (maxmemory with noeviction; the operator shows RedisOutOfMemory). The task goes back unspent.
REDIS_TROUBLE: tuple[type[Exception], ...] = (*TRANSIENT_ERRORS, QueueUnavailable, OutOfMemoryError)


def closed_connection(exc: BaseException) -> bool:
    """A write on a connection that closed under it (uvloop's and asyncio's RuntimeError "unable to perform
    operation on <transport>; the handler is closed"): redis-py's cluster client lets it through during a
    failover where it maps socket errors to ConnectionError. Like Redis trouble, never the page's fault."""
    return isinstance(exc, RuntimeError) and "the handler is closed" in str(exc)


MAX_DEFERRALS = 5  # Retry-After releases of one task (seen by this worker) before its attempts are spent
MAX_DEFERRED_TASKS = 10_000  # tasks whose Retry-After releases are remembered
_T = TypeVar("_T")
PROXY_RETRY_DELAY = 1.0  # seconds before a task whose proxy failed is claimed again
BLOCKED_RETRY_DELAY = 0.5  # seconds before a blocked task is claimed again, by another identity

# What a failed fetch says about the site. Trouble counts toward opening its circuit breaker; an answer
# proves it up (a success to the breaker); other failures (robots.txt, a refused address, ...) say nothing.
SITE_TROUBLE = (FailureClass.TIMEOUT, FailureClass.CONNECTION, FailureClass.HTTP_5XX)
SITE_ANSWERED = (FailureClass.HTTP_4XX, FailureClass.HTTP_429, FailureClass.BAD_CONTENT, FailureClass.TOO_LARGE)
SLOW_DOWN = (*SITE_TROUBLE, FailureClass.HTTP_429)  # errors to the adaptive delay
RETRY_AFTER = (FailureClass.HTTP_429, FailureClass.HTTP_5XX)  # answers whose Retry-After may defer the task


def honours_retry_after(exc: FetchError, honor_retry_after: bool) -> bool:
    """Whether the failure defers the task by the site's ``Retry-After`` (the job's retry policy allowing)."""
    return exc.failure_class in RETRY_AFTER and exc.retry_after is not None and honor_retry_after


def is_skipped(failure: FailureClass, depth: int) -> bool:
    """A link the crawl found that robots.txt forbids is not a failure of the job: it is recorded as skipped
    (count and sample on the job's status) and acked. A listed seed (depth 0) stays a dead letter."""
    return failure == FailureClass.ROBOTS_DISALLOWED and depth > 0


def _labelled(record: Record | None, refresh: RefreshPage) -> Record | None:
    """A refresh job's record of a fetched page: labelled, or none for an unchanged page (unless all are
    written)."""
    if record is None or not refresh.write_record:
        return None
    record.data.update(refresh.record_fields())
    return record


def _links_followed(spec: WorkerJobSpec, task: Task) -> bool:
    """Whether the crawl follows this page's links (so it is fetched in full: a 304 or a skip has none)."""
    return spec.crawl is not None and task.depth < spec.crawl.max_depth


def found_depth(depth: int, kind: str) -> int:
    """Where what a sitemap at ``depth`` (< 0) named goes: page URLs are seeds (0); an index's sitemaps go a
    level down, at most MAX_SITEMAP_LEVEL deep (an index deeper than that is refused)."""
    if kind != INDEX:
        return 0
    if depth <= -MAX_SITEMAP_LEVEL:
        raise BadSitemap(f"a sitemap index nested more than {MAX_SITEMAP_LEVEL} levels deep: refused")
    return depth - 1


def record_for(task: Task, result: FetchResult, data: dict[str, Any], render_info: dict[str, Any]) -> Record:
    """The result record of a page that matched: where and when it was fetched, then the extracted fields
    and what a render adds."""
    fields: dict[str, Any] = {
        "key": record_key(task.job_id, task.url),
        "job": task.job_id,
        "url": task.url,
        "finalUrl": result.final_url,
        "status": result.status,
        "depth": task.depth,
        "attempt": task.attempt,
        "fetchedAt": round(time.time(), 3),
        **data,
        **render_info,
    }
    return Record(task.job_id, task.url, fields)


class TaskPipeline:
    """The worker's parts a task passes through, and :meth:`process`, which the runner starts per task."""

    def __init__(
        self,
        *,
        queue: QueueClient,
        worker_id: str,
        metrics: WorkerMetrics,
        jobs: JobCache,
        breaker: CircuitBreaker,
        limiter: DomainLimiter,
        robots: RobotsCache,
        fetcher: Fetcher,
        renderer: Renderer,
        parser: ParsePool,
        finisher: Finisher,
        notes: JobNotes,
        task_time: TaskTimer,
        max_rate_wait: float,
        pages: PageStates,
    ) -> None:
        self.queue = queue
        self.worker_id = worker_id
        self.metrics = metrics
        self.jobs = jobs
        self.breaker = breaker
        self.limiter = limiter
        self.rate = limiter.rate
        self.slots = limiter.slots
        self.robots = robots
        self.fetcher = fetcher
        self.proxies = ProxyDirectory()  # the pool's proxy groups, read from its mounted Secrets
        self.proxy_usage = ProxyUsage(metrics.proxy_requests)  # per proxy, for the metric and the pool's status
        self.renderer = renderer
        self.parser = parser
        self.finisher = finisher
        self.notes = notes
        self.task_time = task_time  # how long a task holds its slot, which sizes the runner's claims
        self.max_rate_wait = max_rate_wait  # wait longer for a domain and the task is given back with a delay
        self.pages = pages  # refresh jobs' page state (trawl.worker.refresh)
        self._deferred: OrderedDict[tuple[str, str], int] = OrderedDict()  # Retry-After releases per task
        # Sessions next to the job's notes (its home shard); blocked releases per task, apart from the above.
        self.identities = Identities(
            SessionStore(notes.redis, notes.job_key), self.proxies, self.proxy_usage, max_rate_wait
        )
        self._blocked_tries: OrderedDict[tuple[str, str], int] = OrderedDict()
        self.archives = JobArchives(worker_id, notes.archived, fetcher.allowed)  # spec.archive's WARC files

    async def process(self, task: Task) -> None:
        """Run ``task`` to its outcome: handed to the finisher, given back, or failed. A crash fails it as
        Internal and Redis trouble gives it back: a task is never lost."""
        started = time.monotonic()
        outcome = "acked"
        try:
            outcome = await self._handle(task)
        except asyncio.CancelledError:
            outcome = "released"
            with contextlib.suppress(Exception):
                await asyncio.shield(self.queue.release(task, self.worker_id))
            raise
        except Exception as exc:
            if isinstance(exc, REDIS_TROUBLE) or closed_connection(exc):
                # Redis failed under the task (an outage, a cluster failover): not the page's fault, so no
                # attempt is spent. The task goes back if Redis answers by then, else its lease expires.
                log.warning(
                    "Redis error while handling a task; giving it back", extra={"url": task.url, "error": repr(exc)}
                )
                outcome = "released"
                with contextlib.suppress(Exception):
                    await self.queue.release(task, self.worker_id, delay=1.0)
                return
            # a bug must not lose the task: fail it as Internal
            log.exception("task crashed", extra={"worker": self.worker_id, "url": task.url})
            outcome = "failed"
            with contextlib.suppress(Exception):
                await self.queue.fail(task, self.worker_id, FailureClass.INTERNAL.value, f"{type(exc).__name__}: {exc}")
        finally:
            if outcome != "handed":  # handed-over tasks are counted by the finisher once acked or released
                self.metrics.outcomes.labels(outcome).inc()
            elapsed = time.monotonic() - started
            self.task_time.observe(elapsed)
            self.metrics.task_seconds.observe(elapsed)

    async def _give_back_if_busy(self, task: Task, domain: str, spec: WorkerJobSpec) -> bool:
        """Give the task back when its domain's tasks already held here keep the domain busy (a
        ``rate_limit`` deferral; :mod:`trawl.worker.politeness.backlog`)."""
        delay = self.limiter.deferral(domain, *spec.host(domain))
        if delay is None:
            return False
        self.metrics.deferrals.labels("rate_limit").inc()
        await self.queue.release(task, self.worker_id, delay=delay)
        return True

    async def _job(self, task: Task) -> Job | str:
        """The task's job, else the task's outcome: given back while the job has no spec yet, failed when its
        spec does not read (written by an operator this worker cannot follow, or damaged: no use retrying)."""
        try:
            job = await self.jobs.get(task.job_id)
        except BadSpec as exc:
            log.warning("unreadable job spec", extra={"job": task.job_id, "url": task.url, "error": str(exc)})
            failed = await self.queue.fail(
                task, self.worker_id, FailureClass.INTERNAL.value, f"unreadable job spec: {exc}"[:1024]
            )
            return "dead" if failed.dead_lettered else "failed"
        if job is None:
            log.warning("no spec for job; giving the task back", extra={"job": task.job_id, "url": task.url})
            await self.queue.release(task, self.worker_id, delay=2.0)
            return "released"
        return job

    async def _handle(self, task: Task) -> str:
        job = await self._job(task)
        if isinstance(job, str):
            return job
        spec = job.spec
        if sweep_cursor(task) is not None:  # only the operator and a sweep make these (enqueue_sweep.lua)
            return await self._sweep(task, job)
        if spec.archive_source is not None:  # re-extraction: the archive, not the network (trawl.worker.reextract)
            return await reextract_task(self, task, job)
        pol = spec.politeness
        domain = host_of(task.url)
        waited = 0.0  # time spent waiting for politeness (slot, robots, rate): not the site's latency

        async def before_hop(url: str) -> None:
            nonlocal waited
            t0 = time.monotonic()
            try:
                await self._before_hop(url, spec)
            finally:
                waited += time.monotonic() - t0

        if await self._give_back_if_busy(task, domain, spec):  # before any round trip: politeness.backlog
            return "released"
        verdict = await self.breaker.check(domain)
        if verdict.state == "open":
            return await self._circuit_open(task, domain, verdict)
        if is_robots_task(task.url, task.depth):
            return await self._robots_sitemaps(task, job, domain)
        sitemap = task.depth < 0  # only the operator and a sitemap's task make these (enqueue_sitemap.lua)
        refresh = await self._refresh_begin(task, spec) if spec.refresh is not None and not sitemap else None
        if refresh is not None and refresh.not_due(_links_followed(spec, task)):
            return self._hand_refresh(task, job, refresh, None)
        fetch_started = time.monotonic()
        render_info: dict[str, Any] = {}
        try:
            rate, concurrency = spec.host(domain)  # the host's domain rule, else the job's politeness
            deadline = time.monotonic() + self.max_rate_wait
            async with self.limiter.hold_slot(domain, rate, concurrency, deadline=deadline):  # or RateWaitTooLong
                waited = time.monotonic() - fetch_started
                scope = spec.headers  # the job's headers go to its own origins only (trawl.jobspec.headerscope)
                rendered = not sitemap and spec.renders(task.url, domain)
                if rendered and spec.render is not None:  # same limits, hooks, errors as a fetch
                    headers_for = (
                        functools.partial(scope.for_request, task_url=task.url, depth=task.depth)
                        if scope is not None
                        else None
                    )
                    render = functools.partial(
                        self.renderer.render,
                        task.url,
                        spec.render,
                        job.limits,
                        headers_for,
                        user_agent=spec.request.user_agent,  # a session's own replaces it (worker.identity)
                        before_hop=before_hop,
                        job_id=task.job_id,  # its page time counts against the job's tenant's browser quota
                    )
                    result, render_info = await self._as_identity(render, spec, task, domain, rendered=True)
                else:
                    fetch = functools.partial(
                        self.fetcher.fetch,
                        task.url,
                        limits=job.limits,
                        headers=scope.for_request(task.url, task.url, task.depth) if scope is not None else None,
                        user_agent=spec.request.user_agent,
                        before_hop=before_hop,
                        conditional=refresh.headers if refresh is not None else None,
                        content_types=None if sitemap else HTML_TYPES,  # a sitemap's reader judges its bytes
                    )
                    result = await self._as_identity(fetch, spec, task, domain)
            elapsed = time.monotonic() - fetch_started - waited
            if pol.adaptive_delay:
                self.limiter.adaptive(domain).observe(elapsed, False)
            await self.breaker.record(domain, True)
            self.metrics.fetches.labels("ok").inc()
            self.metrics.fetch_seconds.observe(elapsed)
            self.metrics.bytes.inc(len(result.body))
            self.metrics.wire_bytes.inc(result.wire_bytes)
        except RateWaitTooLong as exc:
            self.metrics.deferrals.labels("rate_limit").inc()
            await self.queue.release(task, self.worker_id, delay=max(exc.wait, 0.5))
            return "released"
        except BrowserCrashed as exc:
            return await self._browser_crashed(task, exc)
        except FetchError as exc:
            if refresh is not None and refresh.gone(exc.status):
                return self._hand_refresh(task, job, refresh, exc.status)
            return await self._failed(task, job, domain, exc, time.monotonic() - fetch_started - waited)
        if refresh is not None and refresh.not_modified(result):
            return self._hand_refresh(task, job, refresh, result.status)

        if sitemap:
            return await self._sitemap(task, job, result)
        if spec.archive is not None:
            capture = capture_of(task.url, result, depth=task.depth, user_agent=spec.request.user_agent or "")
            await self.archives.capture(task.job_id, spec.archive, capture)
        content_type = result.content_type + (f"; charset={result.charset}" if result.charset else "")
        try:
            page = await self.parser.extract(job.extractor, result.body, task.url, content_type=content_type)
        except ParseLimit as exc:
            return await self._parse_limit(task, exc)
        self._format_metrics(page)
        links: list[str] = []
        if spec.crawl is not None and page.links:
            links = spec.crawl.select(page.links, task.url, task.depth, self.finisher.submitted(task.job_id))
        shot_cut = page.matched and bound_screenshot(spec.extract.formats, render_info, page.data)
        record = record_for(task, result, page.data, render_info) if page.matched else None
        if record is not None and (page.format_seconds or shot_cut) and record.data.get("truncated"):
            await self.notes.truncated(task.job_id)  # counts.truncated on the job's status
        page_write = None
        if refresh is not None and page.matched:
            refresh.fetched(result, page.fingerprint, page.data)
            self.metrics.refresh.labels(refresh.record_fields()["change"]).inc()
            record = _labelled(record, refresh)
            page_write = refresh.write()
        self.finisher.submit(Finish(task, links, record, job.sink, page=page_write))
        return "handed"

    def _format_metrics(self, page: Page) -> None:
        """Each output format's cost on this page, and the formats cut to their bounds."""
        for name, seconds in page.format_seconds.items():
            self.metrics.format_seconds.labels(name).observe(seconds)
        for name in page.data.get("truncated") or () if page.format_seconds else ():
            self.metrics.format_truncated.labels(name).inc()

    async def _as_identity(
        self, call: Callable[..., Awaitable[_T]], spec: WorkerJobSpec, task: Task, domain: str, rendered: bool = False
    ) -> _T:
        """``call`` (a fetch or a render) as one of the job's sessions (spec.session: trawl.worker.identity),
        else through the proxy group of the domain (its rule's, else the job's), else directly."""
        route = spec.proxy_for(domain)
        if spec.session is None and route is None and not rendered:
            return await call()  # its waits for the domain park it (politeness.parking)
        # A session's cookies, a proxy, a browser page: held for this request, so its waits for the domain
        # keep its place (politeness.parking).
        held = HOLD_PLACE.set(True)
        try:
            if spec.session is not None:
                return await self.identities.run(
                    call,
                    _rendered_result if rendered else _fetched_result,
                    job_id=task.job_id,
                    domain=domain,
                    spec=spec.session,
                    user_agent=spec.request.user_agent or self.fetcher.user_agent,
                    route=route,
                    seed=spec.session_seed,
                )
            return await (call() if route is None else self._proxied(call, route))
        finally:
            HOLD_PLACE.reset(held)

    async def _proxied(self, fetch: Callable[..., Awaitable[_T]], route: dict[str, Any]) -> _T:
        """``fetch`` (a fetch or a render) through the least busy proxy of the job's group
        (trawl.worker.proxies), counted per proxy."""
        try:
            group = self.proxies.group(route)
        except (MissingSecret, ProxyConfigError) as exc:
            raise FetchError(FailureClass.INTERNAL, f"proxy group {route.get('group')!r}: {exc}") from exc
        try:
            async with group.use(wait=self.max_rate_wait) as proxy:
                try:
                    result = await fetch(proxy=proxy)
                except FetchError as exc:
                    outcome = "proxy_error" if exc.proxy_fault else exc.failure_class.value
                    self.proxy_usage.count(group.name, proxy.label, outcome)
                    raise
                self.proxy_usage.count(group.name, proxy.label, "ok")
                return result
        except ProxyBusy as exc:
            self.proxy_usage.count(group.name, "", "busy")
            raise FetchError(FailureClass.CONNECTION, str(exc), proxy_fault=True) from exc

    async def _refresh_begin(self, task: Task, spec: WorkerJobSpec) -> RefreshPage:
        """What the lineage knows of the page. A crawl page whose links are followed is fetched in full: a
        304 has no body to find them in."""
        assert spec.refresh is not None
        page = await refresh_begin(self.pages, spec.refresh, task)
        if _links_followed(spec, task):
            page.headers = {}
        return page

    def _hand_refresh(self, task: Task, job: Job, refresh: RefreshPage, status: int | None) -> str:
        """A page decided without a body (a 304: unchanged; a 404/410: gone; not due for a revisit: no request):
        its record, if it writes one, says where, when and what; its state goes to the finisher."""
        record = None
        if refresh.write_record:
            fields = {
                "key": record_key(task.job_id, task.url),
                "job": task.job_id,
                "url": task.url,
                "status": status,
                "depth": task.depth,
                "attempt": task.attempt,
                "fetchedAt": round(time.time(), 3) if refresh.revisited else None,
                **refresh.record_fields(),
            }
            record = Record(task.job_id, task.url, fields)
        self.metrics.refresh.labels(refresh.record_fields()["change"] if refresh.revisited else "notRevisited").inc()
        self.finisher.submit(Finish(task, [], record, job.sink, page=refresh.write()))
        return "handed"

    def _robots_hop(self, spec: WorkerJobSpec) -> Callable[[str], Awaitable[None]]:
        """What runs before each robots.txt request: the job's rate, as for any request to the site."""
        pol = spec.politeness

        async def robots_hop(hop_url: str) -> None:
            hop_host = host_of(hop_url)
            held = HOLD_PLACE.set(True)  # the origin's other tasks wait for this in their places (.parking)
            try:
                await self.rate.take_token(hop_host, spec.host(hop_host)[0], adaptive=pol.adaptive_delay)
            finally:
                HOLD_PLACE.reset(held)

        return robots_hop

    async def _before_hop(self, url: str, spec: WorkerJobSpec) -> None:
        pol = spec.politeness
        robots_hop = self._robots_hop(spec)
        host = host_of(url)  # each hop (a redirect to another host too) at that host's rate
        rate = spec.host(host)[0]
        if pol.respect_robots_txt:
            if not await self.robots.allowed(url, spec.request.user_agent, pol.robots_cache_seconds, robots_hop):
                raise FetchError(FailureClass.ROBOTS_DISALLOWED, f"robots.txt disallows {url}", url=url)
            crawl_delay = self.robots.crawl_delay(url, spec.request.user_agent)
            if crawl_delay:  # the site's Crawl-delay wins over a faster job rate
                rate = min(rate, 1.0 / crawl_delay)
        await self.rate.take_token(
            host,
            rate,
            adaptive=pol.adaptive_delay,
            deadline=time.monotonic() + self.max_rate_wait,
        )

    async def _sweep(self, task: Task, job: Job) -> str:
        """A refresh job's sweep step: the lineage's pages the run never reached, reported gone
        (trawl.worker.sweep)."""
        if job.spec.refresh is not None:
            step = await sweep(task, job.spec.refresh, job.sink, self.pages, self.queue)
            self.metrics.refresh.labels("gone").inc(len(step.records))
            log.info(
                "refresh sweep",
                extra={"job": task.job_id, "looked": step.looked, "gone": len(step.records), "next": step.cursor},
            )
        self.finisher.submit(Finish(task, [], None, None))
        return "handed"

    # --- sitemaps --------------------------------------------------------------------------------

    async def _robots_sitemaps(self, task: Task, job: Job, domain: str) -> str:
        """A robots.txt read for its Sitemap: lines (spec.sitemaps.fromRobotsTxt), through the robots cache:
        the same copy politeness reads, fetched once per origin for the pool. The sitemaps it names on its
        site are enqueued a level down."""
        spec = job.spec
        try:
            named = await self.robots.sitemaps(task.url, spec.politeness.robots_cache_seconds, self._robots_hop(spec))
        except FetchError as exc:
            return await self._failed(task, job, domain, exc, 0.0)
        urls = robots_sitemaps(named, task.url, spec.sitemaps or SitemapRules())
        added = await self.queue.enqueue_sitemap(task.job_id, task.depth - 1, urls)
        log.info(
            "robots.txt sitemaps", extra={"job": task.job_id, "url": task.url, "named": len(named), "added": added}
        )
        self.finisher.submit(Finish(task, [], None, None))
        return "handed"

    async def _sitemap(self, task: Task, job: Job, result: FetchResult) -> str:
        """A fetched sitemap: read in a parser child under its limits, its page URLs (depth 0: seeds a crawl
        follows from) or child sitemaps (a level down) enqueued; a refused one fails as BadSitemap, alone."""
        try:
            found = await self.parser.sitemap(
                result.body, result.content_type, task.url, job.spec.sitemaps or SitemapRules()
            )
            depth = found_depth(task.depth, found.kind)
        except BadSitemap as exc:
            self.metrics.parse_limits.inc()
            log.warning("sitemap refused", extra={"job": task.job_id, "url": task.url, "error": str(exc)})
            failed = await self.queue.fail(task, self.worker_id, FailureClass.BAD_SITEMAP.value, str(exc)[:1024])
            return "dead" if failed.dead_lettered else "failed"
        except ParseLimit as exc:
            return await self._parse_limit(task, exc)
        added = await self.queue.enqueue_sitemap(task.job_id, depth, found.urls)
        self.metrics.discovered.inc(added)
        log.info(
            "sitemap read",
            extra={
                "job": task.job_id, "url": task.url, "kind": found.kind, "entries": found.entries,
                "added": added, "too_old": found.too_old, "off_site": found.off_site, "filtered": found.filtered,
            },
        )  # fmt: skip
        self.finisher.submit(Finish(task, [], None, None))
        return "handed"

    # --- failures --------------------------------------------------------------------------------

    async def _circuit_open(self, task: Task, domain: str, verdict: Verdict) -> str:
        """The domain is failing for everyone: wait for its probe without spending an attempt."""
        self.metrics.deferrals.labels("circuit_open").inc()
        with contextlib.suppress(Exception):
            await self.notes.throttled(task.job_id, domain, verdict.reason, verdict.until)
        await self.queue.release(task, self.worker_id, delay=max(0.5, verdict.wait()))
        return "released"

    async def _parse_limit(self, task: Task, exc: ParseLimit) -> str:
        """A page no parser should spend longer on: that URL alone fails, for good."""
        self.metrics.parse_limits.inc()
        log.warning("parse limit", extra={"job": task.job_id, "url": task.url, "error": str(exc)})
        failed = await self.queue.fail(task, self.worker_id, FailureClass.PARSE_LIMIT.value, str(exc)[:1024])
        return "dead" if failed.dead_lettered else "failed"

    def _deferred_again(self, task: Task) -> int:
        """How many times this worker has given ``task`` back for a Retry-After or a browser crash, this one
        included."""
        key = (task.job_id, task.task_id)
        count = self._deferred.pop(key, 0) + 1
        self._deferred[key] = count
        return count

    async def _browser_crashed(self, task: Task, exc: BrowserCrashed) -> str:
        """The browser died under the page: not the site's fault, so no attempt is spent and the domain is
        not slowed down; the task goes back at once (a page that crashes every browser fails after
        MAX_DEFERRALS such releases)."""
        if self._deferred_again(task) <= MAX_DEFERRALS:
            self.metrics.deferrals.labels("browser_crash").inc()
            log.info("browser crashed; task given back", extra={"job": task.job_id, "url": task.url})
            await self.queue.release(task, self.worker_id, delay=0.5)
            return "released"
        outcome = await self.queue.fail(task, self.worker_id, exc.failure_class.value, exc.message[:1024])
        return "dead" if outcome.dead_lettered else "failed"

    async def _blocked(self, task: Task, job: Job, domain: str, exc: FetchError) -> str:
        """The site blocked the identity (its session is retired by now): counted apart, told to the domain's
        breaker (consecutive blocks of every identity open it, reason Blocked), and the task given back to be
        tried on another identity without spending an attempt, session.maxBlockedRetries times (per worker)."""
        await self.breaker.record(domain, False, f"{FailureClass.BLOCKED.value}: {exc.message}")
        await self.notes.blocked(task.job_id, domain)
        self.metrics.blocked.inc()
        key = (task.job_id, task.task_id)
        tries = self._blocked_tries.pop(key, 0) + 1
        self._blocked_tries[key] = tries
        while len(self._blocked_tries) > MAX_DEFERRED_TASKS:
            self._blocked_tries.popitem(last=False)
        bound = job.spec.session.max_blocked_retries if job.spec.session is not None else 0
        log_extra = {
            "job": task.job_id,
            "url": task.url,
            "error_class": FailureClass.BLOCKED.value,
            "error": exc.message,
        }
        if tries <= bound:
            self.metrics.deferrals.labels("blocked").inc()
            log.info("blocked; task given back for another identity", extra=log_extra)
            await self.queue.release(task, self.worker_id, delay=BLOCKED_RETRY_DELAY)
            return "released"
        outcome = await self.queue.fail(task, self.worker_id, FailureClass.BLOCKED.value, exc.message[:1024])
        log.info("blocked", extra={**log_extra, "attempt": task.attempt, "dead": outcome.dead_lettered})
        return "dead" if outcome.dead_lettered else "failed"

    async def _failed(self, task: Task, job: Job, domain: str, exc: FetchError, elapsed: float) -> str:
        spec = job.spec
        cls = exc.failure_class
        self.metrics.fetches.labels(cls.value).inc()
        if spec.politeness.adaptive_delay:
            self.limiter.adaptive(domain).observe(elapsed, cls in SLOW_DOWN)
        if cls == FailureClass.BLOCKED:
            return await self._blocked(task, job, domain, exc)
        if exc.proxy_fault:
            pass  # the upstream proxy failed (refused, unreachable, 407): nothing said about the site
        elif cls in SITE_TROUBLE:
            await self.breaker.record(domain, False, f"{cls.value}: {exc.message}")
        elif cls in SITE_ANSWERED:
            await self.breaker.record(domain, True)  # the site answered: it is up
        log_extra = {"job": task.job_id, "url": task.url, "error_class": cls.value, "error": exc.message}
        if exc.proxy_fault and self._deferred_again(task) <= MAX_DEFERRALS:
            while len(self._deferred) > MAX_DEFERRED_TASKS:
                self._deferred.popitem(last=False)
            # Given back without spending an attempt: the next claim picks the least busy proxy again.
            # Bounded like Retry-After releases; past the bound a broken group spends attempts.
            self.metrics.deferrals.labels("proxy").inc()
            log.info("proxy failed; task given back", extra=log_extra)
            await self.queue.release(task, self.worker_id, delay=PROXY_RETRY_DELAY)
            return "released"
        if is_skipped(cls, task.depth):
            await self.notes.skip(task.job_id, task.task_id, task.url, exc.message)
            self.metrics.skipped.labels(cls.value).inc()
            log.info("skipped", extra=log_extra)
            self.finisher.submit(Finish(task, [], None, None))
            return "handed"
        honor = honours_retry_after(exc, spec.retry.honor_retry_after)
        if honor:
            count = self._deferred_again(task)
            while len(self._deferred) > MAX_DEFERRED_TASKS:
                self._deferred.popitem(last=False)
            if count <= MAX_DEFERRALS:
                # Retry-After: give the task back for that long; no attempt is spent, no lease held meanwhile
                self.metrics.deferrals.labels("retry_after").inc()
                log.info("deferred by Retry-After", extra={**log_extra, "delay": exc.retry_after})
                await self.queue.release(task, self.worker_id, delay=exc.retry_after or 0.0)
                return "released"
            # a site that answers Retry-After for ever: from now on each answer spends an attempt
        outcome = await self.queue.fail(
            task, self.worker_id, cls.value, exc.message[:1024], retry_after=exc.retry_after if honor else None
        )
        log.info("fetch failed", extra={**log_extra, "attempt": task.attempt, "dead": outcome.dead_lettered})
        return "dead" if outcome.dead_lettered else "failed"


def _fetched_result(result: FetchResult) -> FetchResult:
    return result


def _rendered_result(rendered: tuple[FetchResult, dict[str, Any]]) -> FetchResult:
    return rendered[0]
