"""Extraction: named fields by CSS (selectolax) or XPath (parsel/lxml), links, images, title, text.

An :class:`Extractor` is compiled once per job spec and applied to many pages. Malformed HTML never
raises: the parsers recover, and a selector that fails on a page yields None for its field.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple
from urllib.parse import urljoin

from selectolax.lexbor import LexborHTMLParser as HTMLParser
from selectolax.lexbor import LexborNode as Node
from w3lib.encoding import html_body_declared_encoding, html_to_unicode, http_content_type_encoding, read_bom

from trawl.api.patterns import compiled as compiled_pattern
from trawl.refresh import fingerprint as fingerprints

from .formats import FormatOptions, run_formats

_WS = re.compile(r"\s+")
_SKIP_TEXT_TAGS = ("script", "style", "noscript", "template", "head")
_UTF8 = frozenset({"utf-8", "utf8"})  # w3lib's names for UTF-8 (resolved labels, and its default)
FINGERPRINT_TEXT = 2_000_000  # characters of readable text a Text fingerprint covers (a record's text: 100,000)


class FieldSpec(NamedTuple):
    name: str
    selector: str
    kind: str = "CSS"  # or "XPath"
    attribute: str | None = None
    multiple: bool = False


@dataclass(frozen=True, slots=True)
class ExtractOptions:
    fields: tuple[FieldSpec, ...] = ()
    links: bool = False
    images: bool = False
    title: bool = True
    text: bool = False
    only_matching: str | None = None
    # A refresh job's fingerprint of the page, computed where the page is parsed: "Record" (the fields
    # extracted) or "Text" (the readable text); "" for none (or "Body", which the worker takes of the bytes).
    fingerprint: str = ""
    formats: FormatOptions = field(default_factory=FormatOptions)  # spec.extract.formats (trawl.worker.formats)

    @classmethod
    def from_dict(cls, data: dict[str, Any] | None) -> ExtractOptions:
        """From an ExtractSpec dump (snake_case or camelCase keys)."""
        if not data:
            return cls()
        raw_fields = data.get("fields") or []
        fields = tuple(
            FieldSpec(
                name=f["name"],
                selector=f["selector"],
                kind=str(f.get("kind") or "CSS"),
                attribute=f.get("attribute"),
                multiple=bool(f.get("multiple", False)),
            )
            for f in raw_fields
        )
        return cls(
            fields=fields,
            links=bool(data.get("links", False)),
            images=bool(data.get("images", False)),
            title=bool(data.get("title", True)),
            text=bool(data.get("text", False)),
            only_matching=data.get("only_matching", data.get("onlyMatching")),
            formats=FormatOptions.from_dict(data),
        )


def _clean(text: str) -> str:
    """Whitespace runs collapsed to one space, ends trimmed: what ``_WS.sub(" ", text).strip()`` gives (the
    regex's \\s and str.split() use the same Unicode whitespace), at a sixth of the cost."""
    return " ".join(text.split())


def _origin(url: str) -> str | None:
    """``scheme://netloc`` of an absolute http(s) URL, or None."""
    if not url.startswith(("http://", "https://")):
        return None
    end = url.find("/", url.index("//") + 2)
    for stop in ("?", "#"):
        cut = url.find(stop, url.index("//") + 2)
        if cut != -1 and (end == -1 or cut < end):
            end = cut
    return url if end == -1 else url[:end]


def _absolute(base: str, href: str | None, origin: str | None = None) -> str | None:
    if not href:
        return None
    href = href.strip()
    if not href or href.startswith(("#", "javascript:", "mailto:", "tel:", "data:")):
        return None
    if origin is not None and href[0] == "/" and not href.startswith("//") and "\\" not in href:
        return origin + href  # the common case, without urljoin's parsing
    try:
        return urljoin(base, href)
    except ValueError:
        return None


@dataclass
class Page:
    """What extraction produced for one page."""

    data: dict[str, Any] = field(default_factory=dict)  # the record's fields (title, fields, links...)
    links: list[str] = field(default_factory=list)  # absolute hrefs, for crawl mode
    matched: bool = True  # only_matching
    fingerprint: str = ""  # ExtractOptions.fingerprint's, of a matched page
    format_seconds: dict[str, float] = field(default_factory=dict)  # time each output format took


class Extractor:
    def __init__(self, options: ExtractOptions, *, need_links: bool = False) -> None:
        self.options = options
        self.need_links = need_links or options.links or "links" in options.formats.formats
        self._only = compiled_pattern(options.only_matching) if options.only_matching else None
        self._css = [f for f in options.fields if f.kind.lower() != "xpath"]
        self._xpath = [f for f in options.fields if f.kind.lower() == "xpath"]
        # An XPath the job author wrote can take any time on a small page (nested predicates over every
        # node: N^k), so a job with one is extracted in a parser process, where the time budget applies
        # (trawl.worker.parsepool), whatever the page's size.
        # The same for markdown, text and structured data: their libraries' cost on a hostile page is theirs.
        self.inline_safe = not self._xpath and not options.formats.expensive
        self.timed_formats = False  # each format under its own timer: set in a parser child (SIGALRM)

    def matches(self, url: str) -> bool:
        return self._only is None or self._only.search(url)

    def extract(self, html: str | bytes, url: str, *, content_type: str | None = None) -> Page:
        page = Page(matched=self.matches(url))
        if isinstance(html, bytes):
            html = parser_input(html, content_type)
        try:
            tree = HTMLParser(html)
        except Exception:  # selectolax is robust, but a parser failure must never kill a task
            tree = HTMLParser("")
        base = url
        base_node = tree.css_first("base[href]")
        if base_node is not None:
            base = _absolute(url, base_node.attributes.get("href")) or url
        if self.need_links:
            links: list[str] = []
            origin = _origin(base)
            for node in tree.css("a[href]"):
                absolute = _absolute(base, node.attributes.get("href"), origin)
                if absolute is not None:
                    links.append(absolute)
            page.links = links
        if not page.matched:
            return page
        data = page.data
        opts = self.options
        if opts.title:
            title = tree.css_first("title")
            data["title"] = _clean(title.text()) if title is not None else None
        for spec in self._css:
            data[spec.name] = self._css_field(tree, spec, base)
        if self._xpath:
            data.update(self._xpath_fields(html, base))
        if opts.links:
            data["links"] = list(dict.fromkeys(page.links))
        if opts.images:
            images: list[str] = []
            for node in tree.css("img[src]"):
                absolute = _absolute(base, node.attributes.get("src"))
                if absolute is not None:
                    images.append(absolute)
            data["images"] = list(dict.fromkeys(images))
        if opts.text:
            data["text"] = readable_text(tree)
        if opts.formats.formats:
            self._formats(page, tree, html, base)
        if opts.fingerprint == "Record":
            page.fingerprint = fingerprints.of_record(data)
        elif opts.fingerprint == "Text":
            page.fingerprint = fingerprints.of_text(
                data["text"] if opts.text else readable_text(tree, FINGERPRINT_TEXT)
            )
        return page

    def _formats(self, page: Page, tree: HTMLParser, html: str | bytes, base: str) -> None:
        text = html.decode("utf-8", errors="replace") if isinstance(html, bytes) else html
        done = run_formats(self.options.formats, tree, text, base, page.links, timed=self.timed_formats)
        page.data.update(done.data)
        if done.truncated:
            page.data["truncated"] = done.truncated
        page.format_seconds = done.seconds

    @staticmethod
    def _value(node: Node, spec: FieldSpec, base: str) -> str | None:
        if spec.attribute:
            value = node.attributes.get(spec.attribute)
            if value is None:
                return None
            if spec.attribute in ("href", "src"):
                return _absolute(base, value) or value
            return str(value).strip()
        return _clean(node.text(deep=True))

    def _css_field(self, tree: HTMLParser, spec: FieldSpec, base: str) -> Any:
        try:
            if spec.multiple:
                values = [self._value(n, spec, base) for n in tree.css(spec.selector)]
                return [v for v in values if v is not None]
            node = tree.css_first(spec.selector)
            return None if node is None else self._value(node, spec, base)
        except Exception:  # an unsupported selector on some page: no value rather than no record
            return [] if spec.multiple else None

    def _xpath_fields(self, html: str | bytes, base: str) -> dict[str, Any]:
        from parsel import Selector

        out: dict[str, Any] = {}
        try:
            text = html.decode("utf-8", errors="replace") if isinstance(html, bytes) else html
            sel = Selector(text=text or "<html></html>")
        except Exception:
            return {spec.name: ([] if spec.multiple else None) for spec in self._xpath}
        for spec in self._xpath:
            try:
                found = sel.xpath(spec.selector)
                values: list[str] = []
                for item in found:
                    if spec.attribute:
                        raw = item.attrib.get(spec.attribute)
                        if raw is None:
                            continue
                        if spec.attribute in ("href", "src"):
                            raw = _absolute(base, raw) or raw
                        values.append(raw.strip())
                    else:
                        root = item.root
                        if isinstance(root, str):
                            value = _clean(root)
                            if spec.selector.rstrip().endswith(("@href", "@src")):
                                value = _absolute(base, value) or value
                            values.append(value)
                        else:
                            values.append(_clean(" ".join(item.xpath(".//text()").getall())))
                    if not spec.multiple:
                        break
                out[spec.name] = values if spec.multiple else (values[0] if values else None)
            except Exception:
                out[spec.name] = [] if spec.multiple else None
        return out


def parser_input(body: bytes, content_type: str | None) -> str | bytes:
    """What the parser gets for ``body``: the text :func:`decode_html` gives, or the bytes themselves
    when they are exactly that text in UTF-8 (no byte-order mark, the page's encoding resolves to UTF-8
    and the bytes are valid UTF-8), the common case: the parser reads UTF-8, so handing it the text
    would decode and re-encode the page for the same tree (about a sixth of a page's CPU time)."""
    if read_bom(body)[0] is None:
        encoding = http_content_type_encoding(content_type) or html_body_declared_encoding(body) or "utf-8"
        if encoding in _UTF8:
            if body.isascii():
                return body
            try:
                body.decode("utf-8")
            except UnicodeDecodeError:
                pass  # invalid bytes become U+FFFD in decode_html, as a browser shows them
            else:
                return body
    return decode_html(body, content_type)


def decode_html(body: bytes, content_type: str | None) -> str:
    """The page's text, decoded as a browser would: a byte-order mark first, then the charset of the
    Content-Type header, then a ``<meta charset>`` / ``http-equiv`` in the document, then UTF-8
    (w3lib's implementation of the HTML5 sniffing rules; undecodable bytes become U+FFFD)."""
    _encoding, text = html_to_unicode(content_type, body, auto_detect_fun=None)
    return str(text)


def readable_text(tree: HTMLParser, limit: int = 100_000) -> str:
    body = tree.body or tree.root
    if body is None:
        return ""
    clone = HTMLParser(body.html or "")
    clone.strip_tags(list(_SKIP_TEXT_TAGS))
    root = clone.body or clone.root
    text = root.text(separator=" ") if root is not None else ""
    return _clean(text)[:limit]


def field_specs(rules: Sequence[dict[str, Any]]) -> tuple[FieldSpec, ...]:
    return ExtractOptions.from_dict({"fields": list(rules)}).fields
