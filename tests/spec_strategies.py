"""Hypothesis strategies for valid spec dicts in the camelCase wire form.

Each object strategy is declared with :func:`obj`, which checks that it covers exactly the fields of
its model: a field added to a model without a strategy here fails the tests (update this file).
"""

from __future__ import annotations

import re
import zoneinfo
from datetime import datetime
from typing import Any

from hypothesis import strategies as st
from pydantic import BaseModel

from trawl.api import archive as archive_api
from trawl.api import (
    domainrules,
    formats,
    policies,
    poolarchive,
    proxies,
    refresh,
    render,
    scrapejob,
    scrapepool,
    sessions,
    tabular,
    tenancy,
)
from trawl.api.cronscrapejob import TIMEZONE_PATTERN, CronScrapeJobSpec, JobTemplateMetadata, ScrapeJobTemplate

Strategy = st.SearchStrategy[Any]


def obj(model: type[BaseModel], required: dict[str, Strategy], optional: dict[str, Strategy]) -> Strategy:
    """A dict strategy for ``model``; every field of the model must be named in required or optional."""
    aliases = {f.alias or name for name, f in model.model_fields.items()}
    named = set(required) | set(optional)
    missing, unknown = aliases - named, named - aliases
    assert not missing and not unknown, f"{model.__name__}: no strategy for {missing}; not fields: {unknown}"
    return st.fixed_dictionaries(required, optional=optional)


def ints(lo: int, hi: int) -> Strategy:
    return st.integers(min_value=lo, max_value=hi)


def floats(lo: float, hi: float, exclude_min: bool = False) -> Strategy:
    return st.floats(min_value=lo, max_value=hi, exclude_min=exclude_min, allow_nan=False, allow_infinity=False)


def enum(values: Any) -> Strategy:
    return st.sampled_from([v.value for v in values])


def ordered(strategy: Strategy, low: str, high: str) -> Strategy:
    """Dicts where ``low`` <= ``high`` when both are present (swapped into order, not filtered: faster)."""

    def repair(d: dict[str, Any]) -> dict[str, Any]:
        if low in d and high in d and d[low] > d[high]:
            d[low], d[high] = d[high], d[low]
        return d

    return strategy.map(repair)


# ------------------------------------------------------------------ scalars

dns_label = st.from_regex(r"[a-z0-9]([-a-z0-9]{0,20}[a-z0-9])?", fullmatch=True)
host = st.from_regex(r"[a-z0-9]{1,12}(\.[a-z0-9-]{1,8}){0,2}\.[a-z]{2,6}", fullmatch=True)
path = st.from_regex(r"(/[A-Za-z0-9._~%!$&'()*+,;=:@-]{0,12}){0,3}(\?[a-z]{1,5}=[A-Za-z0-9]{0,5})?", fullmatch=True)
# One PostgreSQL server: a host name of valid labels, or an IP address (no list, no socket path).
pg_host = st.one_of(
    st.from_regex(r"[a-z0-9]{1,12}(\.[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?){0,2}\.[a-z]{2,6}", fullmatch=True),
    st.sampled_from(["10.0.0.5", "db", "fd00::5"]),
)
http_url = st.builds("{}://{}{}".format, st.sampled_from(["http", "https"]), host, path)
label_key = st.from_regex(r"[a-z]{1,10}(/[a-z]{1,10})?", fullmatch=True)
label_map = st.dictionaries(label_key, st.text(max_size=20), max_size=4)
regex = st.sampled_from([r"^https://", r"/page/\d+$", r"\.html?$", r"(?i)about", r"[a-z]+/[0-9]{2,}"])
short_text = st.text(min_size=1, max_size=30)
secret_ref = obj(
    scrapejob.SecretKeyRef, {"name": dns_label, "key": st.from_regex(r"[-._a-zA-Z0-9]{1,20}", fullmatch=True)}, {}
)

# ------------------------------------------------------------------ policies

