"""The results API (trawl.resultsapi) served by `trawl operator --api-port`, on a real kube-apiserver: the
caller's own token is checked with TokenReview and every request with a SubjectAccessReview, so only the
RBAC on scrapejobs/results and scrapejobs/deadletters decides who reads and who retries; nobody needs the
Redis password. Plain HTTP on loopback here (the chart serves HTTPS)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import ssl
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis
import yaml
from operator_fixtures import apply, get, job, pool
from typer.testing import CliRunner

from tlscerts import issue_tls
from trawl.api.naming import ANNOTATION_RETRY_DEAD, queue_prefix
from trawl.cli import app
from trawl.clitools.exits import EXIT_FORBIDDEN
from trawl.dev.controlplane import ControlPlane
from trawl.dev.operator_process import OperatorProcess, rbac_objects
from trawl.dev.procs import free_port
from trawl.dev.redis_server import RedisServer
from trawl.operator.rbac import DEAD_LETTER_RETRIER_RULES, RESULTS_READER_RULES
from trawl.queue import Queue
from trawl.queue.keys import Keys
from waits import wait_for

# the chart's trawl-results-reader and trawl-dead-letter-retrier ClusterRoles, bound here as Roles
READ, RETRY = RESULTS_READER_RULES, DEAD_LETTER_RETRIER_RULES
# get on the job itself: what every tenant has, and not enough to read its results
JOB_ONLY = [{"apiGroups": ["trawl.dev"], "resources": ["scrapejobs"], "verbs": ["get", "list", "watch", "update"]}]
ENDPOINTS = [("GET", "results"), ("GET", "deadletters"), ("POST", "deadletters/retry")]


@dataclass(frozen=True)
class User:
    name: str
    kubeconfig: Path
    token: str


@dataclass(frozen=True)
class Api:
    url: str
    namespace: str

    def call(self, method: str, path: str, token: str | None, job: str = "books") -> tuple[int, dict[str, str], bytes]:
        url = f"{self.url}/v1/namespaces/{self.namespace}/scrapejobs/{job}/{path}"
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(url, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, dict(response.headers.items()), response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, dict(exc.headers.items()), exc.read()


def make_user(cp: ControlPlane, namespace: str, name: str, rules: list[dict[str, Any]] | None) -> User:
    if rules is not None:
        role = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": name},
            "rules": rules,
        }
        binding = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        }
        apply(cp, role, binding, namespace=namespace)
    kubeconfig = cp.service_account_kubeconfig(namespace, name)
    token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    return User(name, kubeconfig, token)


@contextlib.contextmanager
def serving_api(
    cp: ControlPlane, namespace: str, logs: Path, tls: tuple[Path, Path] | None = None, extra: tuple[str, ...] = ()
) -> Iterator[Api]:
    """`trawl operator --api-port` as its ServiceAccount with the RBAC of trawl.operator.rbac; HTTPS with ``tls``."""
    apply(cp, *rbac_objects(namespace, "trawl-operator", [namespace]))
    kubeconfig = cp.service_account_kubeconfig(namespace, "trawl-operator")
    port = free_port()
    tls_args = ["--api-tls-cert", str(tls[0]), "--api-tls-key", str(tls[1])] if tls else []
    proc = OperatorProcess(
        kubeconfig, [namespace], logs / "operator.log", env={"TRAWL_JOB_SYNC_SECONDS": "1"},
        extra_args=["--api-port", str(port), *tls_args, *extra],
    )  # fmt: skip
    proc.start()
    try:
        wait_for(
            "the results API to listen", lambda: "results API listening" in proc.log_tail(200), 60,
            diag=lambda: proc.log_tail(40),
        )  # fmt: skip
        host = extra[extra.index("--api-bind-address") + 1] if "--api-bind-address" in extra else "127.0.0.1"
        yield Api(f"{'https' if tls else 'http'}://{host}:{port}", namespace)
    finally:
        proc.stop()
        print(f"--- operator log tail:\n{proc.log_tail(60)}")


@pytest.fixture
def api(control_plane: ControlPlane, namespace: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    with serving_api(control_plane, namespace, tmp_path_factory.mktemp("operator")) as served:
        yield served


@pytest.fixture
def books(control_plane: ControlPlane, namespace: str, redis_server: RedisServer) -> dict[str, Any]:
    """The pool and a job (no workers: the test writes its records and dead letters itself)."""
    redis.Redis.from_url(redis_server.url).flushall()
    apply(control_plane, pool("shop", redis_server.url), namespace=namespace)
    apply(control_plane, job("books", "shop", ["http://127.0.0.1:9/a", "http://127.0.0.1:9/b"]), namespace=namespace)
    return get(control_plane, "scrapejob", "books", namespace)


def stream_key(namespace: str, uid: str) -> str:
    return Keys(queue_prefix(namespace, "shop")).results(uid)


def test_every_endpoint_refuses_a_missing_or_invalid_token_and_a_caller_without_the_rbac(
    control_plane: ControlPlane, namespace: str, api: Api, books: dict[str, Any]
) -> None:
    nobody = make_user(control_plane, namespace, "nobody", None)
    job_only = make_user(control_plane, namespace, "job-only", JOB_ONLY)
    reader = make_user(control_plane, namespace, "reader", READ)
    for method, path in ENDPOINTS:
        for token in (None, "not-a-token", nobody.token[:-4] + "AAAA"):
            status, headers, body = api.call(method, path, token)
            assert status == 401, (method, path, token, body)
            assert headers.get("WWW-Authenticate") == "Bearer"
        for user in (nobody, job_only):
            status, _, body = api.call(method, path, user.token)
            assert status == 403, (method, path, user.name, body)
            assert user.name in json.loads(body)["message"]
        # authorised before the job is looked up: a job that does not exist is a 403 too, never a 404
        assert api.call(method, path, nobody.token, job="no-such-job")[0] == 403
    assert api.call("GET", "results", reader.token, job="no-such-job")[0] == 404
    assert api.call("POST", "deadletters/retry", reader.token)[0] == 403
    # an address whose tokens keep failing is held back before its next TokenReview
    answers = [api.call("GET", "results", f"guess-{i}")[0] for i in range(130)]
    assert answers[0] == 401 and answers[-1] == 429, answers


def test_paging_returns_every_record_exactly_once_while_the_job_writes(
    control_plane: ControlPlane, namespace: str, api: Api, books: dict[str, Any], redis_server: RedisServer
) -> None:
    reader = make_user(control_plane, namespace, "reader", READ)
    key = stream_key(namespace, books["metadata"]["uid"])
    client = redis.Redis.from_url(redis_server.url)
    total, written, page_read = 3000, threading.Event(), threading.Event()

    def write() -> None:  # what the RedisStream sink writes: url and data fields, IDs chosen by Redis
        try:
            for start in range(0, total, 50):
                pipe = client.pipeline(transaction=False)
                for i in range(start, start + 50):
                    pipe.xadd(key, {"url": f"http://shop/{i}", "data": json.dumps({"url": f"http://shop/{i}", "i": i})})
                pipe.execute()
                # a batch between every two pages: the reader always pages a stream that is still growing
                page_read.wait(timeout=5)
                page_read.clear()
        finally:
            written.set()

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    seen: list[int] = []
    cursor, pages, pages_while_writing = "", 0, 0
    try:
        while True:
            writing = not written.is_set()
            path = f"results?limit=97&cursor={cursor}" if cursor else "results?limit=97"
            status, headers, body = api.call("GET", path, reader.token)
            assert status == 200, body
            records = [json.loads(line) for line in body.decode().splitlines()]
            seen += [r["i"] for r in records]
            assert int(headers["Trawl-Count"]) == len(records)
            cursor, pages = headers["Trawl-Next-Cursor"], pages + 1
            pages_while_writing += writing and bool(records)
            page_read.set()
            if not records and written.is_set() and len(seen) >= total:
                break
            assert pages < 2000, f"paging did not finish: {len(seen)} of {total}"
    finally:
        writer.join(timeout=60)
    assert seen == list(range(total)), "every record exactly once, in the order written"
    assert pages_while_writing > 20, f"only {pages_while_writing} pages were read while the writer wrote"
    assert api.call("GET", "results?cursor=not-a-cursor", reader.token)[0] == 400
    assert api.call("GET", "results?limit=0", reader.token)[0] == 400

    # `trawl results --api-url`: the reader's kubeconfig alone, no Redis URL, the same records
    out = CliRunner().invoke(
        app, ["results", "books", "--api-url", api.url, "--kubeconfig", str(reader.kubeconfig), "-n", namespace]
    )
    assert out.exit_code == 0, out.output
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [r["i"] for r in lines] == list(range(total))


def dead_letter_one(redis_url: str, namespace: str, uid: str) -> str:
    """Fail one task of the job permanently, as a worker would report a 404: one dead letter."""

    async def run() -> str:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            queue = Queue(client, queue_prefix(namespace, "shop"))
            tasks = await queue.claim("test-worker", 1)
            assert tasks, "the operator enqueued the job's URLs"
            outcome = await queue.fail(tasks[0], "test-worker", "HTTP4xx", "HTTP 404")
            assert outcome.dead_lettered
            return tasks[0].url
        finally:
            await client.aclose()

    return asyncio.run(run())


def test_a_reader_lists_dead_letters_but_only_a_retrier_retries(
    control_plane: ControlPlane, namespace: str, api: Api, books: dict[str, Any], redis_server: RedisServer
) -> None:
    cp = control_plane
    reader = make_user(cp, namespace, "reader", READ)
    retrier = make_user(cp, namespace, "retrier", RETRY)

    def enqueued() -> bool:
        return (
            int(((get(cp, "scrapejob", "books", namespace).get("status") or {}).get("counts") or {}).get("total") or 0)
            == 2
        )

    wait_for("the operator to enqueue the job's URLs", enqueued, 60)
    url = dead_letter_one(redis_server.url, namespace, books["metadata"]["uid"])

    status, _, body = api.call("GET", "deadletters", reader.token)
    assert status == 200, body
    items = json.loads(body)["items"]
    assert [(d["url"], d["errorClass"], d["lastError"]) for d in items] == [(url, "HTTP4xx", "HTTP 404")]
    cli = ["--api-url", api.url, "-n", namespace, "--kubeconfig"]
    out = CliRunner().invoke(app, ["dlq", "list", "books", "-o", "json", *cli, str(reader.kubeconfig)])
    assert out.exit_code == 0, out.output
    assert [d["url"] for d in json.loads(out.stdout)] == [url]

    # the reader may not retry (403, the CLI's forbidden exit), the job is untouched
    out = CliRunner().invoke(app, ["dlq", "retry", "books", "--all", "--no-wait", *cli, str(reader.kubeconfig)])
    assert out.exit_code == EXIT_FORBIDDEN, out.output
    assert ANNOTATION_RETRY_DEAD not in (get(cp, "scrapejob", "books", namespace)["metadata"].get("annotations") or {})

    # the retrier may: the API sets the annotation, the operator requeues the dead letter
    status, _, body = api.call("POST", "deadletters/retry?all=true", retrier.token)
    assert status == 202, body
    requested = json.loads(body)["requested"]
    assert requested.endswith("/all")

    def handled() -> bool:
        status = get(cp, "scrapejob", "books", namespace).get("status") or {}
        return status.get("retryDeadLettersHandled") == requested

    wait_for("the operator to act on the retry", handled, 60)
    assert json.loads(api.call("GET", "deadletters", reader.token)[2])["items"] == []


def test_over_https_with_a_certificate_the_cli_verifies(
    control_plane: ControlPlane, namespace: str, books: dict[str, Any], redis_server: RedisServer, tmp_path: Path
) -> None:
    reader = make_user(control_plane, namespace, "reader", READ)
    client = redis.Redis.from_url(redis_server.url)
    key = stream_key(namespace, books["metadata"]["uid"])
    for i in range(5):
        client.xadd(key, {"url": f"http://shop/{i}", "data": json.dumps({"url": f"http://shop/{i}", "i": i})})
    ca, cert, key_file = issue_tls(tmp_path)
    with serving_api(control_plane, namespace, tmp_path, tls=(cert, key_file)) as api:
        argv = ["results", "books", "--api-url", api.url, "--kubeconfig", str(reader.kubeconfig), "-n", namespace]
        out = CliRunner().invoke(app, [*argv, "--api-ca", str(ca)])
        assert out.exit_code == 0, out.output
        assert [json.loads(line)["i"] for line in out.stdout.splitlines() if line.startswith("{")] == list(range(5))
        # without the CA the certificate is not trusted: the CLI says it cannot reach the API, sends nothing
        out = CliRunner().invoke(app, argv)
        assert out.exit_code == 3 and "CERTIFICATE_VERIFY_FAILED" in out.output, out.output
        # and plain HTTP on the TLS port gets no answer but a TLS failure
        with pytest.raises((urllib.error.URLError, ConnectionError, ssl.SSLError)):
            urllib.request.urlopen(api.url.replace("https:", "http:") + "/healthz", timeout=10).read()
