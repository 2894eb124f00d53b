"""A job's end reaches its status when the queue records it, not at the job's next periodic pass
(trawl.operator.job.endwatch): an operator whose passes over a running job come 10 minutes apart still
reports a finished job Complete within the test's bound, because the pool's event stream brings its pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from operator_fixtures import apply, exists, get, job, pool, wait_complete

from trawl.dev.controlplane import ControlPlane
from trawl.dev.operator_process import OperatorProcess, rbac_objects
from trawl.dev.redis_server import RedisServer
from waits import wait_for

SLOW_PASSES = "600"  # a running job's periodic pass: far beyond every bound below


def test_a_finished_job_is_complete_long_before_its_next_periodic_pass(
    control_plane: ControlPlane,
    namespace: str,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
    tmp_path: Path,
) -> None:
    apply(control_plane, *rbac_objects(namespace, "trawl-operator", [namespace]))
    op = OperatorProcess(
        control_plane.service_account_kubeconfig(namespace, "trawl-operator"),
        [namespace],
        tmp_path / "operator.log",
        env={"TRAWL_JOB_SYNC_SECONDS": SLOW_PASSES, "TRAWL_POOL_SYNC_SECONDS": "1"},
    ).start()
    try:
        apply(control_plane, pool("ends", redis_server.url), namespace=namespace)
        wait_for("Deployment", lambda: exists(control_plane, "deployment", "ends-workers", namespace))
        urls = [bookstore.product_url(i) for i in range(1, 4)]
        apply(control_plane, job("ends", "ends", urls), namespace=namespace)
        # The create pass registers and enqueues the job; nothing but the queue's "finished" entry brings
        # another pass within these 180 s (the next periodic one is 600 s away).
        wait_complete(control_plane, "ends", namespace, 180, lambda: op.log_tail(40))
        status = get(control_plane, "scrapejob", "ends", namespace)["status"]
        assert status["phase"] == "Succeeded"
        assert status["counts"]["succeeded"] == len(urls)
    finally:
        op.stop()