_request_fields: dict[str, Strategy] = {
    "headers": st.dictionaries(st.from_regex(r"X-[A-Za-z]{1,10}", fullmatch=True), short_text, max_size=4),
    "userAgent": short_text,
    "timeoutSeconds": floats(0, 600, exclude_min=True),
    "connectTimeoutSeconds": floats(0, 120, exclude_min=True),
    "maxResponseBytes": ints(1, 1 << 30),
    "maxRedirects": ints(0, 30),
}
request = obj(policies.RequestSpec, {}, _request_fields)
# A pool's X- headers may carry credentials: they need the origins they go to (always listed here).
origin = st.from_regex(r"https?://[a-z]{1,10}\.example(:[1-9][0-9]{0,3})?", fullmatch=True)
pool_request = obj(
    scrapepool.PoolRequestSpec, {"headerOrigins": st.lists(origin, min_size=1, max_size=3)}, _request_fields
)
_label = r"[a-z0-9]([a-z0-9-]{0,6}[a-z0-9])?"
rule_host = st.from_regex(rf"{_label}(\.{_label}){{0,2}}", fullmatch=True)  # a domain rule's host: DNS labels
_rate_fields: dict[str, Strategy] = {
    "requestsPerSecond": floats(0, 10000, exclude_min=True),
    "delaySeconds": floats(0.0001, 86400),
}
domain_rule = obj(
    domainrules.DomainRule,
    {"host": st.one_of(rule_host, st.builds("*.{}".format, rule_host))},
    {
        **_rate_fields,
        "maxConcurrencyPerDomain": ints(1, 1000),
        "headers": st.dictionaries(st.from_regex(r"X-[A-Za-z]{1,10}", fullmatch=True), short_text, max_size=2),
        "render": st.sampled_from(["Fetch", "Browser"]),
        "proxyGroup": st.just("none"),  # always a group of the pool: a named one must be defined there
    },
).filter(lambda r: not ("requestsPerSecond" in r and "delaySeconds" in r) and len(r) > 1 and r.get("headers", 1))
politeness = obj(
    policies.PolitenessSpec,
    {},
    {
        "domains": st.lists(domain_rule, max_size=3, unique_by=lambda r: r["host"]),
        "respectRobotsTxt": st.booleans(),
        "requestsPerSecond": floats(0, 10000, exclude_min=True),
        "maxConcurrencyPerDomain": ints(1, 1000),
        "adaptiveDelay": st.booleans(),
        "robotsCacheSeconds": ints(1, 604800),
    },
)
retry = ordered(
    obj(
        policies.RetrySpec,
        {},
        {
            "maxAttempts": ints(1, 100),
            "backoff": enum(policies.BackoffKind),
            "initialDelaySeconds": floats(0, 86400),
            "maxDelaySeconds": floats(0, 86400),
            "jitter": floats(0, 1),
            "retryOn": st.lists(enum(policies.FailureClass), max_size=16),
            "honorRetryAfter": st.booleans(),
        },
    ),
    "initialDelaySeconds",
    "maxDelaySeconds",
)

# ------------------------------------------------------------------ ScrapeJob

crawl = obj(
    scrapejob.CrawlSpec,
    {},
    {
        "maxDepth": ints(0, 100),
        "maxPages": ints(1, 10_000_000),
        "scope": enum(scrapejob.CrawlScope),
        "include": st.lists(regex, max_size=3),
        "exclude": st.lists(regex, max_size=3),
        "bloomFilter": obj(scrapejob.BloomFilterSpec, {}, {"falsePositiveRate": floats(0.0001, 0.1)}),
    },
)
# An RFC 3339 time in UTC, whole seconds (as the model dumps it: "...Z").
_rfc3339 = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2100, 1, 1)).map(
    lambda d: d.replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
)
_sitemap_optional: dict[str, Strategy] = {
    "fromRobotsTxt": st.booleans(),
    "lastmodAfter": _rfc3339,
    "lastmodSinceLastRun": st.booleans(),
    "maxUrls": ints(1, 1_000_000),
    "include": st.lists(regex, max_size=3),
    "exclude": st.lists(regex, max_size=3),
}
# sitemaps needs urls or fromRobotsTxt
sitemaps_with_urls = obj(scrapejob.SitemapSpec, {"urls": st.lists(http_url, min_size=1, max_size=3)}, _sitemap_optional)
sitemaps = st.one_of(
    sitemaps_with_urls,
    obj(
        scrapejob.SitemapSpec,
        {"fromRobotsTxt": st.just(True)},
        {**{k: v for k, v in _sitemap_optional.items() if k != "fromRobotsTxt"}, "urls": st.nothing()},
    ),
)
field_rule = obj(
    scrapejob.FieldRule,
    {"name": st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True), "selector": short_text},
    {
        "kind": enum(scrapejob.SelectorKind),
        "attribute": st.from_regex(r"[a-z-]{1,12}", fullmatch=True),
        "multiple": st.booleans(),
    },
)
main_content = obj(formats.MainContentOptions, {}, {"tables": st.booleans(), "links": st.booleans()})
structured = obj(
    formats.StructuredOptions,
    {},
    {"syntaxes": st.lists(enum(formats.StructuredSyntax), min_size=1, max_size=4, unique=True)},
)


def _one_text(spec: dict[str, Any]) -> dict[str, Any]:
    """extract.text and the text format both write the record's text: a valid spec has one; and no field of
    its own is named as a format's record field."""
    if spec.get("text") and "text" in spec.get("formats", ()):
        spec["formats"] = [f for f in spec["formats"] if f != "text"]
    if spec.get("formats") and "fields" in spec:
        taken = {*spec["formats"], "truncated"}
        spec["fields"] = [f for f in spec["fields"] if f["name"] not in taken]
    return spec


