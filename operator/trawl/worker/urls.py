"""URLs as a crawl sees them: canonical form, host and registrable domain, and a crawl's scope (pure).

Used by the politeness layer (per-host state), the runner and crawl mode (which discovered links are
followed). Which addresses may be connected to is :mod:`trawl.egress.addresses`.
"""

from __future__ import annotations

import functools
import ipaddress
import posixpath
import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple
from urllib.parse import quote, unquote, urlsplit, urlunsplit

from trawl.api.patterns import Pattern, any_of

if TYPE_CHECKING:
    import tldextract


# --- URL canonicalisation -----------------------------------------------------------------------

_DEFAULT_PORTS = {"http": 80, "https": 443}
_UNRESERVED_SAFE = "/:@!$&'()*+,;=-._~%"
_QUERY_SAFE = "=&/:@!$'()*+,;?-._~%"


# Already canonical: lower-case host, no default port, no fragment, no percent-escapes, no dot segments
# or empty segments, nothing that needs quoting. Most links on real pages look like this.
_SIMPLE_URL = re.compile(
    r"(https?)://[a-z0-9-]+(?:\.[a-z0-9-]+)*(?::(\d{1,5}))?(/[A-Za-z0-9_\-./~!$&'()*+,;=:@]*(?:\?[A-Za-z0-9_\-./~!$&'()*+,;=:@?]+)?)?"
)


def _simple_port_ok(scheme: str, port: str | None) -> bool:
    if port is None:
        return True
    return port != ("80" if scheme == "http" else "443") and port[0] != "0" and int(port) < 65536


def _simple_path_ok(path_and_query: str | None) -> bool:
    if path_and_query is None:
        return True
    path = path_and_query.split("?", 1)[0]  # a dot segment right before the query counts too: /.?a=1
    return not (
        "//" in path
        or "/./" in path
        or "/../" in path
        or path.endswith(("/.", "/.."))
        or path_and_query.startswith("/?")
    )


def canonicalize(url: str, *, keep_fragment: bool = False) -> str | None:
    """A canonical form (fast path for URLs that already are; see :func:`canonicalize_slow`)."""
    m = _SIMPLE_URL.fullmatch(url)
    if m is not None and _simple_port_ok(m.group(1), m.group(2)) and _simple_path_ok(m.group(3)):
        return url if m.group(3) else url + "/"
    return canonicalize_slow(url, keep_fragment=keep_fragment)


