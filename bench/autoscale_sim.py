"""Trawl's autoscaling policy against a KEDA (Redis list scaler) + HPA model, in a simulated pool.

    .venv/bin/python bench/autoscale_sim.py            # full traces, PNGs in docs/autoscale/
    .venv/bin/python bench/autoscale_sim.py --quick    # shorter traces, a few seconds

Both policies drive the same simulated pool (trawl.autoscale.sim) over the same traces with the
same per-task random numbers. Deterministic for a given --seed. The last line is

    worst_p95_wait_ratio=... worst_replica_seconds_ratio=... failing_trace_scaleups=... interrupted_tasks=...

with ratios Trawl / KEDA model, worst over traces; failing_trace_scaleups and interrupted_tasks are
Trawl's (over all traces for interruptions). That line is the headline run (pod start-up 5 s, replicas
0..50, fast failures); a stress run (start-up 15 s, replicas 0..20, failures as slow as successes) is
printed before it with its own "# stress:" line. Waits count what the autoscaler adds beyond the wait a
domain's rate limit imposes anyway (trawl.autoscale.sim.polite_waits).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
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


HEAD = (
    "| trace | policy | tasks | mean wait s | p95 wait s | p95 wait incl. politeness s | replica-s | scale changes "
    "| interrupted | replica-s while failing | scale-ups while failing | requests while failing | dead-lettered |"
)
COLUMNS = HEAD.count("|") - 1


@dataclass
class Outcome:
    rows: list[str]
    worst_wait: float = 0.0
    worst_rs: float = 0.0
    fail_ups: int = 0
    interrupted: int = 0

    def line(self) -> str:
        return (
            f"worst_p95_wait_ratio={self.worst_wait:.2f} worst_replica_seconds_ratio={self.worst_rs:.2f} "
            f"failing_trace_scaleups={self.fail_ups} interrupted_tasks={self.interrupted}"
        )


def run_config(pool: PoolConfig, traces: list[Trace], seed: int, plots: Path | None) -> Outcome:
    out = Outcome([HEAD, "|" + "---|" * COLUMNS])
    for trace in traces:
        results = {p: simulate(trace, pool, p, seed=seed) for p in ("trawl", "keda", "static_max")}
        for name, r in results.items():
            out.rows.append(
                f"| {trace.name} | {name} | {r.tasks} | {r.mean_wait:.1f} | {r.p95_wait:.1f} | {r.p95_raw_wait:.1f} "
                f"| {r.replica_seconds:.0f} | {r.scale_changes} | {r.interrupted} | {r.failing_replica_seconds:.0f} "
                f"| {r.scale_ups_while_failing} | {r.attempts_while_failing} | {r.dead} |"
            )
        tr, kd = results["trawl"], results["keda"]
        wr, rr = ratio(tr.p95_wait, kd.p95_wait), ratio(tr.replica_seconds, kd.replica_seconds)
        cells = [trace.name, "**trawl / keda**", "", f"{ratio(tr.mean_wait, kd.mean_wait):.2f}", f"{wr:.2f}"]
        cells += [f"{ratio(tr.p95_raw_wait, kd.p95_raw_wait):.2f}", f"{rr:.2f}"]
        out.rows.append("| " + " | ".join(cells + [""] * (COLUMNS - len(cells))) + " |")
        out.worst_wait, out.worst_rs = max(out.worst_wait, wr), max(out.worst_rs, rr)
        out.interrupted += tr.interrupted
        if trace.fail_windows:
            out.fail_ups += tr.scale_ups_while_failing
        if plots is not None:
            plot(trace, {k: v for k, v in results.items() if k != "static_max"}, plots / f"{trace.name}.png")
        print(f"# {trace.name}: {trace.description}", file=sys.stderr)
    return out


def describe(pool: PoolConfig) -> str:
    spec, keda = pool.autoscaling, pool.keda
    return "\n".join(
        [
            f"# pool: {pool.concurrency} slots/pod, start-up {pool.startup_seconds:g}s, drain {pool.drain_seconds:g}s, "
            f"retries {pool.max_attempts} attempts from {pool.retry_initial:g}s; "
            f"replicas {spec.min_replicas}..{spec.max_replicas}",
            f"# trawl: targetDrainSeconds={spec.target_drain_seconds} "
            f"scaleDownDelaySeconds={spec.scale_down_delay_seconds} "
            f"idleSecondsBeforeZero={spec.idle_seconds_before_zero} failureRateThreshold={spec.failure_rate_threshold} "
            f"pollSeconds={spec.poll_seconds:g}",
            f"# keda: listLength={keda.list_length:g} pollingInterval={keda.polling_interval:g}s "
            f"cooldownPeriod={keda.cooldown_period:g}s; hpa: sync {keda.hpa_sync_period:g}s tolerance {keda.tolerance} "
            f"down-stabilization {keda.scale_down_stabilization:g}s "
            f"up max(100%,{keda.scale_up_pods} pods)/15s down 100%/15s",
        ]
    )


def make_pool(min_replicas: int, max_replicas: int, startup: float, target_drain: int | None) -> PoolConfig:
    spec = AutoscalingSpec(min_replicas=min_replicas, max_replicas=max_replicas)
    if target_drain is not None:
        spec = spec.model_copy(update={"target_drain_seconds": target_drain})
    keda = KedaHpaConfig(min_replica_count=min_replicas, max_replica_count=max_replicas)
    return PoolConfig(autoscaling=spec, keda=keda, startup_seconds=startup)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter traces")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--plots", type=Path, default=ROOT / "docs" / "autoscale", help="where the PNGs go")
    ap.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    ap.add_argument("--min-replicas", type=int, default=0)
    ap.add_argument("--max-replicas", type=int, default=50)
    ap.add_argument("--startup", type=float, default=5.0, help="pod start-up seconds (Kubernetes SLO: 5 s at p99)")
    ap.add_argument("--target-drain", type=int, default=None, help="Trawl's targetDrainSeconds (default: the API's)")
    ap.add_argument(
        "--fail-duration-factor",
        type=float,
        default=0.1,
        help="failed attempts take this share of a successful one's time (default 0.1, a 5xx; 1.0 = timeouts)",
    )
    ap.add_argument(
        "--no-stress",
        action="store_true",
        help="skip the stress run (start-up 15 s, maxReplicas 20, failures as slow as successes)",
    )
    args = ap.parse_args(argv)

    t0 = time.monotonic()
    runs: list[tuple[str, PoolConfig, float, Path | None]] = [
        (
            "headline",
            make_pool(args.min_replicas, args.max_replicas, args.startup, args.target_drain),
            args.fail_duration_factor,
            None if args.no_plots else args.plots,
        )
    ]
    if not args.no_stress:
        stress = make_pool(args.min_replicas, 20, 15.0, args.target_drain)
        runs.append(("stress", stress, 1.0, None))
    outcomes: list[Outcome] = []
    for label, pool, factor, plots in runs:
        outcome = run_config(pool, build_traces(args.seed, args.quick, factor), args.seed, plots)
        outcomes.append(outcome)
        print(f"## {label}: failed attempts take {factor:g}x a successful one's time")
        print(describe(pool))
        print("\n".join(outcome.rows) if args.markdown else "\n".join(r.replace("**", "") for r in outcome.rows))
        if label != "headline":
            print(f"# {label}: {outcome.line()}")
    print(f"# {time.monotonic() - t0:.1f}s", file=sys.stderr)
    print(outcomes[0].line())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
