"""JSON Lines files: one ``<job>.jsonl`` per job in a directory on a volume the workers mount."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from redis.asyncio import Redis

from .base import Deduped, Record, SinkError, dumps


class JsonLinesSink:
    """Appends to ``<directory>/<job_id>.jsonl``: one line per record, written with O_APPEND."""

    def __init__(self, redis: Redis, dedupe_key: Any, directory: str) -> None:
        self.directory = Path(directory)
        self._dedupe = Deduped(redis, dedupe_key)

    def path(self, job_id: str) -> Path:
        return self.directory / f"{job_id}.jsonl"

    def _append(self, path: Path, payload: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            view = memoryview(payload)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fsync(fd)
        finally:
            os.close(fd)

    async def write(self, job_id: str, records: Sequence[Record]) -> int:
        try:
            fresh = await self._dedupe.fresh(job_id, records)
            if not fresh:
                return 0
            payload = "".join(dumps(r.data) + "\n" for r in fresh).encode()
            await asyncio.to_thread(self._append, self.path(job_id), payload)
            await self._dedupe.mark(job_id, fresh)
            return len(fresh)
        except OSError as exc:
            raise SinkError(f"json lines write failed: {exc}") from exc

    async def close(self) -> None:
        return None
