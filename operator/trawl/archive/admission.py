"""Whether a pool can run a job's archive settings, and whether the archive a job names is its to read (no I/O).

Reasons (a Stalled condition and an Event on the job): ``ArchiveNotConfigured`` (the pool has no
``spec.archive``), ``DirectoryNotMounted`` (its directory is not on a writable volume of the workers),
``ArchiveSourceRefused`` (another namespace's archive, a path out of the job's own part, a name that is
not a plain one).
"""

from __future__ import annotations

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
    if pool.worker.writable_mount_for(directory) is None:
        return "DirectoryNotMounted", (
            f"the pool's spec.archive.directory {directory} is not on a writable volume of its workers"
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
        location=pool.archive.directory.rstrip("/") + "/",
    )


def capture_directory(namespace: str, name: str, pool: ScrapePoolSpec) -> str:
    """Where a capturing job's WARC files go on the workers' volume."""
    assert pool.archive is not None
    return job_archive_prefix(location=pool.archive.directory.rstrip("/") + "/", namespace=namespace, job=name)
