"""The worker's side of WARC capture: a fetched page as a :class:`~trawl.archive.records.Capture`, and the
writer run off the event loop (its file writes, indexing and uploads block)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trawl.archive.capture import Capture
from trawl.egress.addresses import IPNetwork
from trawl.jobspec.podfiles import local_path, read_secret

from .fetch import FetchResult

if TYPE_CHECKING:
    from trawl.archive.stores import Store
    from trawl.archive.writer import ArchiveWriter

S3_SPOOL = Path("/tmp/trawl-warc")  # the worker pod's /tmp is an emptyDir: it outlives a container restart

log = logging.getLogger("trawl.worker")


def capture_of(url: str, result: FetchResult, *, depth: int = 0, user_agent: str = "") -> Capture:
    """What the WARC keeps of a fetch: the decoded body the extraction saw, its headers, where and when."""
    return Capture(
        url=url,
        final_url=result.final_url,
        status=result.status,
        headers=result.headers,
        body=result.body,
        fetched_at=time.time(),
        depth=depth,
        user_agent=user_agent,
    )


class AsyncArchive:
    """An :class:`ArchiveWriter` behind a lock, on a thread: one capture at a time, the loop never blocked."""

    def __init__(self, writer: ArchiveWriter) -> None:
        self.writer = writer
        self.lock = asyncio.Lock()

    async def capture(self, capture: Capture) -> bool:
        async with self.lock:
            truncated = await asyncio.to_thread(self.writer.add, capture)
            if self.writer.due():
                await asyncio.to_thread(self.writer.rotate)
            return truncated

    async def close(self) -> None:
        async with self.lock:
            await asyncio.to_thread(self.writer.close)


# A writer publishes its open file within max_file_seconds (300 s by default, the heartbeat checks): a spool
# file untouched for twice that, plus a margin, belongs to a writer that is gone.
STALE_SECONDS = 2 * 300.0 + 60.0
NOTED = ("records", "truncated", "dropped", "lost")  # the writer's counts noted on the job (JobNotes.archived)


class JobArchives:
    """The worker's WARC writers, one per capturing job (``spec.archive``), each on the job's directory of
    the pool's archive volume with its spool beside it (``.spool/<worker>/``, on the same volume, so a
    restarted worker of the same name publishes what it left). What each writer publishes, cuts, drops or
    loses is added to the job's notes, which the operator shows as ``status.archive``."""

    def __init__(
        self,
        worker_id: str,
        note: Callable[[str, dict[str, int]], Awaitable[None]] | None = None,
        allowed: Sequence[IPNetwork] = (),
    ) -> None:
        self.worker_id = worker_id
        self.allowed = tuple(allowed)  # the pool's address rule, for an S3 location
        self.note = note
        self._jobs: dict[str, AsyncArchive] = {}
        self._noted: dict[str, dict[str, int]] = {}
        self._creating = asyncio.Lock()

    async def _create(self, job_id: str, wire: Mapping[str, Any]) -> AsyncArchive:
        """The job's writer, made once: concurrent first captures wait for the one being made (two writers
        on one spool would take each other's open file for a dead writer's)."""
        async with self._creating:
            archive = self._jobs.get(job_id)
            if archive is None:
                archive = self._jobs[job_id] = await asyncio.to_thread(self._archive, wire)
            return archive

    def _archive(self, wire: Mapping[str, Any]) -> AsyncArchive:
        """A writer on the job's location; what this worker left in its spool is published first."""
        # warcio and the S3 client load with the first capturing job, not at every worker's start.
        from trawl.archive.records import DEFAULT_MAX_PAYLOAD
        from trawl.archive.writer import DEFAULT_FILE_BYTES, ArchiveLimits, ArchiveWriter

        store, spools = store_for(wire, self.allowed)
        limits = ArchiveLimits(
            max_file_bytes=int(wire.get("max_file_bytes") or DEFAULT_FILE_BYTES),
            max_record_bytes=int(wire.get("max_record_bytes") or DEFAULT_MAX_PAYLOAD),
        )
        writer = ArchiveWriter(store, spools / self.worker_id, writer_id=self.worker_id, limits=limits)
        writer.recover()
        writer.adopt_stale(STALE_SECONDS)
        return AsyncArchive(writer)

    async def capture(self, job_id: str, wire: Mapping[str, Any], capture: Capture) -> bool:
        """Archive one page; a volume that fails (full, gone) drops the capture, counted, never the page."""
        try:
            archive = self._jobs.get(job_id) or await self._create(job_id, wire)
            truncated = await archive.capture(capture)
        except OSError as exc:
            log.warning("WARC capture dropped", extra={"job": job_id, "url": capture.url, "error": repr(exc)})
            if self.note is not None:
                await self.note(job_id, {"dropped": 1})
            return False
        await self._report(job_id, archive)
        return truncated

    async def flush_due(self) -> None:
        """Publish the files old enough (a job that stopped fetching still gets its last file out)."""
        for job_id, archive in list(self._jobs.items()):
            if archive.writer.due():
                await archive.close()
            async with archive.lock:  # what dead writers of the job left (another pod's spool)
                await asyncio.to_thread(archive.writer.adopt_stale, STALE_SECONDS)
            await self._report(job_id, archive)

    async def close(self) -> None:
        for job_id, archive in list(self._jobs.items()):
            await archive.close()
            await self._report(job_id, archive)
        self._jobs.clear()

    async def _report(self, job_id: str, archive: AsyncArchive) -> None:
        now = {k: int(getattr(archive.writer.counts, k)) for k in NOTED}
        last = self._noted.get(job_id, dict.fromkeys(NOTED, 0))
        delta = {k: now[k] - last[k] for k in NOTED if now[k] != last[k]}
        self._noted[job_id] = now  # before the await: a concurrent report then notes only what follows
        if delta and self.note is not None:
            await self.note(job_id, delta)


def store_for(wire: Mapping[str, Any], allowed: Sequence[IPNetwork]) -> tuple[Store, Path]:
    """The store a worker spec's archive location names, and where its writers spool: beside the files on a
    volume (``.spool/``), or under the pod's /tmp for S3 (keyed by the prefix)."""
    from trawl.api.scrapejob import S3Sink
    from trawl.archive.stores import S3Store, VolumeStore
    from trawl.sinks.s3 import target_from_spec

    if "s3" in wire:
        spec = S3Sink.model_validate(wire["s3"])
        access, secret = spec.access_key_id_secret_ref, spec.secret_access_key_secret_ref
        target = target_from_spec(
            spec,
            read_secret(access.name, access.key).decode().strip(),
            read_secret(secret.name, secret.key).decode().strip(),
            allowed=allowed,
        )
        prefix = str(wire["prefix"])
        return S3Store(target, prefix), S3_SPOOL / hashlib.blake2b(prefix.encode(), digest_size=8).hexdigest()
    root = Path(local_path(str(wire["directory"])))
    return VolumeStore(root), root / ".spool"
