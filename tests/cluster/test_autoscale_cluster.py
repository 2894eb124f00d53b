"""The autoscaler in the operator, against the real API server, Redis and local worker processes."""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest
import redis
from metrics_page import Scrape
from operator_fixtures import apply, condition, events_for, exists, get, job, pool

from trawl.api.naming import pool_selector, queue_prefix
from trawl.dev.bookstore import Bookstore
from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from trawl.queue.keys import Keys
from waits import wait_for

# Politeness out of the way: these tests are about the autoscaler, not the rate limiter.
FAST = {"politeness": {"requestsPerSecond": 10000, "maxConcurrencyPerDomain": 1000, "respectRobotsTxt": False}}


class ReplicaRecorder:
    """Samples the Deployment's spec.replicas in the background: what the autoscaler asked for, when."""

    def __init__(self, cp: ControlPlane, namespace: str, deployment: str) -> None:
        self.cp, self.namespace, self.deployment = cp, namespace, deployment
        self.samples: list[tuple[float, int]] = []
        self._halt = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._halt.is_set():
            out = self.cp.kubectl(
                "get",
                "deployment",
                self.deployment,
                "-n",
                self.namespace,
                "-o",
                "jsonpath={.spec.replicas}",
                check=False,
            )
            if out.returncode == 0 and out.stdout.strip():
                self.samples.append((time.monotonic(), int(out.stdout)))
            self._halt.wait(0.3)

    def __enter__(self) -> ReplicaRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._halt.set()
        self._thread.join(timeout=10)

    def max_since(self, t: float) -> int:
        return max((r for ts, r in self.samples if ts >= t), default=0)

    def latest(self) -> int:
        return self.samples[-1][1] if self.samples else -1


def pool_passes(operator: Any) -> float:
    """Pool passes the operator has made (its reconcile histogram's count for ScrapePool): the clock a
    negative check runs on, so "no scale-up" means over that many decisions, however slow the machine."""
    return Scrape(operator.metrics_text()).value("trawl_operator_reconcile_seconds_count", kind="ScrapePool")


def let_passes(operator: Any, count: int, what: str) -> None:
    """Wait until the operator has passed its pools ``count`` more times."""
    start = pool_passes(operator)
    wait_for(f"{count} pool passes ({what})", lambda: pool_passes(operator) >= start + count, timeout=120)


@pytest.fixture(scope="module")
def site_options() -> dict[str, Any]:
    """The bookstore answering in 50 ms, so 2,000 tasks are more than one worker drains in 5 s."""
    return {"latency": 0.05}


