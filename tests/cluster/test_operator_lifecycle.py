"""Operator restarts, invalid specs, cron schedules, deadlines and TTLs against a real API server."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis
from operator_fixtures import apply, condition, events_for, exists, get, job, pool

from trawl.dev.controlplane import ControlPlane
from trawl.dev.operator_process import OperatorProcess
from trawl.dev.redis_server import RedisServer
from trawl.queue import Queue
from trawl.queue.keys import Keys
from waits import wait_for


def _stats(redis_url: str, namespace: str, pool_name: str, uid: str) -> Any:
    async def read() -> Any:
        client = aioredis.Redis.from_url(redis_url)
        try:
            return await Queue(client, f"trawl:{{{namespace}/{pool_name}}}").job_stats(uid)
        finally:
            await client.aclose()

    return asyncio.run(read())


def test_operator_killed_mid_enqueue_neither_loses_nor_duplicates(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess, redis_server: RedisServer
) -> None:
    apply(control_plane, pool("big", redis_server.url), namespace=namespace)
    ranges = [{"template": "http://127.0.0.1:9/item/{n}", "start": 1, "end": 50000}]
    apply(control_plane, job("huge", "big", [], urlRanges=ranges), namespace=namespace)
    uid = wait_for("uid", lambda: get(control_plane, "scrapejob", "huge", namespace)["metadata"].get("uid"))
    # Kill the operator while the seeds are being written (some, not all, are in Redis).
    deadline = time.monotonic() + 60
    seen = 0
    while time.monotonic() < deadline:
        stats = _stats(redis_server.url, namespace, "big", uid)
        seen = stats.total if stats.exists else 0
        if seen > 0:
            break
        time.sleep(0.005)
    operator.kill()
    assert seen > 0, "the operator never started enqueueing"
    operator.start()
    wait_for(
        "Queued after restart",
        lambda: (get(control_plane, "scrapejob", "huge", namespace).get("status") or {}).get("phase") == "Queued",
        timeout=90,
        diag=operator.log_tail,
    )
    stats = _stats(redis_server.url, namespace, "big", uid)
    assert stats.total == 50000
    assert stats.pending == 50000
    status = get(control_plane, "scrapejob", "huge", namespace)["status"]
    assert status["counts"]["total"] == 50000
    print(f"killed after {seen} of 50000 tasks were enqueued")


def test_invalid_spec_stalls_and_operator_keeps_working(
    control_plane: ControlPlane, namespace: str, operator: OperatorProcess, redis_server: RedisServer
) -> None:
    apply(control_plane, pool("p", redis_server.url), namespace=namespace)
    # Valid for the API server's schema, invalid for the operator (a regular expression that cannot compile).
    bad = job("bad-regex", "p", ["http://127.0.0.1:9/"], crawl={"include": ["(unclosed"]})
    apply(control_plane, bad, job("good", "p", ["http://127.0.0.1:9/"]), namespace=namespace)

    def stalled() -> Any:
        obj = get(control_plane, "scrapejob", "bad-regex", namespace)
        cond = condition(obj, "Stalled")
        return cond and cond["status"] == "True" and cond["reason"] == "InvalidSpec" and cond

    cond = wait_for("InvalidSpec", stalled, diag=operator.log_tail)
    assert "crawl.include" in cond["message"]
    wait_for(
        "InvalidSpec event",
        lambda: any(e["reason"] == "InvalidSpec" for e in events_for(control_plane, namespace, "bad-regex")),
    )
    wait_for(
        "the valid job is queued",
        lambda: (get(control_plane, "scrapejob", "good", namespace).get("status") or {}).get("phase") == "Queued",
    )
    # Fixing the spec un-stalls the job.
    control_plane.kubectl(
        "patch",
        "scrapejob/bad-regex",
        "-n",
        namespace,
        "--type=merge",
        "-p",
        '{"spec":{"crawl":{"include":["/product/"]}}}',
    )
    wait_for(
        "fixed job queued",
        lambda: (get(control_plane, "scrapejob", "bad-regex", namespace).get("status") or {}).get("phase") == "Queued",
        diag=operator.log_tail,
    )
    assert operator.running


def test_cron_creates_jobs_honours_forbid_and_history(
    control_plane: ControlPlane, namespace: str, redis_server: RedisServer, tmp_path: Path
) -> None:
    from operator_fixtures import apply as apply_objs

    from trawl.dev.operator_process import rbac_objects

    apply_objs(control_plane, *rbac_objects(namespace, "trawl-operator", [namespace]))
    clock = tmp_path / "clock-offset"
    clock.write_text("0")
    op = OperatorProcess(
        control_plane.service_account_kubeconfig(namespace, "trawl-operator"),
        [namespace],
        tmp_path / "operator.log",
        env={"TRAWL_CLOCK_OFFSET_FILE": str(clock), "TRAWL_CRON_SYNC_SECONDS": "1", "TRAWL_JOB_SYNC_SECONDS": "1"},
    ).start()
    try:
        apply(control_plane, pool("p", redis_server.url), namespace=namespace)
        cron = {
            "apiVersion": "trawl.dev/v1alpha1",
            "kind": "CronScrapeJob",
            "metadata": {"name": "hourly"},
            "spec": {
                "schedule": "0 * * * *",
                "concurrencyPolicy": "Forbid",
                "successfulJobsHistoryLimit": 1,
                "jobTemplate": {"spec": {"pool": "p", "urls": ["http://127.0.0.1:9/"]}},
            },
        }
        apply(control_plane, cron, namespace=namespace)

        def jobs() -> list[str]:
            out = control_plane.kubectl(
                "get", "sj", "-n", namespace, "-l", "trawl.dev/cronscrapejob=hourly", "-o", "name"
            ).stdout.split()
            return sorted(out)

        wait_for(
            "status",
            lambda: (get(control_plane, "csj", "hourly", namespace).get("status") or {}).get("nextScheduleTime"),
            diag=op.log_tail,
        )
        assert jobs() == []
        # Jump to just after the next full hour: one job.
        now = time.time()
        clock.write_text(str(3600 - now % 3600 + 5))
        first = wait_for("first job", lambda: jobs() if len(jobs()) == 1 else None, timeout=90, diag=op.log_tail)
        status = get(control_plane, "csj", "hourly", namespace)["status"]
        assert status["active"] == [{"name": first[0].split("/")[1]}]
        assert status["lastScheduleTime"]
        # Another hour later the first job is still active (no workers): Forbid skips the run.
        clock.write_text(str(2 * 3600 - now % 3600 + 5))
        wait_for(
            "skip",
            lambda: (
                get(control_plane, "csj", "hourly", namespace)["status"].get("skippedReason") == "ConcurrencyForbidden"
            ),
            timeout=90,
            diag=op.log_tail,
        )
        assert jobs() == first
        assert any(e["reason"] == "ConcurrencyForbidden" for e in events_for(control_plane, namespace, "hourly"))
        # Switch to Allow: the run Forbid skipped (hour 2: lastScheduleTime stays at hour 1, as CronJob's) is
        # still the most recent unmet time, so it starts now; the next hour starts a third job.
        control_plane.kubectl(
            "patch", "csj/hourly", "-n", namespace, "--type=merge", "-p", '{"spec":{"concurrencyPolicy":"Allow"}}'
        )

        def allow_seen() -> bool:
            obj = get(control_plane, "csj", "hourly", namespace)
            return bool((obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"])

        # Only then move the clock: a pass still holding the Forbid spec would skip the new hour.
        wait_for("Allow observed", allow_seen, timeout=90, diag=op.log_tail)
        second = wait_for("the skipped run", lambda: jobs() if len(jobs()) == 2 else None, timeout=90, diag=op.log_tail)
        assert set(first) < set(second)
        clock.write_text(str(3 * 3600 - now % 3600 + 5))
        third = wait_for("next hour's run", lambda: jobs() if len(jobs()) == 3 else None, timeout=90, diag=op.log_tail)
        assert set(second) < set(third)
        assert len(jobs()) == 3  # one run per schedule time, none twice
    finally:
        op.stop()


@pytest.mark.parametrize("kind", ["deadline", "ttl"])
def test_deadline_fails_and_ttl_deletes(
    control_plane: ControlPlane,
    namespace: str,
    operator: OperatorProcess,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
    kind: str,
) -> None:
    apply(control_plane, pool("p", redis_server.url), namespace=namespace)
    if kind == "deadline":
        slow = {"politeness": {"requestsPerSecond": 1, "maxConcurrencyPerDomain": 1}, "activeDeadlineSeconds": 3}
        apply(
            control_plane,
            job("slow", "p", [bookstore.product_url(i) for i in range(1, 60)], **slow),
            namespace=namespace,
        )

        def failed() -> Any:
            obj = get(control_plane, "scrapejob", "slow", namespace)
            cond = condition(obj, "Failed")
            return cond and cond["status"] == "True" and cond

        cond = wait_for("DeadlineExceeded", failed, timeout=90, diag=operator.log_tail)
        assert cond["reason"] == "DeadlineExceeded"
        obj = get(control_plane, "scrapejob", "slow", namespace)
        assert obj["status"]["phase"] == "Failed"
        assert obj["status"]["counts"]["succeeded"] < 59
    else:
        apply(
            control_plane,
            job("short-lived", "p", [bookstore.product_url(1)], ttlSecondsAfterFinished=2),
            namespace=namespace,
        )
        uid = wait_for("uid", lambda: get(control_plane, "scrapejob", "short-lived", namespace)["metadata"]["uid"])
        wait_for(
            "deleted after its TTL",
            lambda: not exists(control_plane, "scrapejob", "short-lived", namespace),
            timeout=90,
            diag=operator.log_tail,
        )
        client = redis.Redis.from_url(redis_server.url)
        try:
            keys = Keys(f"trawl:{{{namespace}/p}}").job_keys(uid)
            assert client.exists(*keys) == 0
        finally:
            client.close()
