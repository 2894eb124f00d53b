"""Re-extraction: a job's extraction rules over an archive's responses, with no network request at all.

Each archived response (:mod:`trawl.archive.reader`, digests checked) goes through the same
:class:`~trawl.worker.extract.Extractor` a crawl uses, and a page that matches becomes a record of the same
shape a crawl writes (:func:`trawl.worker.pipeline.record_for`), ``fetchedAt`` being the archived date. The
records then go to the job's sink like any job's. Non-HTML and non-2xx responses are skipped (a crawl
extracts from neither); a broken file stops nothing but itself, and every response is counted.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from trawl.archive.reader import ArchiveBroken, Archived, responses
from trawl.archive.stores import Store
from trawl.sinks.base import Record, record_key

from .extract import Extractor, Page
from .fetch import HTML_TYPES


@dataclass(slots=True)
class ReextractCounts:
    responses: int = 0
    records: int = 0
    skipped: int = 0  # not HTML, not 2xx, or not matching onlyMatching
    truncated: int = 0  # archived bodies that were cut when captured
    broken_files: list[str] = field(default_factory=list)


def extractable(item: Archived) -> bool:
    mime = item.content_type.split(";", 1)[0].strip().lower()
    return 200 <= item.status < 300 and (not mime or mime.startswith(HTML_TYPES))


def record_of(job_id: str, item: Archived, page: Page) -> Record:
    """The record a crawl would have written for this page (pipeline.record_for's shape)."""
    fields = {
        "key": record_key(job_id, item.url),
        "job": job_id,
        "url": item.url,
        "finalUrl": item.final_url,
        "status": item.status,
        "depth": item.depth,
        "attempt": 1,
        "fetchedAt": round(item.fetched_at, 3),
        **page.data,
    }
    return Record(job_id, item.url, fields)


def reextract(
    store: Store,
    job_id: str,
    extract: Callable[[bytes, str, str], Page],
    counts: ReextractCounts,
) -> Iterator[Record]:
    """Records of every archived page ``extract(body, url, content_type)`` matches, file by file."""
    for name in store.names():
        try:
            with store.open_warc(name) as fh:
                for item in responses(fh):
                    counts.responses += 1
                    counts.truncated += item.truncated
                    if not extractable(item):
                        counts.skipped += 1
                        continue
                    page = extract(item.body, item.url, item.content_type)
                    if not page.matched:
                        counts.skipped += 1
                        continue
                    counts.records += 1
                    yield record_of(job_id, item, page)
        except ArchiveBroken as exc:
            counts.broken_files.append(f"{name}: {exc}"[:300])


def extractor_call(extractor: Extractor) -> Callable[[bytes, str, str], Page]:
    """In-process extraction (the worker hands the parse pool's instead)."""

    def call(body: bytes, url: str, content_type: str) -> Page:
        return extractor.extract(body, url, content_type=content_type or None)

    return call
