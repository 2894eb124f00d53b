"""A JsonLines sink on a PersistentVolumeClaim the pool mounts: the workers write the file the job's status
names; a directory no volume holds stalls the job at acceptance, and so does a browser job on a pool of
plain workers. About 30 s.

The supervisor stands in for the kubelet: the claim is one local directory shared by the pool's workers.
"""

from __future__ import annotations

import json
from typing import Any

from operator_fixtures import apply, condition, exists, get, job, pool, wait_complete

from trawl.dev.bookstore import PRODUCT_FIELDS
from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from waits import wait_for


def test_pvc_backed_json_lines_writes_the_file_status_names(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
) -> None:
    claim = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "trawl-results"},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    apply(control_plane, claim, namespace=namespace)
    base = pool("files", redis_server.url)
    base["spec"]["worker"]["volumes"] = [{"name": "results", "persistentVolumeClaim": {"claimName": "trawl-results"}}]
    base["spec"]["worker"]["volumeMounts"] = [{"name": "results", "mountPath": "/data/results"}]
    apply(control_plane, base, namespace=namespace)
    wait_for("Deployment", lambda: exists(control_plane, "deployment", "files-workers", namespace))
    pod = get(control_plane, "deployment", "files-workers", namespace)["spec"]["template"]["spec"]
    assert {"name": "results", "persistentVolumeClaim": {"claimName": "trawl-results"}} in pod["volumes"]
    assert {"name": "results", "mountPath": "/data/results"} in pod["containers"][0]["volumeMounts"]

    expected = dict(list(bookstore.expected().items())[:5])
    output = {"sink": "JsonLines", "jsonLines": {"directory": "/data/results/books"}}
    spec = {"extract": {"fields": PRODUCT_FIELDS}, "output": output, "politeness": {"requestsPerSecond": 100}}
    apply(control_plane, job("to-volume", "files", list(expected), **spec), namespace=namespace)
    elsewhere = {"sink": "JsonLines", "jsonLines": {"directory": "/data/results-old"}}
    apply(control_plane, job("elsewhere", "files", list(expected)[:1], output=elsewhere), namespace=namespace)
    # A job that renders in a browser, on this pool of plain workers: stalled at acceptance, nothing fetched.
    apply(control_plane, job("rendered", "files", list(expected)[:1], render={"mode": "Browser"}), namespace=namespace)

    def stalled() -> Any:
        cond = condition(get(control_plane, "scrapejob", "elsewhere", namespace), "Stalled")
        return cond is not None and cond["status"] == "True" and cond

    cond = wait_for("Stalled/DirectoryNotMounted", stalled, timeout=60, diag=operator.log_tail)
    assert cond["reason"] == "DirectoryNotMounted"
    assert "/data/results-old is not on a writable volume" in cond["message"] and "/data/results" in cond["message"]

    def no_browser() -> Any:
        cond = condition(get(control_plane, "scrapejob", "rendered", namespace), "Stalled")
        return cond is not None and cond["status"] == "True" and cond

    cond = wait_for("Stalled/BrowserNotAvailable", no_browser, timeout=60, diag=operator.log_tail)
    assert cond["reason"] == "BrowserNotAvailable" and "ScrapePool 'files' runs plain workers" in cond["message"]

    wait_complete(control_plane, "to-volume", namespace, 120, operator.log_tail)
    obj = get(control_plane, "scrapejob", "to-volume", namespace)
    results = obj["status"]["results"]
    assert results["location"] == f"/data/results/books/{obj['metadata']['uid']}.jsonl"
    assert results["count"] == len(expected)
    # The file the status names, on the claim (the path inside the pods is /data/results/...).
    written = supervisor.claim_dir(namespace, "trawl-results") / results["location"].removeprefix("/data/results/")
    records = [json.loads(line) for line in written.read_text().splitlines()]
    assert sorted(r["url"] for r in records) == sorted(expected)
    assert get(control_plane, "scrapejob", "elsewhere", namespace)["status"].get("phase") in (None, "Pending")
