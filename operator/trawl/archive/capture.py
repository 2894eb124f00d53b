"""What the worker fetched for one task, as the archive keeps it (no WARC library: the worker imports this
at start, the writer only once a job captures)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple


class Capture(NamedTuple):
    """What the worker fetched for one task: enough to archive it and to extract from it again."""

    url: str  # the task's URL
    final_url: str  # after redirects: the response's target URI
    status: int
    headers: Mapping[str, str]
    body: bytes
    fetched_at: float  # seconds since the epoch
    depth: int = 0
    user_agent: str = ""
