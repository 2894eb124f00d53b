"""Sizing a crawl's Bloom filter (trawl.queue.bloom) and what the job's status says of it (pure)."""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from pydantic import ValidationError

from trawl.api.scrapejob import ScrapeJobSpec, ScrapeJobStatus
from trawl.jobspec.wire import build_job_config
from trawl.operator.job.status import JobFacts, derive_job_status
from trawl.queue.bloom import MAX_BITS, MAX_HASHES, BloomSize, false_positive_rate, size_for
from trawl.queue.model import JobStats


def test_the_size_keeps_the_rate_at_capacity_with_at_most_six_bits_per_url() -> None:
    textbook = math.ceil(1_000_000 * -math.log(0.001) / math.log(2) ** 2)  # 14.38 bits per URL, 10 hashes
    size = size_for(1_000_000, 0.001)
    assert size.hashes == MAX_HASHES == 6, "fewer bits per URL than the optimum: each is a Redis operation"
    assert textbook < size.bits < 1.1 * textbook and size.bytes == (size.bits + 7) // 8  # 15.8 bits per URL
    assert false_positive_rate(size, 1_000_000) == pytest.approx(0.001, rel=0.01)
    for rate in (0.1, 0.01, 0.001, 0.0001):
        at = size_for(10_000_000, rate)
        assert false_positive_rate(at, 10_000_000) == pytest.approx(rate, rel=0.01)
        assert at.bits / 10_000_000 <= 25, "at most 25 bits (3.1 bytes) per URL"
    assert size_for(1000, 0.1).hashes == 3, "the optimum when it is within the bound"
    assert false_positive_rate(size, 100_000) < 1e-8, "far below the cap, far below the rate"
    assert BloomSize.parse(size.wire()) == size and BloomSize.parse("") is None
    with pytest.raises(ValueError, match="at most"):
        size_for(10**9, 0.0001)
    assert size_for(10**8, 0.0001).bits <= MAX_BITS


def test_only_a_crawl_that_asks_gets_one_bounded_by_its_page_cap() -> None:
    def config(crawl: dict[str, object]) -> BloomSize | None:
        spec = ScrapeJobSpec.model_validate({"pool": "p", "urls": ["https://a.test/"], "crawl": crawl})
        return build_job_config("j", spec, None).bloom

    assert config({"maxPages": 1000}) is None, "exact unless asked"
    assert config({"maxPages": 1000, "bloomFilter": {}}) == size_for(1000, 0.001)
    # the largest a job author can ask for: the page cap at the smallest rate, 30 MB (a Redis string: 512 MB)
    largest = config({"maxPages": 10_000_000, "bloomFilter": {"falsePositiveRate": 0.0001}})
    assert largest is not None and largest.bytes < 32 * 2**20
    with pytest.raises(ValidationError):
        config({"maxPages": 1000, "bloomFilter": {"falsePositiveRate": 0.5}})


def test_the_status_says_the_filter_and_the_pages_possibly_skipped() -> None:
    now = datetime(2026, 11, 28, 12, 0, tzinfo=UTC)
    size = size_for(1000, 0.001)
    stats = JobStats(10, 5, 0, 0, 5, 0, True, False, now.timestamp() - 5, bloom=size, possibly_skipped=0.01234)
    status, _ = derive_job_status(JobFacts(generation=1, suspend=False, stats=stats), {}, now)
    assert status["dedupe"] == {"mode": "Bloom", "bytes": size.bytes, "hashes": size.hashes, "possiblySkipped": 0.012}
    ScrapeJobStatus.model_validate(status)
    plain = JobStats(10, 5, 0, 0, 5, 0, True, False, now.timestamp() - 5)
    assert "dedupe" not in derive_job_status(JobFacts(generation=1, suspend=False, stats=plain), {}, now)[0]
