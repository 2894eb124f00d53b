"""A session's cookie jar: the standard library's :mod:`http.cookiejar` (RFC 6265 domain and path matching,
expiry, Secure), stored as bounded JSON in Redis (trawl.worker.sessions).

No cookie is parsed here: ``Set-Cookie`` goes to :meth:`http.cookiejar.CookieJar.extract_cookies` and the
``Cookie`` header comes from :meth:`~http.cookiejar.CookieJar.add_cookie_header`, through the urllib
request and response objects they expect. A cookie is stored for the host that set it (or the domain it
named, if the policy accepts it) and sent only where that scope matches: a cookie of a.example never goes to
b.example, and a Secure one never over plain http.

:mod:`http.cookiejar` is imported with the first jar (a job with sessions): every worker imports this
module at start, and most never keep a cookie (docs/architecture.md, "Start-up")."""

from __future__ import annotations

import email.message
import json
import time
import urllib.request
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import http.cookiejar

MAX_COOKIES = 64  # cookies one session keeps; beyond, the largest are dropped (counted)
MAX_JAR_BYTES = 16 * 1024  # the JSON of one session's cookies in Redis
MAX_COOKIE_BYTES = 4096  # RFC 6265 6.1: at least 4096 bytes per cookie; larger ones are not kept
LOCAL_SUFFIX = ".local"  # http.cookiejar's effective host of a dotless name (localhost -> localhost.local)
_FIELDS = ("name", "value", "domain", "path", "secure", "expires", "domain_specified", "domain_initial_dot")


class _Response:
    """What :meth:`CookieJar.extract_cookies` reads of a response: its headers, through ``info()``."""

    def __init__(self, set_cookies: Iterable[str]) -> None:
        self._headers = email.message.Message()
        for value in set_cookies:
            self._headers["Set-Cookie"] = value

    def info(self) -> email.message.Message:
        return self._headers


def _policy() -> http.cookiejar.DefaultCookiePolicy:
    import http.cookiejar

    # Netscape/RFC 6265 cookies only (RFC 2965 is obsolete). DomainStrictNonDomain: a cookie set without a
    # Domain attribute is host-only (RFC 6265 5.3 step 6), returned to that exact host, never its subdomains.
    return http.cookiejar.DefaultCookiePolicy(
        rfc2965=False, strict_ns_domain=http.cookiejar.DefaultCookiePolicy.DomainStrictNonDomain
    )


