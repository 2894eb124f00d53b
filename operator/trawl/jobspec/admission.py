"""Checks made when a job is accepted: what its workers could not use, said once on the job's status.

A bad selector or header, a Secret or directory the pool does not mount, a browser job on a pool of
plain workers: each is ``Stalled/InvalidSpec`` (or its own reason) with the fix, instead of a failure
per URL on the workers.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from trawl.api.common import SecretKeyRef, SecretUse, format_number
from trawl.api.policies import PolitenessSpec, RequestSpec
from trawl.api.scrapejob import ScrapeJobSpec

from .domains import renders_in_browser, rule_problem
from .headerscope import scope_problem

if TYPE_CHECKING:
    from trawl.api.scrapepool import ScrapePoolSpec


def secret_refs(job_spec: ScrapeJobSpec) -> list[tuple[str, SecretKeyRef, SecretUse]]:
    """Every Secret key the job names: (its field, the reference, what it is used for)."""
    output, hooks = job_spec.output, job_spec.on_complete
    named: list[tuple[str, SecretKeyRef | None, SecretUse]] = []
    if output is not None and output.webhook is not None:
        named.append(("spec.output.webhook.secretRef", output.webhook.secret_ref, SecretUse.WEBHOOK_SIGNING_KEY))
    if output is not None and output.postgres is not None:
        pg = output.postgres
        named.append(("spec.output.postgres.passwordSecretRef", pg.password_secret_ref, SecretUse.POSTGRES_PASSWORD))
    if output is not None and output.s3 is not None:
        s3 = output.s3
        named += [
            ("spec.output.s3.accessKeyIdSecretRef", s3.access_key_id_secret_ref, SecretUse.S3_ACCESS_KEY_ID),
            (
                "spec.output.s3.secretAccessKeySecretRef",
                s3.secret_access_key_secret_ref,
                SecretUse.S3_SECRET_ACCESS_KEY,
            ),
        ]
    if hooks is not None and hooks.webhook is not None:
        named.append(("spec.onComplete.webhook.secretRef", hooks.webhook.secret_ref, SecretUse.WEBHOOK_SIGNING_KEY))
    return [(field, ref, use) for field, ref, use in named if ref is not None]


def unmounted_secrets(job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec) -> list[str]:
    """Secrets the job references that its pool does not mount into the workers (the onComplete webhook's
    key too: the operator reads it, but only a Secret the pool grants its jobs is theirs to name)."""
    mounted = set(pool_spec.worker.secrets or ())
    return list(dict.fromkeys(ref.name for _field, ref, _use in secret_refs(job_spec) if ref.name not in mounted))


def undeclared_secret_keys(job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec) -> list[str]:
    """Why each Secret key the job names may not be used so, or [] when the pool declares every one for its
    use (``worker.secretKeys``): a mounted Secret's keys are not all the job's to send anywhere, and a key
    meant as one thing (a password) must not be sent as another (an S3 access key ID, sent in the clear)."""
    declared = {(k.name, k.key, k.use) for k in pool_spec.worker.secret_keys or ()}
    return [
        f"{field} names Secret key {ref.name}/{ref.key}, which ScrapePool {job_spec.pool!r} does not declare for "
        f"use {use.value}: the pool's spec.worker.secretKeys must list {{name: {ref.name}, key: {ref.key}, "
        f"use: {use.value}}}"
        for field, ref, use in secret_refs(job_spec)
        if (ref.name, ref.key, use) not in declared
    ]


def unmounted_directory(job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec) -> str | None:
    """Why a JsonLines or Files job's directory is not on a writable volume its pool mounts, or None when it is."""
    output = job_spec.output
    if output is not None and output.sink == "Files" and output.files is not None:
        directory, field = output.files.directory, "output.files.directory"
    elif output is not None and output.sink == "JsonLines" and output.json_lines is not None:
        directory, field = output.json_lines.directory, "output.jsonLines.directory"
    else:
        return None
    if pool_spec.worker.writable_mount_for(directory) is not None:
        return None
    mounted = ", ".join(m.mount_path for m in pool_spec.worker.volume_mounts or []) or "none"
    return (
        f"{field} {directory} is not on a writable volume of the pool's workers (their root "
        f"filesystem is read-only; mounts: {mounted}): add a volume (e.g. a persistentVolumeClaim) and a "
        f"volumeMount to the ScrapePool's spec.worker"
    )


