"""The `trawl` job tools against the real API server, operator, workers and Redis.

Commands run in-process through typer's CliRunner with --kubeconfig (the admin kubeconfig), and a
few through `python -m trawl.cli` with KUBECONFIG set, as a user runs them.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from operator_fixtures import apply, get, job, pool, wait_complete
from typer.testing import CliRunner

from trawl.cli import app
from trawl.clitools.exits import (
    EXIT_FORBIDDEN,
    EXIT_NO_CRDS,
    EXIT_NOT_FOUND,
    EXIT_OTHER_SINK,
    EXIT_REDIS,
    EXIT_UNREACHABLE,
)
from trawl.dev.controlplane import ControlPlane, find_assets
from trawl.dev.procs import free_port
from trawl.dev.redis_server import RedisServer


def cli(cp: ControlPlane, namespace: str, *args: str, kubeconfig: Path | None = None) -> Any:
    runner = CliRunner()
    argv = [*args, "--kubeconfig", str(kubeconfig or cp.kubeconfig_path), "-n", namespace]
    result = runner.invoke(app, argv, catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"trawl {' '.join(args)} raised {result.exception!r}\n{result.output}")
    return result


def run_trawl(*args: str, kubeconfig: Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KUBECONFIG": str(kubeconfig), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "trawl.cli", *args], capture_output=True, text=True, env=env, timeout=timeout
    )


def quiet_worker() -> dict[str, Any]:
    """One worker on a free metrics port: the default 9090 may be taken by another test's worker."""
    return {
        "worker": {"concurrency": 16, "drainSeconds": 10, "allowedCidrs": ["127.0.0.0/8"], "metricsPort": free_port()},
        "autoscaling": {"minReplicas": 0, "maxReplicas": 1, "idleSecondsBeforeZero": 5, "pollSeconds": 1},
    }