class SessionJar:
    """The cookies of one session; ``changed`` once a response set or removed one."""

    def __init__(self, stored: Iterable[dict[str, Any]] = ()) -> None:
        import http.cookiejar

        self._jar = http.cookiejar.CookieJar(_policy())
        self.changed = False
        self.dropped = 0  # cookies not kept: over a bound
        self.owner = ""  # the session's id: browser pages of one session share a context (browser.contexts)
        for doc in stored:
            cookie = _from_doc(doc)
            if cookie is not None:
                self._jar.set_cookie(cookie)

    def header_for(self, url: str) -> str | None:
        """The ``Cookie`` header a request to ``url`` carries (None: no cookie matches)."""
        request = urllib.request.Request(url)
        self._jar.add_cookie_header(request)
        return request.get_header("Cookie")

    def store(self, url: str, set_cookies: Iterable[str]) -> None:
        """Take a response's ``Set-Cookie`` headers, as the jar's policy allows for ``url``."""
        given = list(set_cookies)
        values = [v for v in given if len(v) <= MAX_COOKIE_BYTES]
        self.dropped += len(given) - len(values)
        if not values:
            return
        before = self.dump_json()
        self._jar.extract_cookies(_Response(values), urllib.request.Request(url))  # type: ignore[arg-type]
        self.changed = self.changed or self.dump_json() != before

    def cookies(self) -> list[http.cookiejar.Cookie]:
        now = int(time.time())
        return [c for c in self._jar if not c.is_expired(now)]

    def dump(self) -> list[dict[str, Any]]:
        """The unexpired cookies as JSON-able documents, within MAX_COOKIES and MAX_JAR_BYTES (the smallest
        kept first: a giant cookie never pushes out the small ones a site relies on)."""
        docs = sorted((_to_doc(c) for c in self.cookies()), key=lambda d: len(d["name"]) + len(d["value"]))
        kept: list[dict[str, Any]] = []
        size = 2
        for doc in docs:
            size += len(json.dumps(doc, separators=(",", ":"))) + 1
            if len(kept) >= MAX_COOKIES or size > MAX_JAR_BYTES:
                self.dropped += 1
                continue
            kept.append(doc)
        return kept

    def dump_json(self) -> str:
        return json.dumps(
            sorted((_to_doc(c) for c in self.cookies()), key=lambda d: (d["domain"], d["path"], d["name"]))
        )

    def for_browser(self) -> list[dict[str, Any]]:
        """The cookies as a browser context takes them (Playwright's ``add_cookies``)."""
        out = []
        for c in self.cookies():
            domain = c.domain
            if not c.domain_specified and domain.endswith(LOCAL_SUFFIX) and "." not in domain[: -len(LOCAL_SUFFIX)]:
                domain = domain[: -len(LOCAL_SUFFIX)]
            doc: dict[str, Any] = {"name": c.name, "value": c.value or "", "domain": domain, "path": c.path or "/"}
            doc["secure"] = bool(c.secure)
            if c.expires is not None:
                doc["expires"] = float(c.expires)
            out.append(doc)
        return out

    def take_browser(self, cookies: Iterable[dict[str, Any]]) -> None:
        """A browser context's cookies (Playwright's ``cookies()``) into the jar: the browser enforced their
        scope when the page set them; a cookie without a dot in its domain is host-only, as the jar keeps it."""
        before = self.dump_json()
        for doc in cookies:
            domain = str(doc.get("domain") or "")
            if not domain or len(str(doc.get("value") or "")) > MAX_COOKIE_BYTES:
                continue
            specified = domain.startswith(".")
            if not specified and "." not in domain:
                domain += LOCAL_SUFFIX  # http.cookiejar's name for a dotless host
            expires = doc.get("expires")
            cookie = _from_doc(
                {
                    "name": doc.get("name"), "value": doc.get("value") or "", "domain": domain,
                    "path": doc.get("path") or "/", "secure": bool(doc.get("secure")),
                    "expires": int(expires) if isinstance(expires, int | float) and expires > 0 else None,
                    "domain_specified": specified, "domain_initial_dot": specified,
                }
            )  # fmt: skip
            if cookie is not None:
                self._jar.set_cookie(cookie)
        self.changed = self.changed or self.dump_json() != before


def _to_doc(cookie: http.cookiejar.Cookie) -> dict[str, Any]:
    return {name: getattr(cookie, name) for name in _FIELDS}


def _from_doc(doc: dict[str, Any]) -> http.cookiejar.Cookie | None:
    """A stored cookie back (None for one that is not a well-formed document: Redis is trusted, but a bad
    entry must cost one cookie, not the session)."""
    import http.cookiejar

    try:
        name, value, domain, path = (str(doc[k]) for k in ("name", "value", "domain", "path"))
        expires = doc.get("expires")
        return http.cookiejar.Cookie(
            version=0,
            name=name,
            value=value,
            port=None,
            port_specified=False,
            domain=domain,
            domain_specified=bool(doc.get("domain_specified")),
            domain_initial_dot=bool(doc.get("domain_initial_dot")),
            path=path,
            path_specified=True,
            secure=bool(doc.get("secure")),
            expires=int(expires) if expires is not None else None,
            discard=expires is None,
            comment=None,
            comment_url=None,
            rest={},
        )
    except (KeyError, TypeError, ValueError):
        return None
