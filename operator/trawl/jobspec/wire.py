"""The job settings a worker reads from the queue (``JobConfig.spec``), and how the operator builds them.

The operator calls :func:`build_worker_spec` (through :func:`build_job_config`) when it registers a job;
workers read it back with :func:`trawl.worker.jobsettings.parse_worker_spec` (cached per job). Layout
(JSON, snake_case keys)::

    {
      "version": 1,
      "request":    ResolvedRequest dump     (headers, user_agent, timeouts, max_response_bytes, max_redirects)
      "politeness": ResolvedPoliteness dump  (respect_robots_txt, requests_per_second, ...)
      "retry":      ResolvedRetry dump
      "extract":    ExtractSpec dump         (fields, links, images, title, text, only_matching)
      "crawl":      CrawlSpec dump or None   (max_depth, max_pages, scope, include, exclude)
      "sitemaps":   SitemapSpec dump or None (lastmod_after, max_urls, include, exclude, ...; absent before
                    sitemaps came, which reads as None)
      "output":     OutputSpec dump          (sink, redis_stream, json_lines, webhook incl. secret_ref)
      "render":     RenderSpec dump or None  (mode Browser: waits, time cap, screenshot, blocked resources)
      "header_scope": None, or where the headers go (trawl.jobspec.headerscope: the job's own origins; the
                    pool's headers other than the harmless ones and the origins they may go to)
      "refresh":    None, or spec.refresh resolved (trawl.refresh.decide.RefreshSettings: the lineage with
                    the job's namespace, fingerprint, conditional, records_all, retain_seconds)
      "domains":    None, or the pool's and the job's per-domain rules (trawl.jobspec.domains.DomainRules)
      "format_max_bytes": the most bytes each of extract.formats may put in a record (the pool's
                    jobLimits.maxFormatBytes; absent before formats came, which reads as the default)
      "proxy":      None (direct), or the proxy group the job goes through: {"group", "secret": {"name",
                    "key"}, "max_per_proxy"}: a reference to the pool's Secret, never a proxy URL
      "proxy_groups": None, or the routes of the proxy groups domain rules name: {group: route, "none": None}
      "session":    None, or spec.session dump (trawl.api.sessions: scope, bounds, block rules)
      "session_seed": None, or the pool's session seed the job names: {"name", "secret": {"name", "key"}}
    }

``politeness`` is what a host no rule matches gets; :class:`trawl.jobspec.domains.HostCache` resolves the
others (a worker that predates rules reads ``politeness`` alone).

``request.headers`` holds the headers sent to each of the job's own origins (the job's, or the pool's
harmless ones); a pool's other default headers are only in ``header_scope``.

Secrets never travel through Redis: a webhook's ``secretRef`` is a reference (Secret name and key),
read by the worker from its pod's files (:mod:`trawl.jobspec.podfiles`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trawl.api.formats import DEFAULT_FORMAT_BYTES
from trawl.api.policies import (
    PolitenessSpec,
    RequestSpec,
    ResolvedPoliteness,
    ResolvedRequest,
    ResolvedRetry,
    resolve_politeness,
    resolve_request,
    resolve_retry,
)
from trawl.api.refresh import RefreshRecords
from trawl.api.render import RenderSpec
from trawl.api.scrapejob import ExtractSpec, OutputSpec, RedisStreamSink, ScrapeJobSpec, SinkKind

from .domains import DomainRules
from .headerscope import build_scope, job_origins

if TYPE_CHECKING:  # the operator's side; a worker never builds the pool's model
    from trawl.api.proxies import ProxyGroup
    from trawl.api.scrapepool import Ceilings, ScrapePoolSpec
    from trawl.queue.bloom import BloomSize


SPEC_VERSION = 1


def refresh_lineage(namespace: str, name: str, job_spec: ScrapeJobSpec, cron: str | None = None) -> str | None:
    """The page state a refresh job compares with: ``<namespace>/<lineage>``, where the lineage is the one the
    spec names, else the CronScrapeJob that created the job (``cron``: its label, which the author could set
    too, to the same effect as naming the lineage), else the job's name. Always in the job's own namespace:
    the author chooses among their own lineages only. None for a job without spec.refresh."""
    if job_spec.refresh is None:
        return None
    return f"{namespace}/{job_spec.refresh.lineage or cron or name}"


def _refresh_settings(job_spec: ScrapeJobSpec, lineage: str | None) -> dict[str, Any] | None:
    refresh = job_spec.refresh
    if refresh is None or lineage is None:
        return None
    # Pages are left alone only where the job does not force every one.
    revisit = refresh.revisit if not refresh.force_refresh else None
    return {
        "lineage": lineage,
        "fingerprint": refresh.fingerprint.value,
        "conditional": refresh.conditional(),
        "records_all": refresh.records == RefreshRecords.ALL,
        "retain_seconds": refresh.retain_days * 86400,
        "changed_fields": refresh.changed_fields,
        "revisit_min_seconds": int(revisit.min_hours * 3600) if revisit else 0,
        "revisit_max_seconds": int(revisit.max_hours * 3600) if revisit else 0,
    }


def build_worker_spec(
    job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec | None, lineage: str | None = None
) -> dict[str, Any]:
    """Resolve a job's settings against its pool's defaults into the dict stored in JobConfig.spec.

    Layers: the built-in defaults, lowered to the pool's jobLimits where those are lower; the pool's
    defaults; the job. The pool's defaults are within its limits (the model says so) and a job asking
    for more is refused before it is registered (admission.limit_exceeded), so what a worker reads is
    always within the pool's limits. ``lineage``: a refresh job's (:func:`refresh_lineage`)."""
    defaults = pool_spec.defaults if pool_spec is not None else None
    ceilings = pool_spec.ceilings() if pool_spec is not None else None
    within_request, within_politeness = _within(ceilings)
    request = resolve_request(within_request, defaults.request if defaults else None, job_spec.request)
    pool_request = defaults.request if defaults else None
    origins = job_origins([*(job_spec.urls or ()), *_listed_sitemaps(job_spec)], job_spec.url_ranges or ())
    request.headers, header_scope = build_scope(
        job_spec.request.headers if job_spec.request else None,
        pool_request.headers if pool_request else None,
        pool_request.header_origins if pool_request else None,
        origins,
    )
    politeness = resolve_politeness(within_politeness, defaults.politeness if defaults else None, job_spec.politeness)
    rules = DomainRules.build(defaults.politeness if defaults else None, job_spec.politeness)
    if header_scope is None and rules is not None and rules.has_headers():
        # The rules' headers go where the job's would: its own origins, which the scope names.
        header_scope = {"origins": origins}
    retry = resolve_retry(defaults.retry if defaults else None, job_spec.retry)
    extract = job_spec.extract or ExtractSpec()
    output = job_spec.output or OutputSpec()
    if ceilings is not None and output.sink == SinkKind.REDIS_STREAM and output.redis_stream is None:
        # Left unset: the built-in maxLen, or the pool's ceiling when that is lower.
        max_len = min(RedisStreamSink().max_len, ceilings.max_results_retained)
        output = output.model_copy(update={"redis_stream": RedisStreamSink(max_len=max_len)})
    return {
        "version": SPEC_VERSION,
        "request": request.model_dump(mode="json"),
        "politeness": politeness.model_dump(mode="json"),
        "retry": retry.model_dump(mode="json"),
        "extract": extract.model_dump(mode="json"),
        "crawl": job_spec.crawl.model_dump(mode="json") if job_spec.crawl is not None else None,
        "sitemaps": job_spec.sitemaps.model_dump(mode="json") if job_spec.sitemaps is not None else None,
        "output": output.model_dump(mode="json"),
        # Only a render that may happen is sent: plain fetching stays the spec that workers have always read.
        # A rule's Browser render takes the job's render settings (mode Fetch: only where a rule says Browser).
        "render": _render(job_spec, rules),
        "header_scope": header_scope,
        "refresh": _refresh_settings(job_spec, lineage),
        "domains": rules.to_wire() if rules is not None else None,
        "format_max_bytes": ceilings.max_format_bytes if ceilings is not None else DEFAULT_FORMAT_BYTES,
        "proxy": proxy_route(job_spec, pool_spec),
        "proxy_groups": rule_routes(rules, pool_spec),
        "session": job_spec.session.model_dump(mode="json") if job_spec.session is not None else None,
        "session_seed": seed_route(job_spec, pool_spec),
    }


def proxy_route(job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec | None) -> dict[str, Any] | None:
    """The proxy group the job's requests go through: the one it names, else the pool's default; None for
    direct. A group the pool does not define is refused before this (admission.unknown_proxy_group); the
    wire carries the Secret's name and key only, the worker reads the URLs from its mounted file."""
    from trawl.api.proxies import NO_PROXY

    proxies = pool_spec.proxies if pool_spec is not None else None
    if proxies is None or (job_spec.proxy is not None and job_spec.proxy.group == NO_PROXY):
        return None
    group = proxies.group(job_spec.proxy.group) if job_spec.proxy is not None else proxies.default_group()
    return _route(group) if group is not None else None


