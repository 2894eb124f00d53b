"""Calibrate the autoscaler simulator against real pods: one step burst on the real one-node Kubernetes,
replicas and task waits over time, beside the simulator's prediction for the same parameters.

    flock /tmp/trawl-realnode.lock .venv/bin/python bench/autoscale_calibrate.py   # node up, burst, node down
    .venv/bin/python bench/autoscale_calibrate.py --sim-only --startup 6           # the prediction alone

Only one real node may run on a machine at a time (it owns cni0, nf_tables tables, kubelet ports): run
it under ``flock /tmp/trawl-realnode.lock``. The node is started and torn down as the e2e layer does
(``tests/e2e``: ``hack/realnode/node.sh``, the chart installed with Helm as shipped, the fixture site as
pods); the node's folder is removed unless something of it was left on the host.

The burst: ``--tasks`` product pages of the fixture site answering after ``--latency`` seconds, all
submitted in one ScrapeJob at t = 0 to a pool of its own (the e2e pool's settings: ``concurrency`` 4,
``pollSeconds`` 2, ``targetDrainSeconds`` 10, ``scaleDownDelaySeconds`` 10, ``idleSecondsBeforeZero``
15, replicas 0..``--max-replicas``). Measured every second: the Deployment's ``spec.replicas``, its
pods and Ready pods. A task's wait is the site's access-log time of its first fetch minus the time the
job was applied (so it includes the operator's enqueue). The simulator (``poolsim.sim``, the
controller's own ``plan()``) runs the same burst with the same pool, the pod start-up the real pool
measured (``status.podStartupSeconds``) and the service time the site imposes plus a measured
per-fetch overhead, over ``--seeds`` poll phases.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "e2e"), str(ROOT / "tests")]

from poolsim.kedahpa import KedaHpaConfig  # noqa: E402
from poolsim.sim import PoolConfig, Result, percentile, simulate  # noqa: E402
from poolsim.traces import Trace  # noqa: E402
from trawl.api.scrapepool import AutoscalingSpec  # noqa: E402

POOL = "calib"
SITE_DEPLOYMENT = "bookstore-slow"


@dataclass
class Series:
    """Replicas over time (seconds since the burst) and each task's wait."""

    times: list[float]
    desired: list[int]
    pods: list[int]
    ready: list[int]
    waits: list[float]


def autoscaling(max_replicas: int) -> dict[str, Any]:
    from conftest import pool_object

    spec = dict(pool_object(POOL)["spec"]["autoscaling"])
    spec["maxReplicas"] = max_replicas
    return spec


def predict(tasks: int, service: float, startup: float, max_replicas: int, seed: int, horizon: float) -> Result:
    spec = AutoscalingSpec.model_validate(autoscaling(max_replicas))
    pool = PoolConfig(
        autoscaling=spec,
        keda=KedaHpaConfig(min_replica_count=0, max_replica_count=max_replicas),
        concurrency=4,
        drain_seconds=30.0,
        startup_seconds=startup,
        sample_seconds=1.0,
    )
    # One domain without a rate limit: the job's politeness (200 req/s, 48 at once) never binds at 4 slots x 4 pods.
    trace = Trace(
        "calibration",
        f"{tasks} tasks of {service:.2f}s at t=0",
        horizon,
        [(i * 1e-4, 0) for i in range(tasks)],
        service_mean=service,
        service_sigma=0.05,
    )
    return simulate(trace, pool, "trawl", seed=seed)


def sim_series(r: Result) -> Series:
    return Series(
        [s.t for s in r.samples],
        [s.desired for s in r.samples],
        [s.replicas for s in r.samples],
        [s.replicas for s in r.samples],
        r.waits,
    )


def at(series: Series, t: float, values: list[int]) -> int:
    """The last sample at or before ``t``."""
    out = values[0] if values else 0
    for ts, v in zip(series.times, values, strict=True):
        if ts > t:
            break
        out = v
    return out


