"""Trawl's autoscaling policy against a KEDA (Redis list scaler) + HPA model, in a simulated pool.

    .venv/bin/python bench/autoscale_sim.py            # full traces, PNGs in docs/autoscale/
    .venv/bin/python bench/autoscale_sim.py --quick    # shorter traces, a few seconds

Both policies drive the same simulated pool (trawl.autoscale.sim) over the same traces with the
same per-task random numbers. Deterministic for a given --seed. The last line is

    worst_p95_wait_ratio=... worst_replica_seconds_ratio=... failing_trace_scaleups=... interrupted_tasks=...

with ratios Trawl / KEDA model, worst over traces; failing_trace_scaleups and interrupted_tasks are
Trawl's (over all traces for interruptions).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from trawl.api.scrapepool import AutoscalingSpec
from trawl.autoscale.kedahpa import KedaHpaConfig
from trawl.autoscale.sim import PoolConfig, Result, Trace, build_traces, simulate

ROOT = Path(__file__).resolve().parents[1]


def plot(trace: Trace, results: dict[str, Result], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    colors = {"trawl": "tab:blue", "keda": "tab:orange"}
    labels = {"trawl": "Trawl policy", "keda": "KEDA + HPA model"}
    for name, r in results.items():
        t = [s.t for s in r.samples]
        ax1.step(t, [s.replicas for s in r.samples], where="post", color=colors[name], label=labels[name])
        ax2.plot(t, [s.ready + s.delayed for s in r.samples], color=colors[name], label=f"{labels[name]}: queued")
    for start, end, _ in trace.fail_windows:
        for ax in (ax1, ax2):
            ax.axvspan(start, end, color="red", alpha=0.1, label="downstream failing" if ax is ax1 else None)
    ax1.set_ylabel("worker pods")
    ax1.legend(loc="upper right", fontsize=8)
    ax2.set_ylabel("tasks waiting (ready + delayed)")
    ax2.set_xlabel("seconds")
    ax2.legend(loc="upper right", fontsize=8)
    fig.suptitle(f"{trace.name}: {trace.description}", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)


def ratio(a: float, b: float) -> float:
    if b <= 0:
        return 0.0 if a <= 0 else float("inf")
    return a / b


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter traces")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--plots", type=Path, default=ROOT / "docs" / "autoscale", help="where the PNGs go")
    ap.add_argument("--markdown", action="store_true", help="print the table as Markdown")
    ap.add_argument("--min-replicas", type=int, default=0)
    ap.add_argument("--max-replicas", type=int, default=20)
    ap.add_argument("--target-drain", type=int, default=60, help="Trawl's targetDrainSeconds (API default 60)")
    ap.add_argument(
        "--fail-duration-factor",
        type=float,
        default=1.0,
        help="failed attempts take this share of a successful one's time (default 1.0; 0.1 = fast 5xx)",
    )
    args = ap.parse_args(argv)

    spec = AutoscalingSpec(
        min_replicas=args.min_replicas, max_replicas=args.max_replicas, target_drain_seconds=args.target_drain
    )
    keda = KedaHpaConfig(min_replica_count=args.min_replicas, max_replica_count=args.max_replicas)
    pool = PoolConfig(autoscaling=spec, keda=keda)
    print(
        f"# pool: {pool.concurrency} slots/pod, start-up {pool.startup_seconds:g}s, drain {pool.drain_seconds:g}s, "
        f"retries {pool.max_attempts} attempts from {pool.retry_initial:g}s; "
        f"replicas {spec.min_replicas}..{spec.max_replicas}"
    )
    print(
        f"# trawl: targetDrainSeconds={spec.target_drain_seconds} "
        f"scaleDownDelaySeconds={spec.scale_down_delay_seconds} "
        f"idleSecondsBeforeZero={spec.idle_seconds_before_zero} failureRateThreshold={spec.failure_rate_threshold} "
        f"pollSeconds={spec.poll_seconds:g}"
    )
    print(
        f"# keda: listLength={keda.list_length:g} pollingInterval={keda.polling_interval:g}s "
        f"cooldownPeriod={keda.cooldown_period:g}s; hpa: sync {keda.hpa_sync_period:g}s tolerance {keda.tolerance} "
        f"down-stabilization {keda.scale_down_stabilization:g}s "
        f"up max(100%,{keda.scale_up_pods} pods)/15s down 100%/15s"
    )
    head = (
        "| trace | policy | tasks | mean wait s | p95 wait s | replica-s | scale changes | interrupted "
        "| replica-s while failing | scale-ups while failing | requests while failing | dead-lettered |"
    )
    rows = [head, "|" + "---|" * 12]
    worst_wait = worst_rs = 0.0
    fail_ups = interrupted = 0
    t0 = time.monotonic()
    for trace in build_traces(args.seed, args.quick, args.fail_duration_factor):
        results = {p: simulate(trace, pool, p, seed=args.seed) for p in ("trawl", "keda", "static_max")}
        for name, r in results.items():
            rows.append(
                f"| {trace.name} | {name} | {r.tasks} | {r.mean_wait:.1f} | {r.p95_wait:.1f} | {r.replica_seconds:.0f} "
                f"| {r.scale_changes} | {r.interrupted} | {r.failing_replica_seconds:.0f} "
                f"| {r.scale_ups_while_failing} | {r.attempts_while_failing} | {r.dead} |"
            )
        tr, kd = results["trawl"], results["keda"]
        wr, rr = ratio(tr.p95_wait, kd.p95_wait), ratio(tr.replica_seconds, kd.replica_seconds)
        cells = [trace.name, "**trawl / keda**", "", f"{ratio(tr.mean_wait, kd.mean_wait):.2f}", f"{wr:.2f}"]
        cells.append(f"{rr:.2f}")
        rows.append("| " + " | ".join(cells + [""] * (12 - len(cells))) + " |")
        worst_wait, worst_rs = max(worst_wait, wr), max(worst_rs, rr)
        interrupted += tr.interrupted
        if trace.fail_windows:
            fail_ups += tr.scale_ups_while_failing
        if not args.no_plots:
            plot(trace, {k: v for k, v in results.items() if k != "static_max"}, args.plots / f"{trace.name}.png")
        print(f"# {trace.name}: {trace.description}", file=sys.stderr)
    print("\n".join(rows) if args.markdown else "\n".join(r.replace("**", "") for r in rows))
    print(f"# {time.monotonic() - t0:.1f}s", file=sys.stderr)
    print(
        f"worst_p95_wait_ratio={worst_wait:.2f} worst_replica_seconds_ratio={worst_rs:.2f} "
        f"failing_trace_scaleups={fail_ups} interrupted_tasks={interrupted}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
