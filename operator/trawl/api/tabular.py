"""Tabular outputs (CSV and Parquet files): the file format a job chooses for its S3 or Files sink, the
Files sink's settings, and the platform's bounds on what one file may hold.

The job author chooses the format and the directory; the bounds are built in, because a file is built in
a worker's memory before it is written. The worker's :mod:`trawl.sinks.tabular` builds the schema and
the rows; :mod:`trawl.sinks.tabularfiles` writes them to a volume, :mod:`trawl.sinks.s3` to a bucket.
"""

from __future__ import annotations

from pydantic import Field

from .common import TrawlModel

# Plain Python, read by the workers without pydantic (trawl.api.plain); exported here as before.
from .plain import DIRECTORY_PATTERN as DIRECTORY_PATTERN
from .plain import MAX_CELL_BYTES as MAX_CELL_BYTES
from .plain import MAX_EXTRA_BYTES as MAX_EXTRA_BYTES
from .plain import MAX_FILE_BYTES as MAX_FILE_BYTES
from .plain import MAX_FILE_ROWS as MAX_FILE_ROWS
from .plain import FileFormat as FileFormat


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
