"""ScrapeJob: a set of URLs (or crawl seeds) to fetch and extract, and its observed state."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import datetime
from enum import StrEnum
from itertools import islice
from math import gcd
from typing import Annotated, Any, Self
from urllib.parse import urlsplit

from pydantic import ConfigDict, Field, field_validator, model_validator

from .archive import REEXTRACT_URL, ArchiveSourceSpec, ArchiveSpec, ArchiveStatus
from .common import Condition, DNSLabel, HttpURL, SecretKeyRef, TrawlModel, check_http_url
from .formats import (
    DEFAULT_FORMAT_BYTES,
    MAX_FORMAT_DEPTH,
    MAX_FORMAT_ENTRIES,
    MAX_FORMAT_LINKS,
    MainContentOptions,
    OutputFormat,
    StructuredOptions,
)
from .patterns import SYNTAX as PATTERN_SYNTAX
from .patterns import check as check_pattern
from .plain import CrawlScope as CrawlScope  # plain Python: read by the workers without pydantic
from .plain import SinkKind as SinkKind
from .policies import FailureClass, PolitenessSpec, RequestSpec, RetrySpec
from .proxies import JobProxy
from .refresh import RefreshSpec
from .render import RenderSpec
from .sessions import SessionSpec
from .tabular import DIRECTORY_PATTERN, FileFormat, FilesSink

MAX_INLINE_URLS = 5000
MAX_URL_LENGTH = 2048  # every URL a job lists or a range makes (HttpURL's bound)
MAX_GENERATED_URLS = 1_000_000
# A crawl's task cap (crawl.maxPages). Its cost is Redis memory per task and per seen URL, bounded by the
# cap and measured (bench/frontier.py); no process keeps anything per page of a job. At this cap a Bloom
# filter at the lowest rate is 24 MB, far within a Redis string's 512 MB.
MAX_CRAWL_PAGES = 10_000_000
MAX_DEAD_LETTERS_ON_STATUS = 20
MAX_SKIPPED_ON_STATUS = 10
ROBOTS_PATH = "/robots.txt"


def _check_regexes(patterns: list[str] | None) -> list[str] | None:
    # RE2, as the workers match them: a pattern that needs backtracking is refused here, with the job.
    for pattern in patterns or []:
        check_pattern(pattern)
    return patterns


Pattern = Annotated[str, Field(min_length=1, max_length=512)]


class BloomFilterSpec(TrawlModel):
    """Deduplicate a large crawl's URLs in a Bloom filter instead of an exact set: about 2 bytes of Redis per
    URL at the default rate, instead of 50-60 — at the price that a new URL may, at that rate, be taken
    for one already seen and skipped. status.dedupe shows how many pages were possibly skipped."""

    false_positive_rate: float = Field(
        default=0.001,
        ge=0.0001,  # written without an exponent: a YAML 1.1 reader takes 1e-09 for a string
        le=0.1,
        description="The most a new URL may be taken for a seen one (and skipped); the filter is sized for the "
        "crawl's maxPages, so the rate holds up to it. Smaller costs more bits: 15.8 per URL at 0.001, 24.7 "
        "at 0.0001.",
    )


class CrawlSpec(TrawlModel):
    """Follow links from the seed URLs. Without it only the listed URLs are fetched."""

    max_depth: int = Field(default=2, ge=0, le=100, description="Link hops followed from a seed (seeds are depth 0).")
    max_pages: int = Field(
        default=100,
        ge=1,
        le=MAX_CRAWL_PAGES,
        description="Most pages fetched by the whole job, seeds included (at most 10,000,000; the pool's "
        "jobLimits.maxUrlsPerJob bounds it too).",
    )
    scope: CrawlScope = Field(
        default=CrawlScope.SAME_HOST,
        description="Which discovered links are followed: SameHost (the seed's host) or SameDomain "
        "(the seed's registrable domain and its subdomains).",
    )
    include: list[Pattern] | None = Field(
        default=None,
        max_length=50,
        description=f"Regular expressions in {PATTERN_SYNTAX}; when set, a discovered URL is followed only if "
        "one matches.",
    )
    exclude: list[Pattern] | None = Field(
        default=None,
        max_length=50,
        description=f"Regular expressions in {PATTERN_SYNTAX}; a discovered URL that matches one is skipped.",
    )

    bloom_filter: BloomFilterSpec | None = Field(
        default=None,
        description="Deduplicate this crawl's URLs in a Bloom filter (for very large crawls): far less Redis, "
        "and a few pages possibly skipped, counted on status.dedupe. Unset: exact dedupe (no page skipped).",
    )

    _valid_include = field_validator("include")(_check_regexes)
    _valid_exclude = field_validator("exclude")(_check_regexes)


MAX_SITEMAPS_LISTED = 100
MAX_ROBOTS_ORIGINS = 100  # robots.txt files read for Sitemap: lines (fromRobotsTxt), one per origin
DEFAULT_SITEMAP_URLS = 10_000


class SitemapSpec(TrawlModel):
    """Seed the job from sitemaps (sitemaps.org XML, gzip or not, sitemap indexes, plain-text lists).

    Each sitemap is fetched by a worker like a page (same address checks, robots.txt, rate and size
    limits) and parsed under hard limits; a sitemap that breaks one is dead-lettered (class BadSitemap)
    and the rest of the job goes on. The page URLs it lists are depth-0 seeds (a crawl follows links
    from them)."""

    urls: list[HttpURL] | None = Field(
        default=None,
        max_length=MAX_SITEMAPS_LISTED,
        description=f"Sitemaps or sitemap indexes to read (at most {MAX_SITEMAPS_LISTED}). Immutable.",
    )
    from_robots_txt: bool = Field(
        default=False,
        description="Also read the Sitemap: lines of the robots.txt of every origin of urls, urlRanges and "
        f"sitemaps.urls (at most {MAX_ROBOTS_ORIGINS} origins). Immutable.",
    )
    lastmod_after: datetime | None = Field(
        default=None,
        description="Take only the URLs whose <lastmod> is at or after this time (RFC 3339). URLs without a "
        "lastmod are taken; a lastmod without a time of day counts as the end of its day. Immutable.",
    )
    lastmod_since_last_run: bool = Field(
        default=False,
        description="In a CronScrapeJob's jobTemplate: take only the URLs whose <lastmod> is at or after the start "
        "of the CronScrapeJob's last successful run (the CronScrapeJob sets lastmodAfter on each job it creates; "
        "its first job, and a ScrapeJob of its own, take every URL). A later lastmodAfter wins.",
    )
    max_urls: int = Field(
        default=DEFAULT_SITEMAP_URLS,
        ge=1,
        le=MAX_GENERATED_URLS,
        description="Most tasks the sitemaps may add to the job: page URLs and the sitemaps an index names. "
        "Without crawl it is part of the job's URL count (the pool's jobLimits.maxUrlsPerJob); with crawl, "
        "crawl.maxPages bounds every task of the job as well. Immutable.",
    )
    include: list[Pattern] | None = Field(
        default=None,
        max_length=50,
        description=f"Regular expressions in {PATTERN_SYNTAX}; when set, a page URL of a sitemap is taken only "
        "if one matches.",
    )
    exclude: list[Pattern] | None = Field(
        default=None,
        max_length=50,
        description=f"Regular expressions in {PATTERN_SYNTAX}; a page URL of a sitemap that matches one is not taken.",
    )

    _valid_include = field_validator("include")(_check_regexes)
    _valid_exclude = field_validator("exclude")(_check_regexes)

    @model_validator(mode="after")
    def _has_source(self) -> Self:
        if not self.urls and not self.from_robots_txt:
            raise ValueError("sitemaps needs urls or fromRobotsTxt")
        return self


class SelectorKind(StrEnum):
    CSS = "CSS"
    XPATH = "XPath"


class FieldRule(TrawlModel):
    """One named value extracted from each page."""

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]*$",
        description="Key of the value in the result.",
    )
    selector: str = Field(min_length=1, max_length=1024, description="CSS selector or XPath expression.")
    kind: SelectorKind = Field(default=SelectorKind.CSS, description="Selector language: CSS or XPath.")
    attribute: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="Take this attribute of the matched element instead of its text (e.g. href).",
    )
    multiple: bool = Field(default=False, description="Return every match as a list instead of the first one.")


class ExtractSpec(TrawlModel):
    """What each result record holds besides the URL and HTTP status."""

    fields: list[FieldRule] | None = Field(
        default=None, max_length=100, description="Named values extracted by selector."
    )
    links: bool = Field(default=False, description="Include the page's absolute links.")
    images: bool = Field(default=False, description="Include the page's absolute image URLs.")
    title: bool = Field(default=True, description="Include the page title.")
    text: bool = Field(default=False, description="Include the page's readable text.")
    only_matching: str | None = Field(
        default=None,
        max_length=512,
        description=f"Regular expression in {PATTERN_SYNTAX}; results are written only for pages whose URL "
        "matches (pages that do not match are still crawled for links).",
    )
    formats: list[OutputFormat] | None = Field(
        default=None,
        max_length=len(OutputFormat),
        description="Formats of the page written as record fields of the same name: markdown and text (the main "
        "content, without navigation, ads and footers), structured (embedded JSON-LD, microdata, OpenGraph, "
        f"RDFa), links (absolute, deduplicated, at most {MAX_FORMAT_LINKS}), screenshot (a base64 PNG of the "
        "viewport; render.mode Browser only, else the job is Stalled with reason ScreenshotNeedsBrowser). "
        "Each is at most the pool's "
        f"jobLimits.maxFormatBytes (default {DEFAULT_FORMAT_BYTES} bytes) and structured data at most "
        f"{MAX_FORMAT_ENTRIES} entries per syntax and per array, {MAX_FORMAT_DEPTH} levels deep; a format cut "
        "to fit is named in the record's truncated list. Format text replaces the option text.",
    )
    main_content: MainContentOptions | None = Field(
        default=None, description="Options of the markdown and text formats."
    )
    structured: StructuredOptions | None = Field(default=None, description="Options of the structured format.")

    @field_validator("fields")
    @classmethod
    def _unique_names(cls, value: list[FieldRule] | None) -> list[FieldRule] | None:
        names = [rule.name for rule in value or []]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"field names must be unique, repeated: {', '.join(duplicates)}")
        return value

    @field_validator("only_matching")
    @classmethod
    def _valid_regex(cls, value: str | None) -> str | None:
        _check_regexes([value] if value else None)
        return value

    @field_validator("formats")
    @classmethod
    def _unique_formats(cls, value: list[OutputFormat] | None) -> list[OutputFormat] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError("formats must be unique")
        return value

    @model_validator(mode="after")
    def _one_text(self) -> Self:
        # Both would write the record's text field: the main content (format) or all readable text (option).
        if self.text and OutputFormat.TEXT in (self.formats or ()):
            raise ValueError(
                "extract.text and extract.formats [text] both write the record's text field: the format is the "
                "main content, the option all of the page's readable text; choose one"
            )
        if self.formats:
            # A field of the job's own would be overwritten by a format's (or read as the truncated list).
            taken = {f.value for f in self.formats} | {"truncated"}
            clash = sorted(rule.name for rule in self.fields or () if rule.name in taken)
            if clash:
                raise ValueError(f"extract.fields {', '.join(clash)}: names the formats' record fields use")
        return self


# UrlRange.longest_url for the API server: the template's length, plus for each {n} the digits of end
# beyond the three characters of "{n}".
URL_RANGE_LENGTH_RULE = {
    "rule": "self.template.size() + (self.template.size() - self.template.replace('{n}', '').size()) / 3 "
    f"* (string(self.end).size() - 3) <= {MAX_URL_LENGTH}",
    "message": f"every URL of the range (the template with end in it) must fit in {MAX_URL_LENGTH} characters",
    "fieldPath": ".template",
}


class UrlRange(TrawlModel):
    """A numbered sequence of URLs, e.g. listing pages: template with {n}, from start to end inclusive."""

    template: str = Field(
        min_length=8,
        max_length=MAX_URL_LENGTH,
        pattern=r"^https?://[^\s]*\{n\}[^\s]*$",
        description=f"http(s) URL containing {{n}}, replaced by each number of the range; every URL of the range "
        f"(with the last number in it) must fit in {MAX_URL_LENGTH} characters.",
    )
    start: int = Field(ge=0, description="First number.")
    end: int = Field(ge=0, description="Last number (inclusive).")
    step: int = Field(default=1, ge=1, description="Increment.")

    @model_validator(mode="after")
    def _ordered(self) -> Self:
        if self.end < self.start:
            raise ValueError("end must be greater than or equal to start")
        longest = self.longest_url()
        if longest > MAX_URL_LENGTH:
            raise ValueError(
                f"the range's URLs reach {longest} characters (the template with {self.end}); at most {MAX_URL_LENGTH}"
            )
        for n in (self.start, self.last()):
            try:
                check_http_url(self.url(n))
            except ValueError as exc:
                raise ValueError(f"the range's URL with {n}: {exc}") from exc
        return self

    def count(self) -> int:
        """How many URLs the range makes (not len(): a range up to 2**63 is more than len() can return)."""
        return (self.end - self.start) // self.step + 1

    def last(self) -> int:
        return self.start + (self.count() - 1) * self.step

    def longest_url(self) -> int:
        """The length of the range's longest URL (the one with the most digits), without building any."""
        return len(self.template) + self.template.count("{n}") * (len(str(self.end)) - len("{n}"))

    def url(self, n: int) -> str:
        return self.template.replace("{n}", str(n))

    def urls(self, skip: int = 0) -> Iterator[str]:
        """The range's URLs in order, after the first ``skip``: one at a time, never the whole list."""
        return (self.url(n) for n in range(self.start + skip * self.step, self.end + 1, self.step))


