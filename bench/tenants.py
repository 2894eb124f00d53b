#!/usr/bin/env python3
"""Tenants on one pool (issue 33): weighted fair share, a tenant's return, a small tenant beside a flood, utilisation.

One freshly started redis-server, one pool (one prefix), simulated workers that claim and ack through the real
:class:`trawl.queue.Queue`: ``--workers`` processes (4) of ``--slots`` task slots each (16), claims sized as the
real worker sizes them (:mod:`trawl.queue.claimsize`, ``auto``: a slot's next task is buffered ahead), each task
"worked" for a fixed ``--service-ms`` (50 ms) with ``asyncio.sleep`` and then acked on its own. A sleep, not a
busy loop: a scraping task waits on the network, and a busy loop would serialise the slots of a process on its
one event loop and take from the two cores the Redis server and the other processes need. Idle workers poll as
the worker does (10 ms doubling to ``--idle-poll-max`` 0.25 s). Every claim is logged by the workers (claim
time, job, task, start and end of its work), and the pool's ready count is sampled every 0.1 s. Phases, each on a
flushed Redis with fresh workers:

* shares -- tenants a, b, c with weights 3:2:1 and backlogs no claim rate can drain (a holds 1 job, b 2, c 3: a
  team's share must not grow with its jobs). a and b start; c is idle ``--idle`` s, then enqueues: the time
  until its share of claims, per ``--bucket`` (0.5 s), is back to at least (1 - ``--return-tolerance``) of its
  weight is ``return_s`` (first). After ``--warmup`` s, shares are measured over every ``--window`` (30 s)
  window, sliding by 1 s over ``--measure`` s (60 s): ``weights_error`` is the worst window's largest relative
  error |share / weight share - 1|. Then c's jobs are cancelled, c stays idle ``--idle`` s and enqueues a new
  job: ``return_s`` is the worse of the two returns.
* small -- a small tenant's job of 100 URLs on the idle pool, ``--reps`` times (the pool idle in between), then
  beside a big tenant whose ``--big-jobs`` jobs (10) flood ``--flood`` URLs (1,000,000), enqueued in batches of
  5,000 by a separate process while the workers claim (the enqueue's time is printed). A task's wait is enqueue
  call to claim; ``small_tenant_p95_ratio`` is the median over reps of the p95 wait beside the flood divided by
  the same alone. The small and the big tenant have weight 1 each. Beside it, the floor any claim order could
  reach (``small_tenant_p95_best_possible_ratio``: the small job taking every claim from its enqueue on, the
  tasks workers already hold left with them) and the measured p95 over that floor.
* ``utilisation`` -- busy slots (a task between the start of its work and its ack's reply) / all slots,
  integrated over every 0.1 s sample interval whose both ends saw ready work, over all phases.

Checks printed before the last line: no task claimed twice, every ack accepted (except for cancelled jobs), per
job: nothing left in flight, succeeded = acks, total = pending + succeeded, and per tenant (``tenant_usage``):
nothing left in flight, claims counted = claims seen.

    .venv/bin/python bench/tenants.py            # the full run (~2 min on 2 cores)
    .venv/bin/python bench/tenants.py --quick    # 10 s windows, 20 s measured, 100,000 URLs of flood (~1 min)

The last line: ``weights_error=… return_s=… small_tenant_p95_ratio=… utilisation=…``.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import contextlib
import json
import math
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "operator"))

import redis.asyncio as aioredis  # noqa: E402

from trawl.dev import procs  # noqa: E402
from trawl.dev.redis_server import RedisServer  # noqa: E402
from trawl.queue import JobConfig, Queue  # noqa: E402
from trawl.queue.model import TenantLimits, TenantPolicy  # noqa: E402

PREFIX = "trawl:{bench/tenants}"
READY_KEY = "bench:workers-ready"
ENQUEUE_BATCH = 5000
SMALL_URLS = 100  # the small tenant's one job
SAMPLE_S = 0.1
SELF = str(Path(__file__).resolve())


def write(path: str | Path, text: str) -> None:
    Path(path).write_text(text)


def urls(tag: str, start: int, n: int) -> list[str]:
    return [f"https://{tag}.example/item/{i}" for i in range(start, start + n)]


# ---------------------------------------------------------------------------------------------- worker process


async def worker(args: argparse.Namespace) -> None:
    """Slots as the worker runs them (buffer ahead, claims sized by claimsize), each task a sleep then its ack."""
    from trawl.queue.claimsize import ClaimState, TaskTimer, claim_size, parse_setting
    from trawl.redisconn.client import connect

    redis = connect(args.url, multiplex=True)
    q = Queue(redis, args.prefix, lease_seconds=args.lease)
    wid, conc, service = args.worker_id, args.slots, args.service_ms / 1000
    setting = parse_setting("auto")
    timer = TaskTimer()
    buffer: deque[tuple[Any, float]] = deque()
    running: set[asyncio.Task[None]] = set()
    freed = asyncio.Event()
    stop = asyncio.Event()
    records: list[str] = []
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)

    async def one(task: Any, claimed: float) -> None:
        start = time.monotonic()
        await asyncio.sleep(service)
        ok = await q.ack(task, wid)
        end = time.monotonic()
        timer.observe(end - start)
        records.append(f"{claimed:.6f} {task.job_id} {task.task_id} {start:.6f} {end:.6f} {int(ok)}")

    def begin(task: Any, claimed: float) -> None:
        t = asyncio.create_task(one(task, claimed))
        running.add(t)
        t.add_done_callback(done)

    def done(t: asyncio.Task[None]) -> None:
        running.discard(t)
        if buffer:
            begin(*buffer.popleft())
        freed.set()

    async def heartbeats() -> None:
        while not stop.is_set():
            await q.heartbeat(wid, in_flight=len(running) + len(buffer))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), args.lease / 4)

    hb = asyncio.create_task(heartbeats())
    idle = 0.01
    first = True
    while not stop.is_set():
        n = claim_size(ClaimState(conc, len(running), len(buffer), args.lease, timer.mean), setting)
        if n <= 0:
            freed.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(freed.wait(), 0.5)
            continue
        tasks = await q.claim(wid, n)
        claimed = time.monotonic()
        if first:
            first = False
            await redis.incr(READY_KEY)
        for task in tasks:
            if len(running) < conc:
                begin(task, claimed)
            else:
                buffer.append((task, claimed))
        if not tasks:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), idle)  # the worker's idle poll: 10 ms doubling to the max
            idle = min(idle * 2, args.idle_poll_max)
        else:
            idle = 0.01
    while running or buffer:  # drain: every claimed task is worked and acked
        freed.clear()
        await freed.wait()
    stop.set()
    with contextlib.suppress(asyncio.CancelledError):
        await hb
    write(args.out, "\n".join(records) + "\n")
    await redis.aclose()


# ------------------------------------------------------------------------------------------ flood process


async def flood(args: argparse.Namespace) -> None:
    """The big tenant's enqueue: its jobs' seeds in batches, one batch per job in turn (jobs already registered)."""
    r = aioredis.Redis.from_url(args.url)
    q = Queue(r, args.prefix, enqueue_batch=ENQUEUE_BATCH)
    jobs = args.jobs.split(",")
    per_job = args.flood // len(jobs)
    t0 = time.monotonic()
    added = 0
    for pos in range(0, per_job, ENQUEUE_BATCH):
        for job in jobs:
            n = min(ENQUEUE_BATCH, per_job - pos)
            added += await q.enqueue_seeds(job, pos, urls(job, pos, n))
    for job in jobs:
        await q.mark_enqueue_done(job)
    write(args.out, json.dumps({"added": added, "t0": t0, "t1": time.monotonic()}))
    await r.aclose()


# ------------------------------------------------------------------------------------------------ controller


@dataclass
class Claim:
    t: float  # claim reply (monotonic; one clock for every process of the machine)
    job: str
    task: str
    start: float
    end: float
    ok: bool


@dataclass
class Phase:
    """What one phase's workers did, and what the sampler saw."""

    claims: list[Claim] = field(default_factory=list)
    ready: list[tuple[float, int]] = field(default_factory=list)
    slots: int = 0


