"""Sitemaps are hostile input: trawl.worker.sitemaps reads urlsets, indexes, gzip and plain text under hard
limits, and refuses bombs, entity expansion, HTML and oversized files with a clear message (BadSitemap).
The spec side: spec.sitemaps, the seeds the operator enqueues for it, and the job's task cap."""

from __future__ import annotations

import gzip
import time
import tracemalloc
from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.dev.sitemapsite import BILLION_LAUGHS, gzip_bomb, sitemap_index, urlset
from trawl.jobspec.admission import limit_exceeded
from trawl.jobspec.wire import build_job_config, build_worker_spec
from trawl.worker.jobsettings import parse_worker_spec
from trawl.worker.pipeline import found_depth
from trawl.worker.sitemaps import (
    MAX_DECOMPRESSED_BYTES,
    MAX_INDEX_ENTRIES,
    MAX_URLSET_ENTRIES,
    BadSitemap,
    SitemapRules,
    is_robots_task,
    lastmod_time,
    read_sitemap,
    robots_sitemaps,
)

SITE = "https://books.test"
RULES = SitemapRules()


def _read(body: bytes, content_type: str = "application/xml", rules: SitemapRules = RULES) -> Any:
    return read_sitemap(body, content_type, SITE + "/sitemap.xml", rules)


def _ts(text: str) -> float:
    return datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp()


def test_a_urlset_gives_its_canonical_urls_on_its_own_host() -> None:
    body = urlset(
        [
            (SITE + "/a", None),
            (" https://BOOKS.test:443/b#frag ", "2024-01-01"),
            ("https://elsewhere.test/c", None),  # another host: sitemaps.org says a sitemap speaks for its own
            ("ftp://books.test/d", None),
            (SITE + "/a", None),
        ]
    )
    found = _read(body)
    assert (found.kind, found.urls, found.entries) == ("urlset", [SITE + "/a", SITE + "/b"], 5)
    assert (found.off_site, found.filtered) == (1, 1)


def test_same_domain_scope_takes_the_sites_other_hosts() -> None:
    body = urlset([("https://www.books.test/x", None), ("https://other.test/y", None)])
    found = _read(body, rules=SitemapRules(scope="SameDomain"))
    assert found.urls == ["https://www.books.test/x"]


def test_an_index_names_sitemaps_and_gzip_is_known_by_its_bytes() -> None:
    index = sitemap_index([SITE + "/s1.xml.gz", SITE + "/s2.xml"])
    found = _read(gzip.compress(index), content_type="application/octet-stream")
    assert (found.kind, found.urls) == ("sitemapindex", [SITE + "/s1.xml.gz", SITE + "/s2.xml"])
    # gzip served as text/xml, or under a name without .gz: the magic bytes decide
    assert _read(gzip.compress(urlset([(SITE + "/p", None)])), content_type="text/xml").urls == [SITE + "/p"]


def test_a_plain_text_sitemap_lists_one_url_per_line() -> None:
    found = _read(f"{SITE}/1\r\n\n  {SITE}/2\nnot a url\n".encode(), content_type="text/plain; charset=utf-8")
    assert (found.kind, found.urls, found.filtered) == ("text", [SITE + "/1", SITE + "/2"], 1)


def test_lastmod_filter_keeps_newer_and_undated_urls() -> None:
    body = urlset(
        [
            (SITE + "/old", "2024-01-15"),
            (SITE + "/same-day", "2024-03-01"),  # a date is the end of its day: it may have changed after
            (SITE + "/new", "2024-06-01T12:00:00+00:00"),
            (SITE + "/undated", None),
            (SITE + "/garbled", "yesterday"),  # not a date: as if undated
        ]
    )
    rules = SitemapRules(lastmod_after=_ts("2024-03-01T08:00:00"))
    found = _read(body, rules=rules)
    assert found.urls == [SITE + "/same-day", SITE + "/new", SITE + "/undated", SITE + "/garbled"]
    assert found.too_old == 1


def test_lastmod_forms() -> None:
    assert lastmod_time("2024") == pytest.approx(_ts("2025-01-01T00:00:00"), abs=0.01)
    assert lastmod_time("2024-12") == pytest.approx(_ts("2025-01-01T00:00:00"), abs=0.01)
    assert lastmod_time("2024-02-03T04:05:06Z") == _ts("2024-02-03T04:05:06")
    assert lastmod_time("2024-02-03T04:05:06+02:00") == _ts("2024-02-03T02:05:06")
    assert lastmod_time("2024-02-30") is None


