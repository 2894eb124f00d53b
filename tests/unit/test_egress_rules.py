"""Issue 32's rules for what a job's author names, decided without a server: Secret keys only for the use the
pool declares, what a webhook's answer means, what an S3 failure or an unreadable Secret may say on a
status, and job-chosen names resolving off the loop's default executor."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from datetime import UTC, datetime
from typing import Any

import pytest
from minio.error import InvalidResponseError, S3Error
from pydantic import ValidationError
from redis.asyncio import Redis

from trawl.api.scrapejob import ScrapeJobSpec
from trawl.api.scrapepool import ScrapePoolSpec
from trawl.egress.addresses import BlockedAddressError, parse_networks
from trawl.jobspec.admission import undeclared_secret_keys, unmounted_secrets
from trawl.jobspec.podfiles import secret_env_name
from trawl.jobspec.wire import build_worker_spec
from trawl.operator.job.oncomplete import run_hooks
from trawl.operator.job.reconcile import admit
from trawl.operator.job.sinkcheck import sink_problem
from trawl.operator.pool.deployment import worker_deployment
from trawl.operator.secrets import secret_reader
from trawl.queue.keys import Keys
from trawl.sinks.s3 import describe_error
from trawl.sinks.webhook import answered
from trawl.worker.jobsettings import parse_worker_spec
from trawl.worker.jobsinks import JobSinks

S3 = {
    "bucket": "results",
    "endpoint": "https://store.example",
    "accessKeyIdSecretRef": {"name": "pg", "key": "password"},  # the database password, as an access key ID
    "secretAccessKeySecretRef": {"name": "s3", "key": "secret"},
}
HOOK = {"webhook": {"url": "https://hook.example/", "secretRef": {"name": "hook", "key": "hmac"}}}


def _job(**spec: Any) -> ScrapeJobSpec:
    return ScrapeJobSpec.model_validate({"pool": "p", "urls": ["https://s.example/"], **spec})


def _pool(**worker: Any) -> ScrapePoolSpec:
    return ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379"}, "worker": worker})


def test_a_job_may_name_only_the_keys_the_pool_declares_for_that_use() -> None:
    job = _job(output={"sink": "S3", "s3": S3})
    declared = [
        {"name": "pg", "key": "password", "use": "PostgresPassword"},
        {"name": "s3", "key": "secret", "use": "S3SecretAccessKey"},
    ]
    pool = _pool(secrets=["pg", "s3"], secretKeys=declared)
    assert unmounted_secrets(job, pool) == []  # both Secrets are mounted: that alone was enough before
    (problem,) = undeclared_secret_keys(job, pool)
    assert problem == (
        "spec.output.s3.accessKeyIdSecretRef names Secret key pg/password, which ScrapePool 'p' does not declare "
        "for use S3AccessKeyId: the pool's spec.worker.secretKeys must list {name: pg, key: password, use: "
        "S3AccessKeyId}"
    )
    assert getattr(admit("uid", job, pool), "reason", None) == "SecretKeyNotAllowed"
    fixed = _pool(
        secrets=["pg", "s3"], secretKeys=[*declared, {"name": "pg", "key": "password", "use": "S3AccessKeyId"}]
    )
    assert undeclared_secret_keys(job, fixed) == []
    assert undeclared_secret_keys(_job(), _pool()) == []  # no Secret named: nothing to declare


def test_the_on_complete_webhook_key_is_a_secret_the_pool_grants_too() -> None:
    """Issue 32: onComplete.webhook.secretRef was read by the operator from any Secret of the namespace."""
    job = _job(onComplete=HOOK)
    assert unmounted_secrets(job, _pool()) == ["hook"]
    problem = admit("uid", job, _pool())
    assert getattr(problem, "reason", None) == "SecretNotMounted"
    assert "'hook'" in getattr(problem, "message", "") and "spec.worker.secrets" in getattr(problem, "message", "")
    mounted = _pool(secrets=["hook"])
    assert undeclared_secret_keys(job, mounted) != []
    granted = _pool(secrets=["hook"], secretKeys=[{"name": "hook", "key": "hmac", "use": "WebhookSigningKey"}])
    assert undeclared_secret_keys(job, granted) == [] and unmounted_secrets(job, granted) == []


def test_declared_keys_must_be_of_mounted_secrets() -> None:
    with pytest.raises(ValidationError, match=r"secretKeys names Secret 'pg', which worker\.secrets does not list"):
        _pool(secretKeys=[{"name": "pg", "key": "password", "use": "PostgresPassword"}])


async def test_an_unreadable_secret_says_nothing_of_what_exists() -> None:
    """Issue 32: the status said whether the Secret existed and which of its keys did not."""
    index = {("ns", "s3"): [{"data": {"id": "YQ==", "other": "Yg=="}}]}
    job = _job(output={"sink": "S3", "s3": {**S3, "accessKeyIdSecretRef": {"name": "s3", "key": "nope"}}})
    problem = await sink_problem("ns", job, secret_reader(index))
    assert problem is not None and problem.reason == "SinkSecretUnreadable"
    assert problem.message == "output.s3.accessKeyIdSecretRef: Secret key s3/nope is not readable"
    missing = _job(output={"sink": "S3", "s3": {**S3, "accessKeyIdSecretRef": {"name": "gone", "key": "id"}}})
    problem = await sink_problem("ns", missing, secret_reader(index))
    assert (
        problem is not None and problem.message == "output.s3.accessKeyIdSecretRef: Secret key gone/id is not readable"
    )
    hooks = _job(onComplete=HOOK).on_complete
    assert hooks is not None
    out = await run_hooks(
        namespace="ns",
        name="j",
        uid="u",
        spec=hooks,
        pool=ScrapePoolSpec.model_validate({"redis": {"url": "redis://r:6379/0"}}),
        pool_name="p",
        status={},
        prev=None,
        allowed=(),
        now=datetime.now(UTC),
        read_secret=secret_reader(index),
    )
    assert out["webhook"]["message"] == "onComplete.webhook.secretRef: Secret key hook/hmac is not readable"


@pytest.mark.parametrize(
    ("status", "delivered", "retry", "message"),
    [
        (204, True, False, "delivered"),
        (303, False, False, "redirect refused: webhooks are POSTed to the URL given (HTTP 303)"),
        (307, False, False, "redirect refused: webhooks are POSTed to the URL given (HTTP 307)"),
        (404, False, False, "HTTP 404"),
        (429, False, True, "HTTP 429"),
        (503, False, True, "HTTP 503"),
    ],
)
def test_what_a_webhooks_answer_means(status: int, delivered: bool, retry: bool, message: str) -> None:
    outcome = answered(status)
    assert (outcome.delivered, outcome.retry, outcome.message) == (delivered, retry, message)


class _Response:
    status = 403


def test_s3_failures_are_summarised_without_the_body() -> None:
    body = "internal service says: db.internal:5432 password=hunter2"
    error = S3Error(_Response(), "AccessDenied", body, "/b", "req", "host")  # type: ignore[arg-type]
    assert describe_error(error) == "S3 AccessDenied (HTTP 403)"
    weird = S3Error(_Response(), f"<{body}>", body, None, None, None)  # type: ignore[arg-type]
    assert describe_error(weird) == "S3 an unknown error (HTTP 403)"
    assert (
        describe_error(InvalidResponseError(502, "text/html", f"<html>{body}</html>")) == "not an S3 answer (HTTP 502)"
    )
    refused = OSError("Connection aborted.", BlockedAddressError("refused: 10.0.0.1 is in blocked network 10.0.0.0/8"))
    assert describe_error(refused) == "refused: 10.0.0.1 is in blocked network 10.0.0.0/8"


async def test_names_a_job_chose_never_hold_the_default_executor(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 32: PostgreSQL sink hosts resolved on the loop's default executor, so a few jobs naming hosts whose
    DNS never answers held every thread of it, and Redis reconnects (which resolve there) waited behind them."""
    real = socket.getaddrinfo
    release = threading.Event()

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, str) and host.endswith(".black-hole.test"):
            release.wait(30)  # a resolver that never answers (until the test ends)
            raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    jobs = [
        _job(
            output={"sink": "PostgreSQL", "postgres": {"host": f"db{i}.black-hole.test", "database": "d", "user": "u"}}
        )
        for i in range(40)
    ]
    checks = [asyncio.create_task(sink_problem("ns", job)) for job in jobs]
    try:
        await asyncio.sleep(0.2)  # every check has asked for its name
        started = time.monotonic()
        # What redis-py does to reconnect: resolve on the loop's default executor.
        await asyncio.wait_for(asyncio.get_running_loop().getaddrinfo("localhost", 6379), 5)
        assert time.monotonic() - started < 1
    finally:
        release.set()
        await asyncio.gather(*checks, return_exceptions=True)


