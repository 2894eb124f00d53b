"""A job's settings as a worker uses them: :data:`JobConfig.spec <trawl.jobspec.wire>` parsed, cached per job.

The operator writes the settings when it registers the job (:func:`trawl.jobspec.wire.build_worker_spec`,
which documents the layout); :func:`parse_worker_spec` is its inverse, with the extraction options and
crawl policy the worker runs on.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from trawl.api.formats import DEFAULT_FORMAT_BYTES
from trawl.api.policies import ResolvedPoliteness, ResolvedRequest, ResolvedRetry
from trawl.api.render import RenderMode, RenderSpec
from trawl.api.scrapejob import CrawlSpec, ExtractSpec, OutputSpec
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
    archive: dict[str, Any] | None = None  # spec.archive's WARC capture (trawl.worker.archiving); None: none
    archive_source: dict[str, Any] | None = None  # a re-extraction job's archive (trawl.worker.reextract)

    def host(self, authority: str) -> tuple[float, int]:
        """(requests per second, concurrency) for requests to ``authority`` (a URL's host[:port])."""
        if self.hosts is None:
            return self.politeness.requests_per_second, self.politeness.max_concurrency_per_domain
        got = self.hosts.get(authority)
        return got.requests_per_second, got.max_concurrency_per_domain

    def renders(self, url: str, authority: str) -> bool:
        """Whether ``url`` (on ``authority``, its host[:port]) is rendered in the browser: as its host's rule
        says (Browser or Fetch), else as the job's render says (mode Browser and onlyMatching)."""
        if self.render is None:
            return False
        rule = self.hosts.get(authority).render if self.hosts is not None else None
        if rule is not None:
            return rule == RenderMode.BROWSER
        return self.render.applies(url)


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
        render=RenderSpec.model_validate(spec["render"]) if spec.get("render") else None,
        refresh=refresh,
        headers=HeaderScope.parse(request.headers, spec.get("header_scope"), hosts),
        hosts=hosts,
        proxy=spec.get("proxy") or None,
        archive=spec.get("archive") or None,
        archive_source=spec.get("archive_source") or None,
        sitemaps=(
            SitemapRules.from_spec(spec["sitemaps"], str(crawl.scope.value) if crawl is not None else None)
            if spec.get("sitemaps")
            else None
        ),
    )
