"""What workers tell the operator about a job besides the queue's counters: skipped URLs, a failing sink.

Kept beside the queue's keys rather than in them (the queue's scripts own those):

- ``J:sk`` (hash, task id -> JSON ``{"url", "reason", "time"}``): URLs a crawl discovered that were not
  fetched because robots.txt disallows them. A skip is not a failure: the task is acked, and the
  operator reports ``counts.skipped`` and a sample (``status.skipped``). Written with HSETNX, so a
  redelivered task is counted once; the key follows the job hash's expiry and is deleted on cancel.
- fields ``se`` (message) and ``ses`` (since, unix seconds) of the job hash: the job's sink is failing
  right now. Set by a worker whose write failed, cleared by the next successful write; the operator
  shows the job ``Stalled/SinkFailing`` with the message while they are set.

- field ``ftr`` of the job hash: records written with an output format cut to its bounds
  (``extract.formats``; the record's ``truncated`` list), counted by the worker that built them; the
  operator reports ``counts.truncated``. A page retried after a lost acknowledgement may count twice.

- ``J:cb`` (hash, domain -> JSON ``{"reason", "until"}``): domains whose circuit breaker held back
  this job's tasks (:mod:`trawl.worker.breaker`); the operator lists those still open on the status.

- field ``blk`` of the job hash and ``J:bk`` (hash, domain -> count, at most BLOCKED_DOMAINS domains):
  responses the job's ``session.block`` rules marked blocked (:mod:`trawl.worker.identity`); the operator
  reports ``counts.blocked`` and the most blocked domains (``status.blockedDomains``).

The scripts do nothing for a job whose hash is gone (cancelled or expired), so they never re-create it.
"""

from __future__ import annotations

import json
import time
from typing import Any, NamedTuple

from redis.asyncio import Redis

from trawl.redisconn.replies import text
from trawl.redisconn.scripts import read_script

from .keys import blocked_key, skipped_key, throttled_key

SKIP_SAMPLE = 10
BLOCKED_DOMAINS = 1000  # domains whose blocks a job counts apart


class Skipped(NamedTuple):
    url: str
    reason: str
    time: float


class Throttled(NamedTuple):
    domain: str
    reason: str
    until: float  # unix seconds


class SinkTrouble(NamedTuple):
    message: str
    since: float


