"""Invalid manifests shared by the model tests (pydantic) and the CRD tests (the real API server).

Each case is one small change to a valid object and the field path an error must name. Some
mistakes only the API server can see (a change to an immutable field, an over-long object name);
those have ``pydantic_field=None``.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

GROUP_VERSION = "trawl.dev/v1alpha1"

VALID_JOB: dict[str, Any] = {"pool": "default", "urls": ["https://example.com/"]}
VALID_POOL: dict[str, Any] = {"redis": {"url": "redis://redis.trawl-system.svc:6379/0"}}
VALID_CRON: dict[str, Any] = {"schedule": "*/5 * * * *", "jobTemplate": {"spec": VALID_JOB}}
VALID = {"ScrapeJob": VALID_JOB, "ScrapePool": VALID_POOL, "CronScrapeJob": VALID_CRON}

_DELETE = object()


def changed(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A deep copy of ``base`` with dotted paths set (``crawl.maxPages=0``) or removed (``_DELETE``)."""
    out = copy.deepcopy(base)
    for dotted, value in changes.items():
        *parents, leaf = dotted.split("__")
        node = out
        for key in parents:
            node = node.setdefault(key, {})
        if value is _DELETE:
            node.pop(leaf, None)
        else:
            node[leaf] = value
    return out


@dataclass(frozen=True)
class Case:
    id: str
    kind: str
    spec: dict[str, Any]
    server_field: str
    """Substring of the API server's error: the field path it names."""
    pydantic_field: str | None
    """Substring of pydantic's error (location or message), or None when pydantic cannot see it."""
    name: str = "bad"
    update: dict[str, Any] | None = None
    """For immutability: the object is created with ``spec``, then merge-patched with this spec."""

    def manifest(self, name: str | None = None) -> dict[str, Any]:
        metadata = {"name": name or self.name}
        return {"apiVersion": GROUP_VERSION, "kind": self.kind, "metadata": metadata, "spec": self.spec}


def _job(**changes: Any) -> dict[str, Any]:
    return changed(VALID_JOB, **changes)


def _pool(**changes: Any) -> dict[str, Any]:
    return changed(VALID_POOL, **changes)


def _cron(**changes: Any) -> dict[str, Any]:
    return changed(VALID_CRON, **changes)


