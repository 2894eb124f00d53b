"""Session seeds: cookies a pool offers its jobs' new sessions (``ScrapePool.spec.sessionSeeds``), read from
the Secret the pool mounts, never one a job names itself (a job names a seed of its pool, the operator puts
the Secret's name and key in the job's worker spec: trawl.jobspec.wire.seed_route).

A seed lists one cookie a line: the URL that sets it, a space, and a ``Set-Cookie`` value. Each is given to
the session's jar as that URL's response would give it (trawl.worker.cookies: http.cookiejar's parsing and
RFC 6265 scoping), so a seed cannot make a cookie go where its own URL's response could not."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

from trawl.jobspec.podfiles import read_secret

from .cookies import SessionJar

RELOAD_SECONDS = 60.0  # a Secret's update reaches the mounted file within a minute or so
MAX_SEED_LINES = 256


def parse_seed(text: str) -> list[tuple[str, str]]:
    """(URL, Set-Cookie value) of each line; blank lines and ``#`` comments skipped, lines without a URL and
    a value, or not http(s), left out (the text is never echoed: it holds credentials)."""
    out: list[tuple[str, str]] = []
    for raw in text.splitlines()[:MAX_SEED_LINES]:
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        url, _, value = line.partition(" ")
        if url.startswith(("http://", "https://")) and value.strip():
            out.append((url, value.strip()))
    return out


class SeedDirectory:
    """The seeds the job specs name, read from the mounted Secrets and re-read every minute."""

    def __init__(self, environ: Mapping[str, str] | None = None) -> None:
        self._environ = environ
        self._seeds: dict[tuple[str, str], tuple[float, list[tuple[str, str]]]] = {}

    def cookies(self, route: Mapping[str, Any]) -> list[tuple[str, str]]:
        """A seed's cookies; raises :class:`~trawl.jobspec.podfiles.MissingSecret` when it cannot be read."""
        key = (str(route["secret"]["name"]), str(route["secret"]["key"]))
        cached = self._seeds.get(key)
        now = time.monotonic()
        if cached is not None and now - cached[0] < RELOAD_SECONDS:
            return cached[1]
        seed = parse_seed(read_secret(key[0], key[1], self._environ).decode("utf-8", "replace"))
        self._seeds[key] = (now, seed)
        return seed

    def seed(self, jar: SessionJar, route: Mapping[str, Any]) -> None:
        """Give a new session's jar the seed's cookies."""
        for url, value in self.cookies(route):
            jar.store(url, [value])
