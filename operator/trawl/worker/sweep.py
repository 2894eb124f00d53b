"""A refresh job's sweep: once the run's own work is done, the pages its lineage knew that the run never
reached (no longer linked, no longer in the list or the sitemap) are reported gone, each with a record and
counted once on the job (``status.changes.gone``), as a 404 or 410 is during the run.

The operator adds the first sweep task only when the run covered its whole scope (trawl.queue's
enqueue_sweep.lua: not when the task cap stopped it, nor under cross-job dedupe) and would succeed, so a page
is gone only when nothing of this run could have reached it. A page whose task failed for good in this run
was reached: its dead letter keeps it from being reported gone (its state stays as it was). A page the run
fetched that no longer matches the extraction rules yields no record any more, and is reported gone too.

One task scans at most MAX_PAGES_PER_TASK of the lineage's hash (HSCAN) and adds the next cursor's task
before its ack, so a lineage of millions of pages is swept in bounded steps that any worker may take, and
the job stays unfinished until the last. Records go to the sink first, then the states (with the job's tag:
a retried step reports nothing twice, and the sink keeps one record per URL and job), then the ack. Pages an
earlier run reported gone and still unreached are forgotten (their memory goes; back again, they are new).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any

from trawl.queue.model import SWEEP_MAX_DEAD, QueueClient, Task, sweep_cursor
from trawl.queue.pagestate import PageSave, PageStates
from trawl.refresh import decide
from trawl.refresh.decide import RefreshSettings
from trawl.refresh.state import Change, decode, encode, encoded_prefix, job_tag, url_field
from trawl.sinks.base import Record, Sink, record_key

SCAN_COUNT = 500  # fields per HSCAN call
MAX_PAGES_PER_TASK = 5000  # fields one sweep task looks at before it hands the rest to the next


@dataclass(slots=True)
class SweepStep:
    """What one sweep task found: the next cursor ("0": the lineage is swept), the gone pages' records and
    states, and the states to forget (field -> the value read)."""

    cursor: str
    records: list[Record] = field(default_factory=list)
    saves: list[PageSave] = field(default_factory=list)
    forget: dict[str, str] = field(default_factory=dict)
    looked: int = 0


def gone_record(job_id: str, url: str, now: float) -> Record:
    """The record of a page the run never reached: where, when, and its label (no status: nothing answered)."""
    fields: dict[str, Any] = {
        "key": record_key(job_id, url),
        "job": job_id,
        "url": url,
        "status": None,
        "sweptAt": round(now, 3),
        "change": Change.GONE.value,
        "reached": False,
    }
    return Record(job_id, url, fields)


def judge(step: SweepStep, items: dict[str, str], job_id: str, tag: str, dead: Collection[str]) -> None:
    """Fold one HSCAN batch into ``step``: pure (the decisions are trawl.refresh.decide's)."""
    now = time.time()
    for key, raw in items.items():
        old = decode(raw)
        if old is None or key in dead:
            continue
        if decide.forgotten(old, tag):
            step.forget[key] = raw
            continue
        outcome = decide.unlinked(old, tag, int(now))
        if outcome is not None:
            step.records.append(gone_record(job_id, old.url, now))
            step.saves.append(PageSave(key, encode(outcome.state), outcome.change.value))
    step.looked += len(items)


def dead_fields(urls: Collection[str]) -> frozenset[str]:
    """The page-state fields of the run's dead-lettered URLs: tried and failed, so not gone."""
    return frozenset(url_field(u) for u in urls)


async def sweep(task: Task, settings: RefreshSettings, sink: Sink, pages: PageStates, queue: QueueClient) -> SweepStep:
    """One sweep task: scan up to MAX_PAGES_PER_TASK pages from its cursor, write the gone pages' records,
    then save their states (counted on the job once), forget the pages gone before, and add the next step."""
    cursor = sweep_cursor(task)
    assert cursor is not None
    tag = job_tag(task.job_id)
    dead = dead_fields([d.url for d in await queue.dead_letters(task.job_id, limit=SWEEP_MAX_DEAD)])
    step = SweepStep(cursor)
    while True:
        step.cursor, items = await pages.scan(settings.lineage, step.cursor, SCAN_COUNT)
        judge(step, items, task.job_id, tag, dead)
        if step.cursor == "0" or step.looked >= MAX_PAGES_PER_TASK:
            break
    if step.records:
        await sink.write(task.job_id, step.records)
    await pages.save(task.job_id, settings.lineage, encoded_prefix(tag), step.saves, settings.retain_seconds)
    await pages.forget(settings.lineage, step.forget)
    if step.cursor != "0":
        await queue.enqueue_sweep(task.job_id, step.cursor, first=False)
    return step
