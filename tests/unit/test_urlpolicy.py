"""Address block list, URL canonicalisation and crawl scope."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trawl.egress.addresses import address_block_reason, parse_networks
from trawl.worker.urls import CrawlPolicy, canonicalize, canonicalize_slow, registrable_domain


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "127.8.9.10",
        "10.0.0.1",
        "172.16.5.4",
        "192.168.1.1",
        "169.254.169.254",
        "100.64.0.1",
        "0.0.0.0",
        "224.0.0.1",
        "255.255.255.255",
        "240.0.0.1",
        "::1",
        "::",
        "fe80::1",
        "fc00::1",
        "fd12:3456::1",
        "ff02::1",
        "::ffff:169.254.169.254",
        "::ffff:127.0.0.1",
        "::ffff:10.0.0.1",
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "2002:7f00:1::",  # 6to4 of 127.0.0.1
        "::127.0.0.1",  # IPv4-compatible
        "2001:db8::1",
    ],
)
def test_internal_addresses_are_blocked(address: str) -> None:
    assert address_block_reason(address) is not None


@pytest.mark.parametrize("address", ["93.184.216.34", "8.8.8.8", "2606:4700:4700::1111", "::ffff:8.8.8.8"])
def test_public_addresses_pass(address: str) -> None:
    assert address_block_reason(address) is None


def test_allow_list_opens_exactly_the_listed_networks() -> None:
    allowed = parse_networks(["127.0.0.2/32", "10.1.0.0/16"])
    assert address_block_reason("127.0.0.2", allowed) is None
    assert address_block_reason("10.1.2.3", allowed) is None
    assert address_block_reason("::ffff:127.0.0.2", allowed) is None  # mapped form of an allowed address
    assert address_block_reason("127.0.0.1", allowed) is not None
    assert address_block_reason("10.2.0.1", allowed) is not None
    assert address_block_reason("169.254.169.254", allowed) is not None
    assert address_block_reason("not-an-ip", allowed) is not None


@pytest.mark.parametrize(
    ("raw", "canonical"),
    [
        ("HTTP://Example.COM:80/a/./b/../c?x=1#frag", "http://example.com/a/c?x=1"),
        ("http://example.com/.?a=1&b=2", "http://example.com/?a=1&b=2"),  # a dot segment just before the query
        ("http://example.com/a/b/..?q=//", "http://example.com/a/?q=//"),
        ("http://example.com/a?u=http://x/./y", "http://example.com/a?u=http://x/./y"),  # the query keeps its dots
        ("https://example.com:443", "https://example.com/"),
        ("https://example.com:8443/x/", "https://example.com:8443/x/"),
        ("http://example.com/a%7Eb", "http://example.com/a~b"),
        ("http://example.com/a b", "http://example.com/a%20b"),
        ("http://bücher.de/", "http://xn--bcher-kva.de/"),
        ("http://[::1]:8080/", "http://[::1]:8080/"),
        ("http://example.com./x", "http://example.com/x"),
    ],
)
def test_canonicalize(raw: str, canonical: str) -> None:
    assert canonicalize(raw) == canonical


@pytest.mark.parametrize(
    "raw", ["ftp://example.com/", "javascript:alert(1)", "mailto:a@b.c", "http://", "http://a:99999/"]
)
def test_canonicalize_rejects(raw: str) -> None:
    assert canonicalize(raw) is None


def test_registrable_domain() -> None:
    assert registrable_domain("www.shop.example.com") == "example.com"
    assert registrable_domain("books.example.co.uk") == "example.co.uk"
    assert registrable_domain("127.0.0.1") == "127.0.0.1"
    # The Public Suffix List, not a guess: private suffixes are sites of their own, wildcards and exceptions
    assert registrable_domain("alice.github.io") == "alice.github.io" != registrable_domain("bob.github.io")
    assert registrable_domain("www.city.kawasaki.jp") == "city.kawasaki.jp"
    assert registrable_domain("a.b.example.kawasaki.jp") == "b.example.kawasaki.jp"
    assert registrable_domain("www.example.com.au") == "example.com.au"
    assert registrable_domain("localhost.") == "localhost"


def test_crawl_policy_scope_depth_include_exclude() -> None:
    page = "http://books.example.com/category/a/page-1.html"
    links = [
        "/product/1.html",
        "http://books.example.com/product/1.html#reviews",  # same after canonicalisation
        "http://other.example.com/product/2.html",
        "http://evil.test/product/3.html",
        "/product/4.html?sort=asc",
        "/private/x.html",
        "mailto:someone@example.com",
    ]
    absolute = [link if "://" in link or ":" in link else "http://books.example.com" + link for link in links]
    same_host = CrawlPolicy.build(scope="SameHost", exclude=[r"/private/"], max_depth=2)
    assert same_host.select(absolute, page, 0) == [
        "http://books.example.com/product/1.html",
        "http://books.example.com/product/4.html?sort=asc",
    ]
    same_domain = CrawlPolicy.build(scope="SameDomain", include=[r"/product/\d+\.html$"], max_depth=2)
    assert same_domain.select(absolute, page, 1) == [
        "http://books.example.com/product/1.html",
        "http://other.example.com/product/2.html",
    ]
    assert same_host.select(absolute, page, 2) == []  # depth 3 would exceed maxDepth 2


_URL_PARTS = st.tuples(
    st.sampled_from(["http", "https", "HTTP", "ftp"]),
    st.sampled_from(["example.com", "Example.COM", "a.b.example.org", "127.0.0.1", "host.", "bücher.de", "[::1]"]),
    st.sampled_from(["", ":80", ":443", ":8080", ":0", ":080", ":99999"]),
    st.lists(st.sampled_from(["a", "b.html", ".", "..", "", "%7E", "x y", "~u", "p(1)", "q=1"]), max_size=5),
    st.sampled_from(["", "?", "?a=1&b=2", "?u=http://x/y", "?q=%20"]),
    st.sampled_from(["", "#frag"]),
)


@given(_URL_PARTS)
def test_fast_path_agrees_with_the_full_canonicalisation(parts: tuple[str, str, str, list[str], str, str]) -> None:
    scheme, host, port, segments, query, fragment = parts
    url = f"{scheme}://{host}{port}" + ("/" + "/".join(segments) if segments else "") + query + fragment
    assert canonicalize(url) == canonicalize_slow(url)
    canon = canonicalize(url)
    if canon is not None:
        assert canonicalize(canon) == canon  # idempotent