extract = obj(
    scrapejob.ExtractSpec,
    {},
    {
        "fields": st.lists(field_rule, max_size=5, unique_by=lambda f: f["name"]),
        "links": st.booleans(),
        "images": st.booleans(),
        "title": st.booleans(),
        "text": st.booleans(),
        "onlyMatching": regex,
        "formats": st.lists(enum(formats.OutputFormat), max_size=4, unique=True),
        "mainContent": main_content,
        "structured": structured,
    },
).map(_one_text)


def _render(wait: str) -> Strategy:
    required = {"mode": enum(render.RenderMode), "waitFor": st.just(wait)}
    if wait == "Selector":
        required["selector"] = st.sampled_from(["ol.items li", "#content", "div.product h1"])
    optional = {
        "delaySeconds": floats(0, 60),
        "timeoutSeconds": floats(1, 300),
        "screenshot": st.booleans(),
        "blockResources": st.lists(enum(render.BlockedResource), max_size=4, unique=True),
        "onlyMatching": st.sampled_from(["/js/", r"/category/[a-z-]+/page-\d+\.html$"]),
    }
    if wait != "Selector":
        optional["selector"] = st.sampled_from(["ol.items li", "#content"])
    return obj(render.RenderSpec, required, optional)


render_spec = st.one_of(st.sampled_from([w.value for w in render.RenderWait]).flatmap(_render), st.just({}))
url_range = ordered(
    obj(
        scrapejob.UrlRange,
        {
            "template": st.builds("https://{}/p/{{n}}{}".format, host, st.sampled_from(["", "?x=1", "/index.html"])),
            "start": ints(0, 1000),
            "end": ints(0, 2000),
        },
        {"step": ints(1, 50)},
    ),
    "start",
    "end",
)


revisit_spec = obj(
    refresh.RevisitSpec,
    {"maxHours": floats(0.1, refresh.MAX_RETAIN_DAYS * 24)},
    {"minHours": floats(0, refresh.MAX_RETAIN_DAYS * 24)},
).filter(lambda r: r.get("minHours", 0) <= r["maxHours"])
refresh_spec = obj(
    refresh.RefreshSpec,
    {},
    {
        "revisit": revisit_spec,
        "changedFields": st.booleans(),
        "lineage": dns_label,
        "fingerprint": enum(refresh.Fingerprint),
        "conditionalRequests": st.booleans(),
        "forceRefresh": st.booleans(),
        "records": enum(refresh.RefreshRecords),
        "retainDays": ints(1, refresh.MAX_RETAIN_DAYS),
    },
)


pg_name = st.from_regex(r"[a-z_][a-z0-9_]{0,20}", fullmatch=True)


def _output(sink: str) -> Strategy:
    settings = {
        "redisStream": obj(scrapejob.RedisStreamSink, {}, {"maxLen": ints(1, 10_000_000)}),
        "jsonLines": obj(
            scrapejob.JsonLinesSink,
            {"directory": st.from_regex(r"(/[a-z0-9_-][a-z0-9._-]{0,8}){1,3}/?", fullmatch=True)},
            {},
        ),
        "webhook": obj(scrapejob.WebhookSink, {"url": http_url}, {"secretRef": secret_ref, "batchSize": ints(1, 1000)}),
        "postgres": obj(
            scrapejob.PostgresSink,
            {"host": pg_host, "database": pg_name, "user": pg_name},
            {
                "port": ints(1, 65535),
                "passwordSecretRef": secret_ref,
                "table": st.builds("{}{}".format, st.sampled_from(["", "results.", "s_1."]), pg_name),
                "sslMode": st.sampled_from(["disable", "allow", "prefer", "require", "verify-ca", "verify-full"]),
                "connectTimeoutSeconds": ints(1, 300),
            },
        ),
        "s3": obj(
            scrapejob.S3Sink,
            {
                "bucket": st.from_regex(r"[a-z0-9][a-z0-9-]{1,20}[a-z0-9]", fullmatch=True),
                "accessKeyIdSecretRef": secret_ref,
                "secretAccessKeySecretRef": secret_ref,
            },
            {
                "prefix": st.sampled_from(["", "trawl/", "a/b/"]),
                "endpoint": http_url,
                "region": st.sampled_from(["us-east-1", "eu-west-3"]),
                "pathStyle": st.booleans(),
                "format": enum(tabular.FileFormat),
            },
        ),
        "files": obj(
            tabular.FilesSink,
            {"directory": st.from_regex(r"(/[a-z0-9_-][a-z0-9._-]{0,8}){1,3}/?", fullmatch=True)},
            {"format": enum(tabular.FileFormat)},
        ),
    }
    key = {
        "RedisStream": "redisStream",
        "JsonLines": "jsonLines",
        "Webhook": "webhook",
        "PostgreSQL": "postgres",
        "S3": "s3",
        "Files": "files",
    }[sink]
    required = {"sink": st.just(sink), key: settings[key]}
    optional = {k: v for k, v in settings.items() if k != key}
    return obj(scrapejob.OutputSpec, required, optional)


