"""Issue 32: a job's seeds are a stream the operator enqueues a batch at a time, never a list. One job with
a million-URL range took the shared operator to 2 GB on every pass; now a pass holds one batch, and
resumes at any position by arithmetic. What the list did (each URL once, in order) the stream keeps."""

from __future__ import annotations

import itertools
import tracemalloc
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from trawl.api.scrapejob import ScrapeJobSpec


def _job(**spec: Any) -> ScrapeJobSpec:
    return ScrapeJobSpec.model_validate({"pool": "p", **spec})


MIXED = _job(
    urls=["https://a.example/1", "https://b.example/", "https://a.example/1", "https://a.example/3"],
    urlRanges=[
        {"template": "https://a.example/{n}", "start": 1, "end": 9, "step": 2},
        {"template": "https://c.example/page/{n}", "start": 0, "end": 20, "step": 5},
        {"template": "https://a.example/{n}", "start": 4, "end": 7},
    ],
)


def test_the_stream_resumes_at_any_position() -> None:
    full = list(MIXED.seeds())
    assert len(full) == MIXED.seed_count() == 3 + 5 + 5 + 4
    for start in range(len(full) + 3):
        assert list(MIXED.seeds(start)) == full[start:]


def test_each_url_once_in_order_as_the_list_had_it() -> None:
    """The stream may repeat a URL (a listed one in a range, overlapping ranges); the queue then keeps one
    digest per seed and drops the repeats, so the job holds what seed_urls listed, in its order."""
    assert MIXED.seeds_may_repeat()
    assert list(dict.fromkeys(MIXED.seeds())) == MIXED.seed_urls()


def test_a_crawls_seeds_are_its_first_max_pages() -> None:
    crawl = _job(urlRanges=[{"template": "https://a.example/{n}", "start": 1, "end": 500}], crawl={"maxPages": 7})
    assert crawl.seed_count() == 7
    assert list(crawl.seeds()) == [f"https://a.example/{n}" for n in range(1, 8)]
    assert list(crawl.seeds(5)) == ["https://a.example/6", "https://a.example/7"]


def test_a_million_url_range_costs_one_url_at_a_time() -> None:
    """A million URLs of 2,000 characters are 2 GB as a list: the stream holds one, wherever it starts."""
    template = "https://shop.example/" + "x" * 1960 + "/{n}"
    job = _job(urlRanges=[{"template": template, "start": 1, "end": 1_000_000}])
    assert job.seed_count() == 1_000_000 and not job.seeds_may_repeat()
    tracemalloc.start()
    try:
        last = list(job.seeds(999_998))
        for _url in itertools.islice(job.seeds(), 200_000):
            pass
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert last == [template.replace("{n}", "999999"), template.replace("{n}", "1000000")]
    assert peak < 1_000_000, f"{peak} bytes at the peak"


_templates = st.sampled_from(
    ["https://a.example/{n}", "https://a.example/1{n}", "https://a.example/{n}0", "https://b.example/{n}"]
)
_range = st.tuples(_templates, st.integers(0, 30), st.integers(0, 30), st.integers(1, 4)).map(
    lambda t: {"template": t[0], "start": min(t[1], t[2]), "end": max(t[1], t[2]), "step": t[3]}
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.sampled_from(["https://a.example/10", "https://a.example/3", "https://c.example/"]), max_size=3),
    st.lists(_range, min_size=1, max_size=4),
)
def test_a_stream_that_repeats_a_url_is_always_known_to(urls: list[str], ranges: list[dict[str, Any]]) -> None:
    """seeds_may_repeat may say yes for a stream without repeats (the queue then dedupes for nothing), never
    no for one with repeats (they would be fetched twice)."""
    job = _job(urls=urls or None, urlRanges=ranges)
    stream = list(job.seeds())
    if len(set(stream)) < len(stream):
        assert job.seeds_may_repeat(), (urls, ranges)


def test_a_range_too_long_to_count_with_len_is_refused_as_a_validation_error() -> None:
    """A range of 2**63 numbers (the API server's integers allow it) is more than len() can return: it is
    refused naming the limit, never an OverflowError that no status reflects."""
    import pytest
    from pydantic import ValidationError

    with pytest.raises(ValidationError, match="at most 1000000 URLs"):
        _job(urlRanges=[{"template": "https://a.example/{n}", "start": 0, "end": 2**63 - 1}])
