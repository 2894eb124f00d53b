"""Files sink: CSV, Parquet or gzip JSON Lines files on a volume the workers mount.

Layout::

    <directory>/<job UID>/<ns timestamp>-<sha256>-<n>.<csv|parquet|jsonl.gz>   one per written batch part
    <directory>/<job UID>/manifest.json     files, rows, sha256, schema; rewritten after every write

A file is written under a temporary name in the same directory, synced, then renamed: a rename is
atomic, so a file either holds its whole part or does not exist (readers never see half a file), which
the pending-file protocol of :mod:`.parts` needs for exactly once. The manifest is rebuilt from the
directory listing (each name carries its rows and checksum) under an exclusive lock, so workers sharing
the volume never lose each other's files from it; it is current after every write, so it is complete
when the job finishes. The job's UID is the only path part taken from a job besides the directory
(admission checks it is on a writable mount of the pool), and it is checked to be one name.
"""

from __future__ import annotations

import asyncio
import fcntl
import json
import os
import re
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from trawl.api.plain import FileFormat

from .base import Record, SinkError
from .parts import PartWriter, encoder
from .tabular import Column, Part, describe, parse_name, part_name

MANIFEST = "manifest.json"
LOCK = ".manifest.lock"
_JOB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def job_dir(directory: Path, job_id: str) -> Path:
    """The job's folder; a job id that is not one plain name (``..``, a slash) is refused."""
    if not _JOB_ID.fullmatch(job_id) or job_id in (".", ".."):
        raise SinkError(f"job id {job_id!r} is not a plain name")
    return directory / job_id


def _write_atomically(path: Path, body: bytes) -> None:
    tmp = path.with_name(f".tmp-{os.getpid()}-{time.time_ns()}-{path.name}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        view = memoryview(body)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # the rename itself survives a crash
    finally:
        os.close(dir_fd)


def listing(folder: Path) -> list[dict[str, Any]]:
    """The job's files in the order written (their names start with a timestamp)."""
    out = []
    with os.scandir(folder) as entries:
        for entry in entries:
            parsed = None if entry.name.startswith(".") else parse_name(entry.name)
            if parsed is not None and entry.is_file():
                out.append({"file": entry.name, "rows": parsed[1], "sha256": parsed[0], "size": entry.stat().st_size})
    return sorted(out, key=lambda f: str(f["file"]))


def write_manifest(folder: Path, job_id: str, fmt: FileFormat, schema: Sequence[Column]) -> dict[str, Any]:
    """Rebuild ``manifest.json`` from the folder, under the folder's lock."""
    with open(folder / LOCK, "a+b") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        files = listing(folder)
        manifest: dict[str, Any] = {
            "job": job_id,
            "format": fmt.value,
            "rows": sum(int(f["rows"]) for f in files),
            "files": files,
        }
        if fmt != FileFormat.JSON_LINES:
            manifest["schema"] = describe(schema)
        _write_atomically(folder / MANIFEST, json.dumps(manifest, indent=1).encode())
        return manifest


class FilesSink:
    def __init__(
        self, redis: Redis, dedupe_key: Any, directory: str, *, fmt: FileFormat, schema: Sequence[Column]
    ) -> None:
        self.directory = Path(directory)
        self.fmt = fmt
        self.schema = tuple(schema)
        self._writer = PartWriter(redis, dedupe_key, self, encoder(fmt, schema))

    def name(self, job_id: str, part: Part) -> str:
        return str(job_dir(self.directory, job_id) / part_name(time.time_ns(), part, self.fmt))

    async def exists(self, name: str) -> bool:
        return await asyncio.to_thread(os.path.exists, name)

    async def put(self, name: str, part: Part) -> None:
        path = Path(name)
        await asyncio.to_thread(path.parent.mkdir, parents=True, exist_ok=True)
        await asyncio.to_thread(_write_atomically, path, part.body)

    async def write(self, job_id: str, records: Sequence[Record]) -> int:
        try:
            written = await self._writer.write(job_id, records)
            folder = job_dir(self.directory, job_id)
            if folder.exists():  # also after a settled redelivery: a dead worker's file joins the manifest
                await asyncio.to_thread(write_manifest, folder, job_id, self.fmt, self.schema)
            return written
        except OSError as exc:
            raise SinkError(f"files write under {self.directory} failed: {exc}") from exc

    async def close(self) -> None:
        return None