class JsonLinesSink(TrawlModel):
    """Results appended as JSON Lines files under a directory mounted into the workers."""

    directory: str = Field(
        min_length=1,
        max_length=1024,
        # The job author's path: no '.' or '..' part may climb out of the mount admission found it on.
        pattern=DIRECTORY_PATTERN,
        description="Absolute directory on a mounted volume of the pool's workers (no '.' or '..' part: a part "
        "starts with a letter, digit, '_' or '-'); one file per job is written.",
    )


class WebhookSink(TrawlModel):
    """Results POSTed in batches as JSON, with an HMAC-SHA256 signature header."""

    url: HttpURL = Field(description="Endpoint receiving POSTed batches.")
    secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="Secret key holding the HMAC key; the X-Trawl-Signature header carries the digest.",
    )
    batch_size: int = Field(default=50, ge=1, le=1000, description="Results per POST.")


PG_IDENT = r"[a-z_][a-z0-9_]{0,62}"

# One server: a DNS name or an IP address (IPv6 without brackets). libpq would also take a list of hosts
# ("a,b") or a Unix socket directory ("/run/postgresql"), which the address check (trawl.egress.sinkaddr)
# cannot follow: a list's other hosts and a socket path would be connected to unchecked. The CRD says
# the same in a CEL rule (trawl.api.crd), with this message.
_PG_LABEL = r"[A-Za-z0-9_]([-A-Za-z0-9_]*[A-Za-z0-9_])?"
PG_HOST_PATTERN = rf"^({_PG_LABEL}\.)*{_PG_LABEL}\.?$|^[0-9A-Fa-f:.]+$"
PG_HOST_MESSAGE = (
    "host must be one host name or IP address: a list of hosts (a,b) or a Unix socket directory (/path) is not accepted"
)