class JobNotes:
    """Writes (worker) and reads (operator) of the notes above; ``job_key`` maps a job id to its hash."""

    def __init__(self, redis: Redis, job_key: Any) -> None:
        self.redis = redis
        self.job_key = job_key
        self._skip = redis.register_script(read_script("trawl.queue", "note_skip"))
        self._sink_error = redis.register_script(read_script("trawl.queue", "note_sink_error"))
        self._throttled = redis.register_script(read_script("trawl.queue", "note_throttled"))
        self._truncated = redis.register_script(read_script("trawl.queue", "note_truncated"))
        self._blocked = redis.register_script(read_script("trawl.queue", "note_blocked"))
        self._throttled_written: dict[tuple[str, str], float] = {}  # (job, domain) -> until last written

    async def skip(self, job_id: str, task_id: str, url: str, reason: str) -> bool:
        jk = str(self.job_key(job_id))
        doc = json.dumps({"url": url, "reason": reason, "time": round(time.time(), 3)}, separators=(",", ":"))
        return int(await self._skip(keys=[jk, skipped_key(jk)], args=[task_id, doc])) == 1

    async def truncated(self, job_id: str) -> int:
        """A record of the job had an output format cut to its bounds; returns the job's count so far."""
        return int(await self._truncated(keys=[str(self.job_key(job_id))]))

    async def archived(self, job_id: str, counts: dict[str, int]) -> None:
        """Add a worker's WARC counts (records, truncated, dropped, lost: trawl.worker.archiving; read, skipped:
        trawl.worker.reextract) to the job's."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for name, value in counts.items():
                pipe.hincrby(str(self.job_key(job_id)), f"archive_{name}", value)
            await pipe.execute()

    async def archive_counts(self, job_id: str) -> dict[str, int]:
        raw = await self.redis.hmget(str(self.job_key(job_id)), ARCHIVE_FIELDS)  # type: ignore[misc]
        return _archive_counts(raw)

    async def truncated_count(self, job_id: str) -> int:
        raw = await self.redis.hget(str(self.job_key(job_id)), "ftr")  # type: ignore[misc]
        return int(raw or 0)

    async def blocked(self, job_id: str, domain: str) -> int:
        """A response of the job on ``domain`` was blocked; returns the job's count so far."""
        jk = str(self.job_key(job_id))
        return int(await self._blocked(keys=[jk, blocked_key(jk)], args=[domain, BLOCKED_DOMAINS]))

    async def blocked_counts(self, job_id: str, limit: int = 10) -> tuple[int, list[tuple[str, int]]]:
        """The job's blocked responses, and its ``limit`` most blocked domains with their counts."""
        jk = str(self.job_key(job_id))
        total = await self.redis.hget(jk, "blk")  # type: ignore[misc]
        if not total:
            return 0, []
        return _blocked_counts(total, await self.redis.hgetall(blocked_key(jk)), limit)  # type: ignore[misc]

    async def sink_failing(self, job_id: str, message: str) -> None:
        await self._sink_error(keys=[str(self.job_key(job_id))], args=[message[:1024], repr(time.time())])

    async def throttled(self, job_id: str, domain: str, reason: str, until: float) -> None:
        """The domain's breaker held back a task of the job until ``until``; written once per opening."""
        if self._throttled_written.get((job_id, domain)) == until:
            return
        jk = str(self.job_key(job_id))
        doc = json.dumps({"reason": reason[:512], "until": round(until, 3)}, separators=(",", ":"))
        await self._throttled(keys=[jk, throttled_key(jk)], args=[domain, doc])
        self._throttled_written[(job_id, domain)] = until
        if len(self._throttled_written) > 10_000:
            self._throttled_written.pop(next(iter(self._throttled_written)))

    async def throttled_domains(self, job_id: str, now: float | None = None, limit: int = 10) -> list[Throttled]:
        """Domains whose breaker is holding back the job's tasks now (until in the future), latest first."""
        raw = await self.redis.hgetall(throttled_key(str(self.job_key(job_id))))  # type: ignore[misc]
        return _throttled(raw, time.time() if now is None else now, limit)

    async def sink_ok(self, job_id: str) -> None:
        await self.redis.hdel(str(self.job_key(job_id)), "se", "ses")  # type: ignore[misc]

    async def skipped(self, job_id: str, sample: int = SKIP_SAMPLE) -> tuple[int, list[Skipped]]:
        """How many URLs were skipped, and up to ``sample`` of them."""
        key = skipped_key(str(self.job_key(job_id)))
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hlen(key)
            pipe.hscan(key, 0, count=sample)
            count, (_cursor, found) = await pipe.execute()
        return int(count), _skipped_sample(found, sample)

    async def sink_trouble(self, job_id: str) -> SinkTrouble | None:
        msg, since = await self.redis.hmget(str(self.job_key(job_id)), ["se", "ses"])  # type: ignore[misc]
        return _sink_trouble(msg, since)

    async def read(self, job_id: str, *, running: bool, blocked: bool, archive: bool) -> NotesRead:
        """Every note the operator's pass reads, in one round trip (a pipeline, no transaction: each note is
        read as it stands, as the separate reads did). ``running``: the breakers and the sink's trouble too
        (they matter only while the job runs); ``blocked``/``archive``: the job counts those."""
        jk = str(self.job_key(job_id))
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hlen(skipped_key(jk))
            pipe.hscan(skipped_key(jk), 0, count=SKIP_SAMPLE)
            pipe.hmget(jk, ["ftr", "blk", "se", "ses", *ARCHIVE_FIELDS])
            if running:
                pipe.hgetall(throttled_key(jk))
            if blocked:
                pipe.hgetall(blocked_key(jk))
            found = await pipe.execute()
        skipped, (_cursor, sample), fields = found[0], found[1], found[2]
        truncated, total_blocked, sink_message, sink_since = fields[:4]
        rest = found[3:]
        throttled = _throttled(rest.pop(0), time.time(), 10) if running else []
        blocked_domains = rest.pop(0) if blocked else {}
        return NotesRead(
            skipped=int(skipped),
            skipped_sample=_skipped_sample(sample, SKIP_SAMPLE),
            throttled=throttled,
            sink_trouble=_sink_trouble(sink_message, sink_since) if running else None,
            truncated=int(truncated or 0),
            blocked=_blocked_counts(total_blocked, blocked_domains, 10) if blocked and total_blocked else (0, []),
            archive=_archive_counts(fields[4:]) if archive else None,
        )

    async def forget(self, job_id: str) -> None:
        """Delete the note hashes (the job was cancelled; the sink fields go with the job hash)."""
        jk = str(self.job_key(job_id))
        await self.redis.delete(skipped_key(jk), throttled_key(jk), blocked_key(jk))


class NotesRead(NamedTuple):
    """The notes of one job as one pass reads them (JobNotes.read)."""

    skipped: int
    skipped_sample: list[Skipped]
    throttled: list[Throttled]
    sink_trouble: SinkTrouble | None
    truncated: int
    blocked: tuple[int, list[tuple[str, int]]]
    archive: dict[str, int] | None


ARCHIVE_NAMES = ("records", "truncated", "dropped", "lost", "read", "skipped")
ARCHIVE_FIELDS = [f"archive_{n}" for n in ARCHIVE_NAMES]


def _archive_counts(raw: list[Any]) -> dict[str, int]:
    # The capture counts always; a re-extraction's (read, skipped) only when the job had one.
    return {n: int(v or 0) for n, v in zip(ARCHIVE_NAMES, raw, strict=True) if v is not None or n in ARCHIVE_NAMES[:4]}


def _blocked_counts(total: Any, raw: dict[Any, Any], limit: int) -> tuple[int, list[tuple[str, int]]]:
    domains = sorted(((text(d), int(n)) for d, n in raw.items()), key=lambda dn: (-dn[1], dn[0]))
    return int(total), domains[:limit]


def _throttled(raw: dict[Any, Any], now: float, limit: int) -> list[Throttled]:
    out = []
    for domain, value in raw.items():
        doc = json.loads(value)
        if float(doc["until"]) > now:
            out.append(Throttled(text(domain), str(doc["reason"]), float(doc["until"])))
    out.sort(key=lambda t: -t.until)
    return out[:limit]


def _skipped_sample(found: dict[Any, Any], sample: int) -> list[Skipped]:
    out: list[Skipped] = []
    for raw in list(found.values())[:sample]:
        doc = json.loads(raw)
        out.append(Skipped(str(doc["url"]), str(doc["reason"]), float(doc["time"])))
    out.sort(key=lambda s: s.time)
    return out


def _sink_trouble(msg: Any, since: Any) -> SinkTrouble | None:
    if msg is None:
        return None
    return SinkTrouble(text(msg), float(since) if since is not None else time.time())