class Pool:
    """Worker processes on the benchmark's pool, started on a flushed Redis and stopped (drained) at the end."""

    def __init__(self, url: str, args: argparse.Namespace, log_dir: Path, name: str) -> None:
        self.url, self.args, self.log_dir, self.name = url, args, log_dir, name
        self.procs: list[subprocess.Popen[bytes]] = []
        self.outs: list[Path] = []

    async def start(self, r: aioredis.Redis) -> None:
        await r.flushall()
        a = self.args
        for i in range(a.workers):
            out = self.log_dir / f"{self.name}-w{i}.claims"
            argv = [
                sys.executable, SELF, "--role", "worker", "--url", self.url,
                "--prefix", PREFIX, "--worker-id", f"bench-{self.name}-{i}@x", "--slots", str(a.slots),
                "--service-ms", str(a.service_ms), "--idle-poll-max", str(a.idle_poll_max), "--out", str(out),
            ]  # fmt: skip
            self.procs.append(procs.start(argv, log_path=self.log_dir / f"{self.name}-w{i}.log"))
            self.outs.append(out)
        deadline = time.monotonic() + 60
        while int(await r.get(READY_KEY) or 0) < a.workers:
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                raise RuntimeError(f"workers did not start; see {self.log_dir}/{self.name}-w*.log")
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)  # every worker at its longest idle poll, as an idle pool's are

    async def stop(self) -> list[Claim]:
        for p in self.procs:
            procs.signal_group(p, signal.SIGTERM)
        for p in self.procs:
            await asyncio.to_thread(procs.stop, p, 30)
        claims: list[Claim] = []
        for out in self.outs:
            if not out.exists():
                raise RuntimeError(f"a worker wrote no claims ({out}); see {self.log_dir}/{self.name}-w*.log")
            for line in out.read_text().split("\n"):
                if line:
                    t, job, task, start, end, ok = line.split()
                    claims.append(Claim(float(t), job, task, float(start), float(end), ok == "1"))
        claims.sort(key=lambda c: c.t)
        return claims


