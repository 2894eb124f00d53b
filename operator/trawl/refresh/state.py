"""One URL's page state: what a lineage's last run learnt of it, as stored in the pool's Redis.

Stored per lineage in one hash (``<pool prefix>:ps:<namespace>/<lineage>``), field :func:`url_field` (24
characters), value :func:`encode` (newline-separated: no header value may hold a newline). What one URL costs
is bounded: validators longer than the caps below are not kept (the page is then fetched in full, as if the
server sent none), nor is a URL longer than MAX_URL (such a page cannot be reported gone when a run no longer
reaches it), so a value is at most MAX_VALUE bytes and usually about 100 plus the URL (see
docs/architecture.md for the measured cost per URL in Redis).
"""

from __future__ import annotations

import hashlib
from enum import StrEnum
from typing import NamedTuple

FORMAT = "1"
MAX_ETAG = 128  # characters; RFC 9110 sets none, real servers send 10 to 70
MAX_LAST_MODIFIED = 40  # an IMF-fixdate is 29
MAX_URL = 2048  # characters; the URL is kept so that a run that no longer reaches the page can report it gone
MAX_FIELDS_TEXT = 64 * 9 - 1  # 64 field digests of 8 hex characters, comma-separated (changedFields only)
# The longest value: format, tag, the longest label, fingerprint, both validators, two 13-digit times, the URL,
# the field digests, 9 newlines.
MAX_VALUE = 1 + 8 + 9 + 16 + MAX_ETAG + MAX_LAST_MODIFIED + 13 + 13 + MAX_URL + MAX_FIELDS_TEXT + 9


class Change(StrEnum):
    """What a page is against the lineage's last run."""

    NEW = "new"
    CHANGED = "changed"
    UNCHANGED = "unchanged"
    GONE = "gone"


class PageState(NamedTuple):
    """What a run learnt of one URL. ``tag`` names the job that wrote it (:func:`job_tag`): a task that finds
    its own job's tag was redelivered after its state was saved, so its label is the one already decided."""

    tag: str
    change: Change
    fingerprint: str = ""  # "" for a gone page
    etag: str = ""
    last_modified: str = ""
    fetched_at: int = 0  # unix seconds
    changed_at: int = 0  # when the fingerprint last differed (or the page was first seen, or went)
    url: str = ""  # the page's URL ("" when longer than MAX_URL, or saved before URLs were kept)
    fields: str = ""  # digests of the extracted fields (spec.refresh.changedFields), else ""


def job_tag(job_id: str) -> str:
    """A short name for a job in page state (8 hex characters): only equality with the same job matters."""
    return hashlib.blake2b(job_id.encode(), digest_size=4).hexdigest()


def url_field(url: str) -> str:
    """The hash field of a URL: 96 bits of its digest (no collision expected below 10^14 URLs per lineage)."""
    return hashlib.blake2b(url.encode(), digest_size=12).hexdigest()


def encode(state: PageState) -> str:
    etag = state.etag if len(state.etag) <= MAX_ETAG else ""
    last_modified = state.last_modified if len(state.last_modified) <= MAX_LAST_MODIFIED else ""
    parts = (
        FORMAT,
        state.tag,
        state.change.value,
        state.fingerprint,
        _one_line(etag),
        _one_line(last_modified),
        str(state.fetched_at),
        str(state.changed_at),
        _one_line(state.url) if len(state.url) <= MAX_URL else "",
        state.fields if len(state.fields) <= MAX_FIELDS_TEXT else "",
    )
    return "\n".join(parts)


def encoded_prefix(tag: str) -> str:
    """How every value a job with this tag wrote begins (the queue's save script compares it)."""
    return f"{FORMAT}\n{tag}\n"


def decode(raw: str | bytes | None) -> PageState | None:
    """The state in a stored value; None for none, or for a value this version cannot read (the page then
    counts as new, which costs one full fetch, never a wrong 'unchanged')."""
    if raw is None:
        return None
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
    parts = text.split("\n")
    parts += [""] * (10 - len(parts)) if len(parts) in (8, 9) else []  # saved before URLs, or field digests
    if len(parts) != 10 or parts[0] != FORMAT:
        return None
    try:
        return PageState(
            tag=parts[1],
            change=Change(parts[2]),
            fingerprint=parts[3],
            etag=parts[4],
            last_modified=parts[5],
            fetched_at=int(parts[6]),
            changed_at=int(parts[7]),
            url=parts[8],
            fields=parts[9],
        )
    except ValueError:
        return None


def _one_line(value: str) -> str:
    return "" if "\n" in value or "\r" in value else value