def report(real: Series | None, sims: list[Result], step: float) -> str:
    sim = sim_series(sims[0])
    # Until both are back at zero pods (and a little after).
    sim_end = max((t for t, n in zip(sim.times, sim.pods, strict=True) if n), default=0.0)
    end = max(real.times[-1] if real else 0.0, sim_end) + step
    lines = [
        "| t s | real desired | real pods | real Ready | sim desired (seed 1) | sim pods |",
        "|---|---|---|---|---|---|",
    ]
    t = 0.0
    while t <= end:
        r = (at(real, t, real.desired), at(real, t, real.pods), at(real, t, real.ready)) if real else ("-",) * 3
        lines.append(f"| {t:.0f} | {r[0]} | {r[1]} | {r[2]} | {at(sim, t, sim.desired)} | {at(sim, t, sim.pods)} |")
        t += step
    lines.append("")

    def stats(waits: list[float]) -> str:
        return f"p50 {percentile(waits, 0.5):.1f}s p95 {percentile(waits, 0.95):.1f}s max {max(waits, default=0):.1f}s"

    sim_p95 = [percentile(r.waits, 0.95) for r in sims]
    sim_peak = [max(s.desired for s in r.samples) for r in sims]
    lines.append(f"simulated ({len(sims)} poll phases): task wait {stats(sims[0].waits)} (seed 1); p95 median "
                 f"{statistics.median(sim_p95):.1f}s range {min(sim_p95):.1f}-{max(sim_p95):.1f}s; "
                 f"peak replicas {min(sim_peak)}-{max(sim_peak)}; scale changes {sims[0].scale_changes}")  # fmt: skip
    if real:
        changes = sum(1 for a, b in zip(real.desired, real.desired[1:], strict=False) if a != b)
        lines.append(f"real: task wait {stats(real.waits)}; peak replicas {max(real.desired, default=0)}; "
                     f"scale changes {changes}; tasks fetched {len(real.waits)}")  # fmt: skip
    return "\n".join(lines)


def site_first_fetches(node: Any, since: float) -> dict[str, float]:
    """path?query -> epoch of its first fetch, from the fixture site's access log."""
    out: dict[str, float] = {}
    for line in node.kubectl("-n", "trawl-e2e-site", "logs", f"deploy/{SITE_DEPLOYMENT}", "--tail=-1").splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[1] == "GET" and parts[0].replace(".", "", 1).isdigit():
            ts = float(parts[0])
            if ts >= since and "calib=" in parts[2]:
                out.setdefault(parts[2], ts)
    return out


def measure(node: Any, tasks: int, max_replicas: int, timeout: float) -> tuple[Series, float | None]:
    from scenarios import FAST, SLOW_SITE, job, job_status, worker_pods

    from conftest import NAMESPACE, pool_object
    from trawl.autoscale.startup import pod_startup
    from waits import wait_for

    pool = pool_object(POOL)
    pool["spec"]["autoscaling"] = autoscaling(max_replicas)
    node.apply([pool])
    wait_for("the pool observed", lambda: (node.get("scrapepool", POOL, NAMESPACE) or {}).get("status"), 120, 1.0)
    urls = [f"{SLOW_SITE}/product/{i % 100 + 1}.html?calib={i}" for i in range(tasks)]
    series = Series([], [], [], [], [])
    since = time.time()
    node.apply([job("calib", POOL, urls, politeness=FAST)])
    deadline = time.monotonic() + timeout
    startups: list[float] = []
    finished_at: float | None = None
    while time.monotonic() < deadline:
        now = time.time() - since
        dep = node.get("deployment", f"{POOL}-workers", NAMESPACE) or {}
        pods = worker_pods(node, POOL)
        ready = [p for p in pods if any(c.get("type") == "Ready" and c.get("status") == "True"
                                        for c in (p.get("status") or {}).get("conditions") or [])]  # fmt: skip
        for p in ready:
            measured = pod_startup(p)
            if measured and measured[1] not in startups:
                startups.append(measured[1])
        series.times.append(now)
        series.desired.append(int((dep.get("spec") or {}).get("replicas") or 0))
        series.pods.append(len(pods))
        series.ready.append(len(ready))
        if finished_at is None and job_status(node, "calib").get("completionTime"):
            finished_at = now
        if finished_at is not None and not pods:
            break
        time.sleep(1.0)
    fetched = site_first_fetches(node, since)
    series.waits = [ts - since for ts in fetched.values()]
    status = (node.get("scrapepool", POOL, NAMESPACE) or {}).get("status") or {}
    startup = status.get("podStartupSeconds")
    node.kubectl("-n", NAMESPACE, "delete", "scrapejob", "calib", "--wait=true", "--timeout=120s", check=False)
    node.kubectl("-n", NAMESPACE, "delete", "scrapepool", POOL, "--wait=true", "--timeout=120s", check=False)
    return series, float(startup) if startup is not None else (statistics.median(startups) if startups else None)


