"""Sessions shared by a pool's workers: an identity (cookie jar, user agent, proxy) kept across a job's
requests, in the pool's Redis next to the job's keys (same hash tag: one Redis Cluster slot).

Keys (``J`` is the job's hash key, trawl.queue.keys)::

    J:ss            hash  the job's sessions (scope Job): <id> -> JSON {"ua", "proxy", "created"},
                          <id>:n -> requests made with it
    J:sc            hash  their cookie jars: <id> -> JSON list of cookies (read for the chosen session only)
    J:ss:<domain>, J:sc:<domain>   the same for one domain (scope Domain)
    J:ssd           zset  domain -> last use, the domains with sessions (scope Domain): at most MAX_DOMAINS,
                          the least recently used dropped first
    J:pc            hash  "<proxy host:port>|<domain>" -> until: a proxy cooling down for a domain after a block

Each key expires (a session's maximum age, a cool-down) so a job's sessions leave with it. A session holds
the proxy's host:port, never its credentials: those stay in the pool's Secret. What a session holds is
bounded (trawl.worker.cookies: cookies and bytes; ``pool_size`` sessions per scope)."""

from __future__ import annotations

import json
import logging
import random
import secrets
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from redis.asyncio import Redis

from trawl.api.plain import SessionScope
from trawl.redisconn.replies import text

from .cookies import SessionJar

if TYPE_CHECKING:  # a pydantic model: only jobs with spec.session build one (jobsettings)
    from trawl.api.sessions import SessionSpec

log = logging.getLogger("trawl.worker.sessions")

MAX_DOMAINS = 1000  # domains with sessions per job (scope Domain)
MAX_COOLING = 4096  # (proxy, domain) cool-downs remembered per job
COOL_SECONDS = 300.0  # a proxy blocked on a domain is not given to that domain's new sessions this long
EXPIRY_MARGIN = 60


@dataclass(slots=True)
class Session:
    id: str
    key: str  # the Redis hash that holds it
    jars: str  # the Redis hash that holds its cookie jar
    domain: str  # the domain this use is for
    user_agent: str
    proxy: str  # host:port of its proxy, "" for none (yet)
    created: float
    uses: int
    jar: SessionJar = field(default_factory=SessionJar)
    new: bool = False

    def __post_init__(self) -> None:
        # browser pages share a context only within one session (trawl.worker.browser.contexts)
        self.jar.owner = f"{self.key}/{self.id}"

    def meta_json(self) -> str:
        return json.dumps({"ua": self.user_agent, "proxy": self.proxy, "created": self.created}, separators=(",", ":"))

    def jar_json(self) -> str:
        return json.dumps(self.jar.dump(), separators=(",", ":"))


def live(doc: dict[str, Any], uses: int, spec: SessionSpec, now: float) -> bool:
    """Whether a stored session may still be used: younger than maxAgeSeconds, used fewer than maxUses."""
    return now - float(doc.get("created", 0)) < spec.max_age_seconds and uses < spec.max_uses


def choose(candidates: Sequence[str], pool_size: int, rng: random.Random) -> str | None:
    """The session to use, or None to make a new one: new while the rotation has room, else one at random."""
    if len(candidates) < pool_size:
        return None
    return rng.choice(list(candidates))