def pg_host_problem(host: str) -> str | None:
    """Why ``host`` is not one PostgreSQL server's name or address, or None."""
    return None if re.fullmatch(PG_HOST_PATTERN, host) else f"{PG_HOST_MESSAGE}, got {host!r}"


class PostgresSink(TrawlModel):
    """Results upserted into a PostgreSQL table shared by jobs, one row per (job, URL).

    The table (created at job acceptance when missing, checked when present) has the columns ``key``
    (primary key: a hash of job and URL, so a redelivered task never adds a second row), ``job``
    (the ScrapeJob's UID), ``url``, ``data`` (jsonb, the whole record) and ``written_at``.
    """

    host: str = Field(
        min_length=1,
        max_length=253,
        description="Server host name or IP address (one server; no host list, no Unix socket). Its addresses "
        "must be global or in the pool's spec.worker.allowedCidrs (an in-cluster server needs its range there).",
    )
    port: int = Field(default=5432, ge=1, le=65535, description="Server port.")
    database: str = Field(min_length=1, max_length=63, description="Database name.")
    user: str = Field(min_length=1, max_length=63, description="Role to connect as.")
    password_secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="Secret key holding the password; the Secret must be listed in the pool's spec.worker.secrets.",
    )
    table: str = Field(
        default="trawl_results",
        max_length=127,
        pattern=rf"^({PG_IDENT}\.)?{PG_IDENT}$",
        description="Table, optionally schema-qualified (schema.table); created when missing.",
    )
    ssl_mode: str = Field(
        default="prefer",
        pattern=r"^(disable|allow|prefer|require|verify-ca|verify-full)$",
        description="libpq sslmode: disable, allow, prefer, require, verify-ca or verify-full.",
    )
    connect_timeout_seconds: int = Field(default=10, ge=1, le=300, description="Connection timeout.")

    @field_validator("host")
    @classmethod
    def _one_host(cls, value: str) -> str:
        problem = pg_host_problem(value)
        if problem is not None:
            raise ValueError(problem)
        return value