async def sampler(q: Queue, into: list[tuple[float, int]], stop: asyncio.Event) -> None:
    while not stop.is_set():
        sig = await q.pool_signals(reap=False)
        into.append((time.monotonic(), sig.ready))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SAMPLE_S)


async def enqueue_backlog(q: Queue, jobs: list[str], per_job: int) -> None:
    for job in jobs:
        for pos in range(0, per_job, ENQUEUE_BATCH):
            await q.enqueue_seeds(job, pos, urls(job, pos, min(ENQUEUE_BATCH, per_job - pos)))


async def check(q: Queue, claims: list[Claim], jobs: list[str], cancelled: set[str]) -> dict[str, Any]:
    """No task claimed twice; every ack accepted (but cancelled jobs'); per job nothing in flight, succeeded =
    acks, total = pending + succeeded; per tenant nothing in flight and every claim counted."""
    seen = Counter((c.job, c.task) for c in claims)
    dup = sum(n - 1 for n in seen.values() if n > 1)
    rejected = sum(1 for c in claims if not c.ok and c.job not in cancelled)
    acks = Counter(c.job for c in claims if c.ok)
    bad: list[str] = []
    drained: list[str] = []
    for job in jobs:
        if job in cancelled:
            continue
        s = await q.job_stats(job)
        if s.in_flight or s.succeeded != acks[job] or s.total != s.pending + s.succeeded or s.retrying or s.dead:
            bad.append(
                f"{job}: total {s.total} pending {s.pending} in_flight {s.in_flight} retrying {s.retrying} "
                f"succeeded {s.succeeded} dead {s.dead}, acks seen {acks[job]}"
            )
        if s.pending == 0:
            drained.append(job)
    # The queue's own count per tenant (P:tn:<t>): nothing left in flight, every claim counted (skipped for a
    # queue that counts nothing per tenant, as before the fair share).
    usage = await q.tenant_usage()
    claimed = Counter(tenant_of(c.job) for c in claims)
    if any(u.claimed_total for u in usage):
        for u in usage:
            if u.in_flight or u.claimed_total != claimed[u.tenant]:
                bad.append(
                    f"tenant {u.tenant}: in flight {u.in_flight}, claimed {u.claimed_total}, seen {claimed[u.tenant]}"
                )
    counted = {u.tenant: u.claimed_total for u in usage}
    return {"duplicates": dup, "rejected_acks": rejected, "bad_jobs": bad, "drained_jobs": drained, "claims": counted}


