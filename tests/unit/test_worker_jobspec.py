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


# The worker reads its spec as plain data (trawl.worker.specread), not through the API's models (issue 38):
# what it reads must be what the models would give, and what they would refuse it refuses too.

_JOBS = [
    {},
    {
        "crawl": {"maxDepth": 3, "maxPages": 50, "scope": "SameDomain", "include": ["/b/"], "exclude": ["/x/"]},
        "extract": {
            "fields": [{"name": "t", "selector": "//h1", "kind": "XPath", "attribute": "id", "multiple": True}],
            "links": True,
            "images": True,
            "title": False,
            "onlyMatching": "/product/",
            "formats": ["markdown", "structured"],
            "mainContent": {"tables": False, "links": True},
            "structured": {"syntaxes": ["json-ld"]},
        },
        "request": {"headers": {"X-A": "1"}, "userAgent": "ua/1", "timeoutSeconds": 5, "maxRedirects": 0},
        "politeness": {"respectRobotsTxt": False, "requestsPerSecond": 0.5, "adaptiveDelay": False},
        "retry": {"maxAttempts": 7, "backoff": "Fixed", "retryOn": ["HTTP4xx"], "honorRetryAfter": False},
        "output": {"sink": "Webhook", "webhook": {"url": "https://hook.test/x", "batchSize": 9}},
    },
    {"output": {"sink": "JsonLines", "jsonLines": {"directory": "/data/out"}}},
    {"output": {"sink": "Files", "files": {"directory": "/data/files", "format": "CSV"}}},
    {"output": {"sink": "RedisStream", "redisStream": {"maxLen": 7}}, "extract": {"text": True}},
]


@pytest.mark.parametrize("job", _JOBS)
def test_plain_reading_gives_what_the_models_give(job: dict[str, object]) -> None:
    from trawl.api.policies import ResolvedPoliteness, ResolvedRequest, ResolvedRetry
    from trawl.api.scrapejob import CrawlSpec, ExtractSpec, OutputSpec
    from trawl.worker.extract import ExtractOptions

    wire = json.loads(
        json.dumps(build_worker_spec(ScrapeJobSpec.model_validate({"pool": "p", "urls": URLS, **job}), None))
    )
    parsed = parse_worker_spec(wire)
    assert parsed.request._asdict() == ResolvedRequest.model_validate(wire["request"]).model_dump()
    assert parsed.politeness._asdict() == ResolvedPoliteness.model_validate(wire["politeness"]).model_dump()
    retry = ResolvedRetry.model_validate(wire["retry"]).model_dump()
    assert parsed.retry._asdict() == retry | {"retry_on": tuple(retry["retry_on"])}
    extract = ExtractSpec.model_validate(wire["extract"]).model_dump(mode="json")
    assert parsed.extract == ExtractOptions.from_dict(extract)
    output = OutputSpec.model_validate(wire["output"]).model_dump(mode="json")
    assert _plain(parsed.output) == output
    if wire["crawl"] is not None:
        crawl = CrawlSpec.model_validate(wire["crawl"])
        assert parsed.crawl is not None and parsed.max_pages == crawl.max_pages
        assert (parsed.crawl.scope, parsed.crawl.max_depth) == (crawl.scope.value, crawl.max_depth)


URLS = ["https://example.com/"]


def _plain(value: object) -> object:
    """A settings NamedTuple as the model's JSON dump would show it."""
    if isinstance(value, tuple) and hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    return value.value if hasattr(value, "value") else value