class S3Sink(TrawlModel):
    """Results as objects, one per written batch (gzip JSON Lines, CSV or Parquet), under a per-job prefix.

    Objects: ``<prefix><job UID>/records/<time>-<sha256>-<n>.<jsonl.gz|csv|parquet>``; when the job
    finishes the operator writes ``<prefix><job UID>/manifest.json`` listing them with their record
    counts and checksums (and, for CSV and Parquet, the format and the schema).
    """

    bucket: str = Field(
        min_length=3, max_length=63, pattern=r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$", description="Bucket name."
    )
    prefix: str = Field(
        default="trawl/",
        max_length=512,
        pattern=r"^([^/].*/)?$",
        description="Key prefix, empty or ending in '/'; each job writes under <prefix><job UID>/.",
    )
    endpoint: HttpURL | None = Field(
        default=None, description="S3-compatible endpoint URL (MinIO, Ceph, ...). Default: AWS for the region."
    )
    region: str = Field(default="us-east-1", min_length=1, max_length=64, description="Region.")
    path_style: bool = Field(
        default=False, description="Address buckets as <endpoint>/<bucket> (most non-AWS stores need it)."
    )
    access_key_id_secret_ref: SecretKeyRef = Field(
        description="Secret key holding the access key ID (the Secret must be in the pool's spec.worker.secrets)."
    )
    secret_access_key_secret_ref: SecretKeyRef = Field(description="Secret key holding the secret access key.")
    format: FileFormat = Field(
        default=FileFormat.JSON_LINES,
        description="JSONLines (gzip), CSV or Parquet: one object per written batch, a table with a column per "
        "field for CSV and Parquet (README, Tabular outputs).",
    )


class RedisStreamSink(TrawlModel):
    """Results in a Redis stream of the pool's Redis, kept with the job's other keys."""

    max_len: int = Field(default=100000, ge=1, le=10_000_000, description="Most entries kept; older ones are trimmed.")


class OutputSpec(TrawlModel):
    """Where results go."""

    sink: SinkKind = Field(
        default=SinkKind.REDIS_STREAM, description="RedisStream, JsonLines, Webhook, PostgreSQL, S3 or Files."
    )
    redis_stream: RedisStreamSink | None = Field(default=None, description="Settings for sink RedisStream.")
    json_lines: JsonLinesSink | None = Field(default=None, description="Settings for sink JsonLines (required then).")
    webhook: WebhookSink | None = Field(default=None, description="Settings for sink Webhook (required then).")
    postgres: PostgresSink | None = Field(default=None, description="Settings for sink PostgreSQL (required then).")
    s3: S3Sink | None = Field(default=None, description="Settings for sink S3 (required then).")
    files: FilesSink | None = Field(default=None, description="Settings for sink Files (required then).")

    @model_validator(mode="after")
    def _settings_for_sink(self) -> Self:
        if self.sink == SinkKind.JSON_LINES and self.json_lines is None:
            raise ValueError("output.jsonLines is required when sink is JsonLines")
        if self.sink == SinkKind.WEBHOOK and self.webhook is None:
            raise ValueError("output.webhook is required when sink is Webhook")
        if self.sink == SinkKind.POSTGRESQL and self.postgres is None:
            raise ValueError("output.postgres is required when sink is PostgreSQL")
        if self.sink == SinkKind.S3 and self.s3 is None:
            raise ValueError("output.s3 is required when sink is S3")
        if self.sink == SinkKind.FILES and self.files is None:
            raise ValueError("output.files is required when sink is Files")
        return self


class OnCompleteWebhook(TrawlModel):
    """A CloudEvents 1.0 JSON event POSTed once the job has finished, HMAC-signed like the webhook sink."""

    url: HttpURL = Field(description="Endpoint receiving the event.")
    secret_ref: SecretKeyRef | None = Field(
        default=None,
        description="Secret key holding the HMAC key (X-Trawl-Signature): a Secret the pool mounts, in the pool's "
        "namespace.",
    )


MAX_JOB_PARAMETERS = 16
PARAMETER_ENV_PREFIX = "TRAWL_PARAM_"


class JobParameter(TrawlModel):
    """One value passed to the Job, as the environment variable TRAWL_PARAM_<name>."""

    name: str = Field(
        min_length=1,
        max_length=63,
        pattern=r"^[A-Z][A-Z0-9_]*$",
        description="Upper-case letters, digits and _; the Job sees TRAWL_PARAM_<name>.",
    )
    value: str = Field(default="", max_length=1024, description="The value (at most 1024 characters).")


class OnCompleteJob(TrawlModel):
    """Run one of the Jobs the pool offers (its spec.onCompleteJobs), with parameters."""

    template: DNSLabel = Field(description="Name of a template in the pool's spec.onCompleteJobs.")
    parameters: list[JobParameter] | None = Field(
        default=None,
        max_length=MAX_JOB_PARAMETERS,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
        description=f"At most {MAX_JOB_PARAMETERS} values, each in every container's env as TRAWL_PARAM_<name>; "
        "nothing else of the Job can be set from a ScrapeJob.",
    )

    @field_validator("parameters")
    @classmethod
    def _unique(cls, value: list[JobParameter] | None) -> list[JobParameter] | None:
        names = [p.name for p in value or []]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise ValueError(f"onComplete.job.parameters names must be unique, repeated: {', '.join(repeated)}")
        return value

    def env(self) -> list[dict[str, str]]:
        return [{"name": PARAMETER_ENV_PREFIX + p.name, "value": p.value} for p in self.parameters or []]


