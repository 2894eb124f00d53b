"""WARC-Date values to epoch seconds."""

from __future__ import annotations

from datetime import UTC, datetime


def parse_warc_date(value: str) -> float:
    """``2026-11-28T09:52:20.123456Z`` or ``2026-11-28T09:52:20Z`` -> seconds since the epoch."""
    text = value.strip().rstrip("Z")
    fmt = "%Y-%m-%dT%H:%M:%S.%f" if "." in text else "%Y-%m-%dT%H:%M:%S"
    return datetime.strptime(text, fmt).replace(tzinfo=UTC).timestamp()
