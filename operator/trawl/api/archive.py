"""WARC capture and re-extraction settings (trawl.archive): a job's ``archive`` and ``archiveSource``, and a
pool's ``archive`` location.

The pool's platform team chooses where archives live (a directory on a writable volume of its workers); a
job only turns capture on, within the record and file caps below, or names an archive to re-extract from
by a previous job's name or a path relative to its own namespace's part of that location. Which names
and paths are allowed is decided by :mod:`trawl.archive.source`; a refused one stalls the job.
"""

from __future__ import annotations

from pydantic import Field

from .common import TrawlModel

REEXTRACT_URL = "trawl-archive:"  # the one task a re-extraction job enqueues (trawl.worker.reextract)
KIB, MIB = 1 << 10, 1 << 20
DEFAULT_RECORD_BYTES = 8 * MIB
MAX_RECORD_BYTES = 64 * MIB
DEFAULT_FILE_BYTES = 100 * MIB
MAX_FILE_BYTES = 1 << 30


class ArchiveSpec(TrawlModel):
    """Keep every response the job fetches as WARC records (request + response, payload digest)."""

    max_record_bytes: int = Field(
        default=DEFAULT_RECORD_BYTES,
        ge=KIB,
        le=MAX_RECORD_BYTES,
        description="Bytes of one response body kept; a longer one is cut and marked WARC-Truncated: length.",
    )
    max_file_bytes: int = Field(
        default=DEFAULT_FILE_BYTES,
        ge=MIB,
        le=MAX_FILE_BYTES,
        description="A WARC file is closed, indexed (CDXJ) and published once it is this large.",
    )


class ArchiveSourceSpec(TrawlModel):
    """Re-extract from an archive instead of fetching: no request goes to any site."""

    job: str | None = Field(
        default=None, max_length=253, description="A previous ScrapeJob of this namespace whose archive is read."
    )
    path: str | None = Field(
        default=None,
        max_length=1024,
        description="Or a directory relative to this namespace's part of the pool's archive location.",
    )
    namespace: str | None = Field(
        default=None, max_length=253, description="Only this job's own namespace is allowed (others: refused)."
    )


class ArchiveStatus(TrawlModel):
    """What the workers did with the job's WARC capture (spec.archive), summed over workers."""

    records: int = Field(default=0, description="Response records published in WARC files (with a request each).")
    truncated: int = Field(default=0, description="Of them, bodies cut to maxRecordBytes (WARC-Truncated).")
    dropped: int = Field(default=0, description="Captured but not published: the archive volume refused them.")
    lost: int = Field(default=0, description="Cut off by a worker that died while writing them.")
    read: int = Field(default=0, description="Re-extraction (spec.archiveSource): responses read from the archive.")
    skipped: int = Field(
        default=0, description="Re-extraction: responses not extracted (not HTML or 2xx, onlyMatching, parse limits)."
    )
