"""Output formats of a page (spec.extract.formats), each bounded: markdown, text, structured, links.

The page's author is hostile: a 16 MiB text node, a JSON-LD array of 100,000 entries, JSON nested 10,000
deep, broken JSON beside good blocks. So each format is cut to the pool's byte budget
(``format_max_bytes``), structured data to :data:`MAX_FORMAT_ENTRIES` entries per syntax and per array and
:data:`MAX_FORMAT_DEPTH` levels, links to :data:`MAX_FORMAT_LINKS`; a format cut to fit, or left out
because it failed or ran over its time (:func:`time_limit`), is named in the record's ``truncated`` list.
JSON-LD is read block by block here (extruct's reader gives up on the page at the first broken block).

The expensive formats (markdown, text, structured) run in the parse pool's children
(:mod:`trawl.worker.parsepool`), where a per-format timer applies; links are a by-product of parsing.
"""

from __future__ import annotations

import contextlib
import json
import signal
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from selectolax.lexbor import LexborHTMLParser

from trawl.api.plain import (
    DEFAULT_FORMAT_BYTES,
    FORMAT_SECONDS,
    MAX_FORMAT_DEPTH,
    MAX_FORMAT_ENTRIES,
    MAX_FORMAT_LINKS,
    OutputFormat,
    StructuredSyntax,
)

EXPENSIVE = frozenset({OutputFormat.MARKDOWN.value, OutputFormat.TEXT.value, OutputFormat.STRUCTURED.value})
MAX_ERRORS = 10  # structured-data errors kept on a record (each cut to ERROR_CHARS)
ERROR_CHARS = 200
# The main-content reader gets at most this much of the page: lxml drops a text node over 10,000,000
# characters (the whole extraction comes back empty), and its cost grows with the input.
MAIN_CONTENT_INPUT = 8_000_000
JSON_LD_BLOCK_CHARS = 16_000_000  # about a quarter of a second of json.loads
ALL_SYNTAXES = tuple(s.value for s in StructuredSyntax)
JSON_LD_TYPES = frozenset({"application/ld+json", "application/json+ld"})


class FormatOptions(NamedTuple):
    """What a job asked for (hashable: the parser children key their extractors by it)."""

    formats: tuple[str, ...] = ()
    tables: bool = True
    markdown_links: bool = False
    syntaxes: tuple[str, ...] = ALL_SYNTAXES
    max_bytes: int = DEFAULT_FORMAT_BYTES

    @property
    def expensive(self) -> bool:
        return any(f in EXPENSIVE for f in self.formats)

    @classmethod
    def from_dict(cls, data: dict[str, Any], max_bytes: int = DEFAULT_FORMAT_BYTES) -> FormatOptions:
        """From an ExtractSpec dump (snake_case keys, as the worker spec holds it)."""
        main = data.get("main_content") or {}
        structured = data.get("structured") or {}
        return cls(
            formats=tuple(str(f) for f in data.get("formats") or ()),
            tables=bool(main.get("tables", True)),
            markdown_links=bool(main.get("links", False)),
            syntaxes=tuple(str(s) for s in structured.get("syntaxes") or ALL_SYNTAXES),
            max_bytes=max_bytes,
        )


@dataclass
class Formats:
    """What the formats gave one page: record fields, the formats cut or left out, seconds per format."""

    data: dict[str, Any] = field(default_factory=dict)
    truncated: list[str] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)


class FormatTimeout(Exception):
    """A format ran over :data:`FORMAT_SECONDS`."""


@contextlib.contextmanager
def time_limit(seconds: float, enabled: bool) -> Iterator[None]:
    """Raise :class:`FormatTimeout` in the code inside after ``seconds`` (SIGALRM: a parser child's main thread
    only; elsewhere, ``enabled=False``, the parse pool's own budget for the whole page is the bound)."""
    if not enabled or threading.current_thread() is not threading.main_thread():
        yield
        return

    def expired(_signum: int, _frame: Any) -> None:
        raise FormatTimeout(f"over {seconds:g}s")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def cut_text(text: str, max_bytes: int) -> tuple[str, bool]:
    """``text`` within ``max_bytes`` of UTF-8 (never half a character), and whether it was cut."""
    if len(text) * 4 <= max_bytes:
        return text, False  # fits whatever its characters
    raw = text.encode("utf-8")
    if len(raw) <= max_bytes:
        return text, False
    return raw[:max_bytes].decode("utf-8", errors="ignore"), True


