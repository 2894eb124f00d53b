"""What a refresh job's worker does with a page, given the lineage's state of it: the validators it sends,
the label the page gets, the state saved, and whether a record is written. Pure (no I/O).

A task can be redelivered after its state was saved (the worker died before its ack): the state then carries
this job's own tag, and the label already decided stands. Such a task is fetched in full, without
validators, so its record can be rebuilt (the sink keeps one record per URL and job, whichever write wins).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from .state import Change, PageState

GONE_STATUSES = frozenset({404, 410})


class RefreshSettings(NamedTuple):
    """spec.refresh as the worker reads it from the job's settings (trawl.jobspec.wire)."""

    lineage: str  # "<namespace>/<lineage>": the operator sets the namespace, never the job author
    fingerprint: str = "Record"  # Record, Text or Body
    conditional: bool = True
    records_all: bool = False
    retain_seconds: int = 30 * 86400
    revisit_min_seconds: int = 0
    revisit_max_seconds: int = 0  # 0: adaptive revisits off (every page is due)
    changed_fields: bool = False  # keep a digest per extracted field, and name the changed ones on records

    @classmethod
    def parse(cls, raw: Mapping[str, Any] | None) -> RefreshSettings | None:
        if not raw or not raw.get("lineage"):
            return None
        return cls(
            lineage=str(raw["lineage"]),
            fingerprint=str(raw.get("fingerprint") or "Record"),
            conditional=bool(raw.get("conditional", True)),
            records_all=bool(raw.get("records_all", False)),
            retain_seconds=int(raw.get("retain_seconds") or 30 * 86400),
            revisit_min_seconds=int(raw.get("revisit_min_seconds") or 0),
            revisit_max_seconds=int(raw.get("revisit_max_seconds") or 0),
            changed_fields=bool(raw.get("changed_fields", False)),
        )


class Outcome(NamedTuple):
    """A page's label, the state to save for it, and whether it writes a record."""

    change: Change
    state: PageState
    write_record: bool


def revisit_interval(old: PageState, settings: RefreshSettings) -> float:
    """Seconds a page stays fresh after its last visit: half the time it had gone unchanged by then, within
    the job's bounds (0 with adaptive revisits off)."""
    if settings.revisit_max_seconds <= 0:
        return 0.0
    stable = max(0, old.fetched_at - old.changed_at)
    return float(min(settings.revisit_max_seconds, max(settings.revisit_min_seconds, stable / 2)))


def not_due(old: PageState | None, tag: str, settings: RefreshSettings, now: int) -> Outcome | None:
    """A page adaptive revisits leave alone this run: unchanged with no request, its state kept as it was
    (but tagged with this run: it was accounted for, so the sweep does not call it gone). None when the page
    is due: never seen, gone, changed at its last visit, or fresh no longer."""
    # Off first: with a 0 interval alone, a page fetched by a worker whose clock runs ahead would look fresh.
    if settings.revisit_max_seconds <= 0 or old is None or old.tag == tag:
        return None
    if old.change in (Change.GONE, Change.NEW, Change.CHANGED):
        return None
    if now - old.fetched_at >= revisit_interval(old, settings):
        return None
    return Outcome(Change.UNCHANGED, old._replace(tag=tag), settings.records_all)


def conditional_headers(old: PageState | None, tag: str, settings: RefreshSettings) -> dict[str, str]:
    """The validators to send with the first request of a page."""
    if not settings.conditional or old is None or old.tag == tag or old.change == Change.GONE:
        return {}
    headers = {}
    if old.etag:
        headers["If-None-Match"] = old.etag
    if old.last_modified:
        headers["If-Modified-Since"] = old.last_modified
    return headers


def fetched(
    old: PageState | None, tag: str, fingerprint: str, validators: Mapping[str, str], now: int, records_all: bool
) -> Outcome:
    """A page fetched in full (2xx): new, changed or unchanged by its fingerprint."""
    if old is not None and old.tag == tag:
        return _again(old, now, records_all)
    if old is None or old.change == Change.GONE:
        change, changed_at = Change.NEW, now
    elif old.fingerprint == fingerprint:
        change, changed_at = Change.UNCHANGED, old.changed_at
    else:
        change, changed_at = Change.CHANGED, now
    state = PageState(
        tag=tag,
        change=change,
        fingerprint=fingerprint,
        etag=validators.get("etag", ""),
        last_modified=validators.get("last-modified", ""),
        fetched_at=now,
        changed_at=changed_at,
    )
    return Outcome(change, state, writes_record(change, records_all))


def not_modified(old: PageState, tag: str, validators: Mapping[str, str], now: int, records_all: bool) -> Outcome:
    """A 304 to the validators sent: unchanged, and nothing was fetched to tell otherwise. A 304 may carry
    newer validators (RFC 9111 4.3.4): they replace the stored ones."""
    state = PageState(
        tag=tag,
        change=Change.UNCHANGED,
        fingerprint=old.fingerprint,
        etag=validators.get("etag") or old.etag,
        last_modified=validators.get("last-modified") or old.last_modified,
        fetched_at=now,
        changed_at=old.changed_at,
        fields=old.fields,
    )
    return Outcome(Change.UNCHANGED, state, records_all)


def gone(old: PageState | None, tag: str, status: int | None, now: int) -> Outcome | None:
    """A 404 or 410 for a page the lineage had seen: gone (a record, not a failure). None for any other
    failure, or a page never seen (which fails as in any job)."""
    if old is None or status not in GONE_STATUSES:
        return None
    if old.tag == tag:
        return _again(old, now, True)
    state = PageState(tag=tag, change=Change.GONE, fetched_at=now, changed_at=now)
    return Outcome(Change.GONE, state, True)


def unlinked(old: PageState, tag: str, now: int) -> Outcome | None:
    """A page the lineage knew that this run (``tag``) never reached, once the run has ended with its whole
    scope done (the job's sweep): gone, now, with a record. None for a page this run handled, one without its
    URL kept, or one already reported gone by an earlier run (the sweep forgets those: :func:`forgotten`)."""
    if old.tag == tag or old.change == Change.GONE or not old.url:
        return None
    state = old._replace(tag=tag, change=Change.GONE, fingerprint="", changed_at=now)
    return Outcome(Change.GONE, state, True)


def forgotten(old: PageState, tag: str) -> bool:
    """A page an earlier run reported gone and this run did not reach again: its state goes (should it come
    back, it is new), so pages that are gone for good do not hold memory until the lineage expires."""
    return old.tag != tag and old.change == Change.GONE


def writes_record(change: Change, records_all: bool) -> bool:
    return records_all or change != Change.UNCHANGED


def _again(old: PageState, now: int, records_all: bool) -> Outcome:
    return Outcome(old.change, old._replace(fetched_at=now), writes_record(old.change, records_all))