output = st.one_of(
    st.sampled_from([s.value for s in scrapejob.SinkKind]).flatmap(_output),
    st.just({}),  # every field defaulted
)

_on_complete_webhook = obj(scrapejob.OnCompleteWebhook, {"url": http_url}, {"secretRef": secret_ref})
_job_template = st.fixed_dictionaries(
    {
        "spec": st.fixed_dictionaries(
            {
                "template": st.fixed_dictionaries(
                    {
                        "spec": st.fixed_dictionaries(
                            {
                                "restartPolicy": st.sampled_from(["Never", "OnFailure"]),
                                "containers": st.lists(
                                    st.fixed_dictionaries({"name": dns_label, "image": st.sampled_from(["a:1", "b"])}),
                                    min_size=1,
                                    max_size=2,
                                ),
                            }
                        )
                    }
                )
            },
            optional={"backoffLimit": ints(0, 6)},
        )
    },
    optional={"metadata": st.fixed_dictionaries({"labels": label_map})},
)
_on_complete_job = obj(
    scrapejob.OnCompleteJob,
    {"template": dns_label},
    {
        "parameters": st.lists(
            obj(
                scrapejob.JobParameter,
                {"name": st.from_regex(r"[A-Z][A-Z0-9_]{0,15}", fullmatch=True)},
                {"value": st.text(max_size=20)},
            ),
            max_size=scrapejob.MAX_JOB_PARAMETERS,
            unique_by=lambda p: p["name"],
        )
    },
)
session_spec = obj(
    sessions.SessionSpec,
    {},
    {
        "scope": enum(sessions.SessionScope),
        "poolSize": ints(1, 50),
        "maxAgeSeconds": ints(10, 86400),
        "maxUses": ints(1, 10000),
        "maxBlockedRetries": ints(0, 10),
        "userAgents": st.lists(st.from_regex(r"[A-Za-z0-9/ .;()_-]{1,40}", fullmatch=True), max_size=3),
        "seed": dns_label,
        "block": obj(
            sessions.BlockRules,
            {},
            {
                "statusCodes": st.lists(ints(400, 599), max_size=16),
                "markers": st.lists(st.text(min_size=1, max_size=20), max_size=4),
                "challengePaths": st.lists(path.filter(lambda p: p.startswith("/")), max_size=4),
                "minBodyFraction": floats(0.0, 1.0),
            },
        ),
    },
)
_urls = st.lists(http_url, min_size=1, max_size=8)
_url_ranges = st.lists(url_range, min_size=1, max_size=3)


def _job_spec(seeds: dict[str, Strategy], more: dict[str, Strategy]) -> Strategy:
    return obj(
        scrapejob.ScrapeJobSpec,
        {"pool": dns_label, **seeds},
        {**more, **_job_optional},
    )


_job_optional: dict[str, Strategy] = {
    "crawl": crawl,
    "render": render_spec,
    "refresh": refresh_spec,
    "extract": extract,
    "request": request,
    "politeness": politeness,
    "retry": retry,
    "priority": ints(0, 9),
    "priorityClassName": dns_label,
    "proxy": obj(proxies.JobProxy, {"group": st.one_of(st.just("none"), dns_label)}, {}),
    "session": session_spec,
    "poolNamespace": dns_label,
    "dedupe": obj(scrapejob.DedupeSpec, {}, {"acrossJobs": st.booleans(), "windowSeconds": ints(1, 30 * 86400)}),
    "activeDeadlineSeconds": ints(1, 10**9),
    "suspend": st.booleans(),
    "maxDeadLetters": ints(0, 10**6),
    "ttlSecondsAfterFinished": ints(0, 10**9),
    "output": output,
    # job and the refused jobTemplate never together (the CRD and the model say so)
    "onComplete": st.one_of(
        obj(
            scrapejob.OnCompleteSpec,
            {"webhook": _on_complete_webhook},
            {"job": _on_complete_job, "jobTemplate": st.nothing()},
        ),
        obj(
            scrapejob.OnCompleteSpec,
            {"job": _on_complete_job},
            {"webhook": _on_complete_webhook, "jobTemplate": st.nothing()},
        ),
        obj(scrapejob.OnCompleteSpec, {"jobTemplate": _job_template}, {"webhook": st.nothing(), "job": st.nothing()}),
    ),
}
_job_optional["sitemaps"] = sitemaps
# WARC capture and re-extraction (trawl.archive): any source text reaches the model; the operator refuses it.
_job_optional["archive"] = obj(
    archive_api.ArchiveSpec, {}, {"maxRecordBytes": ints(1024, 64 << 20), "maxFileBytes": ints(1 << 20, 1 << 30)}
)
_job_optional["archiveSource"] = obj(
    archive_api.ArchiveSourceSpec,
    {},
    {"job": dns_label, "path": st.text(max_size=64), "namespace": dns_label},
)
# A job needs urls, urlRanges or sitemaps.urls (or more than one).
scrape_job_spec = st.one_of(
    _job_spec({"urls": _urls}, {"urlRanges": _url_ranges}),
    _job_spec({"urlRanges": _url_ranges}, {"urls": st.nothing()}),
    obj(
        scrapejob.ScrapeJobSpec,
        {"pool": dns_label, "sitemaps": sitemaps_with_urls},
        {
            **{k: v for k, v in _job_optional.items() if k != "sitemaps"},
            "urls": st.nothing(),
            "urlRanges": st.nothing(),
        },
    ),
)

