"""Output formats (extract.formats) of pages, pure: main content as markdown and text, embedded structured
data, links, and their bounds against hostile pages."""

from __future__ import annotations

import socket
import subprocess
import sys

import pytest

from format_pages import ARTICLE, GRAPHS, JSON_LD_ENTRIES, huge_text, many_json_ld
from trawl.api.formats import MAX_FORMAT_DEPTH, MAX_FORMAT_ENTRIES, MAX_FORMAT_LINKS
from trawl.api.scrapejob import ExtractSpec
from trawl.worker.extract import ExtractOptions, Extractor
from trawl.worker.formats import (
    Budget,
    FormatTimeout,
    bounded_links,
    cut_text,
    fit_items,
    time_limit,
)
from trawl.worker.jobsettings import parse_worker_spec

URL = "https://harbour.example/log/1.html"


def _formats(html: str, *formats: str, max_bytes: int = 1 << 20, **extract: object) -> dict[str, object]:
    options = ExtractOptions.from_dict({"formats": list(formats), **extract})
    options = ExtractOptions(formats=options.formats._replace(max_bytes=max_bytes))
    return Extractor(options).extract(html.encode(), URL).data


def test_markdown_keeps_the_article_and_its_table_without_navigation_ads_or_footer() -> None:
    data = _formats(ARTICLE, "markdown", "text")
    markdown, text = str(data["markdown"]), str(data["text"])
    assert "lighthouse keeper wrote every evening" in markdown and "every morning" in markdown
    assert "| Day | Ships |" in markdown and "| Monday | 12 |" in markdown
    for gone in ("Cheap flights", "Shop", "All rights reserved"):
        assert gone not in markdown and gone not in text
    assert "lighthouse keeper" in text and "#" not in text.split("\n")[0][:1]
    assert "truncated" not in data


def test_markdown_options_drop_tables_and_keep_links_absolute() -> None:
    data = _formats(ARTICLE, "markdown", main_content={"tables": False, "links": True})
    markdown = str(data["markdown"])
    assert "| Day |" not in markdown
    assert "[the next entry](https://harbour.example/log/2.html)" in markdown


def test_structured_reads_every_good_json_ld_block_beside_a_broken_one() -> None:
    data = _formats(ARTICLE, "structured")
    found = data["structured"]
    assert isinstance(found, dict)
    assert found["json-ld"] == GRAPHS  # both @graph blocks, in page order
    [error] = found["errors"]
    assert error.startswith("json-ld block 2: JSONDecodeError")
    assert found["microdata"] == [
        {"@type": "Product", "@context": "https://schema.org", "name": "Brass lantern", "price": "40"}
    ]
    assert found["opengraph"][0]["og:title"] == "The keeper's log"
    assert found["opengraph"][0]["@type"] == "article"  # extruct's uniform form
    assert isinstance(found["rdfa"], list)
    assert "truncated" not in data


def test_structured_syntaxes_are_the_jobs_choice() -> None:
    data = _formats(ARTICLE, "structured", structured={"syntaxes": ["opengraph"]})
    assert set(data["structured"]) == {"opengraph"}  # type: ignore[arg-type]


def test_links_are_absolute_and_deduplicated() -> None:
    links = _formats(ARTICLE, "links")["links"]
    assert isinstance(links, list)
    assert len(links) == len(set(links))
    assert "https://harbour.example/about" in links and "https://harbour.example/shop?x=1" in links
    assert all(link.startswith(("https://", "http://")) for link in links)


def test_a_huge_text_node_is_cut_to_the_budget_and_marked() -> None:
    budget = 64 * 1024
    data = _formats(huge_text(), "markdown", "text", max_bytes=budget)
    assert data["truncated"] == ["markdown", "text"]
    for name in ("markdown", "text"):
        value = str(data[name])
        assert 0 < len(value.encode()) <= budget and value.startswith("word word")