def test_include_exclude_and_max_urls() -> None:
    body = urlset([(f"{SITE}/product/{i}.html", None) for i in range(10)] + [(SITE + "/about", None)])
    rules = SitemapRules(include=(r"/product/",), exclude=(r"/product/0\.",), max_urls=3)
    found = _read(body, rules=rules)
    assert found.urls == [f"{SITE}/product/{i}.html" for i in (1, 2, 3)]
    assert found.filtered == 8


def test_a_gzip_bomb_is_refused_at_the_cap_quickly_and_in_bounded_memory() -> None:
    bomb = gzip_bomb()  # a quarter GiB inflated, a few hundred KiB sent
    assert len(bomb) < 1024 * 1024
    tracemalloc.start()
    started = time.monotonic()
    try:
        with pytest.raises(BadSitemap, match=f"inflates to more than {MAX_DECOMPRESSED_BYTES} bytes"):
            _read(bomb, content_type="application/gzip")
        _current, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert time.monotonic() - started < 10
    assert peak < 16 * 1024 * 1024, peak  # chunks, never the inflated size


def test_a_body_over_the_cap_uncompressed_is_refused_unread() -> None:
    with pytest.raises(BadSitemap, match="larger than"):
        _read(b"<urlset>" + b" " * MAX_DECOMPRESSED_BYTES)


def test_billion_laughs_is_refused_for_its_dtd() -> None:
    started = time.monotonic()
    with pytest.raises(BadSitemap, match=r"declares a DTD"):
        _read(BILLION_LAUGHS)
    assert time.monotonic() - started < 1


def test_an_external_entity_is_never_fetched_nor_read() -> None:
    xxe = b'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY x SYSTEM "file:///etc/passwd">]><urlset/>'
    with pytest.raises(BadSitemap, match="DTD"):
        _read(xxe)


def test_html_and_other_content_types_are_refused_with_the_reason() -> None:
    page = b"<!DOCTYPE html><html><head><title>Shop</title></head><body><p>hi<br></body></html>"
    with pytest.raises(BadSitemap, match=r"content type text/html \(an HTML page\)"):
        _read(page, content_type="text/html; charset=utf-8")
    with pytest.raises(BadSitemap, match=r"root element is <rss>"):
        _read(b"<rss><channel/></rss>")
    with pytest.raises(BadSitemap, match="content type image/png"):
        _read(b"\x89PNG\r\n", content_type="image/png")
    with pytest.raises(BadSitemap, match="not well-formed XML"):
        _read(b"<urlset><url><loc>x</url>")
    with pytest.raises(BadSitemap, match="not valid gzip"):
        _read(b"\x1f\x8bnot really gzip at all")
    with pytest.raises(BadSitemap, match="truncated gzip"):
        _read(gzip.compress(urlset([(SITE + "/a", None)]))[:-20])


def test_an_xml_sitemap_served_as_html_is_still_read() -> None:
    assert _read(urlset([(SITE + "/a", None)]), content_type="text/html").urls == [SITE + "/a"]


def test_too_many_entries_are_refused_not_truncated() -> None:
    full = urlset((f"{SITE}/{i}", None) for i in range(MAX_URLSET_ENTRIES))
    assert _read(full, rules=SitemapRules(max_urls=MAX_URLSET_ENTRIES)).entries == MAX_URLSET_ENTRIES
    over = urlset((f"{SITE}/{i}", None) for i in range(MAX_URLSET_ENTRIES + 1))
    with pytest.raises(BadSitemap, match=f"more than {MAX_URLSET_ENTRIES} URLs"):
        _read(over)
    text = "".join(f"{SITE}/{i}\n" for i in range(MAX_URLSET_ENTRIES + 1)).encode()
    with pytest.raises(BadSitemap, match=f"more than {MAX_URLSET_ENTRIES} URLs"):
        _read(text, content_type="text/plain")


def test_an_index_of_50000_sitemaps_is_refused() -> None:
    huge = sitemap_index(f"{SITE}/part-{i}.xml" for i in range(50_000))
    with pytest.raises(BadSitemap, match=f"more than {MAX_INDEX_ENTRIES} sitemaps in an index"):
        _read(huge)


def test_index_nesting_is_bounded() -> None:
    assert [found_depth(d, "sitemapindex") for d in (-1, -2)] == [-2, -3]
    assert [found_depth(d, "urlset") for d in (-1, -2, -3)] == [0, 0, 0]
    with pytest.raises(BadSitemap, match="nested more than 3 levels"):
        found_depth(-3, "sitemapindex")


