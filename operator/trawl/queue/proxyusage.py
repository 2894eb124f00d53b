"""Each proxy's use and health, counted by the workers for the pool's status (``status.proxies``).

A worker counts its proxied requests by group, proxy (host:port, never credentials) and outcome, beside the
metric ``trawl_worker_proxy_requests_total``, and adds them about once a second to the pool's hash
``P:px`` (fields ``<group>|<host:port>|<ok|fail|blk>`` -> count, ``<group>|<host:port>|last`` -> the latest
outcome and its time). The operator reads the hash into the pool's status (:func:`summary`). The hash holds
only what the pool's Secret lists (host:port), so it is bounded by the pool's author."""

from __future__ import annotations

import json
import time
from collections import Counter as Tally
from collections.abc import Mapping
from typing import Any

from prometheus_client import Counter
from redis.asyncio import Redis

from trawl.redisconn.replies import text

OK, FAILED, BLOCKED = "ok", "fail", "blk"
MAX_PROXIES_ON_STATUS = 50


def bucket(outcome: str) -> str:
    """The status's three figures: ok, blocked, and every failure (the proxy's or the site's) as failed."""
    return OK if outcome == "ok" else BLOCKED if outcome == "blocked" else FAILED


class ProxyUsage:
    """Counts since the last flush, and the latest outcome of each proxy."""

    def __init__(self, metric: Counter) -> None:
        self.metric = metric
        self._counts: Tally[tuple[str, str, str]] = Tally()
        self._last: dict[tuple[str, str], tuple[str, float]] = {}

    def count(self, group: str, proxy: str, outcome: str) -> None:
        self.metric.labels(group, proxy, outcome).inc()
        if proxy:  # "busy" names no proxy
            self._counts[(group, proxy, bucket(outcome))] += 1
            self._last[(group, proxy)] = (outcome, time.time())

    async def flush(self, redis: Redis, key: str) -> None:
        """Add the counts to the pool's hash; kept for the next flush if Redis fails."""
        if not self._counts:
            return
        counts, last = self._counts, self._last
        self._counts, self._last = Tally(), {}
        try:
            async with redis.pipeline(transaction=False) as pipe:
                for (group, proxy, kind), n in counts.items():
                    pipe.hincrby(key, f"{group}|{proxy}|{kind}", n)
                for (group, proxy), (outcome, when) in last.items():
                    pipe.hset(key, f"{group}|{proxy}|last", json.dumps({"outcome": outcome, "time": round(when, 3)}))
                await pipe.execute()
        except Exception:
            self._counts.update(counts)
            self._last = {**last, **self._last}
            raise


def summary(raw: Mapping[Any, Any]) -> list[dict[str, Any]]:
    """The pool status's ``proxies`` from the hash: per proxy its requests, ok, failed, blocked, the latest
    outcome and its health (Failing or Blocked when the latest request was so, else Healthy)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for field, value in raw.items():
        parts = text(field).rsplit("|", 2)
        if len(parts) != 3:
            continue
        group, proxy, kind = parts
        row = rows.setdefault((group, proxy), {"group": group, "proxy": proxy, OK: 0, FAILED: 0, BLOCKED: 0})
        if kind == "last":
            try:
                doc = json.loads(text(value))
                row["last"] = (str(doc["outcome"]), float(doc["time"]))
            except (ValueError, KeyError, TypeError):
                continue
        elif kind in (OK, FAILED, BLOCKED):
            row[kind] = int(text(value))
    out = []
    for row in rows.values():
        outcome, when = row.pop("last", ("", 0.0))
        health = "Blocked" if outcome == "blocked" else "Healthy" if outcome in ("ok", "") else "Failing"
        out.append(
            {
                "group": row["group"][:63],
                "proxy": row["proxy"][:261],
                "requests": row[OK] + row[FAILED] + row[BLOCKED],
                "ok": row[OK],
                "failed": row[FAILED],
                "blocked": row[BLOCKED],
                "health": health,
                "lastOutcome": outcome[:64],
                "lastTime": _iso(when) if when else None,
            }
        )
    out.sort(key=lambda r: (r["health"] == "Healthy", r["group"], r["proxy"]))
    return out[:MAX_PROXIES_ON_STATUS]


def _iso(when: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when))
