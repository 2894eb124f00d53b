"""Extraction with selectolax (CSS) and parsel (XPath); malformed HTML never raises."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from trawl.dev.bookstore import PRODUCT_FIELDS, PRODUCT_XPATH_FIELD, Renderer, catalog, expected_record
from trawl.worker.extract import ExtractOptions, Extractor, decode_html, parser_input

PAGE = """<html><head><title>  A   Title </title><base href="/base/"></head><body>
<h1 class="name">Widget</h1><p class="price">£9.99</p>
<ul><li class="tag">a</li><li class="tag">b</li></ul>
<a href="next.html">next</a><a href="http://other.test/x">x</a><a href="#top">top</a><a href="javascript:void(0)">j</a>
<img src="img/1.png"><img src="/img/2.png">
<script>var hidden = 1;</script><p>Visible text.</p>
</body></html>"""


def test_fields_links_images_title_text() -> None:
    options = ExtractOptions.from_dict(
        {
            "fields": [
                {"name": "name", "selector": "h1.name"},
                {"name": "price", "selector": "//p[@class='price']", "kind": "XPath"},
                {"name": "tags", "selector": "li.tag", "multiple": True},
                {"name": "first_link", "selector": "a", "attribute": "href"},
                {"name": "missing", "selector": ".nope"},
                {"name": "hrefs", "selector": "//a/@href", "kind": "XPath", "multiple": True},
            ],
            "links": True,
            "images": True,
            "text": True,
        }
    )
    page = Extractor(options).extract(PAGE, "http://shop.test/dir/page.html")
    data = page.data
    assert data["title"] == "A Title"
    assert data["name"] == "Widget"
    assert data["price"] == "£9.99"
    assert data["tags"] == ["a", "b"]
    assert data["first_link"] == "http://shop.test/base/next.html"
    assert data["missing"] is None
    assert data["hrefs"][:2] == ["http://shop.test/base/next.html", "http://other.test/x"]
    assert data["links"] == ["http://shop.test/base/next.html", "http://other.test/x"]
    assert data["images"] == ["http://shop.test/base/img/1.png", "http://shop.test/img/2.png"]
    assert "Visible text." in data["text"] and "hidden" not in data["text"]


def test_malformed_html_and_bad_selectors_do_not_raise() -> None:
    options = ExtractOptions.from_dict(
        {
            "fields": [
                {"name": "a", "selector": "p:::bad"},
                {"name": "b", "selector": "//p[", "kind": "XPath"},
                {"name": "c", "selector": "p", "multiple": True},
            ],
            "text": True,
        }
    )
    extractor = Extractor(options, need_links=True)
    for html in ["", "<", "<html><p>unclosed <b>bold <a href='x'>", "\x00\xff<p>bin</p>", b"\xff\xfe<p>bytes"]:
        page = extractor.extract(html, "http://x.test/")
        assert page.data["a"] is None
        assert page.data["b"] is None
        assert isinstance(page.data["c"], list)


def test_only_matching_still_returns_links() -> None:
    extractor = Extractor(ExtractOptions.from_dict({"onlyMatching": r"/product/"}), need_links=True)
    page = extractor.extract(PAGE, "http://shop.test/category/1.html")
    assert not page.matched and page.data == {} and page.links


def test_bookstore_product_page_yields_the_expected_record() -> None:
    renderer = Renderer(catalog(2, 5, 3))
    options = ExtractOptions.from_dict({"fields": [*PRODUCT_FIELDS, PRODUCT_XPATH_FIELD]})
    extractor = Extractor(options)
    for product in renderer.cat.products:
        html = renderer.product(product.id)
        assert html is not None
        data = extractor.extract(html, "http://b.test" + product.path).data
        assert {k: data[k] for k in expected_record(product)} == expected_record(product)


# --- the parser gets the raw bytes only when they are exactly the decoded text in UTF-8 -------------------

_PIECES = st.sampled_from(
    [
        b"<p>plain ascii</p>",
        "<p>caf\u00e9 \u20ac \u65e5\u672c</p>".encode(),
        b"<p>\xe9t\xe9 in latin-1</p>",
        b"<p>broken \xc3 utf-8 \xff</p>",
        b'<meta charset="utf-8">',
        b'<meta charset="windows-1252">',
        b'<meta http-equiv="Content-Type" content="text/html; charset=iso-8859-2">',
        b'<meta charset="utf-16">',
        b"<base href='/b/'><a href='x'>x</a>",
        b'<a href="/\xc3\xa9">e</a>',
        b"\x1b$B",
    ]
)


@settings(max_examples=300, deadline=None)
@given(
    bom=st.sampled_from([b"", b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff"]),
    pieces=st.lists(_PIECES, max_size=6),
    content_type=st.sampled_from(
        [None, "", "text/html", "text/html; charset=utf-8", "text/html; charset=ISO-8859-1", "text/html; charset=x"]
    ),
)
def test_parser_input_is_the_decoded_page(bom: bytes, pieces: list[bytes], content_type: str | None) -> None:
    body = bom + b"".join(pieces)
    got = parser_input(body, content_type)
    text = decode_html(body, content_type)
    # Either the decoded text itself, or bytes that are that text in UTF-8 (what the parser reads).
    assert got == text if isinstance(got, str) else got == text.encode("utf-8")


def test_extraction_from_bytes_equals_extraction_from_text() -> None:
    options = ExtractOptions.from_dict(
        {"fields": [{"name": "p", "selector": "p"}, {"name": "a", "selector": "//a/@href", "kind": "XPath"}]}
    )
    extractor = Extractor(options, need_links=True)
    for body in (PAGE.encode(), PAGE.encode("utf-8") + b"\xff", PAGE.encode("latin-1", "replace")):
        for content_type in (None, "text/html; charset=utf-8", "text/html; charset=windows-1252"):
            from_bytes = extractor.extract(body, "http://shop.test/a/", content_type=content_type)
            from_text = extractor.extract(decode_html(body, content_type), "http://shop.test/a/")
            assert (from_bytes.data, from_bytes.links) == (from_text.data, from_text.links)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(list(" \t\n\r\x0b\x0c\x1c\x85\xa0\u2003\u3000ab\u00e9"))))
def test_clean_collapses_whitespace_as_the_regex_did(text: str) -> None:
    from trawl.worker.extract import _WS, _clean

    assert _clean(text) == _WS.sub(" ", text).strip()
