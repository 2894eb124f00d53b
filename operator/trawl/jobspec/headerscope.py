"""Which requests a job's headers go to: the job's own origins only, and a pool's credentials only where the pool says.

Request headers carry credentials (Authorization, Cookie, an API key). Two people write them: the job's
author (``spec.request.headers``) and the pool's author (``defaults.request.headers``, inherited by every
job that sets none). Neither may reach a server the job did not name, and the pool's may not reach a
server its author did not name, however the request comes about (a crawled link, a redirect, a page's
subresource in a browser). So (pure; the operator builds the scope when it registers a job, the worker
asks it per request):

- A job's *own origins* are the origins (scheme, host, port) of its ``urls`` and ``urlRanges``. Only
  requests to one of them carry headers: a crawl following a link to another host of its domain, or from
  https to http on the same host (a downgrade: the credentials would cross the network in clear), sends
  none; a seed's scheme is part of its origin.
- A pool's default headers from :data:`HARMLESS` (content negotiation, no secret) go to the job's own
  origins like the job's. Any other (a credential, or a name we cannot tell from one: ``X-Api-Key``,
  ``X-Auth-Token``...) goes only to origins the pool lists in ``defaults.request.headerOrigins`` that
  are also the job's own: a job author naming their own server gets none of it. A pool with such a
  header and no ``headerOrigins`` is refused (:class:`trawl.api.scrapepool.PoolRequestSpec`).

- A domain rule's headers (``politeness.domains[].headers``, the pool's and the job's) go with the job's:
  to its own origins whose host the rule matches, never further; a pool rule's non-harmless ones over
  https only (:func:`trawl.jobspec.domains.rule_headers`).

The fetcher adds one rule of its own per fetch: a redirect to another origin than the request's (a
downgrade to http on the same host included) carries none of them (:mod:`trawl.worker.fetch`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from trawl.api.plain import HARMLESS_HEADERS as HARMLESS

from .domains import HostCache, rule_headers

MAX_ORIGINS = 5000  # as many as `urls` may list; a job with headers and more distinct origins is refused
_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> str | None:
    """``scheme://host:port`` of an http(s) URL (port always written, host lower-case, IDNA-encoded, without
    a final dot): two URLs of one origin give the same string; None for anything else."""
    try:
        parts = urlsplit(url.strip())
        host = parts.hostname
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not host:
        return None
    host = host.rstrip(".")
    if ":" in host:
        host = f"[{host}]"
    elif not host.isascii():
        try:
            host = host.encode("idna").decode("ascii")
        except UnicodeError:
            return None
    return f"{scheme}://{host}:{port or _DEFAULT_PORTS[scheme]}"


def is_harmless(name: str) -> bool:
    return name.lower() in HARMLESS


def job_origins(urls: Iterable[str], ranges: Iterable[Any]) -> list[str]:
    """The job's own origins, sorted: those of ``urls`` and of every URL ``ranges`` (UrlRange) generate.

    A range whose ``{n}`` is in the path gives one origin; one whose ``{n}`` is in the host gives one per
    number (:func:`scope_problem` refuses headers on a job with more than :data:`MAX_ORIGINS`)."""
    found = {o for o in (origin(u) for u in urls) if o is not None}
    for r in ranges:
        authority = r.template.split("://", 1)[-1]
        for stop in "/?#":
            authority = authority.split(stop, 1)[0]
        numbers = range(r.start, r.end + 1, r.step) if "{n}" in authority else range(r.start, r.start + 1)
        for n in numbers:
            o = origin(r.template.replace("{n}", str(n)))
            if o is not None:
                found.add(o)
            if len(found) > MAX_ORIGINS:
                break
    return sorted(found)


def build_scope(
    job_headers: Mapping[str, str] | None,
    pool_headers: Mapping[str, str] | None,
    pool_origins: Iterable[str] | None,
    own_origins: list[str],
) -> tuple[dict[str, str], dict[str, Any] | None]:
    """(the headers sent to the job's own origins, the scope stored beside them; None when no header is sent).

    The job's headers replace the pool's whole (as every request default does); without them the pool's
    are split into the harmless (every own origin) and the others (the pool's listed origins only)."""
    if job_headers:
        headers, restricted = dict(job_headers), {}
    else:
        pool = dict(pool_headers or {})
        headers = {k: v for k, v in pool.items() if is_harmless(k)}
        restricted = {k: v for k, v in pool.items() if not is_harmless(k)}
    # The pool's credentials are stored with the job only for the origins they may go to that it names.
    listed = {o for o in (origin(u) for u in pool_origins or ()) if o is not None} & set(own_origins)
    if not listed:
        restricted = {}
    if not headers and not restricted:
        return headers, None
    scope = {"origins": own_origins, "pool_headers": restricted, "pool_origins": sorted(listed) if restricted else []}
    return headers, scope


def scope_problem(scope: Mapping[str, Any] | None) -> str | None:
    """Why a job's headers cannot be scoped to its origins, or None."""
    if scope is not None and len(scope.get("origins") or ()) > MAX_ORIGINS:
        return (
            f"spec.request.headers (or the pool's defaults.request.headers): the job's URLs span more than "
            f"{MAX_ORIGINS} origins (a urlRanges template with {{n}} in the host?), and headers go only to "
            f"the origins a job lists: split the job, or set no headers"
        )
    return None


@dataclass
class HeaderScope:
    """The worker's side: :meth:`for_request` is the headers a request carries (memoised per origin).

    ``origins`` None with ``headers`` set is a job an older operator registered, without its origins: the
    origin of a seed (depth 0: a URL its author listed) gets the headers, the links a crawl found get none,
    until the operator registers the job again (it does on its next pass)."""

    headers: dict[str, str]
    origins: frozenset[str] | None
    pool_headers: dict[str, str] = field(default_factory=dict)
    pool_origins: frozenset[str] = frozenset()
    hosts: HostCache | None = None  # the job's domain rules, when one of them has headers
    _memo: dict[str, dict[str, str] | None] = field(default_factory=dict)

    @classmethod
    def parse(
        cls, headers: Mapping[str, str] | None, scope: Mapping[str, Any] | None, hosts: HostCache | None = None
    ) -> HeaderScope | None:
        """None when the job sends no header at all (the fetcher's fast path). ``hosts``: the job's domain
        rules (their headers count only where the scope names the job's origins)."""
        if scope is None:
            return cls(dict(headers), None) if headers else None
        pool_headers = dict(scope.get("pool_headers") or {})
        rules = hosts if hosts is not None and hosts.rules is not None and hosts.rules.has_headers() else None
        if not headers and not pool_headers and rules is None:
            return None
        return cls(
            dict(headers or {}),
            frozenset(scope.get("origins") or ()),
            pool_headers,
            frozenset(scope.get("pool_origins") or ()),
            rules,
        )

    def for_request(self, url: str, task_url: str, depth: int) -> dict[str, str] | None:
        """The headers a request to ``url`` carries, made for the task of ``task_url`` at ``depth``."""
        if self.origins is None:
            return self.headers if depth == 0 and origin(url) == origin(task_url) else None
        key = origin(url)
        if key is None:
            return None
        try:
            return self._memo[key]
        except KeyError:
            pass
        out: dict[str, str] | None = None
        if key in self.origins:
            out = dict(self.headers)
            if key in self.pool_origins:
                out.update(self.pool_headers)
            if self.hosts is not None:
                scheme, authority = key.split("://", 1)
                replace_headers(out, rule_headers(self.hosts.get(authority), scheme))
            out = out or None
        if len(self._memo) > 1024:
            self._memo.clear()
        self._memo[key] = out
        return out


def replace_headers(headers: dict[str, str], more: Mapping[str, str]) -> None:
    """Add ``more`` to ``headers``, each replacing one of the same name in any case (HTTP names are)."""
    for name, value in more.items():
        for same in [k for k in headers if k.lower() == name.lower()]:
            del headers[same]
        headers[name] = value