def _route(group: ProxyGroup) -> dict[str, Any]:
    return {
        "group": group.name,
        "secret": {"name": group.secret_ref.name, "key": group.secret_ref.key},
        "max_per_proxy": group.max_concurrency_per_proxy,
    }


def seed_route(job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec | None) -> dict[str, Any] | None:
    """The Secret key of the pool's session seed the job names ({"name", "secret": {"name", "key"}}), or None:
    a reference, the worker reads the cookies from its mounted file (admission.unknown_session_seed refused
    an unknown seed before this)."""
    name = job_spec.session.seed if job_spec.session is not None else None
    seeds = pool_spec.session_seeds if pool_spec is not None else None
    seed = next((s for s in seeds or () if s.name == name), None) if name else None
    if seed is None:
        return None
    return {"name": seed.name, "secret": {"name": seed.secret_ref.name, "key": seed.secret_ref.key}}


def rule_routes(rules: DomainRules | None, pool_spec: ScrapePoolSpec | None) -> dict[str, Any] | None:
    """The routes of the proxy groups the domain rules name (group -> route as :func:`proxy_route`'s; "none"
    -> None), or None when no rule names one."""
    from trawl.api.proxies import NO_PROXY

    names = rules.proxy_groups() if rules is not None else set()
    proxies = pool_spec.proxies if pool_spec is not None else None
    if not names or proxies is None:
        return None
    out: dict[str, Any] = {}
    for name in sorted(names):
        group = proxies.group(name) if name != NO_PROXY else None
        out[name] = None if group is None else _route(group)
    return out