# ------------------------------------------------------------------ ScrapePool

_redis_url = st.builds("{}://{}:{}/{}".format, st.sampled_from(["redis", "rediss"]), host, ints(1, 65535), ints(0, 15))
_url_modes = st.sampled_from([scrapepool.RedisMode.STANDALONE.value, scrapepool.RedisMode.CLUSTER.value])
_redis_common = {
    "shards": st.integers(1, 16),
    "passwordSecretRef": secret_ref,
    "tls": obj(
        scrapepool.RedisTLS,
        {},
        {"enabled": st.booleans(), "caSecretRef": secret_ref, "insecureSkipVerify": st.booleans()},
    ),
    "keyPrefix": st.from_regex(r"[A-Za-z0-9:_.-]{1,20}", fullmatch=True),
}
_not_sentinel = {"sentinels": st.nothing(), "masterName": st.nothing(), "sentinelPasswordSecretRef": st.nothing()}
_sentinel_address = st.builds("{}:{}".format, st.one_of(host, st.just("[fd00::1]")), ints(1, 65535))
redis = st.one_of(
    obj(
        scrapepool.RedisSpec,
        {"url": _redis_url},
        {"mode": _url_modes, "urlSecretRef": st.nothing(), **_not_sentinel, **_redis_common},
    ),
    obj(
        scrapepool.RedisSpec,
        {"urlSecretRef": secret_ref},
        {"mode": _url_modes, "url": st.nothing(), **_not_sentinel, **_redis_common},
    ),
    obj(
        scrapepool.RedisSpec,
        {
            "mode": st.just(scrapepool.RedisMode.SENTINEL.value),
            "sentinels": st.lists(_sentinel_address, min_size=1, max_size=5),
            "masterName": st.from_regex(r"[A-Za-z0-9._-]{1,20}", fullmatch=True),
        },
        {
            "url": st.nothing(),
            "urlSecretRef": st.nothing(),
            "sentinelPasswordSecretRef": secret_ref,
            **_redis_common,
        },
    ),
)
_quantity = st.sampled_from(["100m", "1", "2500m", "128Mi", "1Gi", "500M"])
_volume_name = st.sampled_from(["results", "scratch", "data"])
_pvc = obj(scrapepool.PersistentVolumeClaimSource, {"claimName": dns_label}, {"readOnly": st.booleans()})
_empty_dir = obj(scrapepool.EmptyDirSource, {}, {"medium": st.sampled_from(["", "Memory"]), "sizeLimit": _quantity})
_csi = obj(
    scrapepool.CSISource,
    {"driver": st.sampled_from(["s3.csi.example.com", "efs.csi.aws.com"])},
    {
        "readOnly": st.booleans(),
        "fsType": st.sampled_from(["ext4", "xfs"]),
        "volumeAttributes": label_map,
        "nodePublishSecretRef": obj(scrapepool.LocalObjectReference, {"name": dns_label}, {}),
    },
)


def _no_source(but: str) -> dict[str, Strategy]:
    return {k: st.nothing() for k in ("persistentVolumeClaim", "emptyDir", "csi") if k != but}


def _mounts_name_volumes(worker: dict[str, Any]) -> dict[str, Any]:
    """A volumeMount must name a volume of the pool: point each at one that exists (or drop them)."""
    names = [v["name"] for v in worker.get("volumes", [])]
    if "volumeMounts" in worker:
        if names:
            worker["volumeMounts"] = [m | {"name": names[i % len(names)]} for i, m in enumerate(worker["volumeMounts"])]
        else:
            del worker["volumeMounts"]
    return worker


def _keys_name_secrets(worker: dict[str, Any]) -> dict[str, Any]:
    """A secretKeys entry must name a Secret the pool mounts: point each at one that is (or drop them)."""
    names = worker.get("secrets", [])
    if "secretKeys" in worker:
        if names:
            worker["secretKeys"] = [k | {"name": names[i % len(names)]} for i, k in enumerate(worker["secretKeys"])]
        else:
            del worker["secretKeys"]
    return worker


