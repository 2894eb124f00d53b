"""Output formats of a page (spec.extract.formats): what each is, the few options a job sets, and the
platform's bounds on what one page may put in a record.

The job author chooses formats; the pool's operator chooses how large each may be
(``jobLimits.maxFormatBytes``); the entry and depth caps are built in. The worker's
:mod:`trawl.worker.formats` computes and bounds them.
"""

from __future__ import annotations

from pydantic import Field, field_validator

from .common import TrawlModel

# Plain Python, read by the workers without pydantic (trawl.api.plain); exported here as before.
from .plain import DEFAULT_FORMAT_BYTES as DEFAULT_FORMAT_BYTES
from .plain import FORMAT_SECONDS as FORMAT_SECONDS
from .plain import MAX_FORMAT_BYTES as MAX_FORMAT_BYTES
from .plain import MAX_FORMAT_DEPTH as MAX_FORMAT_DEPTH
from .plain import MAX_FORMAT_ENTRIES as MAX_FORMAT_ENTRIES
from .plain import MAX_FORMAT_LINKS as MAX_FORMAT_LINKS
from .plain import OutputFormat as OutputFormat
from .plain import StructuredSyntax as StructuredSyntax


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