def canonicalize_slow(url: str, *, keep_fragment: bool = False) -> str | None:
    """A canonical form of an absolute http(s) URL, or None when it is not one.

    Lower-cases scheme and host, IDNA-encodes the host, drops default ports, the fragment and empty
    query, resolves ``.``/``..`` segments and normalises percent-encoding (without changing meaning).
    """
    try:
        parts = urlsplit(url.strip())
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS:
        return None
    try:
        host = parts.hostname
        port = parts.port
    except ValueError:
        return None
    if not host:
        return None
    if ":" in host:  # IPv6 literal
        try:
            host = "[" + ipaddress.IPv6Address(host.split("%", 1)[0]).compressed + "]"
        except ValueError:
            return None
    else:
        host = host.rstrip(".")
        try:
            host = host.encode("idna").decode("ascii") if not host.isascii() else host.lower()
        except UnicodeError:
            return None
        if not host or " " in host:
            return None
    netloc = host if port in (None, _DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    path = parts.path or "/"
    if "." in path:
        trailing = path.endswith("/") or path.endswith("/.") or path.endswith("/..")
        path = posixpath.normpath(path)
        if path.startswith("//"):
            path = "/" + path.lstrip("/")
        if trailing and path != "/":
            path += "/"
    path = quote(unquote(path), safe=_UNRESERVED_SAFE) if "%" in path or " " in path else path
    query = parts.query
    if query and ("%" in query or " " in query):
        query = quote(unquote(query), safe=_QUERY_SAFE)
    fragment = parts.fragment if keep_fragment else ""
    return urlunsplit((scheme, netloc, path, query, fragment))


@functools.cache
def _suffixes() -> tldextract.TLDExtract:
    # The Public Suffix List snapshot bundled with tldextract: no download (suffix_list_urls=()), no cache
    # files; private suffixes count (github.io, blogspot.com: every subdomain is someone else's site).
    # Imported here: tldextract (with requests and filelock) costs ~60 ms at import, and only crawls with
    # scope Domain use it, so a worker loads it on first use instead of at start-up.
    import tldextract

    return tldextract.TLDExtract(suffix_list_urls=(), cache_dir=None, include_psl_private_domains=True)


def registrable_domain(host: str) -> str:
    """The registrable domain (eTLD+1) of a host by the Public Suffix List: ``alice.github.io`` and
    ``bob.github.io`` are two sites, ``www.city.kawasaki.jp`` belongs to ``city.kawasaki.jp``. IP addresses,
    single labels and public suffixes themselves are their own domain."""
    host = host.lower().rstrip(".")
    if host.startswith("[") or re.fullmatch(r"[0-9.]+", host):
        return host
    return _suffixes()(host).top_domain_under_public_suffix or host


def host_of(url: str) -> str:
    """host[:port] of a URL (the unit of politeness: robots.txt, rate and concurrency)."""
    if url.startswith(("http://", "https://")) and "@" not in url:
        rest = url[url.index("//") + 2 :]
        end = len(rest)
        for stop in "/?#":
            cut = rest.find(stop)
            if cut != -1 and cut < end:
                end = cut
        return rest[:end].lower()
    return urlsplit(url).netloc.lower()


class CrawlPolicy(NamedTuple):
    """Decides which discovered links of a crawl are followed. ``include``/``exclude``: the job's patterns,
    each list compiled as one RE2 alternation (:mod:`trawl.api.patterns`: linear time on the event loop)."""

    scope: str = "SameHost"  # or "SameDomain"
    include: Pattern | None = None
    exclude: Pattern | None = None
    max_depth: int = 2

    @classmethod
    def build(
        cls,
        scope: str = "SameHost",
        include: Sequence[str] | None = None,
        exclude: Sequence[str] | None = None,
        max_depth: int = 2,
    ) -> CrawlPolicy:
        return cls(scope=scope, include=any_of(include or ()), exclude=any_of(exclude or ()), max_depth=max_depth)

    def in_scope(self, url: str, seed_host: str) -> bool:
        if self.scope == "SameDomain":
            host = urlsplit(url).hostname or ""
            seed = seed_host.split(":", 1)[0] if not seed_host.startswith("[") else seed_host
            domain = registrable_domain(seed)
            return host == domain or host.endswith("." + domain)
        return host_of(url) == seed_host

    def follow(self, url: str, page_url: str, page_depth: int) -> bool:
        """Whether ``url`` (canonical) found on ``page_url`` at ``page_depth`` is followed."""
        if page_depth + 1 > self.max_depth:
            return False
        if not self.in_scope(url, host_of(page_url)):
            return False
        if self.include is not None and not self.include.search(url):
            return False
        return self.exclude is None or not self.exclude.search(url)

    def select(self, links: Iterable[str], page_url: str, page_depth: int, known: set[str] | None = None) -> list[str]:
        """Canonical, in-scope, deduplicated (order kept) links to enqueue from one page.

        ``known`` holds canonical URLs already enqueued for the job; links equal to one are skipped
        before any parsing (a link equal to a canonical URL is canonical itself).
        """
        if page_depth + 1 > self.max_depth:
            return []
        seen: set[str] = {page_url}
        out: list[str] = []
        page_host = host_of(page_url)
        same_host = self.scope != "SameDomain"
        include, exclude = self.include, self.exclude
        for link in links:
            if known is not None and link in known:
                continue
            canon = canonicalize(link)
            if canon is None or canon in seen:
                continue
            seen.add(canon)
            if same_host:
                if host_of(canon) != page_host:
                    continue
            elif not self.in_scope(canon, page_host):
                continue
            if include is not None and not include.search(canon):
                continue
            if exclude is not None and exclude.search(canon):
                continue
            out.append(canon)
        return out