def unknown_proxy_group(job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec) -> str | None:
    """Why the job's spec.proxy.group, or a domain rule's proxyGroup (the job's or the pool's), is not one its
    pool defines, or None when each is (or is 'none')."""
    from trawl.api.proxies import NO_PROXY

    from .domains import job_rules

    groups = pool_spec.proxies.groups if pool_spec.proxies is not None else []
    defined = {g.name for g in groups} | {NO_PROXY}
    known = ", ".join(g.name for g in groups) or "none defined"
    if job_spec.proxy is not None and job_spec.proxy.group not in defined:
        where = f"spec.proxy.group {job_spec.proxy.group!r}"
    else:
        rules = job_rules(job_spec, pool_spec)
        unknown = sorted((rules.proxy_groups() if rules is not None else set()) - defined)
        if not unknown:
            return None
        where = f"a domain rule's proxyGroup {unknown[0]!r}"
    return (
        f"{where} is not a proxy group of ScrapePool {job_spec.pool!r} "
        f"(its spec.proxies.groups: {known}); name one of them, or 'none' to fetch directly"
    )


def screenshot_without_browser(job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec) -> str | None:
    """Why a job's extract.formats screenshot cannot be taken (no page of it renders in a browser), or None."""
    formats = job_spec.extract.formats if job_spec.extract is not None else None
    if "screenshot" not in (formats or ()) or renders_in_browser(job_spec, pool_spec):
        return None
    return (
        "extract.formats screenshot needs pages rendered in a browser: set render.mode Browser (or a domain "
        "rule's render Browser), or remove screenshot from extract.formats"
    )


def unknown_session_seed(job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec) -> str | None:
    """Why the job's spec.session.seed is not a seed its pool offers, or None when it is (or names none)."""
    seed = job_spec.session.seed if job_spec.session is not None else None
    if seed is None:
        return None
    seeds = [s.name for s in pool_spec.session_seeds or ()]
    if seed in seeds:
        return None
    return (
        f"spec.session.seed {seed!r} is not a session seed of ScrapePool {job_spec.pool!r} "
        f"(its spec.sessionSeeds: {', '.join(seeds) or 'none defined'})"
    )


def browser_missing(job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec) -> str | None:
    """Why a job that renders in a browser cannot run on its pool (plain workers), or None when it can.

    Caught at admission so the job is Stalled once, with the fix, instead of failing every URL on
    workers that have no browser.
    """
    if pool_spec.worker.browser is not None or not renders_in_browser(job_spec, pool_spec):
        return None
    why = "render.mode Browser" if job_spec.render is not None and job_spec.render.browser else "a domain rule's render"
    return (
        f"the job renders pages in a headless browser ({why}), but ScrapePool {job_spec.pool!r} "
        f"runs plain workers: set the pool's spec.worker.browser and use the browser worker image, or pick a "
        f"pool that has them"
    )