def test_the_pools_rule_and_cleartext_choice_reach_the_workers_sinks(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool's allowedCidrs and allowCleartextPostgresPassword travel to the workers (environment) and into
    every sink they build, as into the operator's checks."""
    pool = _pool(allowedCidrs=["10.20.0.0/16"], allowCleartextPostgresPassword=True)
    dep = worker_deployment(namespace="ns", pool="p", pool_uid="u", spec=pool, replicas=1)
    env = {e["name"]: e.get("value") for e in dep["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["TRAWL_ALLOWED_CIDRS"] == "10.20.0.0/16" and env["TRAWL_POSTGRES_CLEARTEXT_PASSWORD"] == "true"
    plain = worker_deployment(namespace="ns", pool="p", pool_uid="u", spec=_pool(), replicas=1)
    assert "TRAWL_POSTGRES_CLEARTEXT_PASSWORD" not in str(plain)

    monkeypatch.setenv(secret_env_name("pg", "password"), "db-pass")
    monkeypatch.setenv(secret_env_name("s3", "secret"), "s3-secret")
    allowed = parse_networks(["10.20.0.0/16"])
    # A client that never connects: building a sink registers its scripts, it sends nothing.
    sinks = JobSinks(Redis(), Keys("trawl:{ns/p}"), allowed, None, postgres_cleartext=True)  # type: ignore[arg-type]
    postgres = {"host": "db", "database": "d", "user": "u", "passwordSecretRef": {"name": "pg", "key": "password"}}
    pg_job = _job(output={"sink": "PostgreSQL", "postgres": postgres})
    pg = sinks.for_spec(parse_worker_spec(build_worker_spec(pg_job, None)))
    assert (pg.target.allowed, pg.target.cleartext_password) == (allowed, True)  # type: ignore[attr-defined]
    s3_job = _job(output={"sink": "S3", "s3": {**S3, "accessKeyIdSecretRef": {"name": "s3", "key": "secret"}}})
    s3 = sinks.for_spec(parse_worker_spec(build_worker_spec(s3_job, None)))
    assert s3.target.allowed == allowed  # type: ignore[attr-defined]
