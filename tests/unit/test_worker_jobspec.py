"""The worker spec built for JobConfig.spec, and its parser."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.jobspec.admission import unmounted_secrets
from trawl.jobspec.podfiles import MissingSecret, read_secret, secret_env_name
from trawl.jobspec.wire import build_worker_spec
from trawl.worker.jobsettings import parse_worker_spec


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
    assert parsed.output.webhook is not None and parsed.output.webhook.secret_ref is not None
    assert (parsed.output.webhook.secret_ref.name, parsed.output.webhook.secret_ref.key) == ("hk", "k.1")
    assert spec["output"]["webhook"]["secret_ref"] == {"name": "hk", "key": "k.1"}  # a reference, never the key
    assert unmounted_secrets(job, pool) == ["hk"]
    mounted = pool.model_copy(update={"worker": pool.worker.model_copy(update={"secrets": ["hk"]})})
    assert unmounted_secrets(job, mounted) == []


def test_read_secret_from_the_mounted_file_then_the_environment(tmp_path: Path) -> None:
    (tmp_path / "hk").mkdir()
    (tmp_path / "hk" / "k.1").write_bytes(b"from-file")
    env = {"TRAWL_SECRETS_DIR": str(tmp_path), secret_env_name("hk", "k.1"): "from-env"}
    assert read_secret("hk", "k.1", env) == b"from-file"
    assert secret_env_name("hk", "k.1") == "TRAWL_SECRET_HK_K_1"
    assert read_secret("other", "k.1", {**env, "TRAWL_SECRET_OTHER_K_1": "from-env"}) == b"from-env"
    with pytest.raises(MissingSecret, match=r"list Secret 'gone' in the ScrapePool's spec.worker.secrets"):
        read_secret("gone", "k", env)
    with pytest.raises(MissingSecret):
        read_secret("hk", "..", env)  # never a path outside the Secret's directory


def test_defaults_without_pool_or_sections() -> None:
    parsed = parse_worker_spec({})
    assert parsed.crawl is None and parsed.max_pages is None
    assert parsed.request.max_redirects == 10 and parsed.politeness.respect_robots_txt
    assert parsed.output.sink.value == "RedisStream"


def _problem(job: dict[str, object], pool: dict[str, object] | None = None) -> str | None:
    from trawl.jobspec.admission import spec_problem

    spec = ScrapeJobSpec.model_validate({"pool": "p", "urls": ["https://example.com/"], **job})
    return spec_problem(build_worker_spec(spec, ScrapePoolSpec.model_validate(pool) if pool else None))


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ({"name": "ok", "selector": "div.product h1"}, None),
        ({"name": "ok", "selector": "//p/text()", "kind": "XPath"}, None),
        ({"name": "price", "selector": "p["}, "spec.extract.fields[0].selector ('price'): invalid CSS selector"),
        ({"name": "attr", "selector": "a::attr(href)"}, "invalid CSS selector 'a::attr(href)'"),
        ({"name": "x", "selector": "//p[", "kind": "XPath"}, "invalid XPath selector '//p['"),
    ],
)
def test_selectors_are_checked_when_the_job_is_accepted(field: dict[str, str], expected: str | None) -> None:
    problem = _problem({"extract": {"fields": [field]}})
    if expected is None:
        assert problem is None
    else:
        assert problem is not None and expected in problem


def test_header_values_with_cr_or_lf_are_refused_naming_the_field() -> None:
    assert _problem({"request": {"headers": {"Authorization": "Bearer x"}}}) is None
    problem = _problem({"request": {"headers": {"X-Evil": "a\r\nHost: other"}}})
    assert problem is not None and "spec.request.headers['X-Evil']" in problem and "CR, LF" in problem
    problem = _problem({"request": {"headers": {"Bad Name": "v"}}})
    assert problem is not None and "not a valid header name" in problem
    # A pool's non-harmless default header must name its origins (trawl.jobspec.headerscope).
    request = {"headers": {"X-Pool": "a\nb"}, "headerOrigins": ["https://example.com"]}
    pool = {"redis": {"url": "redis://r:6379/0"}, "defaults": {"request": request}}
    problem = _problem({}, pool)
    assert problem is not None and "X-Pool" in problem and "defaults.request.headers" in problem
