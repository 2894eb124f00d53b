"""Refresh jobs' page state (spec.refresh) beside the queue: per lineage, one hash of URL -> what the last run
learnt (``<prefix>:ps:<namespace>/<lineage>``), and per job the count of pages by label in its job hash
(``rn``/``rc``/``ru``/``rg``: new, changed, unchanged, gone; ``rs``: not revisited), which the operator shows as
status.changes.

Values are opaque here (trawl.refresh.state encodes them). A lineage outlives its jobs: its hash expires when
no run wrote to it for its retention, never with a job. On a sharded pool it lives on the home shard, with
the results and the notes. The save and the counts are one script, after the page's record is stored and
before its ack (trawl.worker.finish), so a page is counted once however often its task is redelivered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

from redis.asyncio import Redis

from trawl.redisconn.scripts import read_script

from .keys import Keys

# By label; notRevisited: a page adaptive revisits left alone (labelled unchanged on its record, counted apart).
COUNTERS = {"new": "rn", "changed": "rc", "unchanged": "ru", "gone": "rg", "notRevisited": "rs"}


class PageSave(NamedTuple):
    """One page's state to save: its hash field, the encoded state, and its label (a key of COUNTERS)."""

    field: str
    value: str
    change: str


class PageStates:
    def __init__(self, redis: Redis, keys: Keys) -> None:
        self.redis = redis
        self.keys = keys
        self._save = redis.register_script(read_script("trawl.queue", "page_state_save"))
        self._forget = redis.register_script(read_script("trawl.queue", "page_state_forget"))

    async def get(self, lineage: str, field: str) -> bytes | str | None:
        value: bytes | str | None = await self.redis.hget(self.keys.page_state(lineage), field)  # type: ignore[misc]
        return value

    async def save(
        self, job_id: str, lineage: str, tag_prefix: str, pages: Sequence[PageSave], retain_seconds: int
    ) -> int:
        """Save the pages' state and count their labels on the job (once per page and job)."""
        if not pages:
            return 0
        args: list[str | int] = [max(1, int(retain_seconds)), tag_prefix]
        for page in pages:
            args += [page.field, page.value, COUNTERS[page.change]]
        keys = [self.keys.job(job_id), self.keys.page_state(lineage)]
        return int(await self._save(keys=keys, args=args))

    async def scan(self, lineage: str, cursor: str, count: int) -> tuple[str, dict[str, str]]:
        """One HSCAN step over the lineage's pages: the next cursor ("0" at the end) and field -> value."""
        nxt, found = await self.redis.hscan(self.keys.page_state(lineage), cursor=int(cursor), count=count)  # type: ignore[misc]
        items = {_text(k): _text(v) for k, v in found.items()}
        return str(nxt), items

    async def forget(self, lineage: str, pages: Mapping[str, str]) -> int:
        """Drop these pages' states (field -> the value read), each only if it still holds that value."""
        if not pages:
            return 0
        args = [x for field_value in pages.items() for x in field_value]
        return int(await self._forget(keys=[self.keys.page_state(lineage)], args=args))


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value
