"""The results API's per-URL history (``…/scrapejobs/J/history?url=U``) on a real kube-apiserver: the records
and dead letters of one URL of a job, with the same 401/403 rules as every endpoint (it needs both
``get scrapejobs/results`` and ``get scrapejobs/deadletters``)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

import redis
from operator_fixtures import get
from test_results_api import JOB_ONLY, READ, Api, api, books, dead_letter_one, make_user, stream_key
from typer.testing import CliRunner

from trawl.cli import app
from trawl.clitools.exits import EXIT_FORBIDDEN
from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from waits import wait_for

__all__ = ["api", "books"]  # the fixtures, used by name

RESULTS_ONLY = [{"apiGroups": ["trawl.dev"], "resources": ["scrapejobs/results"], "verbs": ["get"]}]


def history(api: Api, token: str | None, url: str, job: str = "books") -> tuple[int, Any]:
    status, _, body = api.call("GET", f"history?url={quote(url, safe='')}", token, job=job)
    return status, json.loads(body) if body else None


def test_a_urls_records_and_dead_letters_behind_the_same_rules(
    control_plane: ControlPlane, namespace: str, api: Api, books: dict[str, Any], redis_server: RedisServer
) -> None:
    cp = control_plane
    reader = make_user(cp, namespace, "reader", READ)
    nobody = make_user(cp, namespace, "nobody", JOB_ONLY)
    results_only = make_user(cp, namespace, "results-only", RESULTS_ONLY)
    uid = books["metadata"]["uid"]
    client = redis.Redis.from_url(redis_server.url)
    for i in range(5):  # two records of /a (a refresh would write it again), others between
        url = "http://127.0.0.1:9/a" if i in (1, 3) else f"http://shop/{i}"
        client.xadd(stream_key(namespace, uid), {"url": url, "data": json.dumps({"url": url, "i": i})})

    def enqueued() -> bool:
        status = get(cp, "scrapejob", "books", namespace).get("status") or {}
        return int((status.get("counts") or {}).get("total") or 0) == 2

    wait_for("the operator to enqueue the job's URLs", enqueued, 60)
    dead_url = dead_letter_one(redis_server.url, namespace, uid)

    for token in (None, "not-a-token"):
        assert history(api, token, dead_url)[0] == 401
    for user in (nobody, results_only):  # results alone is not enough: dead letters are in the answer too
        status, body = history(api, user.token, dead_url)
        assert status == 403 and user.name in body["message"]
    assert history(api, nobody.token, dead_url, job="no-such-job")[0] == 403
    assert history(api, reader.token, dead_url, job="no-such-job")[0] == 404
    assert history(api, reader.token, "")[0] == 400

    status, body = history(api, reader.token, "http://127.0.0.1:9/a")
    assert status == 200, body
    assert [r["record"]["i"] for r in body["records"]] == [1, 3]
    assert body["complete"] is True and body["scanned"] == 5
    expected = [dead_url] if dead_url == "http://127.0.0.1:9/a" else []  # the worker's claim picked either
    assert [d["url"] for d in body["deadLetters"]] == expected
    status, body = history(api, reader.token, dead_url)
    assert [(d["url"], d["errorClass"]) for d in body["deadLetters"]] == [(dead_url, "HTTP4xx")]
    status, body = history(api, reader.token, "http://never.example/")
    assert (status, body["records"], body["deadLetters"]) == (200, [], [])

    # `trawl history`: the same answer from the reader's kubeconfig
    argv = ["history", "books", dead_url, "--api-url", api.url, "--kubeconfig", str(reader.kubeconfig), "-n", namespace]
    out = CliRunner().invoke(app, argv)
    assert out.exit_code == 0, out.output
    answer = json.loads(out.stdout)
    assert answer["url"] == dead_url and [d["url"] for d in answer["deadLetters"]] == [dead_url]
    out = CliRunner().invoke(app, [*argv[:-4], "--kubeconfig", str(nobody.kubeconfig), "-n", namespace])
    assert out.exit_code == EXIT_FORBIDDEN, out.output
