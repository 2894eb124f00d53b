"""Which archive a re-extraction job may read: the job author is untrusted, so this is a pure allow rule.

Archives live at ``<pool archive location>/<namespace>/<job name>/`` (a volume directory or an S3 prefix).
A job names its source as ``job`` (a previous ScrapeJob of its own namespace) or ``path`` (a directory
relative to its own namespace's part of the pool's archive location). Refused, with a reason for the job's
status: another namespace (named, or reached by ``..``), an absolute path, a path that is not plain
segments (``.``, ``..``, empty, backslashes, control characters, over 512 characters), and both or neither.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

SEGMENT = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,252}")
DNS_LABEL = re.compile(r"[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?")
MAX_PATH = 512


class ArchiveRefused(Exception):
    """The source a job names is not one it may read; the message is the status condition's."""

    reason = "ArchiveSourceRefused"


@dataclass(frozen=True, slots=True)
class ArchiveSource:
    job: str | None = None
    path: str | None = None
    namespace: str | None = None  # only the job's own namespace is allowed; named to be refused clearly


def relative_path(path: str) -> list[str]:
    """The segments of a safe relative path, or :class:`ArchiveRefused`."""
    if len(path) > MAX_PATH:
        raise ArchiveRefused(f"archive path longer than {MAX_PATH} characters")
    if path.startswith("/") or "\\" in path or any(ord(c) < 32 for c in path):
        raise ArchiveRefused("archive path must be relative, with '/' between plain names")
    segments = path.strip("/").split("/")
    for seg in segments:
        if seg in ("", ".", "..") or not SEGMENT.fullmatch(seg):
            raise ArchiveRefused(f"archive path segment {seg[:40]!r} is not a plain name (no '.', '..', '' or symbols)")
    return segments


def archive_prefix(source: ArchiveSource, *, namespace: str, location: str) -> str:
    """Where the job may read: ``<location><namespace>/<job or path>/``. ``location`` is the pool's archive
    root (ending in '/', or empty); ``namespace`` the re-extraction job's own."""
    if source.namespace is not None and source.namespace != namespace:
        raise ArchiveRefused(f"archive of namespace {source.namespace[:63]!r}: a job reads its own namespace's only")
    if (source.job is None) == (source.path is None):
        raise ArchiveRefused("name exactly one of archive job and archive path")
    if source.job is not None:
        if not DNS_LABEL.fullmatch(source.job):
            raise ArchiveRefused("archive job must be a ScrapeJob name (a DNS label)")
        segments = [source.job]
    else:
        segments = relative_path(str(source.path))
    return f"{location}{namespace}/{'/'.join(segments)}/"


def job_archive_prefix(*, location: str, namespace: str, job: str) -> str:
    """Where a capturing job writes (the same layout a re-extraction job names it by)."""
    return f"{location}{namespace}/{job}/"