worker = obj(
    scrapepool.WorkerSpec,
    {},
    {
        "image": st.from_regex(r"[a-z0-9./-]{1,30}(:[a-z0-9.]{1,10})?", fullmatch=True),
        "imagePullPolicy": st.sampled_from(["Always", "IfNotPresent", "Never"]),
        "concurrency": ints(1, 2048),
        "claimBatch": st.one_of(st.just("auto"), ints(1, 1000)),
        "browser": obj(
            render.BrowserWorkerSpec, {}, {"pagesPerBrowser": ints(1, 64), "memoryLimitMiB": ints(64, 65536)}
        ),
        "circuitBreaker": obj(
            scrapepool.CircuitBreakerSpec,
            {},
            {"failureThreshold": ints(0, 1000), "openSeconds": st.floats(1, 3600, allow_nan=False)},
        ),
        "resources": obj(
            scrapepool.Resources,
            {},
            {
                "requests": st.dictionaries(st.sampled_from(["cpu", "memory"]), _quantity, max_size=2),
                "limits": st.dictionaries(st.sampled_from(["cpu", "memory"]), _quantity, max_size=2),
            },
        ),
        "env": st.lists(
            obj(
                scrapepool.EnvVar,
                # TRAWL_* are the operator's: refused
                {
                    "name": st.from_regex(r"[A-Z_][A-Z0-9_]{0,15}", fullmatch=True).filter(
                        lambda n: not n.startswith("TRAWL_")
                    )
                },
                {"value": st.text(max_size=20)},
            ),
            max_size=4,
        ),
        "drainSeconds": ints(1, 3600),
        "allowedCidrs": st.lists(st.sampled_from(["10.0.0.0/8", "192.168.1.0/24", "127.0.0.1/32", "fd00::/8"])),
        # room for 3 proxy groups' Secrets and the session seeds' one (_proxy_secrets_mounted)
        "secrets": st.lists(dns_label, max_size=16),
        "secretKeys": st.lists(
            obj(
                scrapepool.SecretKeyUse,
                {
                    "name": dns_label,
                    "key": st.from_regex(r"[-._a-zA-Z0-9]{1,20}", fullmatch=True),
                    "use": enum(scrapepool.SecretUse),
                },
                {},
            ),
            max_size=4,
        ),
        "allowCleartextPostgresPassword": st.booleans(),
        "imagePullSecrets": st.lists(dns_label, max_size=20),
        "podSecurityContext": st.fixed_dictionaries(
            {"runAsNonRoot": st.booleans()}, optional={"runAsUser": ints(1, 65535), "fsGroup": ints(1, 65535)}
        ),
        "nodeSelector": label_map,
        "tolerations": st.lists(
            st.fixed_dictionaries(
                {"key": st.from_regex(r"[a-z]{1,10}", fullmatch=True), "operator": st.sampled_from(["Exists"])},
                optional={"effect": st.sampled_from(["NoSchedule", "NoExecute"]), "tolerationSeconds": ints(0, 600)},
            ),
            max_size=3,
        ),
        "serviceAccountName": dns_label,
        "podAnnotations": label_map,
        "podLabels": label_map,
        "metricsPort": ints(1024, 65535),
        "volumes": st.lists(
            st.one_of(
                *(
                    obj(scrapepool.Volume, {"name": _volume_name, key: source}, _no_source(key))
                    for key, source in (("persistentVolumeClaim", _pvc), ("emptyDir", _empty_dir), ("csi", _csi))
                ),
            ),
            max_size=3,
            unique_by=lambda v: v["name"],
        ),
        "volumeMounts": st.lists(
            obj(
                scrapepool.VolumeMount,
                {"name": _volume_name, "mountPath": st.sampled_from(["/data", "/data/results", "/mnt/x", "/out"])},
                {"readOnly": st.booleans(), "subPath": st.sampled_from(["a", "b/c"])},
            ),
            max_size=3,
            unique_by=lambda m: m["mountPath"],
        ),
    },
).map(lambda w: _keys_name_secrets(_mounts_name_volumes(w)))


def _min_within_default_max(d: dict[str, Any]) -> dict[str, Any]:
    """minReplicas alone must not exceed the default maxReplicas (10)."""
    if "maxReplicas" not in d and d.get("minReplicas", 0) > 10:
        d["minReplicas"] %= 11
    return d


autoscaling = ordered(
    obj(
        scrapepool.AutoscalingSpec,
        {},
        {
            "enabled": st.booleans(),
            "minReplicas": ints(0, 1000),
            "maxReplicas": ints(1, 1000),
            "targetDrainSeconds": ints(1, 86400),
            "failureRateThreshold": floats(0, 1, exclude_min=True),
            "scaleDownDelaySeconds": ints(0, 3600),
            "idleSecondsBeforeZero": ints(0, 86400),
            "pollSeconds": floats(1, 60),
        },
    ),
    "minReplicas",
    "maxReplicas",
).map(_min_within_default_max)
job_limits = obj(
    scrapepool.JobLimits,
    {},
    {
        "maxResponseBytes": ints(1, 1 << 30),
        "requestsPerSecond": floats(0, 10000, exclude_min=True),
        "maxConcurrencyPerDomain": ints(1, 1000),
        "maxUrlsPerJob": ints(1, 10_000_000),
        "maxResultsRetained": ints(1, 10_000_000),
        "maxDeadLettersRetained": ints(0, 1_000_000),
        "maxPriority": ints(0, 9),
        "maxFormatBytes": ints(1024, formats.MAX_FORMAT_BYTES),
    },
)


