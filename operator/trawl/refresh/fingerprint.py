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


def of_text(text: str) -> str:
    return of_bytes(" ".join(text.split()).encode())