def test_robots_tasks_and_their_sitemaps() -> None:
    assert is_robots_task(SITE + "/robots.txt", -1)
    assert not is_robots_task(SITE + "/robots.txt", -2)  # an index naming a robots.txt: read as a sitemap
    assert not is_robots_task(SITE + "/dir/robots.txt", -1)
    assert not is_robots_task(SITE + "/robots.txt", 0)
    named = ["/sitemap.xml", SITE + "/s2.xml", "https://other.test/s.xml", "not a url", *[f"/m{i}" for i in range(99)]]
    found = robots_sitemaps(named, SITE + "/robots.txt", RULES)
    assert found[:3] == [SITE + "/sitemap.xml", SITE + "/s2.xml", SITE + "/not%20a%20url"]
    assert len(found) == 50


# --- the spec ---------------------------------------------------------------------------------------


def _job(**spec: Any) -> ScrapeJobSpec:
    return ScrapeJobSpec.model_validate({"pool": "p", **spec})


def test_a_job_may_have_sitemaps_as_its_only_source() -> None:
    job = _job(sitemaps={"urls": [SITE + "/sitemap.xml"]})
    assert job.sitemap_seeds() == [SITE + "/sitemap.xml"]
    with pytest.raises(ValidationError, match=r"needs urls, urlRanges or sitemaps\.urls"):
        _job(sitemaps={"fromRobotsTxt": True})  # robots.txt of which site?
    with pytest.raises(ValidationError, match="sitemaps needs urls or fromRobotsTxt"):
        _job(urls=[SITE + "/"], sitemaps={})
    with pytest.raises(ValidationError):
        _job(sitemaps={"urls": [SITE + "/s.xml"], "include": ["(a+)\\1"]})  # backreference: not RE2


def test_from_robots_txt_reads_each_origin_once() -> None:
    job = _job(
        urls=[SITE + "/a", SITE + "/b", "http://other.test:8080/x"],
        urlRanges=[{"template": "https://ranged.test/p/{n}", "start": 1, "end": 5}],
        sitemaps={"urls": [SITE + "/sitemap.xml"], "fromRobotsTxt": True},
    )
    assert job.sitemap_seeds() == [
        SITE + "/sitemap.xml",
        SITE + "/robots.txt",
        "http://other.test:8080/robots.txt",
        "https://ranged.test/robots.txt",
    ]


def test_the_worker_spec_carries_the_rules_and_the_job_is_capped() -> None:
    job = _job(
        urls=[SITE + "/a"],
        sitemaps={"urls": [SITE + "/s.xml"], "lastmodAfter": "2024-03-01T00:00:00Z", "maxUrls": 500},
    )
    config = build_job_config("j1", job, None)
    assert config.max_pages == 1 + 1 + 500  # the seed, the sitemap, what sitemaps may add
    assert config.dedupe_seeds
    rules = parse_worker_spec(build_worker_spec(job, None)).sitemaps
    assert rules == SitemapRules(lastmod_after=_ts("2024-03-01T00:00:00"), max_urls=500)
    crawl = _job(urls=[SITE + "/"], crawl={"maxPages": 50, "scope": "SameDomain"}, sitemaps={"urls": [SITE + "/s"]})
    assert build_job_config("j2", crawl, None).max_pages == 50
    rules = parse_worker_spec(build_worker_spec(crawl, None)).sitemaps
    assert rules is not None and rules.scope == "SameDomain"
    assert parse_worker_spec(build_worker_spec(_job(urls=[SITE + "/"]), None)).sitemaps is None


def test_the_pools_url_limit_counts_what_sitemaps_may_add() -> None:
    pool = ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379/0"}, "jobLimits": {"maxUrlsPerJob": 1000}})
    assert limit_exceeded(_job(sitemaps={"urls": [SITE + "/s"], "maxUrls": 999}), pool) is None
    refused = limit_exceeded(_job(sitemaps={"urls": [SITE + "/s"], "maxUrls": 1000}), pool)
    assert refused is not None and "1001 URLs is above the 1000" in refused and "maxUrlsPerJob" in refused


def test_empty_entries_count_toward_the_limit() -> None:
    started = time.monotonic()
    with pytest.raises(BadSitemap, match=f"more than {MAX_URLSET_ENTRIES} URLs"):
        _read(gzip.compress(b"<urlset>" + b"<url/>" * 10_000_000 + b"</urlset>"))
    assert time.monotonic() - started < 10
