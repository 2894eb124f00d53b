"""The pure decisions of the results API: what RBAC a request needs, cursors, short caches, rate limits."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Generic, TypeVar
from urllib.parse import unquote

from trawl.api.naming import GROUP

K = TypeVar("K")
V = TypeVar("V")

RESOURCE = "scrapejobs"
# Subresources that exist for RBAC only (the CRD serves neither): a Role may name any resource/subresource.
RESULTS = "results"
DEAD_LETTERS = "deadletters"

DEFAULT_LIMIT = 1000
MAX_LIMIT = 10_000
_STREAM_ID = re.compile(r"^[0-9]{1,20}-[0-9]{1,20}$")


class Action(Enum):
    """What a request does, and the RBAC it needs (verb, subresource of scrapejobs in the job's namespace)."""

    READ_RESULTS = ("get", RESULTS)
    READ_DEAD_LETTERS = ("get", DEAD_LETTERS)
    RETRY_DEAD_LETTERS = ("update", DEAD_LETTERS)

    @property
    def verb(self) -> str:
        return self.value[0]

    @property
    def subresource(self) -> str:
        return self.value[1]


@dataclass(frozen=True)
class Identity:
    """Who the caller is, as TokenReview said: what a SubjectAccessReview is asked about."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()


def resource_attributes(action: Action, namespace: str, name: str) -> dict[str, str]:
    """The SubjectAccessReview's spec.resourceAttributes for ``action`` on job ``namespace/name``."""
    return {
        "namespace": namespace,
        "verb": action.verb,
        "group": GROUP,
        "resource": RESOURCE,
        "subresource": action.subresource,
        "name": name,
    }


def bearer_token(header: str | None) -> str | None:
    """The token of an ``Authorization: Bearer …`` header; None when absent or of another scheme."""
    if not header:
        return None
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        return None
    return token


class BadRequest(ValueError):
    """A query parameter the API refuses (400), with a message naming it."""


def parse_cursor(raw: str | None) -> str:
    """The XRANGE start for a cursor: the stream's beginning without one, else just after the entry it names.

    A cursor is the ID of the last record a page returned. Stream IDs only grow, and an entry added while
    a reader pages gets an ID above every existing one, so a cursor never skips nor repeats a record."""
    if raw is None or raw == "":
        return "-"
    if not _STREAM_ID.match(raw):
        raise BadRequest(f"cursor {raw[:40]!r} is not a cursor this API returned (<ms>-<seq>)")
    return f"({raw}"


def parse_limit(raw: str | None) -> int:
    if raw is None or raw == "":
        return DEFAULT_LIMIT
    if not raw.isdigit() or not 1 <= int(raw) <= MAX_LIMIT:
        raise BadRequest(f"limit must be a whole number from 1 to {MAX_LIMIT}")
    return int(raw)


def parse_flag(raw: str | None, name: str) -> bool:
    if raw in (None, "", "false", "0"):
        return False
    if raw in ("true", "1"):
        return True
    raise BadRequest(f"{name} must be true or false")


@dataclass
class TtlCache(Generic[K, V]):
    """Answers kept ``ttl`` seconds: a burst of pages costs one TokenReview and one SubjectAccessReview,
    and a revoked RoleBinding or token takes effect within ``ttl``. Bounded: the oldest go first."""

    ttl: float
    max_entries: int = 10_000
    clock: Callable[[], float] = time.monotonic
    _entries: dict[K, tuple[float, V]] = field(default_factory=dict)

    def lookup(self, key: K) -> tuple[bool, V | None]:
        """(True, value) while an answer is kept (a kept None too: "not authenticated"), else (False, None)."""
        hit = self._entries.get(key)
        if hit is None:
            return False, None
        if hit[0] <= self.clock():
            del self._entries[key]
            return False, None
        return True, hit[1]

    def put(self, key: K, value: V) -> None:
        if len(self._entries) >= self.max_entries:
            now = self.clock()
            self._entries = {k: v for k, v in self._entries.items() if v[0] > now}
            while len(self._entries) >= self.max_entries:
                del self._entries[next(iter(self._entries))]
        self._entries[key] = (self.clock() + self.ttl, value)


@dataclass
class RateLimiter:
    """A token bucket per caller: ``rate`` requests a second, bursts up to ``burst``."""

    rate: float
    burst: float
    clock: Callable[[], float] = time.monotonic
    max_callers: int = 10_000
    _buckets: dict[str, tuple[float, float]] = field(default_factory=dict)

    def waiting(self, caller: str) -> float:
        """Like :meth:`allow` without spending: the seconds until ``caller`` may go again (0: now)."""
        tokens, at = self._buckets.get(caller, (self.burst, self.clock()))
        tokens = min(self.burst, tokens + (self.clock() - at) * self.rate)
        return 0.0 if tokens >= 1 else (1 - tokens) / self.rate

    def allow(self, caller: str) -> float:
        """0 when the request may go; else the seconds until it may (a 429's Retry-After)."""
        now = self.clock()
        tokens, at = self._buckets.get(caller, (self.burst, now))
        tokens = min(self.burst, tokens + (now - at) * self.rate)
        if tokens < 1:
            self._buckets[caller] = (tokens, now)
            return (1 - tokens) / self.rate
        if caller not in self._buckets and len(self._buckets) >= self.max_callers:
            # full buckets carry no state worth keeping: forget them first
            self._buckets = {k: v for k, v in self._buckets.items() if v[0] + (now - v[1]) * self.rate < self.burst}
        self._buckets[caller] = (tokens - 1, now)
        return 0.0


# The aggregated API's group (an APIService routes /apis/AGGREGATED_GROUP/... through the API server).
AGGREGATED_GROUP = f"results.{GROUP}"
AGGREGATED_VERSION = "v1alpha1"
REMOTE_USER, REMOTE_GROUP, REMOTE_EXTRA = "X-Remote-User", "X-Remote-Group", "X-Remote-Extra-"


def peer_common_name(peercert: Mapping[str, Any] | None) -> str | None:
    """The CN of a client certificate the TLS handshake verified (ssl's getpeercert() form), if any."""
    for rdn in (peercert or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


def front_proxy_identity(
    peercert: Mapping[str, Any] | None, allowed_names: Collection[str], headers: Iterable[tuple[str, str]]
) -> Identity | None:
    """The user the API server's front proxy vouches for, None unless the request came from it.

    The handshake verified the certificate against the request-header CA; it must also carry one of the
    allowed names (empty: any), as kube-apiserver's own requestheader authenticator rules. Only then are
    the X-Remote-* headers believed; from anyone else they are ignored."""
    name = peer_common_name(peercert)
    if name is None or (allowed_names and name not in allowed_names):
        return None
    user, groups, extra = "", [], {}  # type: tuple[str, list[str], dict[str, list[str]]]
    for key, value in headers:
        lowered = key.lower()
        if lowered == REMOTE_USER.lower() and not user:
            user = value
        elif lowered == REMOTE_GROUP.lower():
            groups.append(value)
        elif lowered.startswith(REMOTE_EXTRA.lower()):
            extra.setdefault(unquote(lowered[len(REMOTE_EXTRA) :]), []).append(value)
    if not user:
        return None
    return Identity(user, "", tuple(groups), tuple(sorted((k, tuple(v)) for k, v in extra.items())))