_class_name = st.sampled_from(["low", "normal", "high", "urgent", "bulk"])
_quotas = obj(
    tenancy.TenantQuotas,
    {},
    {
        "inFlight": ints(1, 1_000_000),
        "requestsPerSecond": floats(0, 100_000, exclude_min=True),
        "pagesPerDay": ints(1, 10**12),
        "urlsQueued": ints(1, 10**12),
        "browserSecondsPerDay": floats(0, 86400 * 100_000, exclude_min=True),
    },
)
_terms_fields: dict[str, Strategy] = {
    "weight": ints(1, 1000),
    "priorityCeiling": _class_name,
    "defaultPriorityClass": _class_name,
    "quotas": _quotas,
}


def _valid_tenancy(d: dict[str, Any]) -> dict[str, Any]:
    """Repaired, not filtered: class names a tenant gives that no class has are dropped, a default class
    above its ceiling is dropped, only the first globalDefault stays."""
    values = {c["name"]: c["value"] for c in d.get("priorityClasses") or []}
    seen_default = False
    for c in d.get("priorityClasses") or []:
        if c.get("globalDefault"):
            c["globalDefault"], seen_default = not seen_default, True
    for terms in [*(d.get("tenants") or []), *([d["defaultTenant"]] if "defaultTenant" in d else [])]:
        for key in ("priorityCeiling", "defaultPriorityClass"):
            if key in terms and terms[key] not in values:
                del terms[key]
        ceiling, default = terms.get("priorityCeiling"), terms.get("defaultPriorityClass")
        if ceiling is not None and default is not None and values[default] > values[ceiling]:
            del terms["defaultPriorityClass"]
    return d


tenancy_spec = obj(
    tenancy.TenancySpec,
    {},
    {
        "tenantLabel": st.sampled_from(["trawl.dev/tenant", "team", "example.com/cost-center"]),
        "agingSeconds": floats(1, 86400),
        "priorityClasses": st.lists(
            obj(tenancy.PriorityClass, {"name": _class_name, "value": ints(0, 9)}, {"globalDefault": st.booleans()}),
            max_size=4,
            unique_by=lambda c: c["name"],
        ),
        "tenants": st.lists(
            obj(
                tenancy.Tenant,
                {"name": dns_label.filter(lambda n: n not in tenancy.RESERVED_TENANT_NAMES)},
                _terms_fields,
            ),
            max_size=4,
            unique_by=lambda t: t["name"],
        ),
        "defaultTenant": obj(tenancy.TenantTerms, {}, _terms_fields),
    },
).map(_valid_tenancy)


def _one_default_group(d: dict[str, Any]) -> dict[str, Any]:
    """Repaired: only the first group marked default stays the default."""
    seen = False
    for group in d.get("groups") or []:
        if group.get("default"):
            group["default"], seen = not seen, True
    return d


proxies_spec = obj(
    proxies.ProxiesSpec,
    {},
    {
        "groups": st.lists(
            obj(
                proxies.ProxyGroup,
                {"name": dns_label.filter(lambda n: n != proxies.NO_PROXY), "secretRef": secret_ref},
                {"maxConcurrencyPerProxy": ints(1, 1024), "default": st.booleans()},
            ),
            max_size=3,
            unique_by=lambda g: g["name"],
        )
    },
).map(_one_default_group)


def _proxy_secrets_mounted(d: dict[str, Any]) -> dict[str, Any]:
    """Repaired: the Secrets the proxy groups name are added to worker.secrets (the model requires it)."""
    names = [g["secretRef"]["name"] for g in (d.get("proxies") or {}).get("groups") or []]
    names += [s["secretRef"]["name"] for s in d.get("sessionSeeds") or []]
    if names:
        worker = d.setdefault("worker", {})
        worker["secrets"] = list(dict.fromkeys([*(worker.get("secrets") or []), *names]))
    return d


