"""Tabular outputs (CSV and Parquet files): the file format a job chooses for its S3 or Files sink, the
Files sink's settings, and the platform's bounds on what one file may hold.

The job author chooses the format and the directory; the bounds are built in, because a file is built in
a worker's memory before it is written. The worker's :mod:`trawl.sinks.tabular` builds the schema and
the rows; :mod:`trawl.sinks.tabularfiles` writes them to a volume, :mod:`trawl.sinks.s3` to a bucket.
"""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from .common import TrawlModel

MAX_FILE_ROWS = 10_000  # rows of one file (one Parquet row group): a larger batch is split into files
MAX_FILE_BYTES = 64 << 20  # about this many bytes of cells in one file: a batch over it is split
MAX_CELL_BYTES = 1 << 20  # one cell (a field's value, a format); longer values are cut and named in truncated
MAX_EXTRA_BYTES = 1 << 20  # the extra column (JSON of the record's undeclared fields); over it: null


# Absolute, every part a plain name not starting with '.': no '..' can climb out of the mount the admission
# check found the directory on, and no hidden folder is written. RE2 (the API server's regexps): no lookahead.
DIRECTORY_PATTERN = r"^(/[A-Za-z0-9_-][A-Za-z0-9._-]{0,254})+/?$"


class FileFormat(StrEnum):
    """How records are written: one JSON object per line, or a table (one column per field)."""

    JSON_LINES = "JSONLines"
    CSV = "CSV"
    PARQUET = "Parquet"


class FilesSink(TrawlModel):
    """Results as CSV or Parquet files under a directory mounted into the workers: one file per written
    batch in ``<directory>/<job UID>/``, and ``manifest.json`` there listing them (rewritten after each)."""

    directory: str = Field(
        min_length=1,
        max_length=1024,
        pattern=DIRECTORY_PATTERN,
        description="Absolute directory on a writable volume of the pool's workers (no '.' or '..' part: a "
        "part starts with a letter, digit, '_' or '-'); each job writes under <directory>/<job UID>/.",
    )
    format: FileFormat = Field(default=FileFormat.PARQUET, description="CSV, Parquet or JSONLines (gzip).")
