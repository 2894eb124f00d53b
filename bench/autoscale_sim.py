"""Trawl's autoscaling policy against KEDA (Redis list scaler) + HPA, stock and tuned, in a simulated pool.

    .venv/bin/python bench/autoscale_sim.py --markdown   # 20 seeds per trace, headline + stress, PNGs
    .venv/bin/python bench/autoscale_sim.py --quick      # shorter traces, 5 seeds

Every policy drives the same simulated pool (poolsim.sim) over the same traces with the same
random numbers; each seed draws everything random anew (arrivals, service times, failures, retry
jitter, the phase of every poll loop). Trawl is called through trawl.autoscale.step.plan, the
controller's own call, with only what the controller has (queue snapshot, job-index entries, its
pods' measured start-up). Seeds run in parallel (--jobs). The last two lines are

    worst_seed: p95_wait_ratio_stock=... cost_ratio_stock=... p95_wait_ratio_tuned=... cost_ratio_tuned=... ...
    median_p95_wait_ratio_stock=... median_cost_ratio_stock=... median_p95_wait_ratio_tuned=...
        median_cost_ratio_tuned=... failing_trace_scaleups=... interrupted_tasks=...

Ratios are Trawl / KEDA (p95 wait beyond politeness; replica-seconds = cost). "median_" is the
worst trace's median over seeds (the targets hold "on every trace, at the median"); "worst_seed" the
worst single seed of any trace. failing_trace_scaleups and interrupted_tasks are Trawl's, summed over
every seed (interruptions over every trace). That is the headline run (pod start-up 5 s, replicas
0..50, fast failures); a stress run (start-up 15 s, replicas 0..20, failures as slow as successes)
prints its own "# stress:" lines before it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Iterable
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from poolsim.kedahpa import KedaHpaConfig
from poolsim.sim import PoolConfig, Result, Trace, build_traces, simulate
from trawl.api.scrapepool import AutoscalingSpec

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ("trawl", "keda_stock", "keda_tuned")
LABELS = {"trawl": "Trawl", "keda_stock": "KEDA stock", "keda_tuned": "KEDA tuned", "static_max": "static max"}


@dataclass(frozen=True)
class Run:
    """What one simulation reports (no per-task data: it crosses a process boundary)."""

    p95: float
    mean: float
    p95_raw: float
    cost: float
    changes: int
    interrupted: int
    fail_ups: int
    fail_requests: int
    dead: int
    completed: int
    samples: tuple[tuple[float, int, int], ...] = ()  # (t, pods, queued) for the plots

    @classmethod
    def of(cls, r: Result, keep_samples: bool) -> Run:
        samples = tuple((s.t, s.replicas, s.ready + s.delayed) for s in r.samples) if keep_samples else ()
        return cls(
            r.p95_wait, r.mean_wait, r.p95_raw_wait, r.replica_seconds, r.scale_changes, r.interrupted,
            r.scale_ups_while_failing, r.attempts_while_failing, r.dead, r.completed, samples,
        )  # fmt: skip


@dataclass(frozen=True)
class Config:
    label: str
    pool: PoolConfig
    fail_factor: float
    quick: bool


@lru_cache(maxsize=4)
def _traces(seed: int, quick: bool, factor: float) -> dict[str, Trace]:
    return {t.name: t for t in build_traces(seed, quick, factor)}


def _simulate(cfg: Config, trace: str, seed: int, policies: tuple[str, ...], keep: bool) -> dict[str, Run]:
    tr = _traces(seed, cfg.quick, cfg.fail_factor)[trace]
    return {p: Run.of(simulate(tr, cfg.pool, p, seed=seed), keep) for p in policies}


def ratio(a: float, b: float) -> float:
    if b <= 0:
        return 0.0 if a <= 0 else float("inf")
    return a / b


def med(values: Iterable[float]) -> float:
    return float(statistics.median(values))


@dataclass
class TraceStats:
    """One trace of one configuration: runs per seed and policy."""

    trace: Trace
    runs: dict[int, dict[str, Run]]

    def col(self, policy: str, attr: str) -> list[float]:
        return [float(getattr(r[policy], attr)) for r in self.runs.values()]

    def ratios(self, attr: str, base: str) -> list[float]:
        return [ratio(getattr(r["trawl"], attr), getattr(r[base], attr)) for r in self.runs.values()]


HEAD = (
    "| trace | policy | p95 wait s | mean wait s | p95 wait incl. politeness s | replica-s | scale changes "
    "| interrupted (all seeds) | scale-ups while failing (all seeds) | requests while failing | dead-lettered "
    "| completed by the end |"
)
RATIO_HEAD = (
    "| trace | vs | p95 wait ratio | replica-s ratio | scale-change ratio | "
    "p95 wait ≤ target | replica-s ≤ 1.0 | changes ≤ 1.5 |"
)


def rows(stats: list[TraceStats], static: dict[str, Run], seed: int) -> list[str]:
    out = [HEAD, "|" + "---|" * (HEAD.count("|") - 1)]
    for st in stats:
        for p in POLICIES:

            def mw(attr: str, fmt: str = ".1f", worst: bool = True) -> str:
                v = st.col(p, attr)  # noqa: B023 - used at once
                return f"{med(v):{fmt}} ({max(v):{fmt}})" if worst else f"{med(v):{fmt}}"

            out.append(
                f"| {st.trace.name} | {LABELS[p]} | {mw('p95')} | {mw('mean')} | {mw('p95_raw')} | {mw('cost', '.0f')} "
                f"| {mw('changes', '.0f')} | {sum(st.col(p, 'interrupted')):.0f} | {sum(st.col(p, 'fail_ups')):.0f} "
                f"| {mw('fail_requests', '.0f', False)} | {mw('dead', '.0f', False)} "
                f"| {mw('completed', '.0f', False)} |"
            )
        s = static.get(st.trace.name)
        if s is not None:
            out.append(
                f"| {st.trace.name} | static max (seed {seed}) | {s.p95:.1f} | {s.mean:.1f} | {s.p95_raw:.1f} "
                f"| {s.cost:.0f} | 0 | {s.interrupted} | 0 | {s.fail_requests} | {s.dead} | {s.completed} |"
            )
    return out


def ratio_rows(stats: list[TraceStats]) -> list[str]:
    out = [RATIO_HEAD, "|" + "---|" * (RATIO_HEAD.count("|") - 1)]
    for st in stats:
        for base, target in (("keda_stock", 0.5), ("keda_tuned", 1.0)):
            w, c = st.ratios("p95", base), st.ratios("cost", base)
            ch = st.ratios("changes", base)
            ok = ("yes" if med(w) <= target else "**no**", "yes" if med(c) <= 1.0 else "**no**")
            out.append(
                f"| {st.trace.name} | {LABELS[base]} | {med(w):.2f} ({max(w):.2f}) | {med(c):.2f} ({max(c):.2f}) "
                f"| {med(ch):.2f} ({max(ch):.2f}) | {ok[0]} (≤ {target:g}) | {ok[1]} "
                f"| {'yes' if med(ch) <= 1.5 else '**no**'} |"
            )
    return out


def headline(stats: list[TraceStats]) -> tuple[str, str]:
    def worst(fn: str, attr: str, base: str) -> float:
        per = [st.ratios(attr, base) for st in stats]
        return max(med(v) for v in per) if fn == "median" else max(max(v) for v in per)

    fail_ups = sum(sum(st.col("trawl", "fail_ups")) for st in stats if st.trace.fail_windows)
    interrupted = sum(sum(st.col("trawl", "interrupted")) for st in stats)
    worst_fail = max((max(st.col("trawl", "fail_ups")) for st in stats if st.trace.fail_windows), default=0)
    worst_int = max(max(st.col("trawl", "interrupted")) for st in stats)
    parts = [
        ("p95_wait_ratio_stock", "p95", "keda_stock"),
        ("cost_ratio_stock", "cost", "keda_stock"),
        ("p95_wait_ratio_tuned", "p95", "keda_tuned"),
        ("cost_ratio_tuned", "cost", "keda_tuned"),
    ]
    median = " ".join(f"median_{k}={worst('median', a, b):.2f}" for k, a, b in parts)
    worst_seed = " ".join(f"{k}={worst('max', a, b):.2f}" for k, a, b in parts)
    return (
        f"worst_seed: {worst_seed} failing_trace_scaleups={worst_fail:.0f} interrupted_tasks={worst_int:.0f}",
        f"{median} failing_trace_scaleups={fail_ups:.0f} interrupted_tasks={interrupted:.0f}",
    )


def plot(trace: Trace, runs: dict[str, Run], out: Path, seed: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    colors = {"trawl": "tab:blue", "keda_stock": "tab:orange", "keda_tuned": "tab:green"}
    for name, r in runs.items():
        t = [s[0] for s in r.samples]
        ax1.step(t, [s[1] for s in r.samples], where="post", color=colors[name], label=LABELS[name])
        ax2.plot(t, [s[2] for s in r.samples], color=colors[name], label=f"{LABELS[name]}: queued")
    for start, end, _ in trace.fail_windows:
        for ax in (ax1, ax2):
            ax.axvspan(start, end, color="red", alpha=0.1, label="downstream failing" if ax is ax1 else None)
    ax1.set_ylabel("worker pods")
    ax1.legend(loc="upper right", fontsize=8)
    ax2.set_ylabel("tasks waiting (ready + delayed)")
    ax2.set_xlabel("seconds")
    ax2.legend(loc="upper right", fontsize=8)
    fig.suptitle(f"{trace.name} (seed {seed}): {trace.description}", fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=80)
    plt.close(fig)


def run_config(cfg: Config, seeds: list[int], pool_exec: ProcessPoolExecutor, plots: Path | None) -> list[str]:
    names = list(_traces(seeds[0], cfg.quick, cfg.fail_factor))
    # Longest first, so the pool's last minutes are not one slow simulation on one core.
    order = sorted(names, key=lambda n: -len(_traces(seeds[0], cfg.quick, cfg.fail_factor)[n].arrivals))
    futures = {
        (n, s): pool_exec.submit(_simulate, cfg, n, s, POLICIES, s == seeds[0] and plots is not None)
        for n in order
        for s in seeds
    }
    ref = {n: pool_exec.submit(_simulate, cfg, n, seeds[0], ("static_max",), False) for n in names}
    stats = [TraceStats(_traces(seeds[0], cfg.quick, cfg.fail_factor)[n], {}) for n in names]
    for st in stats:
        for s in seeds:
            st.runs[s] = futures[(st.trace.name, s)].result()
        if plots is not None:
            plot(st.trace, st.runs[seeds[0]], plots / f"{st.trace.name}.png", seeds[0])
    static = {n: f.result()["static_max"] for n, f in ref.items()}
    lines = [f"## {cfg.label}: {len(seeds)} seeds ({seeds[0]}..{seeds[-1]}); median (worst) over seeds"]
    lines += [describe(cfg), "", *rows(stats, static, seeds[0]), "", *ratio_rows(stats), ""]
    worst, median = headline(stats)
    return [*lines, f"# {cfg.label}: {worst}", f"# {cfg.label}: {median}"]


def _trace_drains(cfg: Config) -> str:
    """The traces whose workload sets its own drain (grace period), e.g. " (long_tasks 1200s)"."""
    own = [f"{t.name} {t.drain_seconds:g}s" for t in _traces(1, cfg.quick, cfg.fail_factor).values() if t.drain_seconds]
    return f" ({', '.join(own)})" if own else ""


def describe(cfg: Config) -> str:
    pool = cfg.pool
    spec, keda, tuned = pool.autoscaling, pool.keda, pool.keda_tuned
    return "\n".join(
        [
            f"# pool: {pool.concurrency} slots/pod, start-up {pool.startup_seconds:g}s (Trawl measures it; 15 s "
            f"assumed before the first pod is ready), drain {pool.drain_seconds:g}s{_trace_drains(cfg)}, "
            f"retries {pool.max_attempts} "
            f"attempts from {pool.retry_initial:g}s, failed attempts {cfg.fail_factor:g}x a success's time; "
            f"replicas {spec.min_replicas}..{spec.max_replicas}",
            f"# trawl: targetDrainSeconds={spec.target_drain_seconds} "
            f"scaleDownDelaySeconds={spec.scale_down_delay_seconds} "
            f"idleSecondsBeforeZero={spec.idle_seconds_before_zero} failureRateThreshold={spec.failure_rate_threshold} "
            f"pollSeconds={spec.poll_seconds:g}",
            *(
                f"# {label}: listLength={k.list_length:g} pollingInterval={k.polling_interval:g}s "
                f"cooldownPeriod={k.cooldown_period:g}s; hpa: sync {k.hpa_sync_period:g}s tolerance {k.tolerance} "
                f"down-stabilization {k.scale_down_stabilization:g}s "
                f"up max(100%,{k.scale_up_pods} pods)/15s down 100%/15s"
                for label, k in (("keda stock", keda), ("keda tuned", tuned))
            ),
        ]
    )


def make_pool(min_replicas: int, max_replicas: int, startup: float, target_drain: int | None) -> PoolConfig:
    spec = AutoscalingSpec(min_replicas=min_replicas, max_replicas=max_replicas)
    if target_drain is not None:
        spec = spec.model_copy(update={"target_drain_seconds": target_drain})
    keda = KedaHpaConfig(min_replica_count=min_replicas, max_replica_count=max_replicas)
    return PoolConfig(autoscaling=spec, keda=keda, startup_seconds=startup)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="shorter traces, 5 seeds")
    ap.add_argument("--seeds", type=int, default=None, help="seeds per trace (default 20, --quick 5)")
    ap.add_argument("--first-seed", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="worker processes")
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
    ap.add_argument("--stress-only", action="store_true", help="only the stress run (its lines come last)")
    args = ap.parse_args(argv)
    n = args.seeds or (5 if args.quick else 20)
    seeds = list(range(args.first_seed, args.first_seed + n))

    t0 = time.monotonic()
    configs = [
        Config(
            "headline",
            make_pool(args.min_replicas, args.max_replicas, args.startup, args.target_drain),
            args.fail_duration_factor,
            args.quick,
        )
    ]
    if args.stress_only:
        configs = []
    if not args.no_stress:
        configs.append(Config("stress", make_pool(args.min_replicas, 20, 15.0, args.target_drain), 1.0, args.quick))
    outputs: list[list[str]] = []
    with ProcessPoolExecutor(max_workers=max(1, args.jobs)) as ex:
        for cfg in configs:
            plots = None if args.no_plots or cfg.label != "headline" else args.plots
            outputs.append(run_config(cfg, seeds, ex, plots))
            print(f"# {cfg.label} done after {time.monotonic() - t0:.0f}s", file=sys.stderr)
    for out in reversed(outputs):  # the headline's lines last
        text = "\n".join(out)
        print(text if args.markdown else text.replace("**", ""))
    head = outputs[0]
    label = "# stress: " if args.stress_only else "# headline: "
    print(head[-2].removeprefix(label))
    print(head[-1].removeprefix(label))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
