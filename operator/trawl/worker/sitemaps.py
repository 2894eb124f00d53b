"""Sitemaps as hostile input: read one fetched sitemap under hard limits and pick the URLs to enqueue (pure).

A sitemap task is a task with a negative depth (:mod:`trawl.queue` ``enqueue_sitemap.lua``): -1 for a
sitemap the job lists or a robots.txt it reads for ``Sitemap:`` lines, -2 and -3 for the sitemaps an
index one level up named. The worker fetches it like a page (its fetcher: address checks on every hop,
robots.txt, rate and size limits) and hands the body to :func:`read_sitemap`, in a parser child process
(:mod:`.parsepool`), which refuses with :class:`BadSitemap`:

- gzip recognised by its magic bytes (never by name or content type), inflated a chunk at a time and
  abandoned past :data:`MAX_DECOMPRESSED_BYTES` (the protocol's 50 MB): a gzip bomb costs one chunk of
  memory, not its size;
- XML through lxml's pull parser with no DTD loading, no entity resolution and no network; a document
  that declares a DTD at all is refused (no sitemap needs one; billion-laughs style entity expansion
  needs one);
- a root other than ``<urlset>``/``<sitemapindex>``, HTML, or another content type that is not XML,
  gzip or plain text;
- more than :data:`MAX_URLSET_ENTRIES` URLs (the protocol's 50,000: refused, not truncated, so a partial
  read never passes for a whole one), or an index naming more than :data:`MAX_INDEX_ENTRIES` sitemaps
  (each of them may be 50 MB: an index is where a sitemap multiplies the work).

What is taken (:class:`SitemapRules`): URLs on the sitemap's own host (sitemaps.org: a sitemap speaks
for its host; a crawl with scope SameDomain widens it to the registrable domain), whose ``lastmod`` is
not before the job's ``lastmodAfter`` (no lastmod: taken; a date without a time counts as the end of
that day), matching the job's include/exclude patterns, at most ``max_urls`` per file.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple
from urllib.parse import urljoin

from trawl.api.patterns import Pattern, any_of

from .urls import CrawlPolicy, canonicalize, host_of

MAX_DECOMPRESSED_BYTES = 50 * 1024 * 1024  # sitemaps.org: at most 50 MB uncompressed
MAX_URLSET_ENTRIES = 50_000  # sitemaps.org: at most 50,000 URLs per file
MAX_INDEX_ENTRIES = 1_000  # sitemaps one index may name (the protocol allows 50,000: 2.5 TB to fetch)
MAX_SITEMAP_LEVEL = 3  # -depth of the deepest sitemap task: listed (1) > index child (2) > grandchild (3)
MAX_ROBOTS_SITEMAPS = 50  # Sitemap: lines taken from one robots.txt
MAX_URL_LENGTH = 2048
DEFAULT_MAX_URLS = 10_000  # SitemapSpec.maxUrls's default
CHUNK = 256 * 1024  # bytes inflated or fed to the parser at a time
GZIP_MAGIC = b"\x1f\x8b"
HTML_TYPES = ("text/html", "application/xhtml+xml")
XML_TYPES = ("text/xml", "application/xml", "application/x-xml")
GZIP_TYPES = ("application/gzip", "application/x-gzip", "application/octet-stream", "binary/octet-stream")
ROBOTS_PATH = "/robots.txt"

_DOCTYPE = re.compile(rb"<!DOCTYPE", re.IGNORECASE)

URLSET = "urlset"
INDEX = "sitemapindex"


class BadSitemap(Exception):
    """The document is not a sitemap the worker will read, and why; permanent (class BadSitemap)."""


class SitemapRules(NamedTuple):
    """What a job takes from its sitemaps (its spec.sitemaps, and its crawl's scope)."""

    lastmod_after: float | None = None  # unix seconds
    max_urls: int = DEFAULT_MAX_URLS
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    scope: str = "SameHost"  # or "SameDomain" (the crawl's)

    @classmethod
    def from_spec(cls, sitemaps: dict[str, Any] | None, scope: str | None) -> SitemapRules:
        """From a SitemapSpec dump (snake_case, as the worker spec holds it) and the crawl's scope."""
        raw = sitemaps or {}
        after = raw.get("lastmod_after")
        return cls(
            lastmod_after=_timestamp(datetime.fromisoformat(after)) if after else None,
            max_urls=int(raw.get("max_urls") or DEFAULT_MAX_URLS),
            include=tuple(raw.get("include") or ()),
            exclude=tuple(raw.get("exclude") or ()),
            scope=scope or "SameHost",
        )


class SitemapFound(NamedTuple):
    """What one sitemap gave: page URLs (``kind`` urlset or text) or sitemaps (``kind`` sitemapindex) to
    enqueue, and how many entries were left out by each rule (for the log)."""

    kind: str
    urls: list[str]
    entries: int
    too_old: int = 0
    off_site: int = 0
    filtered: int = 0  # invalid URLs, include/exclude, beyond max_urls


def is_robots_task(url: str, depth: int) -> bool:
    """Whether a sitemap task is a robots.txt read for its Sitemap: lines (only the operator makes those,
    at depth -1; a robots.txt an index names is read as a sitemap, and refused as one)."""
    if depth != -1 or not url.endswith(ROBOTS_PATH):
        return False
    rest = url.split("://", 1)[-1]
    return rest.find("/") == len(rest) - len(ROBOTS_PATH)


def read_sitemap(body: bytes, content_type: str, url: str, rules: SitemapRules) -> SitemapFound:
    """Parse ``body`` (fetched from ``url`` with ``content_type``) and pick what to enqueue; raises
    :class:`BadSitemap`. Memory stays bounded by :data:`CHUNK` and the entries kept, whatever the body."""
    chunks = _inflated(body)
    first = next(chunks, b"")
    head = first.lstrip(b"\xef\xbb\xbf \t\r\n")[:4096]
    mime = content_type.split(";", 1)[0].strip().lower()
    if head.startswith(b"<"):
        if mime.startswith(HTML_TYPES) and not re.search(rb"<(\w+:)?(urlset|sitemapindex)\b", head):
            raise BadSitemap(f"not a sitemap: content type {mime} (an HTML page), no <urlset> or <sitemapindex>")
        if _DOCTYPE.search(head):  # said before the parser sees it (libxml2's own guard would say less)
            raise BadSitemap("the document declares a DTD (<!DOCTYPE ...>): refused, no sitemap needs one")
        kind, entries = _read_xml(_chain(first, chunks), mime)
    elif mime in ("", "text/plain") or (mime.startswith(GZIP_TYPES) and body.startswith(GZIP_MAGIC)):
        kind, entries = "text", _read_text(_chain(first, chunks))
    else:
        raise BadSitemap(f"not a sitemap: content type {mime}, and the body is not XML, gzip or plain text")
    return _select(kind, entries, url, rules)


# --- bytes ----------------------------------------------------------------------------------------


def _inflated(body: bytes) -> Iterator[bytes]:
    """The document's bytes a chunk at a time: gzip (by its magic bytes) inflated with a hard cap."""
    if not body.startswith(GZIP_MAGIC):
        if len(body) > MAX_DECOMPRESSED_BYTES:
            raise BadSitemap(f"larger than {MAX_DECOMPRESSED_BYTES} bytes (the sitemap protocol's limit)")
        for off in range(0, len(body), CHUNK):
            yield body[off : off + CHUNK]
        return
    inflater = zlib.decompressobj(wbits=31)  # gzip framing only
    pending, total = body, 0
    while not inflater.eof:
        try:
            out = inflater.decompress(pending, CHUNK)  # at most CHUNK bytes out, whatever the ratio
        except zlib.error as exc:
            raise BadSitemap(f"not valid gzip: {exc}") from None
        pending = inflater.unconsumed_tail
        total += len(out)
        if total > MAX_DECOMPRESSED_BYTES:
            raise BadSitemap(
                f"gzip inflates to more than {MAX_DECOMPRESSED_BYTES} bytes (the sitemap protocol's limit; "
                f"{len(body)} bytes compressed): refused without inflating the rest"
            )
        if not out and not pending:
            raise BadSitemap("truncated gzip: the stream ends before its end")
        if out:
            yield out


def _chain(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


# --- documents ------------------------------------------------------------------------------------


def _read_text(chunks: Iterator[bytes]) -> list[tuple[str, float | None]]:
    """A plain-text sitemap: one URL per line (lines that are not http(s) URLs are left out later)."""
    entries: list[tuple[str, float | None]] = []
    tail = b""
    for chunk in chunks:
        lines = (tail + chunk).split(b"\n")
        tail = lines.pop()
        for line in lines:
            _add_line(entries, line)
    _add_line(entries, tail)
    return entries


def _add_line(entries: list[tuple[str, float | None]], line: bytes) -> None:
    text = line.strip().decode("utf-8", "replace")
    if not text:
        return
    if len(entries) >= MAX_URLSET_ENTRIES:
        raise BadSitemap(f"more than {MAX_URLSET_ENTRIES} URLs (the sitemap protocol's limit): refused")
    entries.append((text, None))


def _read_xml(chunks: Iterator[bytes], mime: str) -> tuple[str, list[tuple[str, float | None]]]:
    """``<urlset>`` or ``<sitemapindex>``: its (loc, lastmod) entries, streamed (each element freed once
    read); no DTD, no entities, no network."""
    from lxml import etree

    parser = etree.XMLPullParser(
        events=("start", "end"),
        resolve_entities=False,
        no_network=True,
        load_dtd=False,
        huge_tree=False,
        remove_comments=True,
        remove_pis=True,
    )
    state = _XmlState(mime)
    try:
        for chunk in chunks:
            parser.feed(chunk)
            state.take(parser.read_events())
        parser.close()
        state.take(parser.read_events())
    except etree.XMLSyntaxError as exc:
        raise BadSitemap(f"not well-formed XML: {exc}") from None
    if state.kind is None:
        raise BadSitemap("empty document: no <urlset> or <sitemapindex>")
    return state.kind, state.entries


class _XmlState:
    """The pull parser's events folded into entries, with the limits checked as they arrive."""

    def __init__(self, mime: str) -> None:
        self.mime = mime
        self.kind: str | None = None
        self.entries: list[tuple[str, float | None]] = []
        self.count = 0
        self.limit = MAX_URLSET_ENTRIES

    def take(self, events: Any) -> None:
        for event, element in events:
            name = _local(element.tag)
            if self.kind is None and event == "start":
                self._root(element, name)
            elif event == "end" and name in ("url", "sitemap"):
                self._entry(element)

    def _root(self, element: Any, name: str) -> None:
        doctype = element.getroottree().docinfo.doctype
        if doctype:
            raise BadSitemap(f"the document declares a DTD ({doctype}): refused, no sitemap needs one")
        if name not in (URLSET, INDEX):
            raise BadSitemap(
                f"not a sitemap: the root element is <{name}> (content type {self.mime or 'none'}), not "
                f"<urlset> or <sitemapindex>"
            )
        self.kind = name
        self.limit = MAX_URLSET_ENTRIES if name == URLSET else MAX_INDEX_ENTRIES

    def _entry(self, element: Any) -> None:
        loc = lastmod = None
        for child in element:
            field = _local(child.tag) if isinstance(child.tag, str) else ""
            if field == "loc":
                loc = (child.text or "").strip()
            elif field == "lastmod":
                lastmod = lastmod_time((child.text or "").strip())
        # Free what was read: the tree never holds more than the entry being parsed.
        element.clear()
        parent = element.getparent()
        while parent is not None and element.getprevious() is not None:
            del parent[0]
        # Every entry counts, with a <loc> or not: a file of empty <url/>s is refused as soon as it has too
        # many, not read on to its 50 MB.
        self.count += 1
        if self.count > self.limit:
            what = "URLs" if self.kind == URLSET else "sitemaps in an index"
            raise BadSitemap(f"more than {self.limit} {what}: refused (a sitemap is read whole or not at all)")
        if loc:
            self.entries.append((loc, lastmod))


def _local(tag: Any) -> str:
    text = str(tag)
    return text.rsplit("}", 1)[-1] if text.startswith("{") else text


# W3C Datetime, as sitemaps use it: YYYY, YYYY-MM, YYYY-MM-DD, or with a time (and a zone).
_DATE = re.compile(r"(\d{4})(?:-(\d{2})(?:-(\d{2}))?)?")


def lastmod_time(text: str) -> float | None:
    """The latest instant a ``<lastmod>`` may mean, in unix seconds; None when it is not a date.

    A date without a time is the end of that day (a month: of that month, a year: of that year): a page
    is kept whenever its change may have come after the cut-off. A time without a zone is UTC."""
    m = _DATE.fullmatch(text)
    try:
        if m is None:
            return _timestamp(datetime.fromisoformat(text))
        year, month, day = int(m.group(1)), int(m.group(2) or 0), int(m.group(3) or 0)
        if day:
            end = datetime(year, month, day, tzinfo=UTC) + timedelta(days=1)
        elif month:
            end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
        else:
            end = datetime(year + 1, 1, 1, tzinfo=UTC)
    except (ValueError, OverflowError):
        return None
    return end.timestamp() - 0.001


def _timestamp(when: datetime) -> float:
    return (when if when.tzinfo is not None else when.replace(tzinfo=UTC)).timestamp()


# --- selection ------------------------------------------------------------------------------------


def _select(kind: str, entries: list[tuple[str, float | None]], url: str, rules: SitemapRules) -> SitemapFound:
    """The entries to enqueue: canonical, on the sitemap's site, recent enough, matching the patterns."""
    scope = CrawlPolicy.build(scope=rules.scope)
    pages = kind != INDEX
    include = any_of(rules.include) if pages else None
    exclude = any_of(rules.exclude) if pages else None
    own_host = host_of(url)
    taken: dict[str, None] = {}
    too_old = off_site = filtered = 0
    for loc, lastmod in entries:
        canon = canonicalize(loc) if len(loc) <= MAX_URL_LENGTH else None
        if canon is None or len(canon) > MAX_URL_LENGTH:
            filtered += 1
        elif not scope.in_scope(canon, own_host):
            off_site += 1
        elif rules.lastmod_after is not None and lastmod is not None and lastmod < rules.lastmod_after:
            too_old += 1
        elif _matches(canon, include, exclude) and len(taken) < rules.max_urls:
            taken[canon] = None
        else:
            filtered += 1
    return SitemapFound(kind, list(taken), len(entries), too_old, off_site, filtered)


def _matches(url: str, include: Pattern | None, exclude: Pattern | None) -> bool:
    return (include is None or include.search(url)) and (exclude is None or not exclude.search(url))


def robots_sitemaps(named: list[str], robots_url: str, rules: SitemapRules) -> list[str]:
    """The sitemaps a robots.txt names that are read: canonical, on its site (or the crawl's scope), at
    most :data:`MAX_ROBOTS_SITEMAPS`."""
    scope = CrawlPolicy.build(scope=rules.scope)
    own_host = host_of(robots_url)
    out: dict[str, None] = {}
    for raw in named:
        # A relative Sitemap: line is taken relative to the robots.txt (protego keeps it as written).
        canon = canonicalize(urljoin(robots_url, raw)) if len(raw) <= MAX_URL_LENGTH else None
        if canon is not None and scope.in_scope(canon, own_host):
            out[canon] = None
        if len(out) >= MAX_ROBOTS_SITEMAPS:
            break
    return list(out)
