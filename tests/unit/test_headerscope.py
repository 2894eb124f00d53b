"""Which requests a job's headers go to (trawl.jobspec.headerscope): the job's own origins only, a pool's
credentials only to the origins the pool names, never after a downgrade to http."""

from __future__ import annotations

from typing import Any

import pydantic
import pytest

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.jobspec.admission import spec_problem
from trawl.jobspec.headerscope import HeaderScope, job_origins, origin
from trawl.jobspec.wire import build_worker_spec
from trawl.worker.jobsettings import parse_worker_spec

PARTNER = "https://api.partner.test"


def _pool(request: dict[str, Any] | None) -> ScrapePoolSpec:
    defaults = {"request": request} if request is not None else {}
    return ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379/0"}, "defaults": defaults})


def _scope(job: dict[str, Any], pool_request: dict[str, Any] | None = None) -> HeaderScope | None:
    spec = ScrapeJobSpec.model_validate({"pool": "p", **job})
    return parse_worker_spec(build_worker_spec(spec, _pool(pool_request))).headers


def _sent(scope: HeaderScope | None, url: str, task_url: str | None = None, depth: int = 0) -> dict[str, str]:
    assert scope is not None
    return scope.for_request(url, task_url or url, depth) or {}


def test_origins_compare_scheme_host_and_port() -> None:
    assert origin("https://Shop.test/a?b") == origin("https://shop.test:443/c") == "https://shop.test:443"
    assert origin("http://shop.test/") == "http://shop.test:80" != origin("https://shop.test/")
    assert origin("https://shop.test./") == "https://shop.test:443"
    assert origin("https://bücher.test/") == origin("https://xn--bcher-kva.test/x")
    assert origin("ftp://shop.test/") is None and origin("https://[::1/") is None


def test_the_origins_of_a_job_are_its_urls_and_ranges() -> None:
    spec = ScrapeJobSpec.model_validate(
        {
            "pool": "p",
            "urls": ["https://a.test/x", "https://a.test/y"],
            "urlRanges": [
                {"template": "https://b.test/page/{n}", "start": 1, "end": 100000},
                {"template": "https://shop{n}.test/", "start": 1, "end": 3},
            ],
        }
    )
    assert job_origins(spec.urls or [], spec.url_ranges or []) == [
        "https://a.test:443",
        "https://b.test:443",
        "https://shop1.test:443",
        "https://shop2.test:443",
        "https://shop3.test:443",
    ]


def test_job_headers_go_to_its_own_origins_only() -> None:
    secret = {"Authorization": "Bearer s3cret"}
    scope = _scope({"urls": ["https://shop.test/"], "request": {"headers": secret}})
    assert _sent(scope, "https://shop.test/product/1.html", depth=2) == secret  # a crawled page of the origin
    assert _sent(scope, "http://shop.test/product/1.html", depth=1) == {}  # https -> http on the same host
    assert _sent(scope, "https://cdn.shop.test/x.js") == {}  # another host of the domain
    assert _sent(scope, "https://shop.test:8443/") == {}  # another port
    assert _sent(scope, "https://evil.test/") == {}


def test_pool_credentials_go_only_to_the_origins_the_pool_names() -> None:
    pool = {"headers": {"X-Api-Key": "pool-key", "Accept-Language": "de"}, "headerOrigins": [PARTNER]}
    # A job author naming their own server: the harmless header, never the key.
    own = _scope({"urls": ["https://author.test/"]}, pool)
    assert _sent(own, "https://author.test/") == {"Accept-Language": "de"}
    # A job on the partner's API: both; the job's other origins only the harmless one.
    partner = _scope({"urls": [PARTNER + "/v1/items", "https://author.test/"]}, pool)
    assert _sent(partner, PARTNER + "/v1/items?page=2") == {"Accept-Language": "de", "X-Api-Key": "pool-key"}
    assert _sent(partner, "https://author.test/") == {"Accept-Language": "de"}
    assert _sent(partner, "http://api.partner.test/v1/items") == {}  # not the origin the pool named
    # A job's own headers replace the pool's whole, as every request default does.
    replaced = _scope({"urls": [PARTNER + "/"], "request": {"headers": {"X-Job": "j"}}}, pool)
    assert _sent(replaced, PARTNER + "/") == {"X-Job": "j"}


def test_a_pool_credential_without_origins_is_refused_and_harmless_headers_need_none() -> None:
    with pytest.raises(pydantic.ValidationError, match=r"X-Api-Key may carry a credential.*headerOrigins"):
        _pool({"headers": {"X-Api-Key": "k", "Accept": "text/html"}})
    with pytest.raises(pydantic.ValidationError, match="headerOrigins"):
        _pool({"headers": {"k": "v"}, "headerOrigins": ["https://a.test/path"]})  # an origin has no path
    assert _scope({"urls": ["https://a.test/"]}, {"headers": {"Accept-Language": "fr"}}) is not None


def test_no_headers_no_scope() -> None:
    assert _scope({"urls": ["https://a.test/"]}) is None
    pool = {"headers": {"X-Api-Key": "k"}, "headerOrigins": [PARTNER]}
    assert _scope({"urls": ["https://a.test/"]}, pool) is None  # the key is not for this job's origins


def test_a_spec_from_an_older_operator_sends_its_headers_to_its_seeds_origins_only() -> None:
    scope = HeaderScope.parse({"Authorization": "x"}, None)
    assert _sent(scope, "https://a.test/p", "https://a.test/", depth=0) == {"Authorization": "x"}
    assert _sent(scope, "https://cdn.test/p.js", "https://a.test/", depth=0) == {}
    assert _sent(scope, "https://a.test/q", "https://a.test/q", depth=1) == {}


def test_too_many_origins_for_headers_is_an_invalid_spec() -> None:
    job = {
        "urlRanges": [{"template": "https://h{n}.test/", "start": 0, "end": 6000}],
        "request": {"headers": {"Authorization": "x"}},
    }
    spec = ScrapeJobSpec.model_validate({"pool": "p", **job})
    problem = spec_problem(build_worker_spec(spec, None))
    assert problem is not None and "more than 5000 origins" in problem
