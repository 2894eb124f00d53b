"""The regular expressions a job author writes are RE2 (trawl.api.patterns): linear-time matching on the
worker's event loop, and what needs backtracking refused when the job is accepted, naming the field."""

from __future__ import annotations

import time
from typing import Any

import pydantic
import pytest

from trawl.api.common import validation_message
from trawl.api.cronscrapejob import CronScrapeJobSpec
from trawl.api.scrapejob import ScrapeJobSpec
from trawl.worker.extract import ExtractOptions, Extractor
from trawl.worker.urls import CrawlPolicy

# Exponential for a backtracking engine: Python's re spends ~10 s (doubling with each more "a") on the URL
# below before it finds no match.
CATASTROPHIC = "(a+)+$"
HOSTILE_URL = "http://shop.test/" + "a" * 27 + "!"


@pytest.mark.parametrize(
    ("spec", "field"),
    [
        ({"crawl": {"include": ["/ok/", r"(\w+)/\1"]}}, "spec.crawl.include"),
        ({"crawl": {"exclude": ["(?=private)"]}}, "spec.crawl.exclude"),
        ({"extract": {"onlyMatching": "(?<!x)product"}}, "spec.extract.onlyMatching"),
        ({"render": {"mode": "Browser", "onlyMatching": r"(a)\1"}}, "spec.render.onlyMatching"),
    ],
)
def test_a_pattern_re2_cannot_run_is_refused_naming_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(pydantic.ValidationError) as err:
        ScrapeJobSpec.model_validate({"pool": "p", "urls": ["https://shop.test/"], **spec})
    message = validation_message(err.value)  # what Stalled/InvalidSpec says
    assert message.startswith(field) and "not a valid regular expression (RE2)" in message, message
    cron = {"schedule": "@daily", "jobTemplate": {"spec": {"pool": "p", "urls": ["https://shop.test/"], **spec}}}
    with pytest.raises(pydantic.ValidationError, match=r"RE2"):
        CronScrapeJobSpec.model_validate(cron)


def test_patterns_keep_their_meaning() -> None:
    policy = CrawlPolicy.build(include=[r"/product/\d+\.html$", "(?i)/SALE/"], exclude=["/private/"])
    page = "https://shop.test/"
    links = [
        "https://shop.test/product/12.html",
        "https://shop.test/sale/x",
        "https://shop.test/private/product/1.html",
    ]
    assert policy.select([*links, "https://shop.test/about"], page, 0) == links[:2]
    extractor = Extractor(ExtractOptions(only_matching="/product/"))
    assert extractor.matches(links[0]) and not extractor.matches(page)
    assert ScrapeJobSpec.model_validate(
        {"pool": "p", "urls": [page], "render": {"mode": "Browser", "onlyMatching": "/list/"}}
    ).render.applies(  # type: ignore[union-attr]
        "https://shop.test/list/2"
    )


def test_a_catastrophic_pattern_answers_at_once() -> None:
    started = time.monotonic()
    policy = CrawlPolicy.build(include=[CATASTROPHIC], exclude=[CATASTROPHIC])
    assert policy.select([HOSTILE_URL] * 3, "http://shop.test/", 0) == []
    assert not Extractor(ExtractOptions(only_matching=CATASTROPHIC)).matches(HOSTILE_URL)
    assert time.monotonic() - started < 1.0