def tenant_of(job: str) -> str:
    return job.split("-", 1)[0]


def shares(claims: list[Claim], lo: float, hi: float) -> dict[str, int]:
    return dict(Counter(tenant_of(c.job) for c in claims if lo <= c.t < hi))


def return_time(
    claims: list[Claim], tenant: str, weights: dict[str, int], t_enq: float, bucket: float, tol: float, horizon: float
) -> tuple[float, list[float]]:
    """Seconds from ``t_enq`` to the end of the first bucket in which the tenant's share of claims is at least
    (1 - tol) of its weight's share among the tenants with work (all of ``weights``); its share per bucket."""
    want = weights[tenant] / sum(weights.values())
    series: list[float] = []
    found = math.inf
    for k in range(int(horizon / bucket)):
        got = shares(claims, t_enq + k * bucket, t_enq + (k + 1) * bucket)
        total = sum(got.values())
        share = got.get(tenant, 0) / total if total else 0.0
        series.append(share)
        if found == math.inf and total and share >= (1 - tol) * want:
            found = (k + 1) * bucket
    return found, series


def busy_and_total(phase: Phase) -> tuple[float, float]:
    """Busy slot-seconds and slot-seconds over the sample intervals whose both ends saw ready work."""
    events = sorted([(c.start, 1) for c in phase.claims] + [(c.end, -1) for c in phase.claims])
    times = [t for t, _ in events]
    level, levels, cum, acc, prev = 0, [], [], 0.0, times[0] if times else 0.0
    for t, d in events:
        acc += level * (t - prev)
        level += d
        levels.append(level)
        cum.append(acc)
        prev = t

    def integral(t: float) -> float:  # busy slot-seconds from the first event to t
        k = bisect.bisect_right(times, t) - 1
        return 0.0 if k < 0 else cum[k] + levels[k] * (t - times[k])

    busy = total = 0.0
    for (t0, r0), (t1, r1) in zip(phase.ready, phase.ready[1:], strict=False):
        if r0 > 0 and r1 > 0:
            busy += integral(t1) - integral(t0)
            total += phase.slots * (t1 - t0)
    return busy, total


def p95(values: list[float]) -> float:
    s = sorted(values)
    return s[max(0, math.ceil(0.95 * len(s)) - 1)] if s else math.nan


# ---------------------------------------------------------------------------------------------------- phases


