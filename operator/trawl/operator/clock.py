"""The operator's notion of now, with an optional offset for tests of time-based behaviour.

Setting TRAWL_CLOCK_OFFSET_FILE makes the operator add the number of seconds written in that file
to the wall clock, so a test can move a CronScrapeJob across schedule times without waiting.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta


def now() -> datetime:
    current = datetime.now(UTC).replace(microsecond=0)
    path = os.environ.get("TRAWL_CLOCK_OFFSET_FILE")
    if path:
        try:
            with open(path) as fh:
                current += timedelta(seconds=float(fh.read().strip() or 0))
        except (OSError, ValueError):
            pass
    return current
