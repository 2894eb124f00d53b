"""The worker's side of WARC capture: a fetched page as a :class:`~trawl.archive.records.Capture`, and the
writer run off the event loop (its file writes, indexing and uploads block)."""

from __future__ import annotations

import asyncio
import time

from trawl.archive.records import Capture
from trawl.archive.writer import ArchiveWriter

from .fetch import FetchResult


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
        self._lock = asyncio.Lock()

    async def capture(self, capture: Capture) -> bool:
        async with self._lock:
            truncated = await asyncio.to_thread(self.writer.add, capture)
            if self.writer.due():
                await asyncio.to_thread(self.writer.rotate)
            return truncated

    async def close(self) -> None:
        async with self._lock:
            await asyncio.to_thread(self.writer.close)