MANY_URLS = [f"https://example.com/p/{i}" for i in range(5001)]
_LOADER = {"spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "l", "image": "l:1"}]}}}}

INVALID: list[Case] = [
    Case("url-scheme-ftp", "ScrapeJob", _job(urls=["ftp://example.com/file"]), "spec.urls[0]", "urls.0"),
    Case("url-javascript", "ScrapeJob", _job(urls=["javascript:alert(1)"]), "spec.urls[0]", "urls.0"),
    Case("max-pages-zero", "ScrapeJob", _job(crawl={"maxPages": 0}), "spec.crawl.maxPages", "crawl.maxPages"),
    Case("max-pages-negative", "ScrapeJob", _job(crawl={"maxPages": -5}), "spec.crawl.maxPages", "crawl.maxPages"),
    Case(  # a crawl may declare 10,000,000 pages (issue 37), not one more
        "max-pages-over-ten-million",
        "ScrapeJob",
        _job(crawl={"maxPages": 10_000_001}),
        "spec.crawl.maxPages",
        "crawl.maxPages",
    ),
    Case(
        "max-urls-per-job-over-ten-million",
        "ScrapePool",
        _pool(jobLimits={"maxUrlsPerJob": 10_000_001}),
        "spec.jobLimits.maxUrlsPerJob",
        "jobLimits.maxUrlsPerJob",
    ),
    Case("crawl-scope-enum", "ScrapeJob", _job(crawl={"scope": "Everywhere"}), "spec.crawl.scope", "crawl.scope"),
    Case("pool-missing", "ScrapeJob", _job(pool=_DELETE), "spec.pool", "pool"),
    Case("pool-not-dns-label", "ScrapeJob", _job(pool="Bad_Pool"), "spec.pool", "pool"),
    Case("no-urls", "ScrapeJob", _job(urls=_DELETE), "spec.urls: Invalid value", "urls, urlRanges or sitemaps.urls"),
    Case("too-many-urls", "ScrapeJob", _job(urls=MANY_URLS), "spec.urls", "urls"),
    Case(
        "url-range-reversed",
        "ScrapeJob",
        _job(urlRanges=[{"template": "https://e.com/{n}", "start": 5, "end": 1}]),
        "spec.urlRanges[0]",
        "urlRanges.0",
    ),
    # Issue 32: every URL a range makes fits in 2048 characters (600 {n} of seven digits would be 4210).
    Case(
        "url-range-urls-too-long",
        "ScrapeJob",
        _job(urlRanges=[{"template": "https://e.com/" + "{n}" * 600, "start": 1, "end": 1_000_000}]),
        "spec.urlRanges[0].template",
        "urlRanges.0",
    ),
    Case("priority-10", "ScrapeJob", _job(priority=10), "spec.priority", "priority"),
    # A job names a proxy group of its pool, never an address.
    Case("proxy-address", "ScrapeJob", _job(proxy={"group": "http://evil:3128"}), "spec.proxy.group", "proxy.group"),
    # A session's bounds and its rules' shapes (a job author's: hostile).
    Case("session-pool-51", "ScrapeJob", _job(session={"poolSize": 51}), "spec.session.poolSize", "session.poolSize"),
    Case(
        "session-challenge-relative",
        "ScrapeJob",
        _job(session={"block": {"challengePaths": ["captcha"]}}),
        "spec.session.block.challengePaths[0]",
        "session.block.challengePaths.0",
    ),
    Case(  # a user agent that would end its header and start another (header injection)
        "session-user-agent-crlf",
        "ScrapeJob",
        _job(session={"userAgents": ["Mozilla/5.0\r\nX-Admin: 1"]}),
        "spec.session.userAgents[0]",
        "session.userAgents.0",
    ),
    Case(
        "rule-proxy-address",
        "ScrapeJob",
        _job(politeness={"domains": [{"host": "a.example", "proxyGroup": "http://evil:3128"}]}),
        "spec.politeness.domains[0].proxyGroup",
        "domains.0.proxyGroup",
    ),
    Case("jitter-2", "ScrapeJob", _job(retry={"jitter": 2}), "spec.retry.jitter", "retry.jitter"),
    # WARC capture: a record or file cap beyond the model's bounds; a pool archive directory that is relative.
    Case(
        "archive-record-too-big",
        "ScrapeJob",
        _job(archive={"maxRecordBytes": 1 << 30}),
        "spec.archive.maxRecordBytes",
        "archive.maxRecordBytes",
    ),
    Case(
        "archive-file-too-small",
        "ScrapeJob",
        _job(archive={"maxFileBytes": 1}),
        "spec.archive.maxFileBytes",
        "archive.maxFileBytes",
    ),
    Case(
        "pool-archive-relative",
        "ScrapePool",
        _pool(archive={"directory": "warc"}),
        "spec.archive.directory",
        "archive.directory",
    ),
    Case(
        "retry-on-enum", "ScrapeJob", _job(retry={"retryOn": ["Sometimes"]}), "spec.retry.retryOn[0]", "retry.retryOn.0"
    ),
    Case(
        "delays-reversed",
        "ScrapeJob",
        _job(retry={"initialDelaySeconds": 60, "maxDelaySeconds": 10}),
        "spec.retry.initialDelaySeconds",
        "initialDelaySeconds",
    ),
    Case(
        "rps-zero",
        "ScrapeJob",
        _job(politeness={"requestsPerSecond": 0}),
        "spec.politeness.requestsPerSecond",
        "politeness.requestsPerSecond",
    ),
    Case(
        "sink-jsonlines-without-settings",
        "ScrapeJob",
        _job(output={"sink": "JsonLines"}),
        "spec.output.jsonLines",
        "jsonLines",
    ),
    Case(
        "sink-files-without-settings",
        "ScrapeJob",
        _job(output={"sink": "Files"}),
        "spec.output.files",
        "files",
    ),
    Case(
        "sink-files-directory-climbs-out",
        "ScrapeJob",
        _job(output={"sink": "Files", "files": {"directory": "/data/../etc"}}),
        "spec.output.files.directory",
        "output.files.directory",
    ),
    Case(  # the same rule for the JSON Lines sink's directory (it accepted '..' before)
        "sink-jsonlines-directory-climbs-out",
        "ScrapeJob",
        _job(output={"sink": "JsonLines", "jsonLines": {"directory": "/data/../etc"}}),
        "spec.output.jsonLines.directory",
        "output.jsonLines.directory",
    ),
    Case(
        "sink-s3-format-unknown",
        "ScrapeJob",
        _job(
            output={
                "sink": "S3",
                "s3": {
                    "bucket": "bkt",
                    "format": "Excel",
                    "accessKeyIdSecretRef": {"name": "s", "key": "a"},
                    "secretAccessKeySecretRef": {"name": "s", "key": "b"},
                },
            }
        ),
        "spec.output.s3.format",
        "output.s3.format",
    ),
    Case(
        "webhook-url-scheme",
        "ScrapeJob",
        _job(output={"sink": "Webhook", "webhook": {"url": "file:///etc/passwd"}}),
        "spec.output.webhook.url",
        "output.webhook.url",
    ),
    # Issue 32: libpq's host lists and socket paths would be connected to past the address check.
    Case(
        "postgres-host-list",
        "ScrapeJob",
        _job(output={"sink": "PostgreSQL", "postgres": {"host": "db.example,10.0.0.1", "database": "d", "user": "u"}}),
        "spec.output.postgres.host",
        "host must be one host name or IP address",
    ),
    Case(
        "postgres-host-socket",
        "ScrapeJob",
        _job(output={"sink": "PostgreSQL", "postgres": {"host": "/run/postgresql", "database": "d", "user": "u"}}),
        "spec.output.postgres.host",
        "host must be one host name or IP address",
    ),
    Case(
        "field-name-pattern",
        "ScrapeJob",
        _job(extract={"fields": [{"name": "1bad", "selector": "h1"}]}),
        "spec.extract.fields[0].name",
        "extract.fields.0.name",
    ),
    Case("unknown-format", "ScrapeJob", _job(extract={"formats": ["pdf"]}), "spec.extract.formats[0]", "formats"),
    Case(
        "format-bytes-over-most",
        "ScrapePool",
        _pool(jobLimits={"maxFormatBytes": 1 << 30}),
        "spec.jobLimits.maxFormatBytes",
        "jobLimits.maxFormatBytes",
    ),
    Case("unknown-field", "ScrapeJob", _job(colour="blue"), "spec.colour", "colour"),
    Case("job-name-too-long", "ScrapeJob", VALID_JOB, "metadata.name", None, name="j" * 64),
    Case("pool-immutable", "ScrapeJob", VALID_JOB, "spec.pool", None, update={"pool": "other"}),
    Case("urls-immutable", "ScrapeJob", VALID_JOB, "spec.urls", None, update={"urls": ["https://example.org/"]}),
    Case(
        "min-above-max-replicas",
        "ScrapePool",
        _pool(autoscaling={"minReplicas": 5, "maxReplicas": 2}),
        "spec.autoscaling.minReplicas",
        "minReplicas",
    ),
    # Issue 32: a pool's defaults lie within the limits it sets its jobs.
    Case(
        "pool-default-above-its-job-limit",
        "ScrapePool",
        _pool(defaults={"politeness": {"requestsPerSecond": 500}}, jobLimits={"requestsPerSecond": 100}),
        "spec.defaults.politeness.requestsPerSecond",
        "exceeds jobLimits.requestsPerSecond",
    ),
    # Per-domain rules: a pool's stay within its jobLimits too; a rule writes its rate once; a host pattern.
    Case(
        "pool-domain-rule-above-its-job-limit",
        "ScrapePool",
        _pool(
            defaults={"politeness": {"domains": [{"host": "a.example", "delaySeconds": 0.001}]}},
            jobLimits={"requestsPerSecond": 100},
        ),
        "spec.defaults.politeness.domains",
        "exceeds jobLimits.requestsPerSecond",
    ),
    Case(
        "domain-rule-rate-twice",
        "ScrapeJob",
        _job(politeness={"domains": [{"host": "a.example", "requestsPerSecond": 1, "delaySeconds": 1}]}),
        "spec.politeness.domains[0]",
        "not both",
    ),
    Case(
        "domain-rule-host-with-port",
        "ScrapeJob",
        _job(politeness={"domains": [{"host": "a.example:8080", "requestsPerSecond": 1}]}),
        "spec.politeness.domains[0].host",
        "not a host pattern",
    ),
    Case(
        "redis-url-and-secret",
        "ScrapePool",
        _pool(redis={"url": "redis://r:6379/0", "urlSecretRef": {"name": "redis", "key": "url"}}),
        "spec.redis",
        "urlSecretRef",
    ),
    Case(
        "secret-keys-of-an-unmounted-secret",
        "ScrapePool",
        _pool(worker={"secretKeys": [{"name": "pg", "key": "password", "use": "PostgresPassword"}]}),
        "spec.worker.secretKeys",
        "worker.secrets does not list",
    ),
    Case("redis-url-scheme", "ScrapePool", _pool(redis={"url": "http://redis:6379"}), "spec.redis.url", "redis.url"),
    Case(
        "proxy-per-proxy-zero",
        "ScrapePool",
        _pool(
            worker={"secrets": ["proxies"]},
            proxies={
                "groups": [{"name": "dc", "secretRef": {"name": "proxies", "key": "urls"}, "maxConcurrencyPerProxy": 0}]
            },
        ),
        "spec.proxies.groups[0].maxConcurrencyPerProxy",
        "proxies.groups.0.maxConcurrencyPerProxy",
    ),
    # redis-py ignores a path it cannot read as a number: the pool would use database 0 and say Ready.
    Case(
        "redis-url-database-not-a-number",
        "ScrapePool",
        _pool(redis={"url": "redis://redis:6379/notanumber"}),
        "spec.redis.url",
        "database number",
    ),
    Case(
        "redis-sentinel-without-master-name",
        "ScrapePool",
        _pool(redis={"mode": "Sentinel", "sentinels": ["s1:26379"]}),
        "spec.redis",
        "needs both sentinels and masterName",
    ),
    Case(
        "redis-sentinel-with-url",
        "ScrapePool",
        _pool(redis={"mode": "Sentinel", "sentinels": ["s1:26379"], "masterName": "m", "url": "redis://r:6379/0"}),
        "spec.redis",
        "not url or urlSecretRef",
    ),
    Case(
        "redis-sentinels-on-standalone",
        "ScrapePool",
        _pool(redis={"url": "redis://r:6379/0", "sentinels": ["s1:26379"], "masterName": "m"}),
        "spec.redis",
        "apply to mode Sentinel only",
    ),
    Case(
        "redis-sentinel-address-without-port",
        "ScrapePool",
        _pool(redis={"mode": "Sentinel", "sentinels": ["s1"], "masterName": "m"}),
        "spec.redis.sentinels[0]",
        "sentinels.0",
    ),
    Case(
        "worker-env-trawl",
        "ScrapePool",
        _pool(worker={"env": [{"name": "TRAWL_QUEUE_PREFIX", "value": "trawl:other/pool"}]}),
        "spec.worker.env",
        "worker.env may not set TRAWL_QUEUE_PREFIX",
    ),
    Case(
        "on-complete-job-names-repeated",
        "ScrapePool",
        _pool(onCompleteJobs=[{"name": "load", "template": _LOADER}, {"name": "load", "template": _LOADER}]),
        "spec.onCompleteJobs[1]",
        "onCompleteJobs names must be unique",
    ),
    Case(
        "on-complete-job-and-job-template",
        "ScrapeJob",
        _job(onComplete={"job": {"template": "load"}, "jobTemplate": _LOADER}),
        "spec.onComplete.jobTemplate",
        "not jobTemplate",
    ),
    Case(
        "on-complete-parameter-name",
        "ScrapeJob",
        _job(onComplete={"job": {"template": "load", "parameters": [{"name": "target", "value": "x"}]}}),
        "spec.onComplete.job.parameters[0].name",
        "onComplete.job.parameters.0.name",
    ),
    Case(
        "on-complete-parameters-too-many",
        "ScrapeJob",
        _job(onComplete={"job": {"template": "load", "parameters": [{"name": f"P{i}"} for i in range(17)]}}),
        "spec.onComplete.job.parameters",
        "onComplete.job.parameters",
    ),
    Case("bad-cron", "CronScrapeJob", _cron(schedule="61 * * * *"), "spec.schedule", "schedule"),
    Case("cron-six-fields", "CronScrapeJob", _cron(schedule="0 0 * * * *"), "spec.schedule", "schedule"),
    Case("cron-step-zero", "CronScrapeJob", _cron(schedule="*/0 * * * *"), "spec.schedule", "schedule"),
    Case("cron-extension-l", "CronScrapeJob", _cron(schedule="0 0 L * *"), "spec.schedule", "schedule"),
    # Kubernetes' CronJob refuses a range that runs backwards; croniter would run it as a wrap-around.
    Case("cron-reversed-range", "CronScrapeJob", _cron(schedule="30-10 * * * *"), "spec.schedule", "runs backwards"),
    Case("cron-reversed-days", "CronScrapeJob", _cron(schedule="0 9 * * fri-mon"), "spec.schedule", "runs backwards"),
    Case("bad-timezone-shape", "CronScrapeJob", _cron(timeZone="Not A/Zone!"), "spec.timeZone", "timeZone"),
    Case(
        "concurrency-policy-enum",
        "CronScrapeJob",
        _cron(concurrencyPolicy="Sometimes"),
        "spec.concurrencyPolicy",
        "concurrencyPolicy",
    ),
    Case(
        "template-priority",
        "CronScrapeJob",
        _cron(jobTemplate={"spec": _job(priority=10)}),
        "spec.jobTemplate.spec.priority",
        "jobTemplate.spec.priority",
    ),
]
