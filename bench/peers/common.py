"""What every peer's no-op task does: mark its own completion in Redis, so the count is exact."""

from __future__ import annotations

import os

import redis

URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
DONE_KEY = "bench:done"
_client: redis.Redis | None = None


def mark_done() -> None:
    global _client
    if _client is None:
        _client = redis.Redis.from_url(URL)
    _client.incr(DONE_KEY)