def test_backlog_scales_up_fast_then_down_to_zero_and_failures_hold(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Bookstore,
    redis_server: RedisServer,
) -> None:
    autoscaling = {
        "minReplicas": 0,
        "maxReplicas": 4,
        "pollSeconds": 1,
        "scaleDownDelaySeconds": 3,
        "idleSecondsBeforeZero": 3,
        "targetDrainSeconds": 5,
        "failureRateThreshold": 0.5,
    }
    apply(
        control_plane,
        pool(
            "auto",
            redis_server.url,
            autoscaling=autoscaling,
            # The failing-site part below is about the autoscaler's own failure guard, so the workers'
            # per-domain circuit breaker (which would hold the failing tasks back first) is off here.
            worker={
                "concurrency": 8,
                "drainSeconds": 10,
                "allowedCidrs": ["127.0.0.0/8"],
                "circuitBreaker": {"failureThreshold": 0},
            },
        ),
        namespace=namespace,
    )
    wait_for("Deployment", lambda: exists(control_plane, "deployment", "auto-workers", namespace))
    with ReplicaRecorder(control_plane, namespace, "auto-workers") as rec:
        wait_for("idle pool at zero", lambda: rec.latest() == 0, timeout=30, diag=operator.log_tail)

        # A backlog of 2,000 tasks: replicas rise while it lasts. The bound is generous (a loaded CI machine);
        # how fast the scale-up is belongs to the benchmarks (docs/benchmarks.md), not to this assertion.
        ranges = [{"template": bookstore.url + "/product/1.html?copy={n}", "start": 1, "end": 2000}]
        t0 = time.monotonic()
        apply(control_plane, job("backlog", "auto", [], urlRanges=ranges, **FAST), namespace=namespace)

        def diag() -> str:
            st = get(control_plane, "scrapepool", "auto", namespace).get("status")
            job_st = get(control_plane, "scrapejob", "backlog", namespace).get("status")
            return f"samples={rec.samples[-30:]}\npool={st}\njob={job_st}\n{operator.log_tail(20)}"

        wait_for("scale-up", lambda: rec.max_since(t0) >= 2, timeout=60, diag=diag)
        scaled_up_after = next(ts for ts, r in rec.samples if ts >= t0 and r >= 2) - t0
        wait_for(
            "backlog done",
            lambda: (
                (get(control_plane, "scrapejob", "backlog", namespace).get("status") or {}).get("phase") == "Succeeded"
            ),
            timeout=120,
            diag=operator.log_tail,
        )
        peak = rec.max_since(t0)
        # Drained: back to the minimum (zero here), and the worker processes follow.
        wait_for("scale to zero", lambda: rec.latest() == 0, timeout=60, diag=operator.log_tail)
        wait_for("workers gone", lambda: supervisor.live(namespace, "auto-workers") == 0, timeout=30)

        obj = get(control_plane, "scrapepool", "auto", namespace)
        assert obj["status"]["scalingReason"]
        assert obj["status"]["lastScale"]["toReplicas"] == 0
        scaled = [e for e in events_for(control_plane, namespace, "auto") if e["reason"] == "Scaled"]
        assert any("-> 0" in e["message"] for e in scaled)
        assert any("0 -> " in e["message"] for e in scaled)

        # A running pool (one worker) meets a downstream that always fails: it must not scale up.
        control_plane.kubectl(
            "patch",
            "scrapepool/auto",
            "-n",
            namespace,
            "--type=merge",
            "-p",
            '{"spec":{"autoscaling":{"minReplicas":1}}}',
        )
        wait_for("one worker serving", lambda: supervisor.live(namespace, "auto-workers") == 1, timeout=30)
        let_passes(operator, 3, "an idle pool at its minimum")
        assert rec.latest() == 1, rec.samples[-10:]
        failing = [f"{bookstore.url}/hostile/503?id={namespace}-{i}&fail=1000000" for i in range(300)]
        retry = {
            "maxAttempts": 100,
            "initialDelaySeconds": 0,
            "maxDelaySeconds": 0.2,
            "honorRetryAfter": False,
            "jitter": 0,
        }
        t1 = time.monotonic()
        apply(control_plane, job("failing", "auto", failing, retry=retry, **FAST), namespace=namespace)

        def guarded() -> Any:
            cond = condition(get(control_plane, "scrapepool", "auto", namespace), "Degraded")
            return cond and cond["status"] == "True" and cond

        cond = wait_for("failure guard", guarded, timeout=60, diag=operator.log_tail)
        assert cond["reason"] == "FailureGuard"
        let_passes(operator, 8, "the failure guard holds")
        scaled_late = [e["message"] for e in events_for(control_plane, namespace, "auto") if e["reason"] == "Scaled"]
        if rec.max_since(t1) > 1:
            print("\n".join(["SCALED:", *scaled_late, f"t1={t1}", *map(str, rec.samples[-40:])]))
        assert rec.max_since(t1) <= 1
        control_plane.kubectl("delete", "scrapejob/failing", "-n", namespace, "--timeout=60s")
    print(f"scale-up to >=2 replicas after {scaled_up_after:.1f}s; peak {peak} replicas")


def test_measured_pod_startup_on_the_pool_status(
    control_plane: ControlPlane, namespace: str, operator: Any, supervisor: Any, redis_server: RedisServer
) -> None:
    """The controller measures its pods' creation → Ready time and shows what it uses on the pool.

    The local control plane has no kubelet: the test creates a worker pod object and sets its Ready
    condition 7 s after its creation, as a kubelet would report a pod that took 7 s to start."""
    labels = pool_selector("startup")
    pod_obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "startup-workers-abc12", "labels": labels},
        "spec": {"containers": [{"name": "worker", "image": "trawl-worker:dev"}]},
    }
    apply(control_plane, pod_obj, namespace=namespace)
    created = datetime.fromisoformat(
        get(control_plane, "pod", "startup-workers-abc12", namespace)["metadata"]["creationTimestamp"].replace(
            "Z", "+00:00"
        )
    )
    ready_at = (created + timedelta(seconds=7)).strftime("%Y-%m-%dT%H:%M:%SZ")
    status = {"status": {"conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": ready_at}]}}
    control_plane.kubectl(
        "patch", "pod/startup-workers-abc12", "-n", namespace, "--subresource=status", "--type=merge",
        "-p", json.dumps(status),
    )  # fmt: skip
    # minReplicas 1: the supervisor's worker makes the Deployment's ready count change, so the
    # operator lists the pool's pods on that pass.
    apply(
        control_plane,
        pool("startup", redis_server.url, autoscaling={"minReplicas": 1, "maxReplicas": 2, "pollSeconds": 1}),
        namespace=namespace,
    )

    def measured() -> Any:
        return (get(control_plane, "scrapepool", "startup", namespace).get("status") or {}).get("podStartupSeconds")

    assert wait_for("measured start-up", measured, timeout=60, diag=operator.log_tail) == 7.0


