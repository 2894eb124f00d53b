"""A pool's archive location (``ScrapePool.spec.archive``): a directory on a writable worker volume, or an S3
bucket with the pool's credentials (the S3 sink's settings). Apart from :mod:`.archive` because it reuses
:class:`~trawl.api.scrapejob.S3Sink`, which imports that module."""

from __future__ import annotations

from typing import Self

from pydantic import Field, model_validator

from .common import TrawlModel
from .scrapejob import S3Sink


class PoolArchiveSpec(TrawlModel):
    """Where the pool's jobs keep their WARC archives: ``<directory or s3 prefix><namespace>/<job>/``."""

    directory: str | None = Field(
        default=None,
        min_length=2,
        max_length=1024,
        pattern=r"^/",
        description="Absolute directory on a writable volume the pool's workers mount.",
    )
    s3: S3Sink | None = Field(
        default=None,
        description="Or an S3 bucket and prefix; its key Secrets must be in spec.worker.secrets. Workers spool "
        "the open file in their /tmp (an emptyDir) and upload it whole.",
    )

    @model_validator(mode="after")
    def _one_location(self) -> Self:
        if (self.directory is None) == (self.s3 is None):
            raise ValueError("archive needs exactly one of directory and s3")
        return self

    def root(self) -> str:
        """The location's prefix, ending in '/' (a directory, or the S3 key prefix)."""
        if self.s3 is not None:
            return self.s3.prefix
        return str(self.directory).rstrip("/") + "/"