_ONE_JOB_RULE: dict[str, Any] = {
    "rule": "!has(self.job) || !has(self.jobTemplate)",
    "message": "set onComplete.job (a template of the pool's spec.onCompleteJobs), not jobTemplate",
    "fieldPath": ".jobTemplate",
}


class OnCompleteSpec(TrawlModel):
    """What runs after the job finishes (succeeded or failed); its outcome shows on status.onComplete."""

    model_config = ConfigDict(json_schema_extra={"x-kubernetes-validations": [_ONE_JOB_RULE]})

    webhook: OnCompleteWebhook | None = Field(default=None, description="Send a CloudEvent.")
    job: OnCompleteJob | None = Field(
        default=None, description="Run a Job the pool offers (spec.onCompleteJobs), by name, with parameters."
    )
    job_template: dict[str, Any] | None = Field(
        default=None,
        json_schema_extra={"x-kubernetes-preserve-unknown-fields": True},
        description="Not supported: a ScrapeJob cannot say what a Job runs or as whom (the operator would create "
        "it with its own rights). No Job is created; status.onComplete.job is Failed with reason "
        "JobTemplateNotAllowed. Use job, naming a template of the pool's spec.onCompleteJobs.",
    )

    @model_validator(mode="after")
    def _something(self) -> Self:
        if self.webhook is None and self.job is None and self.job_template is None:
            raise ValueError("onComplete needs webhook or job")
        if self.job is not None and self.job_template is not None:
            raise ValueError(_ONE_JOB_RULE["message"])
        return self


class DedupeSpec(TrawlModel):
    """Skip URLs seen recently by other jobs of the pool. Within one job URLs are always deduplicated."""

    across_jobs: bool = Field(default=False, description="Skip URLs that another job of the pool fetched.")
    window_seconds: int = Field(
        default=3600, ge=1, le=30 * 86400, description="How long a fetched URL counts as seen across jobs."
    )