def test_busy_pods_the_work_no_longer_needs_are_cordoned_then_removed_without_interrupting(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Bookstore,
    redis_server: RedisServer,
) -> None:
    """Two or three pods each hold a task of 12-60 s (the burst's fetch timeout is 90 s) and a trickle of
    short tasks keeps arriving. The work asks for fewer pods, so the operator cordons the least busy (the Redis set its
    workers read from their heartbeats): a cordoned pod takes no trickle task, empties and is removed
    while the burst still runs, and no task is interrupted (every page fetched once). The supervisor
    stops the least busy workers, as the ReplicaSet does by the operator's pod-deletion-cost."""
    import redis

    apply(
        control_plane,
        pool(
            "cordon",
            redis_server.url,
            autoscaling={
                "minReplicas": 1,
                "maxReplicas": 3,
                "pollSeconds": 1,
                "scaleDownDelaySeconds": 4,
                "idleSecondsBeforeZero": 60,
                "targetDrainSeconds": 5,
            },
            worker={"concurrency": 4, "drainSeconds": 3, "allowedCidrs": ["127.0.0.0/8"]},
        ),
        namespace=namespace,
    )
    wait_for("one worker serving", lambda: supervisor.live(namespace, "cordon-workers") == 1, timeout=60)
    # Claimed in order, four at a time: the first worker takes L S S S, each later one L S S S.
    long_ids, urls = [], []
    # One pod's long task ends long before the others, which outlast a slow operator's cordon and scale-down.
    for k, seconds in enumerate((60, 12, 40)):
        long_ids.append((1 + 4 * k, seconds))
        urls += [f"{bookstore.url}/product/{1 + 4 * k}.html?delay={seconds}"]
        urls += [f"{bookstore.url}/product/{2 + 4 * k + i}.html?delay=4" for i in range(3)]
    key = f"trawl:{{{namespace}/cordon}}:cd"
    client = redis.Redis.from_url(redis_server.url)
    cordoned: list[tuple[float, set[str]]] = []
    halt = threading.Event()

    def trickle() -> None:  # a 1 s task every 4 s, and the cordon set sampled every 0.2 s meanwhile
        # Light enough that one worker's free slots clearly hold it: the drain answer stays at one worker
        # once the short tasks are done (in flight: the long tasks and at most one trickle task). At a
        # 2 s task every 2 s that answer hovered at 1.1-1.2 workers, and answers of two kept a second
        # pod open to the trickle until the 60 s task ended. The cordon set is sampled far more often
        # than tasks arrive: a cordon may last only the poll before the step down that ends it.
        n, next_task = 0, time.monotonic()
        while not halt.is_set():
            if time.monotonic() >= next_task:
                n, next_task = n + 1, next_task + 4.0
                page = f"{bookstore.url}/product/{20 + n}.html?delay=1"
                apply(control_plane, job(f"t{n}", "cordon", [page], **FAST), namespace=namespace)
            members = {m.decode() for m in client.smembers(key)}
            if members:
                cordoned.append((time.monotonic(), members))
            halt.wait(0.2)

    with ReplicaRecorder(control_plane, namespace, "cordon-workers") as rec:
        t_burst = time.monotonic()
        apply(control_plane, job("burst", "cordon", urls, request={"timeoutSeconds": 90}, **FAST), namespace=namespace)
        # Three, or two when the operator's job index already counted the first claim (ceiling 8 / 4).
        wait_for("scale-up", lambda: rec.latest() >= 2, timeout=60, diag=operator.log_tail)
        t0 = time.monotonic()
        feeder = threading.Thread(target=trickle, daemon=True)
        feeder.start()
        try:
            wait_for(
                "a cordon, then a scale-down while the long tasks run",
                lambda: cordoned and rec.latest() < rec.max_since(t_burst),
                timeout=120,
                diag=lambda: f"samples={rec.samples[-20:]}\n{operator.log_tail(30)}",
            )
            # ... while the burst's long tasks still run (the scale-down removed the emptied cordoned pod).
            running = (get(control_plane, "scrapejob", "burst", namespace).get("status") or {}).get("counts") or {}
        finally:
            halt.set()
            feeder.join(timeout=30)
        wait_for(
            "burst done",
            lambda: (
                (get(control_plane, "scrapejob", "burst", namespace).get("status") or {}).get("phase") == "Succeeded"
            ),
            timeout=120,
            diag=lambda: (
                f"burst={get(control_plane, 'scrapejob', 'burst', namespace).get('status')}\n"
                f"pool={get(control_plane, 'scrapepool', 'cordon', namespace).get('status')}\n"
                f"cordoned={cordoned[:5]}\nsamples={rec.samples[-20:]}\n{operator.log_tail(30)}"
            ),
        )
    assert cordoned[0][0] > t0
    assert running.get("succeeded", 0) < len(urls), running
    fetched = Counter(e.path for e in bookstore.entries() if e.path.startswith("/product/"))
    # nothing interrupted and run again
    assert all(n == 1 for n in fetched.values()), _twice(fetched, bookstore, supervisor, namespace)
    assert all(fetched[f"/product/{i}.html?delay={d}"] == 1 for i, d in long_ids), fetched
    scaled = [e["message"] for e in events_for(control_plane, namespace, "cordon") if e["reason"] == "Scaled"]
    print(f"cordoned: {cordoned[:3]}; scaled: {scaled}")


