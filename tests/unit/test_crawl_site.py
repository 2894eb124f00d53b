"""bench/crawl_site.py: the generated site's pages, links and minimal HTTP, for crawls of up to millions of pages."""

from __future__ import annotations

import math
from collections import deque

import pytest
from selectolax.lexbor import LexborHTMLParser

from crawl_site import FIELDS, Site, fields_of, links_of, page_html, page_index, split_request


def depths(n: int) -> list[int]:
    """Each page's link hops from /p/0 (-1: unreachable), breadth first."""
    depth = [-1] * n
    depth[0] = 0
    todo = deque([0])
    while todo:
        i = todo.popleft()
        for j in links_of(i, n):
            if depth[j] < 0:
                depth[j] = depth[i] + 1
                todo.append(j)
    return depth


@pytest.mark.parametrize("n", [1, 2, 7, 1000, 20_000])
def test_the_whole_site_is_reachable_from_the_first_page_within_log2_hops(n: int) -> None:
    depth = depths(n)
    assert min(depth) == 0  # every page reached
    assert all(depth[j] <= math.log2(j + 1) for j in range(n))
    assert max(depth) <= 100  # crawl.maxDepth's bound


def test_links_stay_on_the_site_and_most_point_back_to_earlier_pages() -> None:
    n = 10_000
    linked_from: dict[int, set[int]] = {}
    total = back = 0
    for i in range(n):
        links = links_of(i, n)
        assert all(0 <= j < n for j in links)
        total += len(links)
        back += sum(j < i for j in links)
        for j in links:
            if j > i:
                linked_from.setdefault(j, set()).add(i)
    assert total / n == pytest.approx(10, abs=0.1)  # ~10 links a page for one new URL: dedupe rejects ~9 in 10
    assert back / total > 0.6
    # a page is reached forward from two pages (one skipped by a Bloom filter does not cut a subtree off)
    assert all(len(linked_from[j]) >= 2 for j in range(3, n))
    assert links_of(5, n) == links_of(5, n)  # deterministic


def test_a_page_carries_the_fields_the_job_extracts_and_its_links() -> None:
    n = 1_000_000
    for i in (0, 1, 123_456, n - 1):
        html = page_html(i, n)
        tree = LexborHTMLParser(html.decode())
        got = {name: " ".join(tree.css_first(sel).text().split()) for name, sel in FIELDS.items()}
        assert got == fields_of(i)
        hrefs = [a.attributes["href"] for a in tree.css("ul a")]
        assert hrefs == [f"/p/{j}" for j in links_of(i, n)]
        assert 800 < len(html) < 2000  # a small page: the crawl's per-page cost, not the bytes, is measured
    assert fields_of(1) != fields_of(2)


def test_page_index_takes_only_pages_of_the_site() -> None:
    assert page_index("/p/0", 10) == 0
    assert page_index("/p/9", 10) == 9
    for path in ("/p/10", "/p/", "/p/01", "/p/-1", "/p/1x", "/p/\u0661", "/robots.txt", "/", "/q/1"):
        assert page_index(path, 10) is None, path


def test_requests_are_split_kept_alive_closed_and_pipelined() -> None:
    assert split_request(b"GET /p/1 HTTP/1.1\r\nHost: x") == (None, 0)
    one = b"GET /p/1 HTTP/1.1\r\nHost: x\r\n\r\n"
    assert split_request(one) == (("GET", "/p/1", False), len(one))
    close = b"GET /p/2 HTTP/1.1\r\nHost: x\r\nConnection: Close\r\n\r\n"
    assert split_request(close) == (("GET", "/p/2", True), len(close))
    assert split_request(b"GET / HTTP/1.0\r\n\r\n")[0] == ("GET", "/", True)
    assert split_request(b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")[0] == ("GET", "/", False)
    assert split_request(one + close) == (("GET", "/p/1", False), len(one))  # the second stays in the buffer
    with pytest.raises(ValueError, match="body"):
        split_request(b"POST /p/1 HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc")
    with pytest.raises(ValueError, match="request line"):
        split_request(b"GARBAGE\r\n\r\n")
    with pytest.raises(ValueError, match="too large"):
        split_request(b"GET /" + b"a" * 20_000)


def test_the_site_counts_distinct_pages_repeats_and_misses() -> None:
    site = Site(5)
    assert site.answer("GET", "/p/1", False).startswith(b"HTTP/1.1 200 OK\r\n")
    site.answer("GET", "/p/1?x=1", False)
    site.answer("GET", "/p/4", False)
    assert site.answer("GET", "/p/5", False).startswith(b"HTTP/1.1 404")
    assert site.answer("HEAD", "/p/1", False).startswith(b"HTTP/1.1 405")
    closing = site.answer("GET", "/p/2", True)
    assert b"\r\nConnection: close\r\n" in closing.split(b"\r\n\r\n", 1)[0] + b"\r\n"
    head, body = site.answer("GET", "/__/stats", False).split(b"\r\n\r\n", 1)
    assert f"Content-Length: {len(body)}".encode() in head
    assert site.stats() == {"pages": 5, "requests": 4, "distinct": 3, "repeats": 1, "not_found": 1}
