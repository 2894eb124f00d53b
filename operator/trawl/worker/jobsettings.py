"""A job's settings as a worker uses them: :data:`JobConfig.spec <trawl.jobspec.wire>` parsed, cached per job.

The operator writes the settings when it registers the job (:func:`trawl.jobspec.wire.build_worker_spec`,
which documents the layout); :func:`parse_worker_spec` is its inverse, with the extraction options and
crawl policy the worker runs on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from trawl.api.formats import DEFAULT_FORMAT_BYTES, OutputFormat
from trawl.api.policies import ResolvedPoliteness, ResolvedRequest, ResolvedRetry
from trawl.api.render import RenderMode, RenderSpec
from trawl.api.scrapejob import CrawlSpec, ExtractSpec, OutputSpec
from trawl.api.sessions import SessionSpec
from trawl.jobspec.domains import DomainRules, HostCache
from trawl.jobspec.headerscope import HeaderScope
from trawl.refresh.decide import RefreshSettings

from .extract import ExtractOptions
from .sitemaps import SitemapRules
from .urls import CrawlPolicy


@dataclass(frozen=True)
class WorkerJobSpec:
    """A parsed worker spec: everything needed to process one task of the job."""

    request: ResolvedRequest
    politeness: ResolvedPoliteness
    retry: ResolvedRetry
    extract: ExtractOptions
    crawl: CrawlPolicy | None
    max_pages: int | None
    output: OutputSpec
    render: RenderSpec | None = None  # set only where pages may render: mode Browser, or a rule's Browser
    headers: HeaderScope | None = None  # which requests carry which headers; None: the job sends none
    refresh: RefreshSettings | None = None  # spec.refresh (trawl.worker.refresh)
    sitemaps: SitemapRules | None = None  # what the job takes from sitemaps; None: it lists none
    hosts: HostCache | None = None  # the rate and concurrency per host (domain rules); None: politeness's
    proxy: dict[str, Any] | None = None  # the proxy group's route (trawl.jobspec.wire.proxy_route); None: direct
    session: SessionSpec | None = None  # spec.session (trawl.worker.sessions); None: no sessions, no ban rules
    proxy_groups: dict[str, Any] | None = None  # the routes of the groups domain rules name (wire.rule_routes)
    session_seed: dict[str, Any] | None = None  # the pool's seed a new session starts from (wire.seed_route)
    archive: dict[str, Any] | None = None  # spec.archive's WARC capture (trawl.worker.archiving); None: none
    archive_source: dict[str, Any] | None = None  # a re-extraction job's archive (trawl.worker.reextract)

    def host(self, authority: str) -> tuple[float, int]:
        """(requests per second, concurrency) for requests to ``authority`` (a URL's host[:port])."""
        if self.hosts is None:
            return self.politeness.requests_per_second, self.politeness.max_concurrency_per_domain
        got = self.hosts.get(authority)
        return got.requests_per_second, got.max_concurrency_per_domain

    def proxy_for(self, authority: str) -> dict[str, Any] | None:
        """The proxy route of requests to ``authority``: its host's rule's group ("none": direct), else the
        job's (spec.proxy, else the pool's default group)."""
        if self.hosts is None or self.proxy_groups is None:
            return self.proxy
        group = self.hosts.get(authority).proxy_group
        if group is None or group not in self.proxy_groups:
            return self.proxy
        route: dict[str, Any] | None = self.proxy_groups[group]
        return route

    def renders(self, url: str, authority: str) -> bool:
        """Whether ``url`` (on ``authority``, its host[:port]) is rendered in the browser: as its host's rule
        says (Browser or Fetch), else as the job's render says (mode Browser and onlyMatching)."""
        if self.render is None:
            return False
        rule = self.hosts.get(authority).render if self.hosts is not None else None
        if rule is not None:
            return rule == RenderMode.BROWSER
        return self.render.applies(url)


def screenshot_render(raw: dict[str, Any] | None, extract: ExtractOptions) -> RenderSpec | None:
    """The job's render, with its screenshot on when extract.formats asks for one (browser mode only)."""
    render = RenderSpec.model_validate(raw) if raw else None
    if render is not None and OutputFormat.SCREENSHOT.value in extract.formats.formats and not render.screenshot:
        render = render.model_copy(update={"screenshot": True})
    return render


def parse_worker_spec(spec: dict[str, Any] | None) -> WorkerJobSpec:
    """The inverse of :func:`build_worker_spec`; missing sections take the built-in defaults."""
    spec = spec or {}
    crawl_raw = spec.get("crawl")
    crawl = CrawlSpec.model_validate(crawl_raw) if crawl_raw is not None else None
    extract = ExtractSpec.model_validate(spec.get("extract") or {})
    request = ResolvedRequest.model_validate(spec.get("request") or {})
    refresh = RefreshSettings.parse(spec.get("refresh"))
    extract_options = ExtractOptions.from_dict(extract.model_dump(mode="json"))
    format_max_bytes = int(spec.get("format_max_bytes") or DEFAULT_FORMAT_BYTES)  # the pool's, never the job's
    extract_options = replace(extract_options, formats=replace(extract_options.formats, max_bytes=format_max_bytes))
    if refresh is not None and refresh.fingerprint in ("Record", "Text"):
        extract_options = replace(extract_options, fingerprint=refresh.fingerprint)
    politeness = ResolvedPoliteness.model_validate(spec.get("politeness") or {})
    rules = DomainRules.from_wire(spec.get("domains"))
    hosts = HostCache(politeness.requests_per_second, politeness.max_concurrency_per_domain, rules) if rules else None
    return WorkerJobSpec(
        request=request,
        politeness=politeness,
        retry=ResolvedRetry.model_validate(spec.get("retry") or {}),
        extract=extract_options,
        crawl=(
            CrawlPolicy.build(
                scope=str(crawl.scope.value if hasattr(crawl.scope, "value") else crawl.scope),
                include=crawl.include,
                exclude=crawl.exclude,
                max_depth=crawl.max_depth,
            )
            if crawl is not None
            else None
        ),
        max_pages=crawl.max_pages if crawl is not None else None,
        output=OutputSpec.model_validate(spec.get("output") or {}),
        render=screenshot_render(spec.get("render"), extract_options),
        refresh=refresh,
        headers=HeaderScope.parse(request.headers, spec.get("header_scope"), hosts),
        hosts=hosts,
        proxy=spec.get("proxy") or None,
        session=SessionSpec.model_validate(spec["session"]) if spec.get("session") else None,
        proxy_groups=spec.get("proxy_groups") or None,
        session_seed=spec.get("session_seed") or None,
        archive=spec.get("archive") or None,
        archive_source=spec.get("archive_source") or None,
        sitemaps=(
            SitemapRules.from_spec(spec["sitemaps"], str(crawl.scope.value) if crawl is not None else None)
            if spec.get("sitemaps")
            else None
        ),
    )