def _twice(fetched: Counter[str], bookstore: Bookstore, supervisor: Any, namespace: str) -> str:
    """Why a page was fetched twice: its requests (start, end) and what the workers said about leases."""
    twice = {p for p, n in fetched.items() if n > 1}
    requests = [(e.path, e.time, e.finished) for e in bookstore.entries() if e.path in twice]
    words = ("drain", "releas", "cordon", "orphan", "lease", "giving back", "started", "stopped")
    lines = []
    for log_path in sorted(supervisor.log_dir.glob(f"{namespace}_*.log")):
        for line in log_path.read_text(errors="replace").splitlines():
            if any(w in line for w in words):
                lines.append(f"{log_path.stem}: {line[:300]}")
    return f"{fetched}\nrequests={requests}\nhistory={supervisor.history[-10:]}\n" + "\n".join(lines[-60:])


def test_a_burst_of_tasks_brings_the_pass_forward(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Bookstore,
    redis_server: RedisServer,
) -> None:
    """Policy rule 11 in the operator: a pool polled every 60 s gets a job of 2,000 URLs; the pool timer's
    next tick reads the queue's enqueue counter, sees the burst and passes at once, so the pool scales up
    long before its next scheduled poll (60 s after the pass at its creation)."""
    autoscaling = {
        "minReplicas": 1,
        "maxReplicas": 3,
        "pollSeconds": 60,
        "scaleDownDelaySeconds": 60,
        "idleSecondsBeforeZero": 60,
        "targetDrainSeconds": 5,
    }
    worker = {"concurrency": 8, "drainSeconds": 10, "allowedCidrs": ["127.0.0.0/8"]}
    created = time.monotonic()
    apply(control_plane, pool("burst", redis_server.url, autoscaling=autoscaling, worker=worker), namespace=namespace)
    wait_for("one worker serving", lambda: supervisor.live(namespace, "burst-workers") == 1, timeout=40)
    # Its heartbeat in Redis too: until the pool's pass sees a worker report, the pod counts as starting and
    # the policy does not grow a pool whose pods are starting (a loaded machine starts a worker in seconds).
    heartbeats = Keys(queue_prefix(namespace, "burst")).worker_info
    wait_for("the worker's heartbeat", lambda: _hlen(redis_server.url, heartbeats) >= 1, timeout=40)
    with ReplicaRecorder(control_plane, namespace, "burst-workers") as rec:
        ranges = [{"template": bookstore.url + "/product/1.html?copy={n}", "start": 1, "end": 2000}]
        applied = time.monotonic()
        apply(control_plane, job("burst", "burst", [], urlRanges=ranges, **FAST), namespace=namespace)
        # The creation pass was at `created` or later: no scheduled pass comes before created + 59.5 s.
        deadline = created + 59.0 - time.monotonic()
        assert deadline > 10, "the pool took too long to start its worker for this test to tell"
        wait_for(
            "scale-up before the next scheduled poll",
            lambda: rec.max_since(applied) >= 2,
            timeout=deadline,
            diag=lambda: (
                f"samples={rec.samples[-20:]}\n"
                f"pool={get(control_plane, 'scrapepool', 'burst', namespace).get('status')}\n"
                f"job={get(control_plane, 'scrapejob', 'burst', namespace).get('status')}\n{operator.log_tail(60)}"
            ),
        )
    assert f"pool {namespace}/burst: a burst of new tasks" in operator.log_tail(400)
    control_plane.kubectl("delete", "scrapejob/burst", "-n", namespace, "--timeout=60s")


def _hlen(url: str, key: str) -> int:
    client = redis.Redis.from_url(url)
    try:
        return int(client.hlen(key))
    finally:
        client.close()