def test_a_100000_entry_json_ld_array_is_bounded_and_marked() -> None:
    data = _formats(many_json_ld(), "structured", max_bytes=256 * 1024)
    found = data["structured"]
    assert isinstance(found, dict)
    assert data["truncated"] == ["structured"]
    assert 0 < len(found["json-ld"]) <= MAX_FORMAT_ENTRIES < JSON_LD_ENTRIES
    assert found["json-ld"][0] == {"@type": "Offer", "price": 0}


def test_deep_json_is_cut_at_the_depth_bound() -> None:
    budget = Budget()
    value: object = 1
    for _ in range(MAX_FORMAT_DEPTH * 3):
        value = [value]
    bounded = budget.bound(value)
    depth = 0
    while isinstance(bounded, list):
        bounded, depth = bounded[0], depth + 1
    assert depth == MAX_FORMAT_DEPTH and bounded is None and budget.cut


def test_json_nested_past_the_interpreter_stack_is_an_error_not_a_crash() -> None:
    deep = "[" * 200_000 + "]" * 200_000
    page = f'<html><head><script type="application/ld+json">{deep}</script></head><body></body></html>'
    found = _formats(page, "structured", structured={"syntaxes": ["json-ld"]})["structured"]
    assert isinstance(found, dict) and found["json-ld"] == [] and "RecursionError" in found["errors"][0]


def test_bounds_of_text_items_and_links() -> None:
    assert cut_text("é" * 10, 5) == ("éé", True)  # never half a character
    assert cut_text("abc", 3) == ("abc", False)
    assert fit_items(["aaaa"] * 10, 20) == (["aaaa"] * 2, True)
    links = [f"https://a.example/{i}" for i in range(MAX_FORMAT_LINKS + 5)]
    kept, cut = bounded_links(links + links, 1 << 30)
    assert cut and kept == links[:MAX_FORMAT_LINKS]


def test_expensive_formats_never_parse_on_the_event_loop() -> None:
    assert Extractor(ExtractOptions.from_dict({"formats": ["links"]})).inline_safe
    for name in ("markdown", "text", "structured"):
        assert not Extractor(ExtractOptions.from_dict({"formats": [name]})).inline_safe


def test_the_budget_is_the_pools_not_the_jobs() -> None:
    spec = parse_worker_spec({"extract": {"formats": ["markdown"]}, "format_max_bytes": 4096})
    assert spec.extract.formats.max_bytes == 4096 and spec.extract.formats.formats == ("markdown",)
    with pytest.raises(ValueError, match=r"maxBytes|max_bytes|extra"):
        ExtractSpec.model_validate({"formats": ["markdown"], "mainContent": {"maxBytes": 1 << 30}})


def test_text_format_and_text_option_are_one_or_the_other() -> None:
    with pytest.raises(ValueError, match="choose one"):
        ExtractSpec.model_validate({"text": True, "formats": ["text"]})
    with pytest.raises(ValueError, match="unique"):
        ExtractSpec.model_validate({"formats": ["links", "links"]})
    with pytest.raises(ValueError, match="truncated: names the formats"):
        ExtractSpec.model_validate({"formats": ["links"], "fields": [{"name": "truncated", "selector": "p"}]})


def test_a_parser_process_cannot_open_a_socket() -> None:
    """The audit hook every parser child installs: no library it runs can reach an address."""
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    code = (
        "import socket\nfrom trawl.worker.parsepool import forbid_network\nforbid_network()\n"
        f"try:\n    socket.create_connection(('127.0.0.1', {port}), timeout=5)\nexcept PermissionError as e:\n"
        "    print('refused', e)\n"
    )
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    finally:
        listener.close()
    assert out.stdout.startswith("refused"), out


def test_a_format_over_its_time_is_stopped_by_the_timer() -> None:
    """The per-format timer a parser child runs each format under (SIGALRM, main thread)."""
    with pytest.raises(FormatTimeout), time_limit(0.2, True):
        while True:
            pass
    with time_limit(0.2, False):  # off: the parse pool's budget for the page is the bound
        pass