class ScrapeJobSpec(TrawlModel):
    """Desired state of a ScrapeJob: what to fetch, how, and where results go."""

    pool: DNSLabel = Field(
        description="Name of the ScrapePool whose workers run this job (in poolNamespace, by default the job's "
        "own namespace). Immutable."
    )
    pool_namespace: DNSLabel | None = Field(
        default=None,
        description="Namespace of the ScrapePool, when the platform runs it for several teams in a namespace of "
        "its own. A pool in another namespace runs the job only if its spec.tenancy admits the job's tenant "
        "(listed, or a defaultTenant); otherwise the job is Stalled with reason PoolNotShared. Default: the "
        "job's namespace. Immutable.",
    )
    urls: list[HttpURL] | None = Field(
        default=None,
        max_length=MAX_INLINE_URLS,
        description=f"URLs to fetch (crawl seeds in crawl mode). At most {MAX_INLINE_URLS}; use urlRanges for more. "
        "Immutable.",
    )
    url_ranges: list[UrlRange] | None = Field(
        default=None, max_length=100, description="Numbered URL sequences added to urls. Immutable."
    )
    sitemaps: SitemapSpec | None = Field(
        default=None, description="Take more seed URLs from sitemaps (listed, or named by robots.txt)."
    )
    crawl: CrawlSpec | None = Field(default=None, description="Follow links from the URLs.")
    extract: ExtractSpec | None = Field(default=None, description="What to extract from each page.")
    render: RenderSpec | None = Field(
        default=None, description="Load pages in a headless browser before extraction. Default: plain fetching."
    )
    refresh: RefreshSpec | None = Field(
        default=None,
        description="Fetch the pages again cheaply and label each record new, changed, unchanged or gone against "
        "the last run of the same lineage (conditional requests, content fingerprints).",
    )
    request: RequestSpec | None = Field(default=None, description="Request settings; unset fields use the pool's.")
    politeness: PolitenessSpec | None = Field(
        default=None, description="Politeness settings; unset fields use the pool's."
    )
    retry: RetrySpec | None = Field(default=None, description="Retry policy; unset fields use the pool's.")
    priority: int | None = Field(
        default=None,
        ge=0,
        le=9,
        description="0 (lowest) to 9 (highest); higher is claimed first. Default: 5, or on a pool with "
        "spec.tenancy the class priorityClassName names (else the tenant's default class). Never above the "
        "pool's jobLimits.maxPriority, or with tenancy the tenant's priorityCeiling (refused, not lowered).",
    )
    priority_class_name: DNSLabel | None = Field(
        default=None,
        description="A priority class of the pool's spec.tenancy.priorityClasses: the job runs at its value. "
        "Refused above the tenant's priorityCeiling, or on a pool without tenancy.",
    )
    proxy: JobProxy | None = Field(
        default=None,
        description="The pool's proxy group to fetch through ({group: <name>}), or {group: none} to go direct; "
        "unset: the pool's default group, if any. Never an address: the pool lists the proxies.",
    )
    session: SessionSpec | None = Field(
        default=None,
        description="Keep identities (cookies, user agent, proxy) across requests and retire those a site "
        "blocks. Unset: every request is a fresh identity and a block is an ordinary failure.",
    )
    dedupe: DedupeSpec | None = Field(default=None, description="Deduplication across jobs of the pool.")
    active_deadline_seconds: int | None = Field(
        default=None, ge=1, description="The job fails when it has run longer than this."
    )
    suspend: bool = Field(default=False, description="Pause the job: workers claim none of its tasks while true.")
    max_dead_letters: int = Field(
        default=0,
        ge=0,
        description="The job still succeeds with at most this many dead-lettered URLs (e.g. 404s found by a crawl).",
    )
    ttl_seconds_after_finished: int | None = Field(
        default=None, ge=0, description="Delete the job and its results this long after it finished."
    )
    output: OutputSpec | None = Field(default=None, description="Result sink. Default: a Redis stream.")
    on_complete: OnCompleteSpec | None = Field(
        default=None, description="A webhook and/or a Job the pool offers, run once the job has finished."
    )
    archive: ArchiveSpec | None = Field(
        default=None,
        description="Keep every fetched response as WARC records with a CDXJ index in the pool's archive location.",
    )
    archive_source: ArchiveSourceSpec | None = Field(
        default=None,
        description="Re-extract from an archive (a previous job's of this namespace, or a path under it) "
        "instead of fetching: urls are then not needed and no request is sent.",
    )

    @model_validator(mode="after")
    def _has_urls(self) -> Self:
        if self.archive_source is not None:  # re-extraction: the archive is the job's input
            return self
        if not self.urls and not self.url_ranges and not (self.sitemaps and self.sitemaps.urls):
            raise ValueError("a ScrapeJob needs urls, urlRanges or sitemaps.urls")
        if self.total_seed_count() > MAX_GENERATED_URLS:
            raise ValueError(f"a ScrapeJob may list at most {MAX_GENERATED_URLS} URLs (urls plus urlRanges)")
        return self

    def sitemap_seeds(self) -> list[str]:
        """The sitemap tasks the operator enqueues: the listed sitemaps, then (fromRobotsTxt) the robots.txt
        of each of the job's origins, whose Sitemap: lines the worker reads (trawl.worker.sitemaps)."""
        if self.sitemaps is None:
            return []
        listed = list(dict.fromkeys(self.sitemaps.urls or []))
        if not self.sitemaps.from_robots_txt:
            return listed
        origins: dict[str, None] = {}
        for url in [*(self.urls or []), *listed, *(r.url(r.start) for r in self.url_ranges or [])]:
            parts = urlsplit(url)
            origins.setdefault(f"{parts.scheme}://{parts.netloc}", None)
            if len(origins) >= MAX_ROBOTS_ORIGINS:
                break
        return [*listed, *(o + ROBOTS_PATH for o in origins)]

    def sitemap_task_budget(self) -> int:
        """Most tasks sitemaps bring into the job: the top-level ones and what they may add."""
        if self.sitemaps is None:
            return 0
        return len(self.sitemap_seeds()) + self.sitemaps.max_urls

    def total_seed_count(self) -> int:
        return len(self.urls or []) + sum(r.count() for r in self.url_ranges or [])

    # The seed stream: ``urls`` without repeats, then every urlRanges entry's URLs in order. A position
    # in it is what the queue's seed cursor counts, so a pass resumes where the last one stopped by
    # arithmetic, and the operator never holds more of a range than the batch it is enqueueing.

    def _unique_urls(self) -> list[str]:
        return list(dict.fromkeys(self.urls or []))

    def seed_count(self) -> int:
        """Positions in the seed stream (a crawl's seeds are its first ``maxPages`` of them)."""
        if self.archive_source is not None:  # one task reads the archive: no URL is fetched
            return 1
        count = len(self._unique_urls()) + sum(r.count() for r in self.url_ranges or [])
        return count if self.crawl is None else min(count, self.crawl.max_pages)

    def seeds(self, start: int = 0) -> Iterator[str]:
        """The seed stream from position ``start`` to :meth:`seed_count`, one URL at a time."""
        if self.archive_source is not None:
            return iter([REEXTRACT_URL][start:])
        listed = self._unique_urls()

        def stream() -> Iterator[str]:
            skip = start
            yield from listed[skip:]
            skip = max(0, skip - len(listed))
            for url_range in self.url_ranges or []:
                if skip >= url_range.count():
                    skip -= url_range.count()
                    continue
                yield from url_range.urls(skip)
                skip = 0

        return islice(stream(), max(0, self.seed_count() - start))

    def seeds_may_repeat(self) -> bool:
        """Whether the stream may hold a URL twice (then the queue drops repeats, by a digest per seed).

        ``urls`` are listed without repeats and one range never repeats itself (distinct numbers spell
        distinct URLs); a range may repeat a listed URL or another range's URL only when their fixed parts
        allow it: ranges with one template and overlapping numbers, or templates whose text before the
        first {n} and after the last one could be the same URL's."""
        ranges = self.url_ranges or []
        if ranges and self.urls:
            return True
        for i, a in enumerate(ranges):
            for b in ranges[i + 1 :]:
                if _may_share_urls(a, b):
                    return True
        return False

    def seed_urls(self) -> list[str]:
        """urls then every urlRanges entry, in order, without duplicates, as one list: for tests and
        `trawl run`; the operator enqueues :meth:`seeds` batch by batch instead."""
        ranged = (url for url_range in self.url_ranges or [] for url in url_range.urls())
        return list(dict.fromkeys([*(self.urls or []), *ranged]))


def _may_share_urls(a: UrlRange, b: UrlRange) -> bool:
    if a.template == b.template:
        # Two arithmetic progressions meet only if their intervals overlap and their offsets agree modulo
        # the gcd of their steps.
        if a.start > b.end or b.start > a.end:
            return False
        return (a.start - b.start) % gcd(a.step, b.step) == 0
    head_a, tail_a = a.template.split("{n}")[0], a.template.rsplit("{n}", 1)[1]
    head_b, tail_b = b.template.split("{n}")[0], b.template.rsplit("{n}", 1)[1]
    heads_agree = head_a.startswith(head_b) or head_b.startswith(head_a)
    tails_agree = tail_a.endswith(tail_b) or tail_b.endswith(tail_a)
    return heads_agree and tails_agree


