"""Fingerprints of what a page says: equal exactly when the content that matters is equal.

A record's fingerprint is over its extracted fields as canonical JSON (sorted keys, no spaces), so the same
page gives the same fingerprint in any worker, any process and after any restart; text is whitespace-folded
first, so a re-indented page is not a change.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

DIGEST_BYTES = 8  # 64 bits: a false "unchanged" needs a collision between two versions of one page


def of_bytes(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).hexdigest()


def of_record(fields: Mapping[str, Any]) -> str:
    canonical = json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return of_bytes(canonical.encode())


MAX_FIELDS = 64  # fields whose digests a page state keeps (spec.refresh.changedFields); beyond: not named
FIELD_DIGEST_BYTES = 4  # per field: a missed change needs a collision between two values of one field


def field_digests(fields: Mapping[str, Any]) -> str:
    """A digest per (name, value) of the first MAX_FIELDS fields by name, comma-separated (at most 575
    characters): what a later run compares to name the fields that changed."""
    names = sorted(fields)[:MAX_FIELDS]
    return ",".join(sorted(_field_digest(name, fields[name]) for name in names))


def changed_names(fields: Mapping[str, Any], old_digests: str) -> list[str]:
    """The fields (of the first MAX_FIELDS by name) whose name and value the last run did not have."""
    old = set(old_digests.split(",")) if old_digests else set()
    return [name for name in sorted(fields)[:MAX_FIELDS] if _field_digest(name, fields[name]) not in old]


def _field_digest(name: str, value: Any) -> str:
    canonical = json.dumps([name, value], sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.blake2b(canonical.encode(), digest_size=FIELD_DIGEST_BYTES).hexdigest()


def of_text(text: str) -> str:
    return of_bytes(" ".join(text.split()).encode())
