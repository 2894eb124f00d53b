"""The worker spec built for JobConfig.spec, and its parser."""

from __future__ import annotations

import json

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.worker.jobspec import build_worker_spec, parse_worker_spec, secret_env_name


def test_build_and_parse_round_trip_with_pool_defaults() -> None:
    job = ScrapeJobSpec.model_validate(
        {
            "pool": "p",
            "urls": ["http://books.test/"],
            "crawl": {"maxDepth": 3, "maxPages": 50, "scope": "SameDomain", "exclude": ["/private/"]},
            "extract": {"fields": [{"name": "t", "selector": "h1"}], "onlyMatching": "/product/"},
            "politeness": {"requestsPerSecond": 5},
            "output": {
                "sink": "Webhook",
                "webhook": {"url": "http://hook.test/x", "secretRef": {"name": "hk", "key": "k.1"}},
            },
        }
    )
    pool = ScrapePoolSpec.model_validate(
        {
            "redis": {"url": "redis://r:6379"},
            "defaults": {
                "politeness": {"maxConcurrencyPerDomain": 7, "requestsPerSecond": 1},
                "retry": {"maxAttempts": 5},
            },
        }
    )
    spec = build_worker_spec(job, pool)
    json.dumps(spec)  # stored as JSON
    parsed = parse_worker_spec(json.loads(json.dumps(spec)))
    assert parsed.politeness.requests_per_second == 5  # the job wins
    assert parsed.politeness.max_concurrency_per_domain == 7  # the pool's default
    assert parsed.retry.max_attempts == 5
    assert parsed.crawl is not None and parsed.crawl.max_depth == 3 and parsed.crawl.scope == "SameDomain"
    assert parsed.max_pages == 50
    assert parsed.extract.fields[0].selector == "h1" and parsed.extract.only_matching == "/product/"
    assert parsed.webhook_secret_env == secret_env_name("hk", "k.1") == "TRAWL_SECRET_HK_K_1"
    assert spec["output"]["webhook"]["secret_ref"] == {"name": "hk", "key": "k.1"}  # a reference, never the key


def test_defaults_without_pool_or_sections() -> None:
    parsed = parse_worker_spec({})
    assert parsed.crawl is None and parsed.max_pages is None
    assert parsed.request.max_redirects == 10 and parsed.politeness.respect_robots_txt
    assert parsed.output.sink.value == "RedisStream"