class JobPhase(StrEnum):
    PENDING = "Pending"
    QUEUED = "Queued"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    SUSPENDED = "Suspended"


class TaskCounts(TrawlModel):
    """How many tasks (URLs) are in each state."""

    total: int = Field(default=0, ge=0, description="Tasks in the job, discovered crawl links included.")
    pending: int = Field(default=0, ge=0, description="Waiting to be claimed.")
    in_flight: int = Field(default=0, ge=0, description="Claimed by a worker.")
    succeeded: int = Field(default=0, ge=0, description="Fetched and written to the sink.")
    retrying: int = Field(default=0, ge=0, description="Failed and waiting for another attempt.")
    dead_lettered: int = Field(default=0, ge=0, description="Failed for good.")
    skipped: int | None = Field(
        default=None, ge=0, description="Discovered links not fetched because robots.txt disallows them."
    )
    truncated: int | None = Field(
        default=None,
        ge=0,
        description="Records with an output format (extract.formats) cut to the pool's bounds: each names the "
        "formats in its truncated field.",
    )
    blocked: int | None = Field(
        default=None,
        ge=0,
        description="Responses spec.session.block marked blocked (each retired its session; not failures "
        "until session.maxBlockedRetries is spent).",
    )
    from_sitemaps: int | None = Field(
        default=None,
        ge=0,
        description="Page URLs taken from sitemaps (spec.sitemaps), each once: counted in total when added.",
    )
    dead_letters_dropped: int | None = Field(
        default=None,
        ge=0,
        description="Dead letters whose records were dropped, the oldest beyond the pool's "
        "jobLimits.maxDeadLettersRetained: still counted in deadLettered, no longer listed by `trawl dlq list` "
        "nor sent back by `trawl dlq retry`.",
    )


class ChangeCounts(TrawlModel):
    """A refresh job's pages by what changed since the lineage's last run (spec.refresh)."""

    new: int = Field(default=0, ge=0, description="Pages the lineage had not seen.")
    changed: int = Field(default=0, ge=0, description="Pages whose fingerprint differs from the last run's.")
    unchanged: int = Field(default=0, ge=0, description="Pages answered 304, or whose fingerprint is the same.")
    gone: int = Field(
        default=0,
        ge=0,
        description="Pages the lineage had seen that now answer 404 or 410, or that this run no longer reached.",
    )
    not_revisited: int = Field(
        default=0,
        ge=0,
        description="Pages adaptive revisits (refresh.revisit) left alone this run: no request (fetches saved).",
    )


class DedupeStatus(TrawlModel):
    """How a crawl with spec.crawl.bloomFilter deduplicates, and what it may have cost."""

    mode: str = Field(default="Bloom", max_length=16, description="Bloom.")
    bytes: int = Field(default=0, ge=0, description="The filter's size in the pool's Redis.")
    hashes: int = Field(default=0, ge=0, description="Bits set per URL.")
    possibly_skipped: float = Field(
        default=0,
        ge=0,
        description="New URLs expected to have been taken for seen ones and skipped: the sum of each check's "
        "false-positive chance at the filter's fill then (an upper bound: checks of URLs really seen count too).",
    )


class SkippedURL(TrawlModel):
    """A discovered URL that was not fetched, and why (not a failure)."""

    url: str = Field(max_length=2048, description="The URL.")
    reason: str = Field(default="", max_length=1024, description="Why it was skipped.")
    time: datetime | None = Field(default=None, description="When it was skipped.")


class ThrottledDomain(TrawlModel):
    """A domain whose circuit breaker is open: the job's tasks for it wait without spending attempts."""

    domain: str = Field(max_length=253, description="host[:port].")
    reason: str = Field(default="", max_length=512, description="The failure that opened the breaker.")
    until: datetime | None = Field(default=None, description="When a probe request will be tried.")


class BlockedDomain(TrawlModel):
    """A domain where the job's identities were blocked (spec.session.block)."""

    domain: str = Field(max_length=253, description="host[:port].")
    blocked: int = Field(ge=0, description="Responses from it marked blocked.")


class DeadLetter(TrawlModel):
    """A URL that failed for good."""

    url: str = Field(max_length=2048, description="The URL.")
    attempts: int = Field(ge=0, description="Attempts made.")
    error_class: FailureClass | None = Field(default=None, description="Class of the last failure.")
    last_error: str = Field(default="", max_length=1024, description="The last failure's message.")
    time: datetime | None = Field(default=None, description="When it was dead-lettered.")


class ResultsLocation(TrawlModel):
    """Where the results are."""

    sink: SinkKind = Field(description="Kind of sink.")
    location: str = Field(
        max_length=2048, description="Redis key, file path, webhook URL, PostgreSQL table or S3 prefix."
    )
    count: int = Field(default=0, ge=0, description="Records written (each (job, URL) once).")
    manifest: str | None = Field(
        default=None, max_length=2048, description="S3 sink: the manifest written when the job finished."
    )
    manifest_error: str | None = Field(
        default=None, max_length=1024, description="S3 sink: why the manifest could not be written (retried)."
    )
    retained: int | None = Field(
        default=None,
        ge=0,
        description="RedisStream: records the stream still holds; fewer than count when older ones were "
        "trimmed at output.redisStream.maxLen.",
    )


class HookOutcome(TrawlModel):
    """How one onComplete hook went."""

    state: str = Field(description="Pending (retried), Running (the Job runs), Succeeded or Failed.")
    attempts: int = Field(default=0, ge=0, description="Deliveries or creations tried.")
    reason: str | None = Field(
        default=None,
        max_length=128,
        description="Why it failed, in one word: JobTemplateNotAllowed, TemplateNotFound, PodNotAllowed, "
        "JobRejected, JobFailed, ...",
    )
    message: str = Field(default="", max_length=1024, description="The last outcome's detail.")
    last_try: datetime | None = Field(default=None, description="When it was last tried or checked.")
    url: str | None = Field(default=None, max_length=2048, description="Webhook: the endpoint.")
    name: str | None = Field(default=None, max_length=253, description="Job: the Job's name.")