def test_the_plain_reader_knows_the_models_fields() -> None:
    # An unknown key is refused, as the models' extra="forbid" refused it: the key sets must follow the models.
    from trawl.api.formats import MainContentOptions, StructuredOptions
    from trawl.api.policies import ResolvedPoliteness, ResolvedRequest, ResolvedRetry
    from trawl.api.scrapejob import CrawlSpec, ExtractSpec, FieldRule, OutputSpec
    from trawl.worker import jobsettings as js

    for keys, model in [
        (js.REQUEST_KEYS, ResolvedRequest),
        (js.POLITENESS_KEYS, ResolvedPoliteness),
        (js.RETRY_KEYS, ResolvedRetry),
        (js.CRAWL_KEYS, CrawlSpec),
        (js.EXTRACT_KEYS, ExtractSpec),
        (js.FIELD_KEYS, FieldRule),
        (js.MAIN_CONTENT_KEYS, MainContentOptions),
        (js.STRUCTURED_KEYS, StructuredOptions),
        (js.OUTPUT_KEYS, OutputSpec),
    ]:
        assert keys == set(model.model_fields), model
    defaults = (js.RequestSettings(), js.PolitenessSettings(), js.RetrySettings())
    for plain, model in zip(defaults, (ResolvedRequest, ResolvedPoliteness, ResolvedRetry), strict=True):
        dumped = model().model_dump()
        assert dict(plain._asdict()) == {k: tuple(v) if isinstance(v, list) else v for k, v in dumped.items()}


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ({"request": []}, "spec.request: expected an object, got list"),
        ({"request": {"timeout_seconds": "soon"}}, "spec.request.timeout_seconds: expected a number, got 'soon'"),
        ({"request": {"max_redirects": True}}, "spec.request.max_redirects: expected an integer, got True"),
        ({"request": {"max_redirects": -1}}, "spec.request.max_redirects: expected an integer of at least 0"),
        ({"request": {"headers": {"X": 1}}}, "spec.request.headers: expected an object of string values"),
        ({"politeness": {"respect_robots_txt": "no"}}, "spec.politeness.respect_robots_txt: expected true or false"),
        ({"politeness": {"rps": 1}}, "spec.politeness: unknown field rps"),
        ({"retry": {"retry_on": ["Sometimes"]}}, "spec.retry.retry_on: 'Sometimes' is not a valid FailureClass"),
        ({"retry": {"backoff": "Random"}}, "spec.retry.backoff: expected one of Fixed, Exponential, got 'Random'"),
        ({"crawl": {"scope": "Anywhere"}}, "spec.crawl.scope: expected one of SameHost, SameDomain"),
        ({"crawl": {"max_pages": 0}}, "spec.crawl.max_pages: expected an integer of at least 1"),
        ({"extract": {"fields": [{"name": "1x", "selector": "h1"}]}}, "spec.extract.fields[0].name: expected a"),
        ({"extract": {"fields": [{"name": "x"}]}}, "spec.extract.fields[0].selector: expected a non-empty string"),
        ({"extract": {"fields": [{"name": "x", "selector": "h1", "kind": "Regex"}]}}, "fields[0].kind: expected"),
        ({"extract": {"formats": ["pdf"]}}, "spec.extract.formats: unknown format 'pdf'"),
        ({"output": {"sink": "Webhook"}}, "spec.output.webhook is required when sink is Webhook"),
        ({"output": {"sink": "JsonLines", "json_lines": {"directory": "/data/../etc"}}}, "json_lines.directory"),
        ({"output": {"sink": "Files", "files": {"directory": "relative"}}}, "spec.output.files.directory"),
        ({"output": {"sink": "Webhook", "webhook": {"url": "ftp://x/"}}}, "spec.output.webhook.url: 'ftp://x/' is not"),
        (
            {
                "output": {
                    "sink": "Webhook",
                    "webhook": {"url": "https://h/", "secret_ref": {"name": "k", "key": "../x"}},
                }
            },
            "spec.output.webhook.secret_ref.key: expected a string matching",
        ),
        ({"output": {"sink": "PostgreSQL", "postgres": {"host": "db"}}}, "spec.output.postgres: "),
        ({"render": {"mode": "Browser", "wait_for": "Teatime"}}, "spec.render: "),
        ({"session": {"scope": "Galaxy"}}, "spec.session: "),
        ({"domains": {"pool": [{"host": ""}]}}, "spec.domains: "),
        ({"format_max_bytes": "big"}, "spec.format_max_bytes: expected an integer"),
    ],
)
def test_a_spec_that_does_not_read_says_which_value_and_why(damage: dict[str, object], message: str) -> None:
    from trawl.worker.jobsettings import BadSpec

    with pytest.raises(BadSpec) as caught:
        parse_worker_spec(damage)
    assert message in str(caught.value)
