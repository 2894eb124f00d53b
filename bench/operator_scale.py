#!/usr/bin/env python3
"""Operator scale: many small ScrapeJobs through the real operator, API server, Redis and workers.

Starts a local control plane (etcd + kube-apiserver), redis-server, the bookstore fixture site,
``trawl operator`` as its ServiceAccount (the sync intervals it ships with: no TRAWL_*_SYNC_SECONDS
set) and the worker supervisor (``trawl worker`` processes for the pool's Deployment), applies one
autoscaled ScrapePool (``allowedCidrs`` 127.0.0.0/8, politeness far above what the machine can do),
then creates ``--jobs`` ScrapeJobs of ``--urls`` product pages each with the Python client
(``--create-threads`` concurrent POSTs) and watches them. It reports:

* create_s      -- from the first create request to the last create's answer;
* queued_s      -- until every job is Queued (status.phase not Pending, or status.counts.total equal
                   to its URL count), counted from the last create (and, second figure, from the first);
* complete_s    -- until every job is Complete (phase Succeeded/Failed), from the last create (and first);
* patches/job   -- status patches the operator made (its counter
                   ``trawl_operator_status_patches_total{kind="ScrapeJob"}``) per job, cross-checked
                   against the status changes seen on the watch (each write that changed status is one
                   MODIFIED event whose status differs from the previous one), and compared with the
                   budget of the issue: 1 per second of the job's runtime (create to Complete) + 3;
* rss_mb        -- the operator's peak resident set (VmHWM from /proc), plus its CPU seconds;
* end_lag       -- per job, from the queue's record of its end (the job hash's ``fin``, Redis's clock) to the
                   watch seeing it Succeeded/Failed (this machine's clock, the same one): p50, p95, max.

The last line is ``queued_s=… complete_s=… patches_per_job=… rss_mb=…`` (queued_s and complete_s from
the last create). Everything started is stopped at the end (the dev classes clean up; their processes
also die with this one).

    .venv/bin/python bench/operator_scale.py              # 1,000 jobs x 10 URLs
    .venv/bin/python bench/operator_scale.py --quick      # 200 jobs
    TRAWL_BENCH_PYSPY=/tmp/op.txt .venv/bin/python bench/operator_scale.py --quick   # + operator profile
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import ssl
import sys
import tempfile
import threading
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, cast

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "operator"))

import kubernetes  # noqa: E402
from kubernetes.client import ApiClient, ApiException  # noqa: E402

from trawl.dev import procs  # noqa: E402
from trawl.dev.bookstore import Bookstore  # noqa: E402
from trawl.dev.controlplane import ControlPlane, find_assets  # noqa: E402
from trawl.dev.operator_process import OperatorProcess, rbac_objects  # noqa: E402
from trawl.dev.redis_server import RedisServer  # noqa: E402
from trawl.dev.supervisor import WorkerSupervisor  # noqa: E402

GROUP, VERSION, PLURAL = "trawl.dev", "v1alpha1", "scrapejobs"
NAMESPACE = "bench"
POOL = "bench"
PRODUCTS = 100  # the bookstore's default catalogue: 4 categories x 25 books
TERMINAL = ("Succeeded", "Failed")
PATCH_METRIC = re.compile(r'^trawl_operator_status_patches_total\{kind="ScrapeJob"\}\s+([0-9.e+]+)', re.M)


# --------------------------------------------------------------------------- observation


@dataclass
class JobTrack:
    urls: int
    created: float | None = None  # monotonic, when the create call returned
    queued: float | None = None
    complete: float | None = None
    complete_wall: float | None = None  # time.time() of the same instant: compared with Redis's "fin"
    written_wall: float | None = None  # when the terminal status was written (its managedFields entry, 1 s steps)
    uid: str = ""
    phase: str | None = None
    writes: int = 0  # MODIFIED events (any write that changed the object)
    status_writes: int = 0  # MODIFIED events whose status differs from the previous one
    last_status: Any = None
    succeeded: int = 0


@dataclass
class Observer:
    """Watches the namespace's ScrapeJobs in a thread and timestamps each job's transitions."""

    api_client: ApiClient
    urls_per_job: int
    jobs: dict[str, JobTrack] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    halt: threading.Event = field(default_factory=threading.Event)
    events: int = 0
    restarts: int = 0
    thread: threading.Thread | None = None
    resource_version: str = ""

    def start(self) -> Observer:
        api = kubernetes.client.CustomObjectsApi(self.api_client)
        listing = cast(dict[str, Any], api.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL))
        self.resource_version = listing["metadata"]["resourceVersion"]
        self.thread = threading.Thread(target=self._run, name="bench-observer", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        self.halt.set()
        if self.thread is not None:
            self.thread.join(timeout=70)

    def track(self, name: str) -> JobTrack:
        with self.lock:
            return self.jobs.setdefault(name, JobTrack(self.urls_per_job))

    def _run(self) -> None:
        api = kubernetes.client.CustomObjectsApi(self.api_client)
        while not self.halt.is_set():
            watch = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
            try:
                for event in watch.stream(  # type: ignore[no-untyped-call]
                    api.list_namespaced_custom_object, GROUP, VERSION, NAMESPACE, PLURAL,
                    resource_version=self.resource_version, timeout_seconds=20, allow_watch_bookmarks=True,
                ):  # fmt: skip
                    self._on_event(event["type"], event["object"], time.monotonic())
                    if self.halt.is_set():
                        watch.stop()  # type: ignore[no-untyped-call]
                        break
            except Exception as exc:
                if self.halt.is_set():
                    return
                # 410 Gone (too old) or a dropped connection: list again so no job is missed, and count it.
                self.restarts += 1
                print(f"  observer: watch restarted after {type(exc).__name__}: {str(exc)[:200]}", flush=True)
                time.sleep(1)
                try:
                    listing = cast(dict[str, Any], api.list_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL))
                except Exception:
                    continue
                self.resource_version = listing["metadata"]["resourceVersion"]
                for obj in listing["items"]:
                    self._on_event("RELIST", obj, time.monotonic())

    def _on_event(self, kind: str, obj: dict[str, Any], now: float) -> None:
        meta = obj.get("metadata") or {}
        if meta.get("resourceVersion"):
            self.resource_version = meta["resourceVersion"]
        if kind in ("BOOKMARK", "ERROR"):
            return
        self.events += 1
        track = self.track(meta["name"])
        status = obj.get("status") or {}
        with self.lock:
            if kind == "MODIFIED":
                track.writes += 1
                if status != track.last_status:
                    track.status_writes += 1
            track.last_status = status
            phase = status.get("phase")
            track.phase = phase
            total = (status.get("counts") or {}).get("total")
            if track.queued is None and ((phase is not None and phase != "Pending") or total == track.urls):
                track.queued = now
            track.uid = meta.get("uid") or track.uid
            if track.complete is None and phase in TERMINAL:
                track.complete = now
                track.complete_wall = time.time()
                track.written_wall = status_written(meta)
                track.succeeded = int((status.get("counts") or {}).get("succeeded", 0))

    def counts(self) -> tuple[int, int]:
        with self.lock:
            queued = sum(1 for t in self.jobs.values() if t.queued is not None)
            complete = sum(1 for t in self.jobs.values() if t.complete is not None)
        return queued, complete


class BenchSupervisor(WorkerSupervisor):
    """The dev supervisor, but each worker gets its own metrics port.

    In a cluster every pod has its own network namespace, so all workers can bind the template's
    ``TRAWL_METRICS_PORT`` (9090); on one host the second worker, or any other process holding 9090,
    makes the worker exit with EADDRINUSE and the supervisor restarts it every second.
    """

    def _env_value(self, namespace: str, pod_name: str, item: dict[str, Any]) -> str:
        if item.get("name") == "TRAWL_METRICS_PORT":
            return str(procs.free_port())
        return super()._env_value(namespace, pod_name, item)


# --------------------------------------------------------------------------- process sampling


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM in kB from /proc/<pid>/status."""
    out: dict[str, int] = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(("VmRSS:", "VmHWM:")):
                out[line.split(":")[0]] = int(line.split()[1])
    except OSError:
        pass
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (not its children), from /proc/<pid>/stat."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def sched_seconds(pid: int) -> tuple[float, float]:
    """(on-CPU, waiting-for-a-CPU) seconds summed over the process's threads, from schedstat.

    The second figure is how long the process was runnable but not running: on a loaded machine it
    tells a process that is slow because it is starved from one that is slow because it waits.
    """
    on_cpu = waiting = 0
    for stat in Path(f"/proc/{pid}/task").glob("*/schedstat"):
        try:
            run_ns, wait_ns, _slices = (int(x) for x in stat.read_text().split())
        except (OSError, ValueError):
            continue
        on_cpu += run_ns
        waiting += wait_ns
    return on_cpu / 1e9, waiting / 1e9