class OnCompleteStatus(TrawlModel):
    """Outcome of spec.onComplete."""

    webhook: HookOutcome | None = Field(default=None, description="The CloudEvent delivery.")
    job: HookOutcome | None = Field(default=None, description="The Job created from the template onComplete.job names.")


class EffectiveDomainRule(TrawlModel):
    """How one host pattern of the pool's and the job's domain rules applies to this job."""

    host: str = Field(max_length=253, description="The host pattern (of a pool rule, a job rule or both).")
    requests_per_second: float = Field(
        ge=0, description="The rate a host matching this pattern (and no more specific one) gets."
    )
    max_concurrency_per_domain: int = Field(ge=0, description="Its concurrency.")
    pool_rule: str | None = Field(
        default=None, max_length=253, description="The pool rule that applied (its host pattern), if any."
    )
    job_rule: str | None = Field(
        default=None, max_length=253, description="The job rule that applied (its host pattern), if any."
    )
    header_names: list[str] | None = Field(
        default=None, max_length=128, description="The names of the rules' headers (never their values)."
    )


class EffectivePoliteness(TrawlModel):
    """The politeness the job was registered with: its pool's defaults, its own settings and the domain rules
    of both, resolved."""

    requests_per_second: float = Field(ge=0, description="Per host, for hosts no domain rule matches.")
    max_concurrency_per_domain: int = Field(ge=0, description="Per host, for hosts no domain rule matches.")
    domains: list[EffectiveDomainRule] | None = Field(
        default=None, max_length=128, description="The domain rules as they apply, one per host pattern."
    )


class ScrapeJobStatus(TrawlModel):
    """Observed state of a ScrapeJob, written by the operator."""

    observed_generation: int = Field(
        default=-1, description="The .metadata.generation the status reflects; -1 until first reconciled."
    )
    phase: JobPhase | None = Field(
        default=None, description="Pending, Queued, Running, Succeeded, Failed or Suspended."
    )
    conditions: list[Condition] | None = Field(
        default=None,
        description="Ready, Reconciling, Stalled, Accepted, Running, Complete, Failed, Suspended, DeadLettered, "
        "DataLost.",
    )
    counts: TaskCounts | None = Field(default=None, description="Tasks by state.")
    changes: ChangeCounts | None = Field(
        default=None, description="With spec.refresh: the pages by what changed since the lineage's last run."
    )
    dedupe: DedupeStatus | None = Field(
        default=None, description="With spec.crawl.bloomFilter: the filter and the pages it possibly skipped."
    )
    progress: int | None = Field(default=None, ge=0, le=100, description="Finished tasks as a percentage of all.")
    progress_text: str | None = Field(default=None, max_length=8, description="progress with its %, for kubectl.")
    duration: str | None = Field(
        default=None, max_length=32, description="completionTime - startTime, as kubectl shows durations (2m13s)."
    )
    eta: datetime | None = Field(default=None, description="Estimated completion time at the current rate.")
    start_time: datetime | None = Field(default=None, description="When the first task was claimed.")
    completion_time: datetime | None = Field(default=None, description="When the job finished.")
    enqueued: int | None = Field(
        default=None,
        ge=0,
        description="Seed URLs enqueued so far: the job's urls (each once), then its urlRanges' URLs in order (a "
        "URL that a range repeats counts again, and is fetched once).",
    )
    dead_letters: list[DeadLetter] | None = Field(
        default=None,
        max_length=MAX_DEAD_LETTERS_ON_STATUS,
        description=f"The latest {MAX_DEAD_LETTERS_ON_STATUS} dead letters; `trawl dlq list` shows all.",
    )
    throttled_domains: list[ThrottledDomain] | None = Field(
        default=None,
        max_length=10,
        description="Domains whose circuit breaker is open now (repeated timeouts, 5xx, connection errors).",
    )
    blocked_domains: list[BlockedDomain] | None = Field(
        default=None, max_length=10, description="The domains with the most blocked responses (spec.session)."
    )
    skipped: list[SkippedURL] | None = Field(
        default=None,
        max_length=MAX_SKIPPED_ON_STATUS,
        description=f"Up to {MAX_SKIPPED_ON_STATUS} of the URLs counted in counts.skipped.",
    )
    results: ResultsLocation | None = Field(default=None, description="Where the results are.")
    archive: ArchiveStatus | None = Field(default=None, description="The job's WARC capture (spec.archive).")
    on_complete: OnCompleteStatus | None = Field(default=None, description="Outcome of spec.onComplete.")
    retry_dead_letters_handled: str | None = Field(
        default=None, description="The last trawl.dev/retry-dead-letters annotation value acted on."
    )
    message: str | None = Field(default=None, max_length=32768, description="Summary of the current state.")
    priority: int | None = Field(
        default=None,
        ge=0,
        le=9,
        description="The priority the job was registered with: spec.priority (default 5), or on a pool with "
        "spec.tenancy what its class, its tenant's default class or the global default gave.",
    )
    tenant: str | None = Field(
        default=None, max_length=253, description="On a pool with spec.tenancy: the tenant the job runs as."
    )
    politeness: EffectivePoliteness | None = Field(
        default=None,
        description="The politeness the job was registered with (fixed then, as its other settings): the rate "
        "and concurrency per host, and how each domain rule of the pool and the job applies.",
    )
    queue_epoch: str | None = Field(
        default=None,
        max_length=64,
        description="The pool's Redis data epoch this status was derived from; Redis answering with another "
        "one lost its data (condition DataLost).",
    )
