"""Output formats of a page (spec.extract.formats): what each is, the few options a job sets, and the
platform's bounds on what one page may put in a record.

The job author chooses formats; the pool's operator chooses how large each may be
(``jobLimits.maxFormatBytes``); the entry and depth caps are built in. The worker's
:mod:`trawl.worker.formats` computes and bounds them.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field, field_validator

from .common import TrawlModel

DEFAULT_FORMAT_BYTES = 1 << 20  # 1 MiB of each format per record, unless the pool says otherwise
MAX_FORMAT_BYTES = 64 << 20  # the most a pool may allow (a record is held in memory and in Redis)
MAX_FORMAT_ENTRIES = 1_000  # items per structured-data syntax, entries of any one JSON array or object
MAX_FORMAT_LINKS = 10_000  # links of one page
MAX_FORMAT_DEPTH = 32  # nesting of structured data kept (deeper values become null)
FORMAT_SECONDS = 3.0  # one format on one page, in a parser process; over it the format is left out


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


class MainContentOptions(TrawlModel):
    """How the main content (formats markdown and text) is taken: navigation, ads and footers are left out."""

    tables: bool = Field(default=True, description="Keep tables (as markdown tables in markdown).")
    links: bool = Field(default=False, description="Keep links in the markdown, as [text](absolute URL).")


class StructuredOptions(TrawlModel):
    """Which embedded structured data the structured format reads."""

    syntaxes: list[StructuredSyntax] = Field(
        default_factory=lambda: list(StructuredSyntax),
        min_length=1,
        max_length=len(StructuredSyntax),
        description="Any of json-ld, microdata, opengraph, rdfa (default: all four).",
    )

    @field_validator("syntaxes")
    @classmethod
    def _unique(cls, value: list[StructuredSyntax]) -> list[StructuredSyntax]:
        if len(set(value)) != len(value):
            raise ValueError("syntaxes must be unique")
        return value
