"""Issue 37: a crawl may declare up to 10,000,000 pages (crawl.maxPages), where a job's seeds and a
sitemap's URLs stay at 1,000,000; a pool allows it only when its jobLimits.maxUrlsPerJob says so (the
default, 100,000, refuses it); the Bloom filter such a crawl gets stays a small Redis string (pure rules)."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from trawl.api.scrapejob import MAX_CRAWL_PAGES, MAX_GENERATED_URLS, ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.jobspec.admission import limit_exceeded
from trawl.jobspec.wire import build_job_config, task_cap

URLS = ["https://shop.example/"]


def _job(**spec: Any) -> ScrapeJobSpec:
    return ScrapeJobSpec.model_validate({"pool": "shop", "urls": URLS, **spec})


def _pool(**limits: Any) -> ScrapePoolSpec:
    return ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379/0"}, "jobLimits": limits})


def test_a_crawl_may_declare_ten_million_pages_and_not_one_more() -> None:
    assert MAX_CRAWL_PAGES == 10_000_000
    job = _job(crawl={"maxPages": MAX_CRAWL_PAGES})
    assert task_cap(job) == MAX_CRAWL_PAGES
    with pytest.raises(ValidationError, match=r"crawl\.maxPages"):
        _job(crawl={"maxPages": MAX_CRAWL_PAGES + 1})


def test_seeds_and_sitemaps_keep_their_million() -> None:
    ranges = [{"template": "https://shop.example/p/{n}", "start": 1, "end": MAX_GENERATED_URLS + 1}]
    with pytest.raises(ValidationError, match=f"at most {MAX_GENERATED_URLS} URLs"):
        _job(urls=None, urlRanges=ranges, crawl={"maxPages": MAX_CRAWL_PAGES})
    with pytest.raises(ValidationError, match=r"sitemaps\.maxUrls"):
        _job(sitemaps={"urls": ["https://shop.example/sitemap.xml"], "maxUrls": MAX_GENERATED_URLS + 1})


def test_a_pool_allows_a_ten_million_page_crawl_only_when_its_limit_says_so() -> None:
    crawl = _job(crawl={"maxPages": MAX_CRAWL_PAGES})
    refused = limit_exceeded(crawl, _pool())
    assert refused is not None and refused.startswith("spec.crawl.maxPages 10000000 is above the 100000"), refused
    assert limit_exceeded(crawl, _pool(maxUrlsPerJob=MAX_CRAWL_PAGES)) is None
    with pytest.raises(ValidationError, match="maxUrlsPerJob"):
        _pool(maxUrlsPerJob=MAX_CRAWL_PAGES + 1)


def test_the_largest_crawls_filter_is_a_small_redis_string() -> None:
    spec = _job(crawl={"maxPages": MAX_CRAWL_PAGES, "bloomFilter": {"falsePositiveRate": 0.0001}})
    bloom = build_job_config("j", spec, None).bloom
    assert bloom is not None and bloom.hashes <= 6
    assert bloom.bytes < 32 * 2**20, "30 MB, far within a Redis string's 512 MB"
