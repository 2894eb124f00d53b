"""Rotating WARC files: captures appended to a spool file, published whole when it is big or old enough.

The open file lives in a spool directory (the worker's emptyDir) as ``<name>.open``; at ``max_file_bytes`` or
``max_file_seconds`` it is indexed and published (:mod:`.stores`) and a new one begins. A worker that dies
leaves its ``.open`` file; the next writer on that spool (:meth:`ArchiveWriter.recover`) keeps every whole
record in it, publishes them, and counts the cut one as lost. A file the store refused stays in the spool
(``.ready``) and is tried again at the next publish; when more than ``max_spool_files`` wait, the oldest is
dropped and its records counted as dropped. Counts: records published, truncated, dropped, lost.
"""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

from . import cdx
from .capture import Capture
from .records import DEFAULT_MAX_PAYLOAD, encode
from .stores import WARC_SUFFIX, Store

DEFAULT_FILE_BYTES = 100 * 1024 * 1024  # the size WARC tools expect (Heritrix, StormCrawler: 1 GB at most)
DEFAULT_FILE_SECONDS = 300.0
MAX_SPOOL_FILES = 8
OPEN, READY = ".open", ".ready"


@dataclass(slots=True)
class ArchiveCounts:
    records: int = 0  # response records published
    truncated: int = 0  # of them, cut to the record cap
    dropped: int = 0  # captured but never published (the store refused them too long)
    lost: int = 0  # cut off by a crash in the middle of a write
    files: int = 0
    bytes: int = 0


@dataclass(frozen=True, slots=True)
class ArchiveLimits:
    max_file_bytes: int = DEFAULT_FILE_BYTES
    max_file_seconds: float = DEFAULT_FILE_SECONDS
    max_record_bytes: int = DEFAULT_MAX_PAYLOAD
    max_spool_files: int = MAX_SPOOL_FILES


def file_name(writer_id: str, now: float | None = None) -> str:
    """``TRAWL-<UTC time>-<ns>-<writer>-<random>.warc.gz``: names sort by time, never collide."""
    t = time.time() if now is None else now
    stamp = time.strftime("%Y%m%d%H%M%S", time.gmtime(t))
    return f"TRAWL-{stamp}-{time.time_ns() % 10**9:09d}-{writer_id}-{secrets.token_hex(3)}{WARC_SUFFIX}"


def whole_prefix(path: Path) -> tuple[int, int, bool]:
    """(bytes of whole records at the start of ``path``, response records among them, whether more followed)."""
    end = responses = 0
    with open(path, "rb") as fh:
        it = ArchiveIterator(fh)
        try:
            for record in it:
                it.read_to_end(record)
                end = it.get_record_offset() + it.get_record_length()
                responses += record.rec_type == "response"
        except (ArchiveLoadFailed, OSError, EOFError, ValueError):
            pass
    return end, responses, end < path.stat().st_size


class ArchiveWriter:
    """One writer per worker and archive location; blocking (the worker runs it on a thread)."""

    def __init__(self, store: Store, spool: Path, *, writer_id: str, limits: ArchiveLimits = ArchiveLimits()) -> None:
        self.store = store
        self.spool = spool
        self.writer_id = writer_id
        self.limits = limits
        self.counts = ArchiveCounts()
        self._open: Path | None = None
        self._opened_at = 0.0
        self._size = 0
        self._responses = 0
        self._truncated = 0
        spool.mkdir(parents=True, exist_ok=True)

    def add(self, capture: Capture) -> bool:
        """Append ``capture``; returns whether its body was cut. Publishes the file once it is full."""
        encoded = encode(capture, max_payload=self.limits.max_record_bytes)
        if self._open is None:
            self._open = self.spool / (file_name(self.writer_id) + OPEN)
            self._opened_at = time.monotonic()
        with open(self._open, "ab") as fh:
            fh.write(encoded.data)
        self._size += len(encoded.data)
        self._responses += 1
        self._truncated += encoded.truncated
        if self._size >= self.limits.max_file_bytes:
            self.rotate()
        return encoded.truncated

    def due(self) -> bool:
        return self._open is not None and time.monotonic() - self._opened_at >= self.limits.max_file_seconds

    def rotate(self) -> None:
        """Close the open file and publish it with every file still waiting."""
        if self._open is not None:
            ready = self._open.with_name(self._open.name[: -len(OPEN)] + f".{self._responses}.{self._truncated}{READY}")
            os.replace(self._open, ready)
            self._open, self._size, self._responses, self._truncated = None, 0, 0, 0
        self._publish_ready()

    close = rotate

    def recover(self) -> None:
        """Publish what a dead writer left in the spool: its whole records; the cut one is counted lost."""
        for path in sorted(self.spool.glob(f"*{OPEN}")):
            if path == self._open:  # this writer's own file, still being written
                continue
            end, responses, cut = whole_prefix(path)
            self.counts.lost += int(cut)
            if end == 0:
                path.unlink()
                continue
            with open(path, "r+b") as fh:
                fh.truncate(end)
            os.replace(path, path.with_name(path.name[: -len(OPEN)] + f".{responses}.0{READY}"))
        self._publish_ready()

    def adopt_stale(self, older_than: float) -> int:
        """Move into this writer's spool the files other writers of the same job left (their ``.open`` or
        ``.ready`` files untouched for ``older_than`` seconds: a live writer publishes within
        ``max_file_seconds``), then publish them as :meth:`recover` does. A rename is atomic and a writer
        holds no file open between captures, so a writer that was only slow starts a new file. Returns
        the files adopted."""
        adopted = 0
        now = time.time()
        for other in self.spool.parent.iterdir() if self.spool.parent.is_dir() else ():
            if other == self.spool or not other.is_dir():
                continue
            for path in list(other.glob(f"*{OPEN}")) + list(other.glob(f"*{READY}")):
                try:
                    if now - path.stat().st_mtime < older_than:
                        continue
                    os.replace(path, self.spool / path.name)
                except FileNotFoundError:  # another writer adopted it first
                    continue
                adopted += 1
        if adopted:
            self.recover()
        return adopted

    def _publish_ready(self) -> None:
        waiting = sorted(self.spool.glob(f"*{READY}"))
        for path in waiting:
            name, responses, truncated = split_ready(path.name)
            try:
                with open(path, "rb") as fh:
                    index = cdx.render(cdx.index_stream(fh, name))
                self.store.publish(name, path, index)
            except Exception:  # the store's or the file's trouble: the file waits (bounded below)
                continue
            self.counts.records += responses
            self.counts.truncated += truncated
            self.counts.files += 1
            self.counts.bytes += path.stat().st_size
            path.unlink()
        self._drop_excess()

    def _drop_excess(self) -> None:
        waiting = sorted(self.spool.glob(f"*{READY}"))
        for path in waiting[: max(0, len(waiting) - self.limits.max_spool_files)]:
            self.counts.dropped += split_ready(path.name)[1]
            path.unlink()


def split_ready(filename: str) -> tuple[str, int, int]:
    """``<name>.warc.gz.<responses>.<truncated>.ready`` -> (name, responses, truncated)."""
    stem = filename[: -len(READY)]
    rest, responses, truncated = stem.rsplit(".", 2)
    return rest, int(responses), int(truncated)
