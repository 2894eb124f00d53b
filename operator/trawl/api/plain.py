"""The API's enumerations and built-in values that workers read, in plain Python: no pydantic here.

A worker imports these at its start (failure classes, the default User-Agent, sink kinds, ...) and reads its
jobs' settings as plain data (:mod:`trawl.worker.jobsettings`): importing pydantic and building the CRD
models cost a third of a worker's start-up (issue 38). The models' modules import these names from here
and export them as before (``trawl.api.policies.FailureClass`` is this class), so the CRDs are unchanged.
Keep this module free of pydantic and of the other ``trawl.api`` modules (tests/unit/test_worker_imports.py).
"""

from __future__ import annotations

import re
from enum import StrEnum
from urllib.parse import urlsplit

DEFAULT_USER_AGENT = "trawl/0.1 (+https://trawl.dev/bot)"

# Request headers that carry no secret (content negotiation): a pool's defaults may send them to every
# origin a job names. Any other default header of a pool goes only where defaults.request.headerOrigins
# says (trawl.jobspec.headerscope).
HARMLESS_HEADERS = frozenset(
    {
        "accept",
        "accept-charset",
        "accept-language",
        "cache-control",
        "dnt",
        "pragma",
        "save-data",
        "sec-gpc",
        "upgrade-insecure-requests",
    }
)


# RE2 and Rust regex both accept this; kept simple so the API server and pydantic agree.
HTTP_URL_PATTERN = r"^https?://[^\s/?#]+([/?#][^\s]*)?$"
_HTTP_URL_RE = re.compile(HTTP_URL_PATTERN, re.IGNORECASE)


def check_http_url(value: str) -> str:
    """The value if it is an http(s) URL whose host and port parse, else ValueError saying why."""
    if not _HTTP_URL_RE.match(value):
        raise ValueError(f"{value!r} is not an http(s) URL: only http:// and https:// URLs can be scraped")
    check_url_parses(value)
    return value


def check_url_parses(value: str) -> None:
    """Raise ValueError unless the URL's host and port parse (what every consumer of it will do).

    The pattern above cannot see an unclosed IPv6 bracket (``http://[::1/x``) or a port that is not a
    number; accepting those would only move the error into every component that reads the URL."""
    parts = urlsplit(value)  # ValueError on an unbalanced IPv6 bracket
    if not parts.hostname:
        raise ValueError(f"{value!r} has no host")
    _ = parts.port  # ValueError when the port is not a number in 0..65535


# Absolute, every part a plain name not starting with '.': no '..' can climb out of the mount the admission
# check found the directory on, and no hidden folder is written. RE2 (the API server's regexps): no lookahead.
DIRECTORY_PATTERN = r"^(/[A-Za-z0-9_-][A-Za-z0-9._-]{0,254})+/?$"


class BackoffKind(StrEnum):
    FIXED = "Fixed"
    EXPONENTIAL = "Exponential"


class FailureClass(StrEnum):
    """Classes of fetch failure. The first five are retryable by default; the rest are permanent."""

    TIMEOUT = "Timeout"
    CONNECTION = "Connection"
    HTTP_429 = "HTTP429"
    HTTP_5XX = "HTTP5xx"
    STALLED = "Stalled"
    HTTP_4XX = "HTTP4xx"
    ROBOTS_DISALLOWED = "RobotsDisallowed"
    BLOCKED_ADDRESS = "BlockedAddress"
    BAD_CONTENT = "BadContent"
    TOO_LARGE = "TooLarge"
    INVALID_URL = "InvalidURL"
    INTERNAL = "Internal"
    SINK_FAILED = "SinkFailed"
    PARSE_LIMIT = "ParseLimit"
    BAD_SITEMAP = "BadSitemap"  # a sitemap refused: not one, too large, too many entries, nested too deep
    BLOCKED = "Blocked"  # the site refused the identity (a job's session.block rules): tried on another one


RETRYABLE_BY_DEFAULT: tuple[FailureClass, ...] = (
    FailureClass.TIMEOUT,
    FailureClass.CONNECTION,
    FailureClass.HTTP_429,
    FailureClass.HTTP_5XX,
    FailureClass.STALLED,
    FailureClass.BLOCKED,  # another identity may get through (after session.maxBlockedRetries free tries)
)

# Failures that another attempt of the same request cannot fix: `trawl dlq retry` leaves their dead
# letters alone unless asked for all of them (SinkFailed and Internal are fixed outside the page, so they
# are worth a retry once the sink or the worker is repaired).
PERMANENT_CLASSES: frozenset[str] = frozenset(
    c.value
    for c in (
        FailureClass.HTTP_4XX,
        FailureClass.ROBOTS_DISALLOWED,
        FailureClass.BLOCKED_ADDRESS,
        FailureClass.BAD_CONTENT,
        FailureClass.TOO_LARGE,
        FailureClass.INVALID_URL,
        FailureClass.PARSE_LIMIT,
        FailureClass.BAD_SITEMAP,
    )
)


class CrawlScope(StrEnum):
    SAME_HOST = "SameHost"
    SAME_DOMAIN = "SameDomain"


class RenderMode(StrEnum):
    FETCH = "Fetch"
    BROWSER = "Browser"


class SessionScope(StrEnum):
    JOB = "Job"  # one rotation of sessions for all the job's domains (the jar keeps cookies per domain)
    DOMAIN = "Domain"  # a rotation per domain: an identity never crosses to another site


class SinkKind(StrEnum):
    REDIS_STREAM = "RedisStream"
    JSON_LINES = "JsonLines"
    WEBHOOK = "Webhook"
    POSTGRESQL = "PostgreSQL"
    S3 = "S3"
    FILES = "Files"


class FileFormat(StrEnum):
    """How records are written: one JSON object per line, or a table (one column per field)."""

    JSON_LINES = "JSONLines"
    CSV = "CSV"
    PARQUET = "Parquet"


# Tabular outputs (trawl.api.tabular): the platform's bounds on what one file may hold.
MAX_FILE_ROWS = 10_000  # rows of one file (one Parquet row group): a larger batch is split into files
MAX_FILE_BYTES = 64 << 20  # about this many bytes of cells in one file: a batch over it is split
MAX_CELL_BYTES = 1 << 20  # one cell (a field's value, a format); longer values are cut and named in truncated
MAX_EXTRA_BYTES = 1 << 20  # the extra column (JSON of the record's undeclared fields); over it: null


class OutputFormat(StrEnum):
    """A format of the page's content, written as the record field of the same name."""

    MARKDOWN = "markdown"
    TEXT = "text"
    STRUCTURED = "structured"
    LINKS = "links"
    SCREENSHOT = "screenshot"  # browser mode only (admission): a PNG of the viewport, base64


class StructuredSyntax(StrEnum):
    JSON_LD = "json-ld"
    MICRODATA = "microdata"
    OPENGRAPH = "opengraph"
    RDFA = "rdfa"


# Output formats (trawl.api.formats): the platform's bounds on what one page may put in a record.
DEFAULT_FORMAT_BYTES = 1 << 20  # 1 MiB of each format per record, unless the pool says otherwise
MAX_FORMAT_BYTES = 64 << 20  # the most a pool may allow (a record is held in memory and in Redis)
MAX_FORMAT_ENTRIES = 1_000  # items per structured-data syntax, entries of any one JSON array or object
MAX_FORMAT_LINKS = 10_000  # links of one page
MAX_FORMAT_DEPTH = 32  # nesting of structured data kept (deeper values become null)
FORMAT_SECONDS = 3.0  # one format on one page, in a parser process; over it the format is left out