class Budget:
    """Bounds a JSON value: entries per array or object, depth; notes whether anything was dropped."""

    def __init__(self, max_entries: int = MAX_FORMAT_ENTRIES, max_depth: int = MAX_FORMAT_DEPTH) -> None:
        self.max_entries = max_entries
        self.max_depth = max_depth
        self.cut = False

    def bound(self, value: Any, depth: int = 0) -> Any:
        if isinstance(value, dict):
            if depth >= self.max_depth:
                self.cut = True
                return None
            if len(value) > self.max_entries:
                self.cut = True
            items = list(value.items())[: self.max_entries]
            return {str(k): self.bound(v, depth + 1) for k, v in items}
        if isinstance(value, list | tuple):
            if depth >= self.max_depth:
                self.cut = True
                return None
            if len(value) > self.max_entries:
                self.cut = True
            return [self.bound(v, depth + 1) for v in value[: self.max_entries]]
        if isinstance(value, str | int | float | bool) or value is None:
            return value
        return str(value)


def fit_items(items: Sequence[Any], max_bytes: int) -> tuple[list[Any], bool]:
    """The leading ``items`` whose JSON fits in ``max_bytes`` together, and whether any were dropped."""
    kept: list[Any] = []
    used = 2
    for item in items:
        size = len(json.dumps(item, ensure_ascii=False, separators=(",", ":"), default=str).encode()) + 1
        if used + size > max_bytes:
            return kept, True
        kept.append(item)
        used += size
    return kept, False


def json_ld_blocks(tree: LexborHTMLParser) -> Iterator[str]:
    for node in tree.css("script[type]"):
        kind = (node.attributes.get("type") or "").split(";")[0].strip().lower()
        if kind in JSON_LD_TYPES:
            yield node.text(deep=True) or ""


def read_json_ld(tree: LexborHTMLParser, errors: list[str]) -> tuple[list[Any], bool]:
    """Each JSON-LD block on its own: a broken one is an error, the others still count. A block over
    :data:`JSON_LD_BLOCK_CHARS` is not parsed (the parse pool's body limit keeps pages below it anyway)."""
    items: list[Any] = []
    cut = False
    for number, block in enumerate(json_ld_blocks(tree), 1):
        if len(block) > JSON_LD_BLOCK_CHARS:
            cut = True
            errors.append(f"json-ld block {number}: {len(block)} characters, over the budget")
            continue
        try:
            data = json.loads(block.strip().removeprefix("<!--").removesuffix("-->"))
        except (ValueError, RecursionError) as exc:  # RecursionError: nesting deeper than Python's stack
            errors.append(f"json-ld block {number}: {type(exc).__name__}: {exc}")
            continue
        if isinstance(data, list):
            if len(data) > MAX_FORMAT_ENTRIES:
                cut = True
            items.extend(data[:MAX_FORMAT_ENTRIES])
        else:
            items.append(data)
        if len(items) > MAX_FORMAT_ENTRIES:
            cut = True
            del items[MAX_FORMAT_ENTRIES:]
            break
    return items, cut


def read_embedded(html: str, url: str, syntaxes: Sequence[str], errors: list[str]) -> dict[str, list[Any]]:
    """Microdata, OpenGraph and RDFa by extruct (it never fetches: RDFa vocabulary expansion is off, and the
    parser child refuses sockets anyway); a syntax that fails is an error, the others still count."""
    import extruct

    out: dict[str, list[Any]] = {}
    for syntax in syntaxes:
        try:
            found = extruct.extract(html, base_url=url, syntaxes=[syntax], errors="strict", uniform=True)
            out[syntax] = list(found.get(syntax) or [])
        except FormatTimeout:
            raise
        except Exception as exc:
            errors.append(f"{syntax}: {type(exc).__name__}: {exc}")
    return out


