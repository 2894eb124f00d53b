"""The archived responses back out of a WARC stream, each record's digests checked as it is read."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import IO

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed

from .records import DEPTH, REQUESTED_URI
from .timeparse import parse_warc_date


class ArchiveBroken(Exception):
    """A WARC file that cannot be read to its end, or whose digest does not match."""


@dataclass(frozen=True, slots=True)
class Archived:
    url: str  # the task's URL
    final_url: str
    status: int
    headers: dict[str, str]
    body: bytes
    fetched_at: float
    depth: int
    truncated: bool

    @property
    def content_type(self) -> str:
        return next((v for k, v in self.headers.items() if k.lower() == "content-type"), "")


def responses(stream: IO[bytes]) -> Iterator[Archived]:
    """Every response record of ``stream``; raises :class:`ArchiveBroken` on a broken member or digest."""
    try:
        for record in ArchiveIterator(stream, check_digests="raise"):
            if record.rec_type != "response" or record.http_headers is None:
                continue
            warc = record.rec_headers
            final_url = str(warc.get_header("WARC-Target-URI"))
            body = record.content_stream().read()
            yield Archived(
                url=str(warc.get_header(REQUESTED_URI) or final_url),
                final_url=final_url,
                status=int(record.http_headers.get_statuscode() or 0),
                headers=dict(record.http_headers.headers),
                body=body,
                fetched_at=parse_warc_date(str(warc.get_header("WARC-Date"))),
                depth=int(warc.get_header(DEPTH) or 0),
                truncated=bool(warc.get_header("WARC-Truncated")),
            )
    except (ArchiveLoadFailed, OSError, EOFError, ValueError) as exc:
        raise ArchiveBroken(f"{type(exc).__name__}: {exc}"[:300]) from exc