def _defaults_within_limits(d: dict[str, Any]) -> dict[str, Any]:
    """A ceiling set below the pool's own default for it is raised to that default (the model refuses it)."""
    limits, defaults = d.get("jobLimits") or {}, d.get("defaults") or {}
    for group, field in (
        ("request", "maxResponseBytes"),
        ("politeness", "requestsPerSecond"),
        ("politeness", "maxConcurrencyPerDomain"),
    ):
        value = (defaults.get(group) or {}).get(field)
        if value is not None and limits.get(field) is not None and value > limits[field]:
            limits[field] = value
    for rule in (defaults.get("politeness") or {}).get("domains") or ():  # the pool's rules likewise
        rates = [rule.get("requestsPerSecond"), 1 / rule["delaySeconds"] if "delaySeconds" in rule else None]
        for field, value in (("requestsPerSecond", max((r for r in rates if r), default=None)),
                             ("maxConcurrencyPerDomain", rule.get("maxConcurrencyPerDomain"))):  # fmt: skip
            if value is not None and limits.get(field) is not None and value > limits[field]:
                limits[field] = value
    return d


# A pool's archive location: a directory or an S3 bucket (exactly one; the S3 sink's settings).
_archive_s3 = obj(
    scrapejob.S3Sink,
    {
        "bucket": st.from_regex(r"[a-z0-9][a-z0-9-]{1,20}[a-z0-9]", fullmatch=True),
        "accessKeyIdSecretRef": secret_ref,
        "secretAccessKeySecretRef": secret_ref,
    },
    {
        "prefix": st.sampled_from(["", "warc/"]),
        "endpoint": http_url,
        "region": st.sampled_from(["us-east-1"]),
        "pathStyle": st.booleans(),
        "format": enum(tabular.FileFormat),  # the S3 sink's model: an archive is WARC whatever it says
    },
)
_pool_archive = st.one_of(
    obj(poolarchive.PoolArchiveSpec, {"directory": st.from_regex(r"\A/[a-z]{1,20}\Z")}, {"s3": st.nothing()}),
    obj(poolarchive.PoolArchiveSpec, {"s3": _archive_s3}, {"directory": st.nothing()}),
)

scrape_pool_spec = (
    obj(
        scrapepool.ScrapePoolSpec,
        {"redis": redis},
        {
            "worker": worker,
            "replicas": ints(0, 1000),
            "autoscaling": autoscaling,
            "queue": obj(
                scrapepool.QueueSpec,
                {},
                {
                    "leaseSeconds": floats(2, 3600),
                    "maxStalls": ints(1, 100),
                    "finishedJobRetentionSeconds": ints(60, 10**8),
                },
            ),
            "defaults": obj(
                scrapepool.PoolDefaults, {}, {"request": pool_request, "politeness": politeness, "retry": retry}
            ),
            "jobLimits": job_limits,
            "onCompleteJobs": st.lists(
                obj(scrapepool.OnCompleteJobTemplate, {"name": dns_label, "template": _job_template}, {}),
                max_size=3,
                unique_by=lambda t: t["name"],
            ),
            "tenancy": tenancy_spec,
            "proxies": proxies_spec,
            "sessionSeeds": st.lists(
                obj(
                    sessions.SessionSeed,
                    {
                        "name": dns_label,
                        "secretRef": st.fixed_dictionaries({"name": st.just("seeds"), "key": dns_label}),
                    },
                    {},
                ),
                max_size=2,
                unique_by=lambda s: s["name"],
            ),
            "archive": _pool_archive,
        },
    )
    .map(_defaults_within_limits)
    .map(_proxy_secrets_mounted)
)

# ------------------------------------------------------------------ CronScrapeJob


def _cron_field(lo: int, hi: int) -> Strategy:
    number = ints(lo, hi).map(str)
    return st.one_of(
        st.just("*"),
        number,
        ints(1, hi).map(lambda n: f"*/{n}"),
        st.tuples(ints(lo, hi), ints(lo, hi)).map(lambda ab: f"{min(ab)}-{max(ab)}"),
        st.lists(number, min_size=2, max_size=3, unique=True).map(",".join),
    )


schedule = st.one_of(
    st.sampled_from(["@hourly", "@daily", "@weekly", "@monthly", "@yearly", "@midnight"]),
    st.tuples(_cron_field(0, 59), _cron_field(0, 23), _cron_field(1, 28), _cron_field(1, 12), _cron_field(0, 6)).map(
        " ".join
    ),
)
_ZONES = sorted(z for z in zoneinfo.available_timezones() if re.match(TIMEZONE_PATTERN, z))
cron_scrape_job_spec = obj(
    CronScrapeJobSpec,
    {
        "schedule": schedule,
        "jobTemplate": obj(
            ScrapeJobTemplate,
            {"spec": scrape_job_spec},
            {"metadata": obj(JobTemplateMetadata, {}, {"labels": label_map, "annotations": label_map})},
        ),
    },
    {
        "timeZone": st.sampled_from(_ZONES),
        "concurrencyPolicy": st.sampled_from(["Allow", "Forbid", "Replace"]),
        "startingDeadlineSeconds": ints(0, 10**6),
        "suspend": st.booleans(),
        "successfulJobsHistoryLimit": ints(0, 100),
        "failedJobsHistoryLimit": ints(0, 100),
    },
)