def _bloom(job_spec: ScrapeJobSpec) -> BloomSize | None:
    """A crawl's Bloom filter, sized for its maxPages (at most MAX_CRAWL_PAGES: 30 MB, within a Redis string)."""
    from trawl.queue.bloom import size_for

    crawl = job_spec.crawl
    if crawl is None or crawl.bloom_filter is None:
        return None
    return size_for(crawl.max_pages, crawl.bloom_filter.false_positive_rate)


def _render(job_spec: ScrapeJobSpec, rules: DomainRules | None) -> dict[str, Any] | None:
    if job_spec.render is not None and job_spec.render.browser:
        return job_spec.render.model_dump(mode="json")
    if rules is not None and rules.render_browser():
        return (job_spec.render or RenderSpec()).model_dump(mode="json")
    return None


def _listed_sitemaps(job_spec: ScrapeJobSpec) -> list[str]:
    return list(job_spec.sitemaps.urls or ()) if job_spec.sitemaps is not None else []


def task_cap(job_spec: ScrapeJobSpec) -> int | None:
    """The most tasks the job may ever hold (the queue's max_pages), or None for no cap.

    A crawl's maxPages caps every task (seeds, sitemaps, what they add, links). Without crawl a job with
    sitemaps is capped at its seeds plus its sitemap budget: the operator enqueues the sitemaps after the
    last seed, so what sitemaps add never takes a seed's place and stays within sitemaps.maxUrls (give or
    take the URLs the seeds repeat). A job of listed URLs only has no cap: it holds its seeds."""
    if job_spec.crawl is not None:
        return job_spec.crawl.max_pages
    if job_spec.sitemaps is not None:
        return job_spec.seed_count() + job_spec.sitemap_task_budget()
    return None


def _within(ceilings: Ceilings | None) -> tuple[RequestSpec | None, PolitenessSpec | None]:
    """The built-in defaults lowered to the pool's ceilings (None without a pool)."""
    if ceilings is None:
        return None, None
    request = RequestSpec(max_response_bytes=min(ResolvedRequest().max_response_bytes, ceilings.max_response_bytes))
    politeness = PolitenessSpec(
        requests_per_second=min(ResolvedPoliteness().requests_per_second, ceilings.requests_per_second),
        max_concurrency_per_domain=min(
            ResolvedPoliteness().max_concurrency_per_domain, ceilings.max_concurrency_per_domain
        ),
    )
    return request, politeness


def build_job_config(
    job_id: str, job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec | None, lineage: str | None = None
) -> Any:
    """The queue's JobConfig for a job (retry policy, crawl caps, priority, dedupe) with its worker spec."""
    from trawl.api.tenancy import DEFAULT_PRIORITY
    from trawl.queue.model import JobConfig, RetryPolicy

    spec = build_worker_spec(job_spec, pool_spec, lineage)
    retry = ResolvedRetry.model_validate(spec["retry"])
    dedupe = job_spec.dedupe
    ceilings = pool_spec.ceilings() if pool_spec is not None else None
    return JobConfig(
        job_id=job_id,
        # Tenancy may resolve another (trawl.jobspec.tenancy.place_job): this is the pool without it.
        priority=job_spec.priority if job_spec.priority is not None else DEFAULT_PRIORITY,
        retry=RetryPolicy(
            max_attempts=retry.max_attempts,
            backoff=str(retry.backoff.value),
            initial_delay=retry.initial_delay_seconds,
            max_delay=retry.max_delay_seconds,
            jitter=retry.jitter,
            retry_on=tuple(str(c.value) for c in retry.retry_on),
            honor_retry_after=retry.honor_retry_after,
        ),
        max_pages=task_cap(job_spec),
        max_depth=job_spec.crawl.max_depth if job_spec.crawl is not None else 0,
        dedupe_across_jobs=dedupe.across_jobs if dedupe is not None else False,
        dedupe_window_seconds=dedupe.window_seconds if dedupe is not None else 3600,
        # With sitemaps every seed is remembered, so a sitemap listing a seed again adds nothing.
        dedupe_seeds=job_spec.seeds_may_repeat() or job_spec.sitemaps is not None,
        max_dead_letters_kept=ceilings.max_dead_letters_retained if ceilings is not None else None,
        spec=spec,
        bloom=_bloom(job_spec),
    )
