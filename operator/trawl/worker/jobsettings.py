"""A job's settings as a worker uses them: :data:`JobConfig.spec <trawl.jobspec.wire>` parsed, cached per job.

The operator writes the settings when it registers the job (:func:`trawl.jobspec.wire.build_worker_spec`,
which documents the layout); :func:`parse_worker_spec` is its inverse, with the extraction options and
crawl policy the worker runs on. It reads plain data (:mod:`.specread`), not the API's pydantic models:
every worker start paid for importing pydantic and building those validators before its first request
(issue 38). The sections only some jobs have (a render, sessions, domain rules, a PostgreSQL or S3 sink)
are still validated by their models, imported with the first such job (which loads Playwright, psycopg or
minio anyway). A spec that does not read raises :class:`~.specread.BadSpec`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple

from trawl.api.plain import (
    DEFAULT_FORMAT_BYTES,
    DEFAULT_USER_AGENT,
    DIRECTORY_PATTERN,
    RETRYABLE_BY_DEFAULT,
    BackoffKind,
    CrawlScope,
    FailureClass,
    FileFormat,
    OutputFormat,
    RenderMode,
    SinkKind,
    StructuredSyntax,
    check_http_url,
)
from trawl.jobspec.domains import DomainRules, HostCache
from trawl.jobspec.headerscope import HeaderScope
from trawl.refresh.decide import RefreshSettings

from .extract import ExtractOptions
from .sitemaps import SitemapRules
from .specread import BadSpec, Section
from .urls import CrawlPolicy

if TYPE_CHECKING:  # pydantic models: imported only for the jobs whose spec has those sections
    from trawl.api.render import RenderSpec
    from trawl.api.scrapejob import PostgresSink, S3Sink
    from trawl.api.sessions import SessionSpec

__all__ = ["BadSpec", "WorkerJobSpec", "parse_worker_spec"]

# The keys of each section: the fields of the model the operator dumped it from (tests/unit/test_worker_jobspec.py
# checks they still are). An unknown key is refused, as the models refused it.
REQUEST_KEYS = frozenset(
    {"headers", "user_agent", "timeout_seconds", "connect_timeout_seconds", "max_response_bytes", "max_redirects"}
)
POLITENESS_KEYS = frozenset(
    {
        "respect_robots_txt",
        "requests_per_second",
        "max_concurrency_per_domain",
        "adaptive_delay",
        "robots_cache_seconds",
    }
)
RETRY_KEYS = frozenset(
    {"max_attempts", "backoff", "initial_delay_seconds", "max_delay_seconds", "jitter", "retry_on", "honor_retry_after"}
)
CRAWL_KEYS = frozenset({"max_depth", "max_pages", "scope", "include", "exclude", "bloom_filter"})
EXTRACT_KEYS = frozenset(
    {"fields", "links", "images", "title", "text", "only_matching", "formats", "main_content", "structured"}
)
FIELD_KEYS = frozenset({"name", "selector", "kind", "attribute", "multiple"})
MAIN_CONTENT_KEYS = frozenset({"tables", "links"})
STRUCTURED_KEYS = frozenset({"syntaxes"})
OUTPUT_KEYS = frozenset({"sink", "redis_stream", "json_lines", "webhook", "postgres", "s3", "files"})
SECRET_REF_KEYS = frozenset({"name", "key"})
FIELD_NAME = r"^[A-Za-z_][A-Za-z0-9_]*$"
DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
SECRET_KEY = r"^[-._a-zA-Z0-9]+$"
SELECTOR_KINDS = ("CSS", "XPath")
OUTPUT_FORMATS = frozenset(f.value for f in OutputFormat)
SYNTAXES = frozenset(x.value for x in StructuredSyntax)


# The settings are NamedTuples, not dataclasses: making a dataclass costs about half a millisecond at import
# (it compiles its methods), and every worker start imports these (issue 38).


class RequestSettings(NamedTuple):
    """How each page is requested (the resolved ``request``: trawl.api.policies.ResolvedRequest's defaults)."""

    headers: Mapping[str, str] = MappingProxyType({})  # read-only: one default shared by every job
    user_agent: str = DEFAULT_USER_AGENT
    timeout_seconds: float = 30.0
    connect_timeout_seconds: float = 10.0
    max_response_bytes: int = 10 * 1024 * 1024
    max_redirects: int = 10


class PolitenessSettings(NamedTuple):
    """The resolved ``politeness`` (trawl.api.policies.ResolvedPoliteness's defaults)."""

    respect_robots_txt: bool = True
    requests_per_second: float = 2.0
    max_concurrency_per_domain: int = 4
    adaptive_delay: bool = True
    robots_cache_seconds: int = 3600


class RetrySettings(NamedTuple):
    """The resolved ``retry`` (trawl.api.policies.ResolvedRetry's defaults)."""

    max_attempts: int = 3
    backoff: BackoffKind = BackoffKind.EXPONENTIAL
    initial_delay_seconds: float = 1.0
    max_delay_seconds: float = 300.0
    jitter: float = 0.2
    retry_on: tuple[FailureClass, ...] = RETRYABLE_BY_DEFAULT
    honor_retry_after: bool = True


class SecretRef(NamedTuple):
    name: str
    key: str


class RedisStreamOutput(NamedTuple):
    max_len: int = 100_000


class JsonLinesOutput(NamedTuple):
    directory: str


class WebhookOutput(NamedTuple):
    url: str
    secret_ref: SecretRef | None = None
    batch_size: int = 50


class FilesOutput(NamedTuple):
    directory: str
    format: FileFormat = FileFormat.PARQUET


class OutputSettings(NamedTuple):
    """Where the job's records go (the ``output`` section, trawl.api.scrapejob.OutputSpec's fields)."""

    sink: SinkKind = SinkKind.REDIS_STREAM
    redis_stream: RedisStreamOutput | None = None
    json_lines: JsonLinesOutput | None = None
    webhook: WebhookOutput | None = None
    postgres: PostgresSink | None = None  # the model: only these jobs import it (with psycopg)
    s3: S3Sink | None = None  # the model: only these jobs import it (with minio)
    files: FilesOutput | None = None


class WorkerJobSpec(NamedTuple):
    """A parsed worker spec: everything needed to process one task of the job."""

    request: RequestSettings
    politeness: PolitenessSettings
    retry: RetrySettings
    extract: ExtractOptions
    crawl: CrawlPolicy | None
    max_pages: int | None
    output: OutputSettings
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


def screenshot_render(render: RenderSpec | None, extract: ExtractOptions) -> RenderSpec | None:
    """The job's render, with its screenshot on when extract.formats asks for one (browser mode only)."""
    if render is not None and OutputFormat.SCREENSHOT.value in extract.formats.formats and not render.screenshot:
        render = render.model_copy(update={"screenshot": True})
    return render


def _render_model() -> Any:
    from trawl.api.render import RenderSpec  # pydantic: only for a job that may render (it loads Playwright too)

    return RenderSpec.model_validate


def _session_model() -> Any:
    from trawl.api.sessions import SessionSpec  # pydantic: only for a job with sessions

    return SessionSpec.model_validate


def _postgres_model() -> Any:
    from trawl.api.scrapejob import PostgresSink  # pydantic: only for a job writing to PostgreSQL (psycopg too)

    return PostgresSink.model_validate


def _s3_model() -> Any:
    from trawl.api.scrapejob import S3Sink  # pydantic: only for a job writing to S3 (minio too)

    return S3Sink.model_validate


def read_request(raw: Any) -> RequestSettings:
    s, d = Section(raw, "spec.request", REQUEST_KEYS), RequestSettings()
    return RequestSettings(
        headers=s.headers("headers"),
        user_agent=s.text("user_agent", d.user_agent),
        timeout_seconds=s.number("timeout_seconds", d.timeout_seconds, low=0),
        connect_timeout_seconds=s.number("connect_timeout_seconds", d.connect_timeout_seconds, low=0),
        max_response_bytes=s.integer("max_response_bytes", d.max_response_bytes, low=1),
        max_redirects=s.integer("max_redirects", d.max_redirects, low=0),
    )


def read_politeness(raw: Any) -> PolitenessSettings:
    s, d = Section(raw, "spec.politeness", POLITENESS_KEYS), PolitenessSettings()
    return PolitenessSettings(
        respect_robots_txt=s.boolean("respect_robots_txt", d.respect_robots_txt),
        requests_per_second=s.number("requests_per_second", d.requests_per_second, low=0),
        max_concurrency_per_domain=s.integer("max_concurrency_per_domain", d.max_concurrency_per_domain, low=0),
        adaptive_delay=s.boolean("adaptive_delay", d.adaptive_delay),
        robots_cache_seconds=s.integer("robots_cache_seconds", d.robots_cache_seconds, low=0),
    )


def read_retry(raw: Any) -> RetrySettings:
    s, d = Section(raw, "spec.retry", RETRY_KEYS), RetrySettings()
    retry_on = s.texts("retry_on")
    try:
        classes = tuple(FailureClass(c) for c in retry_on) if retry_on is not None else d.retry_on
    except ValueError as exc:
        raise BadSpec(f"spec.retry.retry_on: {exc}") from None
    return RetrySettings(
        max_attempts=s.integer("max_attempts", d.max_attempts, low=1),
        backoff=s.enum("backoff", BackoffKind, d.backoff),
        initial_delay_seconds=s.number("initial_delay_seconds", d.initial_delay_seconds, low=0),
        max_delay_seconds=s.number("max_delay_seconds", d.max_delay_seconds, low=0),
        jitter=s.number("jitter", d.jitter, low=0),
        retry_on=classes,
        honor_retry_after=s.boolean("honor_retry_after", d.honor_retry_after),
    )


def read_extract(raw: Any) -> dict[str, Any]:
    """The ``extract`` section checked, with the defaults filled in: what ExtractOptions.from_dict reads."""
    s = Section(raw, "spec.extract", EXTRACT_KEYS)
    fields = [
        {
            "name": f.matching("name", FIELD_NAME),
            "selector": f.text("selector"),
            "kind": f.choice("kind", SELECTOR_KINDS, "CSS"),
            "attribute": f.optional_text("attribute"),
            "multiple": f.boolean("multiple", False),
        }
        for f in s.sections("fields", FIELD_KEYS)
    ]
    formats = s.texts("formats")
    for name in formats or ():
        if name not in OUTPUT_FORMATS:
            raise BadSpec(f"spec.extract.formats: unknown format {name!r}")
    main = s.section("main_content", MAIN_CONTENT_KEYS)
    structured = s.section("structured", STRUCTURED_KEYS)
    syntaxes = structured.texts("syntaxes") if structured is not None else None
    for name in syntaxes or ():
        if name not in SYNTAXES:
            raise BadSpec(f"spec.extract.structured.syntaxes: unknown syntax {name!r}")
    return {
        "fields": fields or None,
        "links": s.boolean("links", False),
        "images": s.boolean("images", False),
        "title": s.boolean("title", True),
        "text": s.boolean("text", False),
        "only_matching": s.optional_text("only_matching"),
        "formats": formats,
        "main_content": (
            {"tables": main.boolean("tables", True), "links": main.boolean("links", False)} if main else None
        ),
        "structured": {"syntaxes": syntaxes} if syntaxes else None,
    }


def _secret_ref(s: Section | None) -> SecretRef | None:
    if s is None:
        return None
    return SecretRef(name=s.matching("name", DNS_LABEL), key=s.matching("key", SECRET_KEY))


def read_output(raw: Any) -> OutputSettings:
    s = Section(raw, "spec.output", OUTPUT_KEYS)
    sink = s.enum("sink", SinkKind, SinkKind.REDIS_STREAM)
    stream = s.section("redis_stream", frozenset({"max_len"}))
    lines = s.section("json_lines", frozenset({"directory"}))
    hook = s.section("webhook", frozenset({"url", "secret_ref", "batch_size"}))
    files = s.section("files", frozenset({"directory", "format"}))
    if hook is not None:
        try:
            url = check_http_url(hook.text("url"))
        except ValueError as exc:
            raise BadSpec(f"spec.output.webhook.url: {exc}") from None
    out = OutputSettings(
        sink=sink,
        redis_stream=RedisStreamOutput(stream.integer("max_len", 100_000, 1, 10_000_000)) if stream else None,
        json_lines=JsonLinesOutput(lines.matching("directory", DIRECTORY_PATTERN)) if lines else None,
        webhook=(
            WebhookOutput(
                url=url,
                secret_ref=_secret_ref(hook.section("secret_ref", SECRET_REF_KEYS)),
                batch_size=hook.integer("batch_size", 50, 1, 1000),
            )
            if hook
            else None
        ),
        postgres=s.model("postgres", _postgres_model),
        s3=s.model("s3", _s3_model),
        files=(
            FilesOutput(
                files.matching("directory", DIRECTORY_PATTERN), files.enum("format", FileFormat, FileFormat.PARQUET)
            )
            if files
            else None
        ),
    )
    settings = {
        SinkKind.JSON_LINES: ("json_lines", out.json_lines),
        SinkKind.WEBHOOK: ("webhook", out.webhook),
        SinkKind.POSTGRESQL: ("postgres", out.postgres),
        SinkKind.S3: ("s3", out.s3),
        SinkKind.FILES: ("files", out.files),
    }
    if sink in settings and settings[sink][1] is None:
        raise BadSpec(f"spec.output.{settings[sink][0]} is required when sink is {sink.value}")
    return out


def parse_worker_spec(spec: dict[str, Any] | None) -> WorkerJobSpec:
    """The inverse of :func:`build_worker_spec`; missing sections take the built-in defaults. Raises
    :class:`BadSpec` for a spec that does not read (the job's tasks are dead-lettered with its message)."""
    top = Section(spec, "spec")
    crawl = top.section("crawl", CRAWL_KEYS)
    scope = crawl.enum("scope", CrawlScope, CrawlScope.SAME_HOST).value if crawl is not None else None
    extract_options = ExtractOptions.from_dict(read_extract(top.raw.get("extract")))
    request = read_request(top.raw.get("request"))
    refresh = RefreshSettings.parse(top.raw.get("refresh"))
    format_max_bytes = DEFAULT_FORMAT_BYTES  # the pool's, never the job's
    if top.raw.get("format_max_bytes"):
        format_max_bytes = top.integer("format_max_bytes", DEFAULT_FORMAT_BYTES, low=1)
    extract_options = replace(extract_options, formats=extract_options.formats._replace(max_bytes=format_max_bytes))
    if refresh is not None and refresh.fingerprint in ("Record", "Text"):
        extract_options = replace(extract_options, fingerprint=refresh.fingerprint)
    politeness = read_politeness(top.raw.get("politeness"))
    try:
        rules = DomainRules.from_wire(top.raw.get("domains"))
    except ValueError as exc:  # the rules' model (pydantic's ValidationError is a ValueError)
        raise BadSpec(f"spec.domains: {exc}"[:1024]) from exc
    hosts = HostCache(politeness.requests_per_second, politeness.max_concurrency_per_domain, rules) if rules else None
    return WorkerJobSpec(
        request=request,
        politeness=politeness,
        retry=read_retry(top.raw.get("retry")),
        extract=extract_options,
        crawl=(
            CrawlPolicy.build(
                scope=scope or CrawlScope.SAME_HOST.value,
                include=crawl.texts("include"),
                exclude=crawl.texts("exclude"),
                max_depth=crawl.integer("max_depth", 2, low=0),
            )
            if crawl is not None
            else None
        ),
        max_pages=crawl.integer("max_pages", 100, low=1) if crawl is not None else None,
        output=read_output(top.raw.get("output")),
        render=screenshot_render(top.model("render", _render_model), extract_options),
        refresh=refresh,
        headers=HeaderScope.parse(request.headers, top.raw.get("header_scope"), hosts),
        hosts=hosts,
        proxy=top.raw.get("proxy") or None,
        session=top.model("session", _session_model),
        proxy_groups=top.raw.get("proxy_groups") or None,
        session_seed=top.raw.get("session_seed") or None,
        archive=top.raw.get("archive") or None,
        archive_source=top.raw.get("archive_source") or None,
        sitemaps=SitemapRules.from_spec(top.raw["sitemaps"], scope) if top.raw.get("sitemaps") else None,
    )