def limit_exceeded(job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec) -> str | None:
    """What in a job asks for more than its pool's jobLimits allow, naming the field, its value and the
    ceiling; None if nothing. Not clamped: a job that asked for 1 GiB bodies is told, never silently
    run with 10 MiB ones."""
    ceilings = pool_spec.ceilings()
    request = job_spec.request or RequestSpec()
    politeness = job_spec.politeness or PolitenessSpec()
    output = job_spec.output
    asked: list[tuple[str, float | None, float, str]] = [
        ("spec.request.maxResponseBytes {}", request.max_response_bytes, ceilings.max_response_bytes,
         "maxResponseBytes"),
        ("spec.politeness.requestsPerSecond {}", politeness.requests_per_second, ceilings.requests_per_second,
         "requestsPerSecond"),
        ("spec.politeness.maxConcurrencyPerDomain {}", politeness.max_concurrency_per_domain,
         ceilings.max_concurrency_per_domain, "maxConcurrencyPerDomain"),
    ]  # fmt: skip
    if pool_spec.tenancy is None:  # with tenancy, the tenant's priorityCeiling decides (jobspec.tenancy)
        asked.append(("spec.priority {}", job_spec.priority, ceilings.max_priority, "maxPriority"))
    if output is not None and output.sink == "RedisStream" and output.redis_stream is not None:
        asked.append(
            ("spec.output.redisStream.maxLen {}", output.redis_stream.max_len, ceilings.max_results_retained,
             "maxResultsRetained")
        )  # fmt: skip
    if job_spec.crawl is not None:
        asked.append(("spec.crawl.maxPages {}", job_spec.crawl.max_pages, ceilings.max_urls_per_job, "maxUrlsPerJob"))
    elif job_spec.sitemaps is not None:
        asked.append(
            ("spec.urls and spec.urlRanges with spec.sitemaps (maxUrls, and one task per sitemap): {} URLs",
             job_spec.seed_count() + job_spec.sitemap_task_budget(), ceilings.max_urls_per_job, "maxUrlsPerJob")
        )  # fmt: skip
    else:
        asked.append(
            ("spec.urls and spec.urlRanges: {} URLs", job_spec.seed_count(), ceilings.max_urls_per_job,
             "maxUrlsPerJob")
        )  # fmt: skip
    for what, value, ceiling, limit in asked:
        if value is not None and value > ceiling:
            return (
                f"{what.format(format_number(value))} is above the {format_number(ceiling)} that ScrapePool "
                f"{job_spec.pool!r} allows (its spec.jobLimits.{limit}): ask for at most that, or have the "
                f"pool's owner raise it"
            )
    return rule_problem(job_spec, pool_spec)


_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an HTTP token (RFC 9110 5.1)


def spec_problem(spec: dict[str, Any]) -> str | None:
    """What in a worker spec (:func:`build_worker_spec`) a worker could not use, naming the field; None if
    nothing. Checked when the job is accepted, with the libraries the worker uses, so a bad selector or
    header is ``Stalled/InvalidSpec`` on the job instead of a null field or an Internal failure per URL."""
    from parsel import Selector
    from selectolax.lexbor import LexborHTMLParser

    probe = LexborHTMLParser("<html><body><p>probe</p></body></html>")
    xprobe = Selector(text="<html><body><p>probe</p></body></html>")
    for i, f in enumerate((spec.get("extract") or {}).get("fields") or []):
        where = f"spec.extract.fields[{i}].selector ({f.get('name')!r})"
        selector = str(f.get("selector") or "")
        try:
            if str(f.get("kind") or "CSS").lower() == "xpath":
                xprobe.xpath(selector)
            else:
                probe.css(selector)
        except Exception as exc:
            kind = "XPath" if str(f.get("kind") or "CSS").lower() == "xpath" else "CSS"
            return f"{where}: invalid {kind} selector {selector!r}: {exc}"
    scope = spec.get("header_scope")
    too_wide = scope_problem(scope)
    if too_wide is not None:
        return too_wide
    headers = {**((spec.get("request") or {}).get("headers") or {}), **((scope or {}).get("pool_headers") or {})}
    problem = header_problem(headers, "spec.request.headers[{!r}] (or the pool's defaults.request.headers)")
    if problem is not None:
        return problem
    domains = spec.get("domains") or {}
    for side, field in (("job", "spec.politeness.domains"), ("pool", "the pool's defaults.politeness.domains")):
        for i, rule in enumerate(domains.get(side) or ()):
            where = f"{field}[{i}] ({rule.get('host')}).headers[{{!r}}]"
            problem = header_problem(rule.get("headers") or {}, where)
            if problem is not None:
                return problem
    return None


def header_problem(headers: dict[str, Any], where: str) -> str | None:
    """Why a header of ``headers`` cannot be sent (``where`` formats with its name), or None: one check for
    the job's request headers and its domain rules' alike."""
    for name, value in headers.items():
        at = where.format(name)
        if not _HEADER_NAME.fullmatch(name):
            return f"{at}: {name!r} is not a valid header name"
        if any(c in str(value) for c in "\r\n\0"):
            return f"{at}: the value contains CR, LF or NUL (header injection)"
    return None
