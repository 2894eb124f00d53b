"""Re-extraction: a job's extraction rules over an archive's responses, with no network request at all.

Each archived response (:mod:`trawl.archive.reader`, digests checked) goes through the same
:class:`~trawl.worker.extract.Extractor` a crawl uses, and a page that matches becomes a record of the same
shape a crawl writes (:func:`trawl.worker.pipeline.record_for`), ``fetchedAt`` being the archived date. The
records then go to the job's sink like any job's. Non-HTML and non-2xx responses are skipped (a crawl
extracts from neither); a broken file stops nothing but itself, and every response is counted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from trawl.api.plain import FailureClass
from trawl.queue.model import Task
from trawl.sinks.base import Record, SinkError, record_key

from .extract import Extractor, Page
from .fetch import HTML_TYPES
from .finish import Finish
from .parsepool import ParseLimit

if TYPE_CHECKING:  # warcio loads with the first re-extraction task, not at every worker's start
    from trawl.archive.reader import Archived
    from trawl.archive.stores import Store

    from .jobcache import Job
    from .pipeline import TaskPipeline

log = logging.getLogger("trawl.worker")


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
    from trawl.archive.reader import ArchiveBroken, responses

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


WRITE_BATCH = 200  # records per sink write


async def archived(store: Store, name: str) -> AsyncIterator[Archived]:
    """The responses of one file, read on a thread one at a time (a file can be far larger than memory)."""
    from trawl.archive.reader import responses

    opened = store.open_warc(name)
    fh = await asyncio.to_thread(opened.__enter__)
    try:
        items = responses(fh)
        while (item := await asyncio.to_thread(next, items, None)) is not None:
            yield item
    finally:
        await asyncio.to_thread(opened.__exit__, None, None, None)


async def reextract_task(pipeline: TaskPipeline, task: Task, job: Job) -> str:
    """A re-extraction job's one task: every archived page through the parse pool (its time and size limits)
    into the job's sink, then acked. A sink failure gives the task back (the sinks drop records already
    written, by key); a broken file fails it with the files named, after the others were written."""
    from trawl.archive.reader import ArchiveBroken

    from .archiving import store_for

    assert job.spec.archive_source is not None
    store, _spool = await asyncio.to_thread(store_for, job.spec.archive_source, pipeline.fetcher.allowed)
    counts = ReextractCounts()
    batch: list[Record] = []
    names = await asyncio.to_thread(store.names)
    if not names:  # a job not captured (yet), or a path with nothing in it: a failure the author sees
        reason = "the archive source holds no published WARC file (a job that captured nothing, or a wrong path)"
        await pipeline.queue.fail(task, pipeline.worker_id, FailureClass.BAD_CONTENT.value, reason)
        return "failed"
    try:
        for name in names:
            try:
                async for item in archived(store, name):
                    record = await _one(pipeline, job, task.job_id, item, counts)
                    if record is not None:
                        batch.append(record)
                    if len(batch) >= WRITE_BATCH:
                        await job.sink.write(task.job_id, batch)
                        batch = []
            except ArchiveBroken as exc:
                counts.broken_files.append(f"{name}: {exc}"[:300])
        if batch:
            await job.sink.write(task.job_id, batch)
    except SinkError as exc:
        await pipeline.queue.release(task, pipeline.worker_id, delay=5.0)
        log.warning("re-extraction: sink failed; task given back", extra={"job": task.job_id, "error": str(exc)})
        return "released"
    log.info("re-extraction", extra={"job": task.job_id, "responses": counts.responses, "records": counts.records})
    # What the sink does not count: the responses read, and those that gave no record (status.archive).
    read = {"read": counts.responses, "skipped": counts.skipped, "truncated": counts.truncated}
    await pipeline.notes.archived(task.job_id, {k: v for k, v in read.items() if v})
    if counts.broken_files:
        reason = f"{len(counts.broken_files)} archive file(s) unreadable: {'; '.join(counts.broken_files[:3])}"
        await pipeline.queue.fail(task, pipeline.worker_id, FailureClass.BAD_CONTENT.value, reason[:1000])
        return "failed"
    pipeline.finisher.submit(Finish(task, [], None, None))
    return "handed"


async def _one(pipeline: TaskPipeline, job: Job, job_id: str, item: Archived, counts: ReextractCounts) -> Record | None:
    counts.responses += 1
    counts.truncated += item.truncated
    if not extractable(item):
        counts.skipped += 1
        return None
    try:
        page = await pipeline.parser.extract(job.extractor, item.body, item.url, content_type=item.content_type)
    except ParseLimit:
        counts.skipped += 1
        return None
    if not page.matched:
        counts.skipped += 1
        return None
    counts.records += 1
    return record_of(job_id, item, page)