def loadavg() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3])


# --------------------------------------------------------------------------- objects


def pool_object(redis_url: str, args: argparse.Namespace) -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ScrapePool",
        "metadata": {"name": POOL, "namespace": NAMESPACE},
        "spec": {
            "redis": {"url": redis_url},
            "worker": {"concurrency": args.concurrency, "drainSeconds": 10, "allowedCidrs": ["127.0.0.0/8"]},
            "autoscaling": {
                "enabled": True,
                "minReplicas": args.min_replicas,
                "maxReplicas": args.max_replicas,
                "targetDrainSeconds": 10,
                "pollSeconds": 1,
            },
            "defaults": {
                # Far above what one machine does: politeness is not what is measured here.
                "politeness": {
                    "requestsPerSecond": 10000,
                    "maxConcurrencyPerDomain": 1000,
                    "adaptiveDelay": False,
                },
            },
        },
    }


def job_object(index: int, store: Bookstore, urls: int) -> dict[str, Any]:
    pages = [store.product_url((index * urls + k) % PRODUCTS + 1) for k in range(urls)]
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "ScrapeJob",
        "metadata": {"name": f"job-{index:05d}", "namespace": NAMESPACE},
        "spec": {"pool": POOL, "urls": pages},
    }


def kubectl_apply(cp: ControlPlane, *objs: dict[str, Any]) -> None:
    cp.kubectl("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objs)}))


REQ_LINE = re.compile(
    r"^(apiserver_request_total|apiserver_request_duration_seconds_sum)\{([^}]*)\}\s+([0-9.e+-]+)$", re.M
)
LABEL = re.compile(r'(\w+)="([^"]*)"')


def apiserver_requests(admin: ApiClient) -> dict[tuple[str, str, str], list[float]]:
    """(verb, resource, subresource) -> [requests, seconds spent] from the API server's /metrics."""
    conf = admin.configuration
    ctx = ssl.create_default_context(cafile=conf.ssl_ca_cert)
    ctx.load_cert_chain(conf.cert_file, conf.key_file)
    with urllib.request.urlopen(f"{conf.host}/metrics", context=ctx, timeout=30) as resp:
        text = resp.read().decode()
    out: dict[tuple[str, str, str], list[float]] = {}
    for metric, labels, value in REQ_LINE.findall(text):
        lab = dict(LABEL.findall(labels))
        if lab.get("resource") not in ("scrapejobs", "scrapepools", "events", "deployments", "secrets"):
            continue
        sub = lab.get("subresource", "")
        code = lab.get("code", "")
        if metric == "apiserver_request_total" and code and not code.startswith("2"):
            sub += f" [{code}]"  # failed requests apart (422: a resourceVersion test failed; 409: conflict)
        key = (lab.get("verb", ""), lab["resource"], sub)
        slot = out.setdefault(key, [0.0, 0.0])
        slot[0 if metric == "apiserver_request_total" else 1] += float(value)
    return out


def request_delta(
    before: dict[tuple[str, str, str], list[float]], after: dict[tuple[str, str, str], list[float]]
) -> dict[str, str]:
    """'VERB resource/sub' -> 'count (mean ms)' for what happened between two readings."""
    out = {}
    for key, (count, seconds) in sorted(after.items()):
        c0, s0 = before.get(key, [0.0, 0.0])
        if count - c0 >= 1:
            name = f"{key[0]} {key[1]}" + (f"/{key[2]}" if key[2] and key[2][0] != " " else key[2])
            out[name] = f"{count - c0:.0f} ({1000 * (seconds - s0) / (count - c0):.0f} ms)"
    return out


def patch_counter(op: OperatorProcess) -> float:
    found = PATCH_METRIC.search(op.metrics_text())
    return float(found.group(1)) if found else 0.0


# --------------------------------------------------------------------------- the run


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    result: dict[str, Any] = {"jobs": args.jobs, "urls_per_job": args.urls, "load_start": loadavg()}
    started: list[Any] = []
    try:
        cp = ControlPlane(assets=find_assets()).start()
        started.append(cp)
        cp.apply_crds()
        redis_server = RedisServer().start()
        started.append(redis_server)
        redis_server.wait_ready()
        store = Bookstore().start()
        started.append(store)

        cp.create_namespace(NAMESPACE)
        kubectl_apply(cp, *rbac_objects(NAMESPACE, "trawl-operator", [NAMESPACE]))
        kubeconfig = cp.service_account_kubeconfig(NAMESPACE, "trawl-operator")
        operator = OperatorProcess(kubeconfig, [NAMESPACE], workdir / "operator.log")
        operator.start()
        started.append(operator)
        assert operator.proc is not None
        op_pid = operator.proc.pid
        profiler = None
        if os.environ.get("TRAWL_BENCH_PYSPY"):
            pyspy = str(Path(sys.executable).with_name("py-spy"))
            profiler = procs.start(
                [pyspy, "record", "-p", str(op_pid), "-r", "50", "-f", "raw", "-o", os.environ["TRAWL_BENCH_PYSPY"]],
                log_path=workdir / "py-spy.log",
            )
            started.append(("profiler", profiler))

        admin = cp.api_client()
        supervisor = BenchSupervisor(admin, workdir / "workers", drain_timeout=20).start()
        started.append(supervisor)

        kubectl_apply(cp, pool_object(redis_server.url, args))
        apps = kubernetes.client.AppsV1Api(admin)
        deadline = time.monotonic() + 240  # a loaded machine: the operator's first pass can take minutes
        while True:
            try:
                apps.read_namespaced_deployment(f"{POOL}-workers", NAMESPACE)
                break
            except ApiException as exc:
                if exc.status != 404 or time.monotonic() > deadline:
                    raise
                time.sleep(0.25)
        if args.min_replicas:
            deadline = time.monotonic() + 60
            while supervisor.live(NAMESPACE, f"{POOL}-workers") < args.min_replicas and time.monotonic() < deadline:
                time.sleep(0.25)
        time.sleep(1)

        observer = Observer(admin, args.urls).start()
        started.append(observer)
        names = [f"job-{i:05d}" for i in range(args.jobs)]
        for name in names:
            observer.track(name)
        cpu0 = cpu_seconds(op_pid)
        sched0 = {name: sched_seconds(pid) for name, pid in {"operator": op_pid, **cp.pids}.items()}
        patches0 = patch_counter(operator)
        requests0 = apiserver_requests(admin)
        result["load_before_create"] = loadavg()

        # ---------------------------------------------------------------- create
        custom = kubernetes.client.CustomObjectsApi(admin)

        def create(index: int) -> None:
            body = job_object(index, store, args.urls)
            for attempt in range(5):
                try:
                    custom.create_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, body)
                    break
                except ApiException as exc:
                    if exc.status == 409 or attempt == 4:  # 409: an earlier attempt did land
                        if exc.status != 409:
                            raise
                        break
                    time.sleep(0.2 * (attempt + 1))
            observer.track(body["metadata"]["name"]).created = time.monotonic()

        def check_alive() -> None:
            for what, proc in (("redis-server", redis_server.proc), ("bookstore", store.proc)):
                if proc is None or proc.poll() is not None:  # type: ignore[attr-defined]
                    raise RuntimeError(f"{what} exited during the run (stopped from outside the benchmark?)")
            if not operator.running:
                raise RuntimeError(f"the operator exited:\n{operator.log_tail()}")

        t_first = time.monotonic()
        with ThreadPoolExecutor(args.create_threads) as pool:
            futures = [pool.submit(create, i) for i in range(args.jobs)]
            while not all(f.done() for f in futures):
                time.sleep(5)
                made = sum(1 for f in futures if f.done())
                queued, _ = observer.counts()
                print(
                    f"  t={time.monotonic() - t_first:6.1f}s created={made}/{args.jobs} queued={queued} "
                    f"op_cpu={cpu_seconds(op_pid) - cpu0:.0f}s load={loadavg()}",
                    flush=True,
                )
                check_alive()
            for f in futures:
                f.result()
        t_last = time.monotonic()
        result["create_s"] = round(t_last - t_first, 2)
        print(f"created {args.jobs} jobs in {t_last - t_first:.1f}s (load {loadavg()})", flush=True)

        # ---------------------------------------------------------------- wait
        rss_samples: list[tuple[float, int]] = []
        deadline = t_last + args.timeout
        last_print = 0.0
        while time.monotonic() < deadline:
            queued, complete = observer.counts()
            now = time.monotonic()
            rss_samples.append((now - t_first, proc_status(op_pid).get("VmRSS", 0)))
            if now - last_print >= 5:
                last_print = now
                print(
                    f"  t={now - t_first:6.1f}s queued={queued}/{args.jobs} complete={complete}/{args.jobs} "
                    f"workers={supervisor.live(NAMESPACE, f'{POOL}-workers')} "
                    f"op_rss={rss_samples[-1][1] / 1024:.0f}MB op_cpu={cpu_seconds(op_pid) - cpu0:.0f}s "
                    f"load={loadavg()}",
                    flush=True,
                )
            if complete >= args.jobs:
                break
            check_alive()
            time.sleep(0.2)
        # Let the last patches and watch events land; finished jobs write nothing more.
        time.sleep(3)
        result["load_end"] = loadavg()

        # ---------------------------------------------------------------- measure
        tracks = dict(observer.jobs)
        queued_at = [t.queued for t in tracks.values() if t.queued is not None]
        done_at = [t.complete for t in tracks.values() if t.complete is not None]
        all_queued = len(queued_at) == args.jobs
        all_done = len(done_at) == args.jobs
        result["queued"] = len(queued_at)
        result["complete"] = len(done_at)
        result["queued_s"] = round(max(queued_at) - t_last, 2) if all_queued else None
        result["queued_from_first_s"] = round(max(queued_at) - t_first, 2) if all_queued else None
        lags = sorted(t.queued - t.created for t in tracks.values() if t.queued is not None and t.created)
        if lags:
            result["queue_lag_p50_s"] = round(lags[len(lags) // 2], 2)
            result["queue_lag_max_s"] = round(lags[-1], 2)
        result["complete_s"] = round(max(done_at) - t_last, 2) if all_done else None
        result["complete_from_first_s"] = round(max(done_at) - t_first, 2) if all_done else None
        result.update(end_lags(redis_server.url, tracks))
        result["succeeded_jobs"] = sum(1 for t in tracks.values() if t.phase == "Succeeded")
        result["succeeded_urls"] = sum(t.succeeded for t in tracks.values())
        result["not_succeeded"] = {
            name: f"{t.phase}: {(t.last_status or {}).get('message', '')}"[:200]
            for name, t in sorted(tracks.items())
            if t.phase != "Succeeded"
        }

        patches = patch_counter(operator) - patches0
        status_writes = sum(t.status_writes for t in tracks.values())
        writes = sum(t.writes for t in tracks.values())
        result["patches_per_job"] = round(patches / args.jobs, 2)
        result["status_writes_per_job"] = round(status_writes / args.jobs, 2)
        result["object_writes_per_job"] = round(writes / args.jobs, 2)
        budgets = {
            name: (t.complete - t.created) + 3
            for name, t in tracks.items()
            if t.complete is not None and t.created is not None
        }
        over = [name for name, b in budgets.items() if tracks[name].status_writes > b]
        result["runtime_mean_s"] = round(sum(b - 3 for b in budgets.values()) / max(len(budgets), 1), 2)
        result["patch_budget_per_job"] = round(sum(budgets.values()) / max(len(budgets), 1), 2)
        result["jobs_over_patch_budget"] = len(over)
        result["status_writes_max"] = max((t.status_writes for t in tracks.values()), default=0)
        requests = request_delta(requests0, apiserver_requests(admin))
        result["apiserver_requests"] = requests
        # Accepted status writes, JSON/merge patches or server-side apply alike.
        landed = sum(int(requests.get(f"{verb} scrapejobs/status", "0").split()[0]) for verb in ("PATCH", "APPLY"))
        result["status_patch_requests_per_job"] = round(landed / args.jobs, 2)
        result["watch_events"] = observer.events
        result["watch_relists"] = observer.restarts

        hwm = proc_status(op_pid).get("VmHWM", 0)
        result["rss_mb"] = round(hwm / 1024, 1)
        result["operator_cpu_s"] = round(cpu_seconds(op_pid) - cpu0, 1)
        for name, pid in {"operator": op_pid, **cp.pids}.items():
            run_s, wait_s = sched_seconds(pid)
            result[f"{name}_cpu_s"] = round(run_s - sched0[name][0], 1)
            result[f"{name}_runqueue_wait_s"] = round(wait_s - sched0[name][1], 1)
        result["workers_max"] = max((n for _t, _d, n in supervisor.history), default=0)
        step = max(1, len(rss_samples) // 20)
        result["operator_rss_mb_timeline"] = [(round(t, 1), round(kb / 1024)) for t, kb in rss_samples[::step]]
        if profiler is not None:
            procs.stop(profiler, timeout=30, sig=signal.SIGINT)  # py-spy writes its output on SIGINT
        return result
    finally:
        for thing in reversed(started):
            try:
                if isinstance(thing, tuple):
                    procs.stop(thing[1], timeout=30, sig=signal.SIGINT)
                else:
                    thing.stop()
            except Exception as exc:  # keep stopping the rest
                print(f"stopping {type(thing).__name__}: {exc}", file=sys.stderr)


def goals_for(jobs: int) -> tuple[int, int]:
    """(queued_s, RSS MB) goals: issue 8's for up to 1,000 jobs, issue 37's for more (up to 10,000)."""
    return (30, 300) if jobs <= 1000 else (60, 600)


def status_written(meta: dict[str, Any]) -> float | None:
    """The newest write to the object's status subresource (managedFields' ``time``: whole seconds)."""
    times = [
        datetime.fromisoformat(entry["time"].replace("Z", "+00:00")).timestamp()
        for entry in meta.get("managedFields") or ()
        if entry.get("subresource") == "status" and entry.get("time")
    ]
    return max(times, default=None)


def percentiles(prefix: str, values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    values = sorted(values)
    return {
        f"{prefix}_p50_s": round(values[len(values) // 2], 3),
        f"{prefix}_p95_s": round(values[min(len(values) - 1, int(len(values) * 0.95))], 3),
        f"{prefix}_max_s": round(values[-1], 3),
    }


def end_lags(redis_url: str, tracks: dict[str, JobTrack]) -> dict[str, float]:
    """From each job's end in the queue (its hash's ``fin``) to the watch seeing its status terminal; split
    at the terminal status's write: ``end_write`` (the operator's part, fin to the write) and ``end_watch``
    (the API server's and this watch's, the write to the event seen)."""
    import redis

    from trawl.api.naming import queue_prefix
    from trawl.queue.keys import Keys

    keys = Keys(queue_prefix(NAMESPACE, POOL))
    done = [t for t in tracks.values() if t.complete_wall is not None and t.uid]
    client = redis.Redis.from_url(redis_url)
    try:
        pipe = client.pipeline(transaction=False)
        for t in done:
            pipe.hget(keys.job(t.uid), "fin")
        fins = pipe.execute()
    finally:
        client.close()
    ended = [(t, float(fin)) for t, fin in zip(done, fins, strict=True) if fin and t.complete_wall]
    written = [(t, fin) for t, fin in ended if t.written_wall is not None]
    return {
        **percentiles("end_lag", [t.complete_wall - fin for t, fin in ended if t.complete_wall]),
        **percentiles("end_write", [t.written_wall - fin for t, fin in written if t.written_wall]),
        **percentiles(
            "end_watch", [t.complete_wall - t.written_wall for t, _ in written if t.complete_wall and t.written_wall]
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=int, default=1000, help="ScrapeJobs to create (default 1000)")
    parser.add_argument("--quick", action="store_true", help="200 jobs (unless --jobs is given)")
    parser.add_argument("--urls", type=int, default=10, help="URLs per job (default 10)")
    parser.add_argument("--create-threads", type=int, default=8, help="concurrent create requests (default 8)")
    parser.add_argument("--min-replicas", type=int, default=1, help="pool autoscaling minReplicas (default 1)")
    parser.add_argument("--max-replicas", type=int, default=4, help="pool autoscaling maxReplicas (default 4)")
    parser.add_argument("--concurrency", type=int, default=32, help="tasks in flight per worker (default 32)")
    parser.add_argument("--timeout", type=float, default=900, help="give up this long after the last create")
    parser.add_argument("--json", type=Path, help="also write the full result as JSON here")
    parser.add_argument("--keep-logs", type=Path, help="keep the operator and worker logs in this folder")
    args = parser.parse_args()
    if args.quick and "--jobs" not in sys.argv:
        args.jobs = 200
    procs.install_signal_handlers()

    if args.keep_logs:
        args.keep_logs.mkdir(parents=True, exist_ok=True)
        workdir = args.keep_logs
        result = run(args, workdir)
    else:
        with tempfile.TemporaryDirectory(prefix="trawl-opscale-") as tmp:
            result = run(args, Path(tmp))

    timeline = result.pop("operator_rss_mb_timeline", [])
    print(json.dumps(result, indent=1))
    print("operator RSS MB over time (s, MB): " + " ".join(f"{t:.0f}:{mb}" for t, mb in timeline))
    result["operator_rss_mb_timeline"] = timeline
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    queued_goal, rss_goal = goals_for(args.jobs)
    targets = {
        f"queued_within_{queued_goal}s": result["queued_s"] is not None and result["queued_s"] <= queued_goal,
        "patches_within_budget": result["jobs_over_patch_budget"] == 0
        and result["patches_per_job"] <= result["patch_budget_per_job"],
        f"rss_under_{rss_goal}mb": result["rss_mb"] < rss_goal,
    }
    print("targets: " + " ".join(f"{k}={'ok' if v else 'MISSED'}" for k, v in targets.items()))
    print(
        f"queued_s={result['queued_s']} complete_s={result['complete_s']} "
        f"patches_per_job={result['patches_per_job']} rss_mb={result['rss_mb']}"
    )


if __name__ == "__main__":
    main()