class SessionStore:
    """Reads and writes the sessions of jobs; ``job_key`` maps a job id to its hash key."""

    def __init__(self, redis: Redis, job_key: Callable[[str], Any], rng: random.Random | None = None) -> None:
        self.redis = redis
        self.job_key = job_key
        self.rng = rng or random.Random()

    def _keys(self, job_id: str, spec: SessionSpec, domain: str) -> tuple[str, str]:
        """(the sessions' hash, their jars' hash) of the scope ``domain`` is in."""
        tail = f":{domain}" if spec.scope == SessionScope.DOMAIN else ""
        return f"{self.job_key(job_id)}:ss{tail}", f"{self.job_key(job_id)}:sc{tail}"

    async def acquire(self, job_id: str, spec: SessionSpec, domain: str, user_agent: str) -> Session:
        """A session for one request to ``domain``: a live one of the rotation, or a new one; its use counted."""
        key, jars = self._keys(job_id, spec, domain)
        now = time.time()
        raw = await self.redis.hgetall(key)  # type: ignore[misc]
        fields = {text(k): text(v) for k, v in raw.items()}
        docs: dict[str, dict[str, Any]] = {}
        stale: list[str] = []
        for sid, value in fields.items():
            if sid.endswith(":n"):  # a use counted after its session was retired (a race) is dropped
                if sid[:-2] not in fields:
                    stale += [sid[:-2], sid]
                continue
            doc = _load(value)
            if doc is not None and live(doc, int(fields.get(f"{sid}:n", 0)), spec, now):
                docs[sid] = doc
            else:
                stale += [sid, f"{sid}:n"]
        # Two workers may both add one at once: the oldest beyond the rotation's size are dropped.
        for sid in sorted(docs, key=lambda s: float(docs[s].get("created", 0)))[: max(0, len(docs) - spec.pool_size)]:
            stale += [sid, f"{sid}:n"]
            docs.pop(sid)
        if stale:
            await self.redis.hdel(key, *stale)  # type: ignore[misc]
            await self.redis.hdel(jars, *stale[::2])  # type: ignore[misc]
        chosen = choose(sorted(docs), spec.pool_size, self.rng)
        if chosen is None:
            # Its own user agent, kept for its life: an identity that changes browsers mid-visit stands out.
            agent = self.rng.choice(spec.user_agents) if spec.user_agents else user_agent
            session = Session(secrets.token_hex(6), key, jars, domain, agent, "", now, 0, new=True)
            await self._write(session, job_id, spec)
            session.uses = int(await self.redis.hincrby(key, f"{session.id}:n", 1))  # type: ignore[misc]
            return session
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hget(jars, chosen)
            pipe.hincrby(key, f"{chosen}:n", 1)
            stored, uses = await pipe.execute()
        cookies = _load_list(text(stored)) if stored is not None else []
        doc = docs[chosen]
        return Session(
            chosen, key, jars, domain, str(doc.get("ua") or user_agent), str(doc.get("proxy") or ""),
            float(doc.get("created", now)), int(uses), SessionJar(cookies),
        )  # fmt: skip

    async def save(self, session: Session, job_id: str, spec: SessionSpec) -> None:
        """Write the session back when something changed (its cookies, its proxy). Another worker's write to
        the same session between this one's read and write is overwritten: the last response wins, as in a
        browser whose tabs race."""
        if session.new or session.jar.changed:
            await self._write(session, job_id, spec)

    async def _write(self, session: Session, job_id: str, spec: SessionSpec) -> None:
        session.new = False
        session.jar.changed = False
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(session.key, session.id, session.meta_json())
            pipe.hset(session.jars, session.id, session.jar_json())
            pipe.expire(session.key, spec.max_age_seconds + EXPIRY_MARGIN)
            pipe.expire(session.jars, spec.max_age_seconds + EXPIRY_MARGIN)
            if spec.scope == SessionScope.DOMAIN:
                domains = f"{self.job_key(job_id)}:ssd"
                pipe.zadd(domains, {session.domain: time.time()})
                pipe.expire(domains, spec.max_age_seconds + EXPIRY_MARGIN)
                pipe.zrange(domains, 0, -MAX_DOMAINS - 1)
            replies = await pipe.execute()
        if spec.scope == SessionScope.DOMAIN and replies[-1]:
            dropped = [text(d) for d in replies[-1]]
            base = str(self.job_key(job_id))
            await self.redis.delete(*(f"{base}:{kind}:{d}" for d in dropped for kind in ("ss", "sc")))
            await self.redis.zrem(f"{self.job_key(job_id)}:ssd", *dropped)

    async def retire(self, session: Session) -> None:
        """The site blocked this identity: no request uses it again."""
        await self.redis.hdel(session.key, session.id, f"{session.id}:n")  # type: ignore[misc]
        await self.redis.hdel(session.jars, session.id)  # type: ignore[misc]

    async def cool(self, job_id: str, proxy: str, domain: str, seconds: float = COOL_SECONDS) -> None:
        """``proxy`` (host:port) was blocked on ``domain``: new sessions there avoid it for ``seconds``."""
        key = f"{self.job_key(job_id)}:pc"
        now = time.time()
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(key, f"{proxy}|{domain}", repr(now + seconds))
            pipe.expire(key, int(seconds) + EXPIRY_MARGIN)
            pipe.hlen(key)
            replies = await pipe.execute()
        if int(replies[-1]) > MAX_COOLING:  # drop the expired ones; a flood of domains cannot grow it for ever
            raw = await self.redis.hgetall(key)  # type: ignore[misc]
            old = [k for k, v in raw.items() if float(text(v)) <= now] or list(raw)[: len(raw) - MAX_COOLING]
            if old:
                await self.redis.hdel(key, *old)  # type: ignore[misc]

    async def cooling(self, job_id: str, domain: str, proxies: Sequence[str]) -> set[str]:
        """Which of ``proxies`` (host:port) are cooling down for ``domain`` now."""
        if not proxies:
            return set()
        key = f"{self.job_key(job_id)}:pc"
        until = await self.redis.hmget(key, [f"{p}|{domain}" for p in proxies])  # type: ignore[misc]
        now = time.time()
        return {p for p, u in zip(proxies, until, strict=True) if u is not None and float(text(u)) > now}


def _load(value: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(value)
    except ValueError:
        return None
    return doc if isinstance(doc, dict) else None


def _load_list(value: str) -> list[dict[str, Any]]:
    try:
        docs = json.loads(value)
    except ValueError:
        return []
    return [d for d in docs if isinstance(d, dict)] if isinstance(docs, list) else []