def structured(tree: LexborHTMLParser, html: str, url: str, options: FormatOptions) -> tuple[dict[str, Any], bool]:
    """The structured format: per syntax its items, bounded; ``errors`` lists what could not be read."""
    errors: list[str] = []
    found: dict[str, list[Any]] = {}
    cut = False
    if StructuredSyntax.JSON_LD.value in options.syntaxes:
        found[StructuredSyntax.JSON_LD.value], cut = read_json_ld(tree, errors)
    others = [s for s in options.syntaxes if s != StructuredSyntax.JSON_LD.value]
    if others:
        found.update(read_embedded(html, url, others, errors))
    budget = Budget()
    result: dict[str, Any] = {}
    room = options.max_bytes
    for syntax in options.syntaxes:
        items = budget.bound(found.get(syntax, [])) or []
        kept, dropped = fit_items(items, room)
        cut = cut or dropped
        result[syntax] = kept
        room -= len(json.dumps(kept, ensure_ascii=False, separators=(",", ":"), default=str).encode())
    if errors:
        result["errors"] = [e[:ERROR_CHARS] for e in errors[:MAX_ERRORS]]
    return result, cut or budget.cut


def main_content(html: str, url: str, options: FormatOptions, output: str) -> tuple[str, bool]:
    """The page's main content (trafilatura: navigation, ads, footers left out) as markdown or plain text."""
    import trafilatura

    cut = len(html) > MAIN_CONTENT_INPUT
    text = trafilatura.extract(
        html[:MAIN_CONTENT_INPUT],
        url=url,
        output_format="markdown" if output == OutputFormat.MARKDOWN.value else "txt",
        include_tables=options.tables,
        include_links=options.markdown_links and output == OutputFormat.MARKDOWN.value,
        include_images=False,
        include_comments=False,
        with_metadata=False,
        deduplicate=False,
    )
    value, over = cut_text(text or "", options.max_bytes)
    return value, over or cut


def bounded_links(links: Sequence[str], max_bytes: int) -> tuple[list[str], bool]:
    """The page's absolute links, deduplicated, at most :data:`MAX_FORMAT_LINKS` and ``max_bytes``."""
    unique = list(dict.fromkeys(links))
    kept, cut = fit_items(unique[:MAX_FORMAT_LINKS], max_bytes)
    return kept, cut or len(unique) > MAX_FORMAT_LINKS


def bound_screenshot(options: FormatOptions, render_info: dict[str, Any], data: dict[str, Any]) -> bool:
    """The screenshot format's bound: a shot over the pool's format budget is left out of the record and
    named in its truncated list (True then)."""
    shot = render_info.get("screenshot")
    if OutputFormat.SCREENSHOT.value not in options.formats or not isinstance(shot, str):
        return False
    if len(shot) <= options.max_bytes:
        return False
    del render_info["screenshot"]
    data["truncated"] = [*(data.get("truncated") or ()), OutputFormat.SCREENSHOT.value]
    return True


def run_formats(
    options: FormatOptions, tree: LexborHTMLParser, html: str, url: str, links: Sequence[str], *, timed: bool
) -> Formats:
    """Every requested format of one page. ``timed``: each format under :data:`FORMAT_SECONDS` (a parser
    child); a format that fails or runs over is None and named in ``truncated``."""
    out = Formats()
    for name in options.formats:
        if name == OutputFormat.SCREENSHOT.value:
            continue  # the browser takes it (jobsettings turns render.screenshot on); bounded by bound_screenshot
        started = time.monotonic()
        value: Any = None
        cut = True  # unless the format completes
        try:
            with time_limit(FORMAT_SECONDS, timed):
                if name == OutputFormat.LINKS.value:
                    value, cut = bounded_links(links, options.max_bytes)
                elif name == OutputFormat.STRUCTURED.value:
                    value, cut = structured(tree, html, url, options)
                else:
                    value, cut = main_content(html, url, options, name)
        except Exception:  # FormatTimeout, or a library's failure on this page: the format alone is lost
            value = None
        out.data[name] = value
        if cut:
            out.truncated.append(name)
        out.seconds[name] = time.monotonic() - started
    return out