def _diag(operator: Any, supervisor: Any) -> str:
    logs = sorted(supervisor.log_dir.glob("*.log"))
    tails = [f"--- {p.name}:\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:]) for p in logs[-3:]]
    return f"--- operator:\n{operator.log_tail(30)}\n" + "\n".join(tails)


def test_submit_wait_status_results_top(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    cp = control_plane
    apply(cp, pool("shop", redis_server.url, **quiet_worker()), namespace=namespace)

    # submit --crawl --wait: a progress bar until Complete, exit 0
    res = cli(
        cp, namespace, "submit", bookstore.url + "/", "--crawl", "--max-pages", "25", "--depth", "3",
        "--exclude", "/private/", "--pool", "shop", "--priority", "7", "--name", "books", "--wait", "--timeout", "150",
    )  # fmt: skip
    assert res.exit_code == 0, res.output + _diag(operator, supervisor)
    assert "scrapejob.trawl.dev/books created" in res.output
    assert "Succeeded" in res.output
    obj = get(cp, "scrapejob", "books", namespace)
    crawl = obj["spec"]["crawl"]
    assert (crawl["maxPages"], crawl["maxDepth"], crawl["exclude"]) == (25, 3, ["/private/"])
    assert obj["spec"]["priority"] == 7
    assert obj["status"]["phase"] == "Succeeded"
    assert obj["status"]["counts"]["succeeded"] == 25

    # submit without --name: generateName from the host; without --wait it returns at once
    res = cli(cp, namespace, "submit", bookstore.product_url(1), bookstore.product_url(2), "--pool", "shop")
    assert res.exit_code == 0, res.output
    generated = res.output.split("scrapejob.trawl.dev/")[1].split()[0]
    assert generated.startswith("127-0-0-1-") or generated.startswith("job-"), generated
    wait_complete(cp, generated, namespace, 120, lambda: _diag(operator, supervisor))

    # status: the table of jobs, one job's detail, JSON
    res = cli(cp, namespace, "status")
    assert res.exit_code == 0, res.output
    assert "books" in res.output and generated in res.output and "Succeeded" in res.output
    assert "PROGRESS" in res.output and "100%" in res.output
    res = cli(cp, namespace, "status", "books")
    assert res.exit_code == 0, res.output
    for text in ("Complete", "Ready", "Conditions", "RedisStream", "trawl results books", "max pages 25"):
        assert text in res.output, (text, res.output)
    res = cli(cp, namespace, "status", "books", "-o", "json")
    assert json.loads(res.output)["metadata"]["name"] == "books"
    res = cli(cp, namespace, "status", "-o", "yaml")
    assert {j["metadata"]["name"] for j in yaml.safe_load(res.output)} == {"books", generated}
    # --watch on a finished job: one document, then it returns (a running job would stream them)
    res = cli(cp, namespace, "status", "books", "-w", "-o", "yaml")
    assert res.exit_code == 0, res.output
    docs = [d for d in yaml.safe_load_all(res.output) if d]
    assert len(docs) == 1 and docs[0]["status"]["phase"] == "Succeeded"
    assert docs[0]["status"]["progressText"] == "100%" and docs[0]["status"]["duration"]
    # kubectl's columns: PROGRESS with %, DURATION
    table = cp.kubectl("get", "sj", "books", "-n", namespace).stdout
    assert "PROGRESS" in table and "100%" in table and "DURATION" in table, table
    # a closed pipe (`trawl results books | head -1`) ends quietly
    head = subprocess.run(
        f"{sys.executable} -m trawl.cli results books -n {namespace} | head -1",
        shell=True, capture_output=True, text=True, timeout=120,
        env={**os.environ, "KUBECONFIG": str(cp.kubeconfig_path)},
    )  # fmt: skip
    assert head.stdout.count("\n") == 1 and "Traceback" not in head.stderr, head.stderr

    # results: JSON Lines on stdout, CSV to a file; one record per page, as the status counts
    res = cli(cp, namespace, "results", "books")
    assert res.exit_code == 0, res.output
    lines = [json.loads(line) for line in res.stdout.splitlines() if line.startswith("{")]
    assert len(lines) == obj["status"]["results"]["count"] == 25
    assert len({r["url"] for r in lines}) == 25
    assert all(r["status"] == 200 for r in lines)
    out = tmp_path / "books.csv"
    res = cli(cp, namespace, "results", "books", "--format", "csv", "--output", str(out))
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(rows) == 25
    assert {r["url"] for r in rows} == {r["url"] for r in lines}
    assert list(rows[0])[:2] == ["url", "status"]
    # --redis-url reads the same stream through another address (as through a port-forward)
    res = cli(cp, namespace, "results", "books", "--redis-url", redis_server.url.replace("127.0.0.1", "localhost"))
    assert res.exit_code == 0 and res.stdout.count("\n") == 25, res.output

    # top --once: one frame with the pool's replicas, backlog, throughput and sparklines
    res = cli(cp, namespace, "top", "--once")
    assert res.exit_code == 0, res.output
    assert "shop" in res.output and "BACKLOG" in res.output and "TASKS/S" in res.output
    assert any(ch in res.output for ch in "▁▂▃▄▅▆▇█")

    # the real entry point, with KUBECONFIG from the environment and the namespace from -n
    proc = run_trawl("status", "-n", namespace, kubeconfig=cp.kubeconfig_path)
    assert proc.returncode == 0, proc.stderr
    assert "books" in proc.stdout


def test_dlq_list_retry_and_failed_submit(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
) -> None:
    cp = control_plane
    spec = quiet_worker()
    # The breaker off: the three URLs share one host, and six 503s in a row would open its breaker, which
    # then lets one probe through per 30, 60, 120 s: the third attempts would outlast the wait below.
    spec["worker"]["circuitBreaker"] = {"failureThreshold": 0}
    apply(cp, pool("flaky", redis_server.url, **spec), namespace=namespace)
    # Each URL answers 503 three times, then recovers: the default three attempts are not enough.
    urls = [f"{bookstore.url}/hostile/503?id={namespace}-{i}&fail=3" for i in range(3)]
    res = cli(cp, namespace, "submit", *urls, bookstore.product_url(3), "--pool", "flaky", "--name", "flaky",
              "--wait", "--timeout", "150")  # fmt: skip
    assert res.exit_code == 1, res.output + _diag(operator, supervisor)
    assert "Failed" in res.output

    res = cli(cp, namespace, "dlq", "list", "flaky")
    assert res.exit_code == 0, res.output
    assert "HTTP5xx" in res.output and "3 dead letters" in res.output
    res = cli(cp, namespace, "dlq", "list", "flaky", "-o", "json")
    records = json.loads(res.stdout)
    assert {r["url"] for r in records} == set(urls)
    assert all(r["attempts"] == 3 and r["errorClass"] == "HTTP5xx" for r in records)
    assert all(len(r["history"]) == 3 for r in records)

    # retry: the annotation, acted on by the operator; the site has recovered, so the job completes
    res = cli(cp, namespace, "dlq", "retry", "flaky")
    assert res.exit_code == 0, res.output
    assert "requested a retry of 3 dead letters" in res.output and "the operator requeued them" in res.output
    annotations = get(cp, "scrapejob", "flaky", namespace)["metadata"]["annotations"]
    assert "trawl.dev/retry-dead-letters" in annotations
    wait_complete(cp, "flaky", namespace, 120, lambda: _diag(operator, supervisor))
    res = cli(cp, namespace, "dlq", "list", "flaky")
    assert res.exit_code == 0 and "no dead letters" in res.output, res.output
    res = cli(cp, namespace, "dlq", "retry", "flaky")
    assert res.exit_code == 0 and "nothing to retry" in res.output, res.output


def _no_traceback(res: Any) -> None:
    assert "Traceback" not in res.output, res.output


def test_error_cases(control_plane: ControlPlane, namespace: str, tmp_path: Path) -> None:
    cp = control_plane
    # job not found, for every command that takes a job
    for args in (["status", "nope"], ["results", "nope"], ["dlq", "list", "nope"], ["dlq", "retry", "nope"]):
        res = cli(cp, namespace, *args)
        assert res.exit_code == EXIT_NOT_FOUND, (args, res.output)
        assert f"ScrapeJob {namespace}/nope not found" in res.output
        _no_traceback(res)

    # pool not found: submit refuses before creating anything
    res = cli(cp, namespace, "submit", "https://example.com/", "--pool", "ghost")
    assert res.exit_code == EXIT_NOT_FOUND, res.output
    assert f"ScrapePool {namespace}/ghost not found" in res.output
    listing = cp.kubectl("get", "scrapejobs", "-n", namespace, "-o", "json")
    assert json.loads(listing.stdout)["items"] == []
    # ...and a job whose pool was deleted: results/dlq name the pool
    apply(cp, job("orphan", "ghost", ["https://example.com/"]), namespace=namespace)
    res = cli(cp, namespace, "results", "orphan")
    assert res.exit_code == EXIT_NOT_FOUND and "ScrapePool" in res.output and "ghost" in res.output, res.output

    # an invalid URL is reported by the same validation the operator applies
    apply(cp, pool("p", "redis://127.0.0.1:1/0"), namespace=namespace)
    res = cli(cp, namespace, "submit", "ftp://example.com/x", "--pool", "p")
    assert res.exit_code == 1 and "invalid job" in res.output, res.output

    # the pool's Redis does not answer: a clear message with the port-forward hint
    apply(cp, job("stuck", "p", ["https://example.com/"]), namespace=namespace)
    for args in (["dlq", "list", "stuck"], ["results", "stuck"]):
        res = cli(cp, namespace, *args)
        assert res.exit_code == EXIT_REDIS, (args, res.output)
        assert "cannot reach the Redis of ScrapePool p at 127.0.0.1:1" in res.output
        assert "--redis-url" in res.output
        _no_traceback(res)

    # results of a JsonLines job: where they are instead
    jl = job("files", "p", ["https://example.com/"], output={"sink": "JsonLines", "jsonLines": {"directory": "/data"}})
    apply(cp, jl, namespace=namespace)
    status = {"status": {"results": {"sink": "JsonLines", "location": "/data/files-x.jsonl", "count": 3}}}
    cp.kubectl("patch", "scrapejob/files", "-n", namespace, "--subresource=status", "--type=merge",
               "-p", json.dumps(status))  # fmt: skip
    res = cli(cp, namespace, "results", "files")
    assert res.exit_code == EXIT_OTHER_SINK, res.output
    assert "/data/files-x.jsonl" in res.output and "cannot be read back" in res.output

    # no cluster: a kubeconfig whose server nobody listens on; no kubeconfig at all
    config = yaml.safe_load(cp.kubeconfig_path.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(yaml.safe_dump(config))
    for args in (["status"], ["status", "x"], ["submit", "https://example.com/"], ["top", "--once"]):
        res = cli(cp, namespace, *args, kubeconfig=dead)
        assert res.exit_code == EXIT_UNREACHABLE, (args, res.output)
        assert "cannot reach the Kubernetes API server at 127.0.0.1:" in res.output
        _no_traceback(res)
    res = cli(cp, namespace, "status", kubeconfig=tmp_path / "missing.kubeconfig")
    assert res.exit_code == EXIT_UNREACHABLE and "no kubeconfig found" in res.output, res.output

    # RBAC: a ServiceAccount with no permissions
    nobody = cp.service_account_kubeconfig(namespace, "nobody")
    res = cli(cp, namespace, "status", kubeconfig=nobody)
    assert res.exit_code == EXIT_FORBIDDEN and "not allowed" in res.output, res.output

    # top without --once: a live view until Ctrl-C (exit 130), here with the pool that has no status yet
    env = {**os.environ, "KUBECONFIG": str(cp.kubeconfig_path), "COLUMNS": "200"}
    top = subprocess.Popen(
        [sys.executable, "-m", "trawl.cli", "top", "-n", namespace, "--interval", "0.5"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        # Ctrl-C as a terminal sends it: a run started in the background (`cmd &` in a script) ignores
        # SIGINT, and its children inherit that, so Python would raise no KeyboardInterrupt.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    watchdog = threading.Timer(60, top.kill)  # a frame never printed must not hang the test
    watchdog.start()
    assert top.stdout is not None
    seen = [top.stdout.readline() for _ in range(2)]  # the header and the pool's row of the first frame
    while len(seen) < 8:  # and a few refreshes
        seen.append(top.stdout.readline())
    top.send_signal(signal.SIGINT)
    stdout, stderr = top.communicate(timeout=20)
    watchdog.cancel()
    frames = "".join(seen) + stdout
    assert top.returncode == 130, stderr
    assert re.search(r"(?m)^\s*p\s+0/0\s", frames) and "Traceback" not in stderr, (frames, stderr)
    assert frames.count("BACKLOG") >= 2

    # the real entry point: one line on stderr, the exit code, no traceback
    proc = run_trawl("status", "nope", "-n", namespace, kubeconfig=cp.kubeconfig_path)
    assert proc.returncode == EXIT_NOT_FOUND
    assert "not found" in proc.stderr and "Traceback" not in proc.stderr + proc.stdout
    proc = run_trawl("dlq", "list", "x", kubeconfig=dead)
    assert proc.returncode == EXIT_UNREACHABLE and "Traceback" not in proc.stderr, proc.stderr


@pytest.fixture(scope="module")
def bare_control_plane() -> Iterator[ControlPlane]:
    """A second API server without the Trawl CRDs."""
    with ControlPlane(assets=find_assets()) as cp:
        yield cp


def test_crds_not_installed(bare_control_plane: ControlPlane) -> None:
    cp = bare_control_plane
    cases = (["status"], ["status", "x"], ["submit", "https://example.com/"], ["dlq", "retry", "x"], ["top", "--once"])
    for args in cases:
        res = cli(cp, "default", *args)
        assert res.exit_code == EXIT_NO_CRDS, (args, res.output)
        assert "Trawl CRDs (trawl.dev/v1alpha1) are not installed" in res.output
        assert "helm install" in res.output
        _no_traceback(res)
