"""Whether a pool can run a job's archive settings, and whether the archive a job names is its to read (no I/O).

Reasons (a Stalled condition and an Event on the job): ``ArchiveNotConfigured`` (the pool has no
``spec.archive``), ``DirectoryNotMounted`` (its directory is not on a writable volume of the workers),
``ArchiveSourceRefused`` (another namespace's archive, a path out of the job's own part, a name that is
not a plain one).
"""

from __future__ import annotations

from typing import Any

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec

from .source import ArchiveRefused, ArchiveSource, archive_prefix, job_archive_prefix


def archive_problem(namespace: str, name: str, spec: ScrapeJobSpec, pool: ScrapePoolSpec) -> tuple[str, str] | None:
    """(reason, message) when the job's archive settings cannot run on ``pool``; None when they can (or
    the job has none)."""
    if spec.archive is None and spec.archive_source is None:
        return None
    if pool.archive is None:
        return "ArchiveNotConfigured", (
            f"ScrapePool {spec.pool!r} has no spec.archive: it keeps no WARC archive for its jobs to write or read"
        )
    directory = pool.archive.directory
    if directory is not None and pool.worker.writable_mount_for(directory) is None:
        return "DirectoryNotMounted", (
            f"the pool's spec.archive.directory {directory} is not on a writable volume of its workers"
        )
    s3 = pool.archive.s3
    if s3 is not None:
        mounted = set(pool.worker.secrets or ())
        for ref in (s3.access_key_id_secret_ref, s3.secret_access_key_secret_ref):
            if ref.name not in mounted:
                return "SecretNotMounted", (
                    f"the pool's spec.archive.s3 names Secret {ref.name!r}, which its spec.worker.secrets does not list"
                )
    source = spec.archive_source
    if source is None:
        return None
    try:
        source_directory(namespace, spec, pool)
    except ArchiveRefused as exc:
        return ArchiveRefused.reason, f"spec.archiveSource: {exc}"
    return None


def source_directory(namespace: str, spec: ScrapeJobSpec, pool: ScrapePoolSpec) -> str:
    """The directory a re-extraction job reads, or :class:`ArchiveRefused`."""
    assert pool.archive is not None and spec.archive_source is not None
    source = spec.archive_source
    return archive_prefix(
        ArchiveSource(job=source.job, path=source.path, namespace=source.namespace),
        namespace=namespace,
        location=pool.archive.root(),
    )


def capture_directory(namespace: str, name: str, pool: ScrapePoolSpec) -> str:
    """Where a capturing job's WARC files go: a directory on the workers' volume, or an S3 key prefix."""
    assert pool.archive is not None
    return job_archive_prefix(location=pool.archive.root(), namespace=namespace, job=name)


def location_wire(where: str, pool: ScrapePoolSpec) -> dict[str, Any]:
    """How a worker finds ``where`` (a capture or source location): ``directory``, or ``s3`` + ``prefix``."""
    assert pool.archive is not None
    if pool.archive.s3 is not None:
        return {"s3": pool.archive.s3.model_dump(mode="json"), "prefix": where}
    return {"directory": where}
