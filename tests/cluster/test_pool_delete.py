"""`trawl pool delete` (the chart's pre-delete hook) against the real API server, each way it can end:
refused while a job names the pool (pool untouched), held by the operator (its DeletionBlocked Event),
a finalizer nobody removes (bounded), and gone. The operator's side runs on the real node
(tests/e2e/test_realnode.py::test_helm_uninstall_refuses_while_a_job_names_the_pool_then_leaves_only_the_crds).
"""

from __future__ import annotations

import json
import time
from typing import Any

from operator_fixtures import apply, exists, get, job, pool
from typer.testing import CliRunner

from trawl.api.naming import FINALIZER
from trawl.cli import app
from trawl.clitools.exits import EXIT_FAILED, EXIT_TIMEOUT
from trawl.dev.controlplane import ControlPlane


def _delete(cp: ControlPlane, namespace: str, *args: str) -> Any:
    argv = ["pool", "delete", *args, "--kubeconfig", str(cp.kubeconfig_path), "-n", namespace]
    result = CliRunner().invoke(app, argv, catch_exceptions=True)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"trawl pool delete raised {result.exception!r}\n{result.output}")
    assert "Traceback" not in result.output, result.output
    return result


def _unfinalize(cp: ControlPlane, namespace: str, name: str) -> None:
    patch = json.dumps({"metadata": {"finalizers": None}})
    cp.kubectl("patch", "scrapepool", name, "-n", namespace, "--type=merge", "-p", patch)


def test_pool_delete_refused_held_timed_out_or_done(control_plane: ControlPlane, namespace: str) -> None:
    cp = control_plane
    held = pool("held", "redis://127.0.0.1:1/0")
    held["metadata"]["finalizers"] = [FINALIZER]  # as the operator sets it; no operator runs here
    apply(cp, pool("used", "redis://127.0.0.1:1/0"), held, pool("free", "redis://127.0.0.1:1/0"), namespace=namespace)
    apply(cp, job("j1", "used", ["https://example.com/"]), namespace=namespace)

    # A job names the pool: refused before deleting anything, the pool untouched.
    res = _delete(cp, namespace, "used", "free")
    assert res.exit_code == EXIT_FAILED, res.output
    assert f"ScrapePool {namespace}/used not deleted: 1 ScrapeJobs still name it (j1)" in res.output
    assert "deletionTimestamp" not in get(cp, "scrapepool", "used", namespace)["metadata"]
    assert exists(cp, "scrapepool", "free", namespace), "nothing is deleted when one pool is refused"

    # The operator holds the deletion (a job created after the check): its message, not a wait.
    uid = get(cp, "scrapepool", "held", namespace)["metadata"]["uid"]
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": "held.blocked", "namespace": namespace},
        "involvedObject": {
            "apiVersion": "trawl.dev/v1alpha1",
            "kind": "ScrapePool",
            "name": "held",
            "namespace": namespace,
            "uid": uid,
        },
        "reason": "DeletionBlocked",
        "message": "1 ScrapeJobs still name this pool (late); delete them first",
        "type": "Warning",
    }
    apply(cp, event, namespace=namespace)
    started = time.monotonic()
    res = _delete(cp, namespace, "held", "--timeout", "60")
    assert res.exit_code == EXIT_FAILED, res.output
    assert "the operator holds it: 1 ScrapeJobs still name this pool (late)" in res.output
    assert time.monotonic() - started < 30, "the hold is reported at once, not after the timeout"
    cp.kubectl("delete", "event", "held.blocked", "-n", namespace)

    # Nobody removes the finalizer (no operator): bounded, and the message names the finalizer.
    res = _delete(cp, namespace, "held", "--timeout", "2")
    assert res.exit_code == EXIT_TIMEOUT, res.output
    assert FINALIZER in res.output and "is it running?" in res.output
    _unfinalize(cp, namespace, "held")

    # No job: gone; a pool already gone is not an error (a retried uninstall).
    cp.kubectl("delete", "scrapejob", "j1", "-n", namespace)
    res = _delete(cp, namespace, "used", "free", "held")
    assert res.exit_code == 0, res.output
    assert f"ScrapePool {namespace}/used deleted" in res.output and f"ScrapePool {namespace}/free deleted" in res.output
    assert f"ScrapePool {namespace}/held not found: nothing to delete" in res.output
    assert not exists(cp, "scrapepool", "used", namespace) and not exists(cp, "scrapepool", "free", namespace)
