"""A refresh job's pages in the worker (spec.refresh): read the lineage's state of a page before its fetch,
send its validators, label what came back, and hand the state to save to the finisher, which saves it after
the page's record is stored and before its ack (trawl.worker.finish). The decisions are trawl.refresh.decide's.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from trawl.queue.model import Task
from trawl.queue.pagestate import PageSave, PageStates
from trawl.refresh import decide
from trawl.refresh import fingerprint as fingerprints
from trawl.refresh.decide import Outcome, RefreshSettings
from trawl.refresh.state import Change, PageState, decode, encode, encoded_prefix, job_tag, url_field

from .fetch import FetchResult


class PageWrite(NamedTuple):
    """A page's state for the finisher to save (trawl.queue.pagestate)."""

    lineage: str
    tag_prefix: str
    retain_seconds: int
    save: PageSave


@dataclass(slots=True)
class RefreshPage:
    """One task's page under spec.refresh: what the lineage knew of it, and its decision once made."""

    settings: RefreshSettings
    tag: str
    key: str  # the page's field in the lineage's hash
    old: PageState | None
    url: str = ""  # kept in the state, so that a later run that no longer reaches the page can name it gone
    outcome: Outcome | None = None
    headers: dict[str, str] = field(default_factory=dict)
    revisited: bool = True  # False: adaptive revisits left the page alone (no request)
    changed_fields: list[str] | None = None  # the fields whose values changed (spec.refresh.changedFields)

    @property
    def write_record(self) -> bool:
        return self.outcome is None or self.outcome.write_record

    def record_fields(self) -> dict[str, Any]:
        """What the record adds: its label (and, for a page adaptive revisits left alone, that it was not)."""
        if self.outcome is None:
            return {}
        if not self.revisited:
            return {"change": "unchanged", "revisited": False}
        if self.changed_fields is not None:
            return {"change": self.outcome.change.value, "changedFields": self.changed_fields}
        return {"change": self.outcome.change.value}

    def not_due(self, links_followed: bool) -> bool:
        """Decide a page adaptive revisits leave alone this run (True): no request. A page whose links the
        crawl follows is always due (its links are the crawl)."""
        if links_followed or self.old is None:
            return False
        self.outcome = decide.not_due(self.old, self.tag, self.settings, int(time.time()))
        self.revisited = self.outcome is None
        return not self.revisited

    def not_modified(self, result: FetchResult) -> bool:
        """Decide a 304 (True), which only validators this page sent can earn."""
        if result.status != 304 or self.old is None:
            return False
        self.outcome = decide.not_modified(
            self.old, self.tag, _validators(result), int(time.time()), self.settings.records_all
        )
        return True

    def fetched(self, result: FetchResult, page_fingerprint: str, data: Mapping[str, Any]) -> None:
        """Decide a page fetched in full, from its fingerprint (and, with changedFields, its fields)."""
        fp = page_fingerprint if self.settings.fingerprint != "Body" else fingerprints.of_bytes(result.body)
        outcome = decide.fetched(
            self.old, self.tag, fp, _validators(result), int(time.time()), self.settings.records_all
        )
        if self.settings.changed_fields and (self.old is None or self.old.tag != self.tag):
            state = outcome.state._replace(fields=fingerprints.field_digests(data))
            outcome = outcome._replace(state=state)
            if outcome.change == Change.CHANGED and self.old is not None and self.old.fields:
                self.changed_fields = fingerprints.changed_names(data, self.old.fields)
        self.outcome = outcome

    def gone(self, status: int | None) -> bool:
        """Decide a failed fetch: True when it means the page is gone (a record, not a failure)."""
        self.outcome = decide.gone(self.old, self.tag, status, int(time.time()))
        return self.outcome is not None

    def write(self) -> PageWrite | None:
        if self.outcome is None:
            return None
        label = self.outcome.change.value if self.revisited else "notRevisited"
        save = PageSave(self.key, encode(self.outcome.state._replace(url=self.url)), label)
        return PageWrite(self.settings.lineage, encoded_prefix(self.tag), self.settings.retain_seconds, save)


async def begin(pages: PageStates, settings: RefreshSettings, task: Task) -> RefreshPage:
    """Read what the lineage knows of the task's page (one HGET) and the validators to send."""
    field_name = url_field(task.url)
    old = decode(await pages.get(settings.lineage, field_name))
    tag = job_tag(task.job_id)
    page = RefreshPage(settings, tag, field_name, old, task.url)
    page.headers = decide.conditional_headers(old, tag, settings)
    return page


def _validators(result: FetchResult) -> dict[str, str]:
    """The response's validators, by lower-case name."""
    found = {}
    for name, value in result.headers.items():
        lower = name.lower()
        if lower in ("etag", "last-modified"):
            found[lower] = value
    return found