def with_node(args: argparse.Namespace) -> tuple[Series, float | None]:
    """Start the node and the release as the e2e layer does, measure, tear everything down."""
    from e2e_node import HACK, RealNode, missing_prerequisites, read_env, run

    from conftest import IMAGE_VALUES, NAMESPACE, RELEASE, hostpath_volume, site_objects
    from helm_chart import helm_binary

    reason = missing_prerequisites()
    if reason:
        raise SystemExit(f"no real node: {reason}")
    folder = Path(tempfile.mkdtemp(prefix="trawl-calibrate-"))
    env = {"R": str(folder)}
    t0 = time.monotonic()
    try:
        run([str(HACK / "node.sh"), "up"], env=env, timeout=900)
        print(f"# node up in {time.monotonic() - t0:.0f}s", file=sys.stderr, flush=True)
        node = RealNode(root=folder, env=read_env(folder / "env"), helm_bin=helm_binary())
        # The plain site brings the site's namespace; the slow one is the burst's (access log on stdout).
        node.apply(site_objects() + site_objects(SITE_DEPLOYMENT, latency=args.latency))
        node.apply([
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": {
                "pod-security.kubernetes.io/enforce": "restricted"}}},
            hostpath_volume(node, "trawl-calibrate-redis"),
        ])  # fmt: skip
        node.helm("install", RELEASE, str(ROOT / "charts" / "trawl"), "-n", NAMESPACE, *IMAGE_VALUES,
                  "--wait", "--timeout", "600s")  # fmt: skip
        node.kubectl("-n", "trawl-e2e-site", "rollout", "status", f"deploy/{SITE_DEPLOYMENT}", "--timeout=300s")
        print(f"# release up after {time.monotonic() - t0:.0f}s", file=sys.stderr, flush=True)
        return measure(node, args.tasks, args.max_replicas, args.timeout)
    finally:
        run([str(HACK / "node.sh"), "down"], env=env, timeout=600, check=False)
        left = run([str(HACK / "node.sh"), "leftovers"], env=env, timeout=120, check=False).strip()
        if left:
            print(f"# the node left things on the host (folder {folder} kept):\n{left}", file=sys.stderr)
        else:
            subprocess.run(["rm", "-rf", str(folder)], check=False)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--tasks", type=int, default=160)
    ap.add_argument("--latency", type=float, default=3.0, help="seconds the fixture site takes per page")
    ap.add_argument("--overhead", type=float, default=0.2, help="per-fetch seconds beyond the site's latency")
    ap.add_argument("--max-replicas", type=int, default=4)
    ap.add_argument("--seeds", type=int, default=10, help="simulated poll phases")
    ap.add_argument("--timeout", type=float, default=600.0, help="most seconds the real burst may take")
    ap.add_argument("--step", type=float, default=5.0, help="seconds between table rows")
    ap.add_argument("--sim-only", action="store_true", help="no node: the prediction alone")
    ap.add_argument("--startup", type=float, default=None, help="pod start-up for the simulator (default: measured)")
    args = ap.parse_args(argv)

    real: Series | None = None
    startup = args.startup
    if not args.sim_only:
        real, measured = with_node(args)
        startup = startup if startup is not None else measured
    startup = 5.0 if startup is None else startup
    horizon = max(real.times[-1] if real else 0.0, 240.0)
    service = args.latency + args.overhead
    sims = [predict(args.tasks, service, startup, args.max_replicas, s, horizon) for s in range(1, args.seeds + 1)]
    print(f"# burst: {args.tasks} tasks of {args.latency:g}s (+{args.overhead:g}s per fetch) at t=0; "
          f"pool concurrency 4, replicas 0..{args.max_replicas}; simulated pod start-up {startup:.1f}s")  # fmt: skip
    print(report(real, sims, args.step))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