async def phase_shares(url: str, args: argparse.Namespace, log_dir: Path, out: dict[str, Any]) -> Phase:
    r = aioredis.Redis.from_url(url)
    q = Queue(r, PREFIX, enqueue_batch=ENQUEUE_BATCH)
    weights = {"a": 3, "b": 2, "c": 1}
    jobs = {"a": ["a-1"], "b": ["b-1", "b-2"], "c": ["c-1", "c-2", "c-3"]}
    rate = args.workers * args.slots / (args.service_ms / 1000)
    span = 2 * args.idle + args.warmup + args.measure + 2 * args.bucket_horizon + 10
    per_tenant = int(rate * span)  # more than the pool could claim in the phase at full rate
    pool = Pool(url, args, log_dir, "shares")
    phase = Phase(slots=args.workers * args.slots)
    stop = asyncio.Event()
    samp: asyncio.Task[None] | None = None
    try:
        await pool.start(r)
        await q.set_tenant_policy(TenantPolicy({t: TenantLimits(weight=w) for t, w in weights.items()}))
        for tenant, js in jobs.items():
            for job in js:
                await q.register_job(JobConfig(job, tenant=tenant))
        t = time.monotonic()
        await enqueue_backlog(q, jobs["a"], per_tenant)
        await enqueue_backlog(q, jobs["b"], per_tenant // 2)
        log(f"shares: a and b enqueued {per_tenant} URLs each in {time.monotonic() - t:.1f}s; c idle {args.idle}s")
        samp = asyncio.create_task(sampler(q, phase.ready, stop))
        t_ab = time.monotonic()
        await asyncio.sleep(args.idle)
        t_c1 = time.monotonic()
        await enqueue_backlog(q, jobs["c"], per_tenant // 3)
        log(f"shares: c enqueued {per_tenant} URLs in {time.monotonic() - t_c1:.1f}s")
        await asyncio.sleep(max(0.0, t_c1 + args.warmup + args.measure - time.monotonic()))
        t_m1 = time.monotonic()
        for job in jobs["c"]:
            await q.cancel(job)
        t_cancel = time.monotonic()
        await asyncio.sleep(args.idle)
        t_c2 = time.monotonic()
        await q.register_job(JobConfig("c-4", tenant="c"))
        await enqueue_backlog(q, ["c-4"], per_tenant)
        await asyncio.sleep(args.bucket_horizon)
        stop.set()
        await samp
        samp = None
        phase.claims = await pool.stop()
        out["shares_checks"] = await check(
            q, phase.claims, [j for js in jobs.values() for j in js] + ["c-4"], set(jobs["c"])
        )
    finally:
        stop.set()
        if samp is not None:
            samp.cancel()
        for p in pool.procs:
            procs.stop(p, 5)
        await r.aclose()
    c = phase.claims
    # c idle: a and b share 3:2
    ab = shares(c, t_ab + 1, t_c1)
    out["idle_ab_share_a"] = round(ab.get("a", 0) / max(1, sum(ab.values())), 3)
    per_job = Counter(x.job for x in c if t_ab + 1 <= x.t < t_c1)
    out["idle_job_shares"] = {j: round(n / max(1, sum(per_job.values())), 3) for j, n in sorted(per_job.items())}
    horizon = args.bucket_horizon
    ret1, series1 = return_time(c, "c", weights, t_c1, args.bucket, args.return_tolerance, horizon)
    ret2, series2 = return_time(c, "c", weights, t_c2, args.bucket, args.return_tolerance, horizon)
    out["return_first_s"], out["return_again_s"] = ret1, ret2
    firsts = [min((x.t for x in c if tenant_of(x.job) == "c" and x.t >= t), default=math.inf) - t for t in (t_c1, t_c2)]
    out["return_first_claim_ms"] = [round(x * 1000, 1) for x in firsts]
    out["return_first_series"] = [round(x, 3) for x in series1]
    out["return_again_series"] = [round(x, 3) for x in series2]
    ab2 = shares(c, t_cancel + 1, t_c2)
    out["idle_again_ab_share_a"] = round(ab2.get("a", 0) / max(1, sum(ab2.values())), 3)
    # sliding windows over the steady span
    total_w = sum(weights.values())
    lo, hi = t_c1 + args.warmup, t_m1
    worst, worst_at, worst_shares = 0.0, 0.0, {}
    by_tenant = {t: [x.t for x in c if tenant_of(x.job) == t] for t in weights}
    start = lo
    while start + args.window <= hi + 1e-9:
        n = {
            t: bisect.bisect_left(ts, start + args.window) - bisect.bisect_left(ts, start)
            for t, ts in by_tenant.items()
        }
        total = sum(n.values())
        for t, w in weights.items():
            err = abs(n[t] / total / (w / total_w) - 1) if total else math.inf
            if err > worst:
                worst, worst_at, worst_shares = err, start - lo, {k: round(v / total, 4) for k, v in n.items()}
        start += 1.0
    out["weights_error"] = worst
    out["weights_worst_window"] = {"offset_s": round(worst_at, 1), "shares": worst_shares}
    whole = shares(c, lo, hi)
    out["weights_whole_span"] = {k: round(v / max(1, sum(whole.values())), 4) for k, v in sorted(whole.items())}
    out["shares_claims_per_s"] = round(sum(whole.values()) / max(1e-9, hi - lo), 1)
    return phase


async def small_rep(q: Queue, job: str, tenant: str) -> float:
    await q.register_job(JobConfig(job, tenant=tenant))
    t = time.monotonic()
    await q.enqueue(job, urls(job, 0, SMALL_URLS), start_index=0)
    while True:
        if not (await q.job_stats(job)).pending:
            return t
        await asyncio.sleep(0.02)


def waits_of(claims: list[Claim], job: str, t_enq: float) -> list[float]:
    return [c.t - t_enq for c in claims if c.job == job]


def best_p95(claims: list[Claim], t_enq: float, n: int) -> float:
    """The p95 wait of n tasks enqueued at t_enq had they taken every claim the pool made from then on: what
    any claim order (strict priority for the small job included) could reach without taking back tasks the
    workers already hold. Beside a flood, claims come only as slots free up, so this is the floor the
    measured p95 is to be read against."""
    after = sorted(c.t for c in claims if c.t >= t_enq)
    k = max(0, math.ceil(0.95 * n) - 1)
    return after[k] - t_enq if len(after) > k else math.nan


async def phase_small(url: str, args: argparse.Namespace, log_dir: Path, out: dict[str, Any]) -> list[Phase]:
    r = aioredis.Redis.from_url(url)
    q = Queue(r, PREFIX, enqueue_batch=ENQUEUE_BATCH)
    policy = TenantPolicy({"small": TenantLimits(weight=1), "big": TenantLimits(weight=1)})
    phases: list[Phase] = []
    rng = random.Random(args.seed)
    flood_proc: subprocess.Popen[bytes] | None = None
    try:
        # alone
        pool = Pool(url, args, log_dir, "alone")
        phase = Phase(slots=args.workers * args.slots)
        stop = asyncio.Event()
        await pool.start(r)
        await q.set_tenant_policy(policy)
        samp = asyncio.create_task(sampler(q, phase.ready, stop))
        alone: list[tuple[str, float]] = []
        for i in range(args.reps):
            await asyncio.sleep(1.0 + rng.random())  # idle workers at their longest poll, at a random phase
            alone.append((f"small-a{i}", await small_rep(q, f"small-a{i}", "small")))
        await asyncio.sleep(0.5)
        stop.set()
        await samp
        phase.claims = await pool.stop()
        out["alone_checks"] = await check(q, phase.claims, [j for j, _ in alone], set())
        phases.append(phase)
        alone_p95 = [p95(waits_of(phase.claims, j, t)) for j, t in alone]

        # beside the flood
        pool = Pool(url, args, log_dir, "flood")
        phase = Phase(slots=args.workers * args.slots)
        stop = asyncio.Event()
        await pool.start(r)
        await q.set_tenant_policy(policy)
        big = [f"big-{i}" for i in range(args.big_jobs)]
        for job in big:
            await q.register_job(JobConfig(job, tenant="big"))
        samp = asyncio.create_task(sampler(q, phase.ready, stop))
        flood_out = log_dir / "flood.json"
        argv = [
            sys.executable, SELF, "--role", "flood", "--url", url, "--prefix", PREFIX,
            "--jobs", ",".join(big), "--flood", str(args.flood), "--out", str(flood_out),
        ]  # fmt: skip
        t_flood = time.monotonic()
        flood_proc = procs.start(argv, log_path=log_dir / "flood.log")
        while (await q.pool_signals(reap=False)).ready < 4 * phase.slots:
            if flood_proc.poll() is not None and flood_proc.returncode:
                raise RuntimeError(f"the flood's enqueue failed; see {log_dir}/flood.log")
            await asyncio.sleep(0.05)
        beside: list[tuple[str, float, bool]] = []
        i = 0
        while i < args.reps or (flood_proc.poll() is None and i < 3 * args.reps):
            if i:  # the first small job comes while the flood is still being enqueued (if it still is)
                await asyncio.sleep(0.5 + rng.random())
            during = flood_proc.poll() is None
            beside.append((f"small-b{i}", await small_rep(q, f"small-b{i}", "small"), during))
            i += 1
        await asyncio.to_thread(flood_proc.wait, 600)
        if flood_proc.returncode:
            raise RuntimeError(f"the flood's enqueue failed; see {log_dir}/flood.log")
        fl = json.loads(flood_out.read_text())
        out["flood_enqueue_s"] = round(fl["t1"] - fl["t0"], 2)
        out["flood_added"] = fl["added"]
        out["flood_start_to_enqueue_s"] = round(fl["t0"] - t_flood, 2)
        await asyncio.sleep(0.5)
        stop.set()
        await samp
        phase.claims = await pool.stop()
        out["flood_checks"] = await check(q, phase.claims, [j for j, _, _ in beside] + big, set())
        phases.append(phase)
        beside_p95 = [p95(waits_of(phase.claims, j, t)) for j, t, _ in beside]
        beside_best = [best_p95(phase.claims, t, SMALL_URLS) for _, t, _ in beside]
        small_share = []
        for j, t, _ in beside:
            last = max(c.t for c in phase.claims if c.job == j)
            got = shares(phase.claims, t, last + 1e-9)
            small_share.append(round(got.get("small", 0) / max(1, sum(got.values())), 3))
    finally:
        if flood_proc is not None:
            procs.stop(flood_proc, 5)
        await r.aclose()
    out["alone_p95_ms"] = [round(x * 1000, 1) for x in alone_p95]
    out["beside_p95_ms"] = [round(x * 1000, 1) for x in beside_p95]
    out["beside_during_enqueue"] = [d for _, _, d in beside]
    out["beside_small_share_of_claims"] = small_share
    out["small_tenant_p95_ratio"] = statistics.median(beside_p95) / statistics.median(alone_p95)
    # The floor of that ratio for any claim order, and how far the fair share is above the floor.
    out["beside_best_possible_p95_ms"] = [round(x * 1000, 1) for x in beside_best]
    out["small_tenant_p95_best_possible_ratio"] = statistics.median(beside_best) / statistics.median(alone_p95)
    out["small_tenant_p95_vs_best_possible"] = statistics.median(beside_p95) / statistics.median(beside_best)
    return phases


def log(msg: str) -> None:
    print(f"# {msg}", file=sys.stderr, flush=True)


async def controller(args: argparse.Namespace) -> int:
    log_dir = Path(tempfile.mkdtemp(prefix="trawl-bench-tenants-"))
    out: dict[str, Any] = {}
    phases: dict[str, Phase] = {}
    t0 = time.perf_counter()
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    ok = False
    try:
        with RedisServer() as server:
            if "shares" in args.phases:
                phases["shares"] = await phase_shares(server.url, args, log_dir, out)
                log(f"shares phase done ({time.perf_counter() - t0:.0f}s)")
            if "small" in args.phases:
                phases["alone"], phases["flood"] = await phase_small(server.url, args, log_dir, out)
                log(f"small phase done ({time.perf_counter() - t0:.0f}s)")
        ok = True
    finally:
        if ok:
            shutil.rmtree(log_dir, ignore_errors=True)
        else:
            log(f"worker logs kept in {log_dir}")
    util = []
    busy = total = 0.0
    for name, ph in phases.items():
        b, t = busy_and_total(ph)
        util.append(f"{name} {b / t:.3f} over {t / ph.slots:.1f}s" if t else f"{name} -")
        busy, total = busy + b, total + t
    out["utilisation_per_phase"] = util
    out["utilisation"] = busy / total if total else math.nan
    out["return_s"] = max(out.get("return_first_s", math.nan), out.get("return_again_s", math.nan))
    for key in ("weights_error", "small_tenant_p95_ratio"):
        out.setdefault(key, math.nan)
    print(
        f"tenants: {args.workers} workers x {args.slots} slots, {args.service_ms} ms per task (asyncio.sleep), "
        f"windows {args.window:g}s over {args.measure:g}s, flood {args.flood} URLs in {args.big_jobs} jobs "
        f"({time.perf_counter() - t0:.0f}s); load average {load_before} before, "
        + " ".join(f"{x:.2f}" for x in os.getloadavg())
        + f" after, {os.cpu_count()} CPUs"
    )
    for k, v in out.items():
        if k not in ("weights_error", "return_s", "small_tenant_p95_ratio", "utilisation"):
            print(f"{k}: {v}")
    if args.json:
        write(args.json, json.dumps(out, indent=2, default=str))
    problems = [
        f"{k}: {v}"
        for k in ("shares_checks", "alone_checks", "flood_checks")
        if k in out
        for v in (out[k]["duplicates"] and f"{out[k]['duplicates']} duplicate claims",
                  out[k]["rejected_acks"] and f"{out[k]['rejected_acks']} rejected acks",
                  *out[k]["bad_jobs"])
        if v
    ]  # fmt: skip
    print("checks: " + ("; ".join(problems) if problems else "no task claimed twice, every ack accepted, jobs add up"))
    print(
        f"weights_error={out['weights_error']:.4f} return_s={out['return_s']:.1f} "
        f"small_tenant_p95_ratio={out['small_tenant_p95_ratio']:.2f} utilisation={out['utilisation']:.3f}"
    )
    return 1 if problems else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="10 s windows over 20 s, 3 reps, a flood of 100,000 URLs")
    ap.add_argument("--workers", type=int, default=4, help="worker processes")
    ap.add_argument("--slots", type=int, default=16, help="task slots per worker process")
    ap.add_argument("--service-ms", type=float, default=50.0, help="each task's simulated work (asyncio.sleep)")
    ap.add_argument("--idle-poll-max", type=float, default=0.25, help="an idle worker's longest pause (the worker's)")
    ap.add_argument("--window", type=float, default=0.0, help="share window, seconds (30; --quick 10)")
    ap.add_argument("--measure", type=float, default=0.0, help="span the windows slide over (60; --quick 20)")
    ap.add_argument("--warmup", type=float, default=0.0, help="from c's enqueue to the first window (10; --quick 5)")
    ap.add_argument("--idle", type=float, default=5.0, help="seconds tenant c stays idle before it enqueues")
    ap.add_argument("--bucket", type=float, default=0.5, help="bucket of the return measurement, seconds")
    ap.add_argument("--bucket-horizon", type=float, default=5.0, help="buckets measured after c's enqueue, seconds")
    ap.add_argument("--return-tolerance", type=float, default=0.1, help="share back within this of the weight")
    ap.add_argument("--reps", type=int, default=0, help="small jobs alone and beside the flood (7; --quick 3)")
    ap.add_argument("--flood", type=int, default=0, help="URLs the big tenant floods (1,000,000; --quick 100,000)")
    ap.add_argument("--big-jobs", type=int, default=10, help="jobs the flood is spread over")
    ap.add_argument("--seed", type=int, default=33)
    ap.add_argument("--phases", default="shares,small", help="the phases to run: shares, small (default both)")
    ap.add_argument("--json", default="", help="also write every figure to this JSON file")
    # the benchmark's own child processes
    ap.add_argument("--role", default="", help=argparse.SUPPRESS)
    ap.add_argument("--url", default="", help=argparse.SUPPRESS)
    ap.add_argument("--prefix", default=PREFIX, help=argparse.SUPPRESS)
    ap.add_argument("--worker-id", default="", help=argparse.SUPPRESS)
    ap.add_argument("--lease", type=float, default=30.0, help=argparse.SUPPRESS)
    ap.add_argument("--jobs", default="", help=argparse.SUPPRESS)
    ap.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.role == "worker":
        from trawl.boot import eventloop

        eventloop.run(worker(args))  # the worker's loop (uvloop)
        return 0
    if args.role == "flood":
        asyncio.run(flood(args))
        return 0
    args.window = args.window or (10.0 if args.quick else 30.0)
    args.measure = args.measure or (20.0 if args.quick else 60.0)
    args.warmup = args.warmup or (5.0 if args.quick else 10.0)
    args.reps = args.reps or (3 if args.quick else 7)
    args.flood = args.flood or (100_000 if args.quick else 1_000_000)
    if args.quick:
        args.idle = min(args.idle, 3.0)
    if args.measure < args.window:
        ap.error("--measure must be at least --window")
    procs.install_signal_handlers()
    return asyncio.run(controller(args))


if __name__ == "__main__":
    sys.exit(main())
