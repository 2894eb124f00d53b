"""Discrete-event simulation of a worker pool under an autoscaler, for ``bench/autoscale_sim.py``.

The pool: tasks arrive on domains; each worker pod has ``concurrency`` slots; an attempt takes a
log-normal service time and fails with the trace's failure probability at its start time; failed
attempts retry with the queue's exponential backoff (3 attempts, 1 s initial, jitter 0.2) and are
dead-lettered after the last; a rate-limited domain hands out start times (tokens), and a worker that
claims a task whose token lies in the future releases it to the delayed set until then (rate-limit
deferral, no attempt spent). New pods serve after ``startup_seconds``. A removed pod stops claiming
and has ``drain_seconds`` (the pool's, or the trace's where its workload sets its own grace period)
to finish its tasks; what is still running then is released to the queue and counted as interrupted.

Every policy sees the same pool, the same trace and the same per-task random numbers:

- ``trawl``: :func:`trawl.autoscale.step.plan`, the controller's own call, on the controller's timer
  (a tick every second through :class:`trawl.autoscale.schedule.PassSchedule`: every ``pollSeconds``,
  a follow-up, or a burst seen in the enqueue counter), with only what the controller has: a
  :class:`PoolSignals` snapshot built like the queue's (per-worker in-flight counts included), job-index
  entries (waiting tasks, the job's hosts when it has few, its politeness) for the rate-limit
  ceiling, and each pod's creation → ready time for the measured start-up (15 s assumed before the
  first). Before removing pods the controller sets ``pod-deletion-cost`` = in-flight tasks, so the
  ReplicaSet removes idle pods first. The pods the step cordons (policy rules 8 and 9) take no new
  tasks (as the real worker's next claim) until a later poll lifts the cordon (the real worker learns
  of a lift from its next heartbeat, within 5 s; here at once).
- ``keda_stock``: :class:`poolsim.kedahpa.KedaHpaModel` on the ready-list length with KEDA's
  and the HPA's defaults; ``keda_tuned``: the same with pollingInterval, scale-down stabilization and
  cooldown equal to Trawl's pollSeconds, scaleDownDelaySeconds and idleSecondsBeforeZero, and
  ``listLength`` = the worker's concurrency (:func:`tuned_keda`). The ReplicaSet removes not-ready
  pods first, then the most recently ready ones, whatever they are doing.
- ``static_max``: a reference, ``maxReplicas`` pods serving from the start, at the highest cost.

The seed draws everything random: the trace's arrivals, service times, failures, retry jitter and
the phase of every poll loop. Pure Python, deterministic for a given seed; no plotting here.
"""

from __future__ import annotations

import heapq
import math
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from trawl.api.scrapepool import AutoscalingSpec, ScrapePoolSpec
from trawl.autoscale.schedule import TICK_SECONDS, PassSchedule
from trawl.autoscale.step import PoolScalerState, plan
from trawl.queue.model import PoolSignals, WorkerActivity

from .kedahpa import KedaHpaConfig, KedaHpaModel
from .traces import Trace, build_traces

__all__ = ["POLICIES", "PoolConfig", "Result", "Sample", "Trace", "build_traces", "percentile", "simulate"]


@dataclass(frozen=True)
class PoolConfig:
    autoscaling: AutoscalingSpec
    keda: KedaHpaConfig  # the stock baseline (replica bounds set, defaults otherwise)
    concurrency: int = 32
    drain_seconds: float = 30.0
    # Kubernetes' pod start-up SLO (stateless pods, image already on the node, creation -> running
    # seen by a watch): 5 s at p99; the worker itself serves within about a second of starting.
    startup_seconds: float = 5.0
    max_attempts: int = 3
    retry_initial: float = 1.0
    retry_max: float = 300.0
    retry_jitter: float = 0.2
    due_soon_seconds: float = 5.0
    sample_seconds: float = 5.0

    @cached_property
    def spec(self) -> ScrapePoolSpec:
        """The ScrapePool the controller would read."""
        return ScrapePoolSpec.model_validate(
            {
                "redis": {"url": "redis://sim:6379"},
                "worker": {"concurrency": self.concurrency, "drainSeconds": self.drain_seconds},
                "autoscaling": self.autoscaling.model_dump(by_alias=True),
            }
        )

    @cached_property
    def keda_tuned(self) -> KedaHpaConfig:
        return tuned_keda(self.keda, self.autoscaling, self.concurrency)


def tuned_keda(stock: KedaHpaConfig, spec: AutoscalingSpec, concurrency: int) -> KedaHpaConfig:
    """KEDA as a careful platform engineer would set it for this pool: polling, scale-down stabilization
    and cooldown as Trawl's, and one worker's concurrency per pod as the list-length target. The HPA's
    sync period (a kube-controller-manager flag) and its rate policies stay as they are."""
    return replace(
        stock,
        list_length=float(concurrency),
        polling_interval=float(spec.poll_seconds),
        scale_down_stabilization=float(spec.scale_down_delay_seconds),
        cooldown_period=float(spec.idle_seconds_before_zero),
    )


@dataclass
class Sample:
    t: float
    replicas: int  # pods that exist (starting, serving or draining)
    desired: int  # the Deployment's spec.replicas
    ready: int
    delayed: int
    in_flight: int


@dataclass
class Result:
    trace: str
    policy: str
    tasks: int
    started: int
    waits: list[float]  # beyond the earliest start the domain's rate limit allows (see polite_waits)
    raw_waits: list[float]  # enqueue -> first start, politeness included
    replica_seconds: float
    failing_replica_seconds: float
    scale_changes: int
    scale_ups_while_failing: int
    interrupted: int
    dead: int
    completed: int
    attempts_while_failing: int  # requests sent to the downstream while it fails
    samples: list[Sample]
    reasons: list[tuple[float, int, str]]

    @property
    def mean_wait(self) -> float:
        return sum(self.waits) / len(self.waits) if self.waits else 0.0

    @property
    def p95_wait(self) -> float:
        return percentile(self.waits, 0.95)

    @property
    def p95_raw_wait(self) -> float:
        return percentile(self.raw_waits, 0.95)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    s = sorted(values)
    k = min(len(s) - 1, max(0, math.ceil(q * len(s)) - 1))
    return s[k]


class _Task:
    __slots__ = (
        "attempt",
        "domain",
        "duration",
        "enqueued",
        "failing",
        "fails",
        "id",
        "reserved",
        "run",
        "services",
        "started",
    )

    def __init__(self, tid: int, enqueued: float, domain: int, services: list[float], fails: list[float]) -> None:
        self.id = tid
        self.enqueued = enqueued
        self.domain = domain
        self.services = services
        self.fails = fails
        self.attempt = 1
        self.started: float | None = None
        self.reserved = False
        self.run = 0  # bumps on every start, so a stale finish event is recognised
        self.failing = False  # the current attempt will fail (decided when it starts)
        self.duration = 0.0  # the current attempt's duration


class _Pod:
    __slots__ = ("created", "draining", "id", "ready_at", "serving", "tasks")

    def __init__(self, pid: int, created: float, ready_at: float) -> None:
        self.id = pid
        self.created = created
        self.ready_at = ready_at
        self.serving = False
        self.draining = False
        self.tasks: dict[int, _Task] = {}


POLICIES = ("trawl", "keda_stock", "keda_tuned", "static_max")

# Event kinds, in tie-break order at equal times.
_ARRIVAL, _DUE, _FINISH, _POD_READY, _DRAIN_END, _TRAWL, _KEDA, _HPA, _SAMPLE = range(9)


class Simulation:
    def __init__(self, trace: Trace, pool: PoolConfig, policy: str, seed: int) -> None:
        if policy not in POLICIES:
            raise ValueError(policy)
        self.trace, self.pool, self.policy = trace, pool, policy
        self.rng = random.Random(seed * 7919 + 1)
        self.phase = random.Random(f"{trace.name}/{seed}")  # where each poll loop starts in its period
        task_rng = random.Random(seed * 104729 + 2)
        mu = math.log(trace.service_mean) - trace.service_sigma**2 / 2
        self.tasks = [
            _Task(
                i,
                t,
                d,
                # exp(gauss) is lognormvariate at a third of the cost (the largest share of a run's time).
                [math.exp(task_rng.gauss(mu, trace.service_sigma)) for _ in range(pool.max_attempts)],
                [task_rng.random() for _ in range(pool.max_attempts)],
            )
            for i, (t, d) in enumerate(trace.arrivals)
        ]
        self.jitter = [task_rng.uniform(-1, 1) for _ in range(pool.max_attempts)]
        self.events: list[tuple[float, int, int, object]] = []
        self.seq = 0
        self.now = 0.0
        self.ready: deque[_Task] = deque()
        self.delayed = 0
        self.delayed_due: list[float] = []  # due times of delayed tasks (heap), for "due soon"
        self.pods: dict[int, _Pod] = {}
        self.next_pod = 0
        self.spec_replicas = 0
        self.token: dict[int, float] = {}
        self.outstanding: dict[int, int] = {}
        self.completed = self.failed = self.dead = self.interrupted = 0
        self.service_total = 0.0
        self.started = 0
        self.area = self.fail_area = 0.0
        self.last_t = 0.0
        self.scale_changes = self.fail_scaleups = self.fail_attempts = 0
        self.samples: list[Sample] = []
        self.reasons: list[tuple[float, int, str]] = []
        self.state: PoolScalerState | None = None
        self.cordoned: frozenset[str] = frozenset()  # Trawl's workers that claim no new tasks
        self.startups: list[tuple[str, float]] = []  # pods that became ready since the last Trawl poll
        self.schedule = PassSchedule()  # Trawl's passes: regular, follow-up (rule 10) or burst (rule 11)
        self.enqueued = 0  # new tasks so far: the queue's enqueue counter
        self.keda = KedaHpaModel(pool.keda_tuned if policy == "keda_tuned" else pool.keda)

    # -- event plumbing -------------------------------------------------------------------------
    def _push(self, t: float, kind: int, payload: object = None) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, payload))

    def _advance(self, t: float) -> None:
        n = len(self.pods)
        dt = t - self.last_t
        if dt > 0:
            self.area += n * dt
            if self.trace.fail_windows:
                for start, end, _ in self.trace.fail_windows:
                    lo, hi = max(start, self.last_t), min(end, t)
                    if hi > lo:
                        self.fail_area += n * (hi - lo)
        self.last_t = t
        self.now = t

    # -- pool mechanics -------------------------------------------------------------------------
    def _free_pods(self) -> list[_Pod]:
        c = self.pool.concurrency
        return [
            p
            for p in self.pods.values()
            if p.serving and not p.draining and len(p.tasks) < c and str(p.id) not in self.cordoned
        ]

    def _dispatch(self) -> None:
        if not self.ready:
            return
        free = self._free_pods()
        c = self.pool.concurrency
        while self.ready and free:
            pod = free[self.rng.randrange(len(free))] if len(free) > 1 else free[0]
            task = self.ready.popleft()
            rps = self.trace.domain_rps.get(task.domain)
            if rps is not None and not task.reserved:
                start = max(self.now, self.token.get(task.domain, 0.0))
                self.token[task.domain] = start + 1.0 / rps
                if start - self.now > 0.01:
                    task.reserved = True  # released with a delay: not before its token
                    self._delay(task, start)
                    continue
            task.reserved = False
            self._start(pod, task)
            if len(pod.tasks) >= c:
                free.remove(pod)

    def _delay(self, task: _Task, due: float) -> None:
        self.delayed += 1
        heapq.heappush(self.delayed_due, due)
        self._push(due, _DUE, task)

    def _start(self, pod: _Pod, task: _Task) -> None:
        if task.started is None:
            task.started = self.now
            self.started += 1
        task.run += 1
        if self.trace.fail_windows and self.trace.failing(self.now):
            self.fail_attempts += 1
        pod.tasks[task.id] = task
        task.failing = task.fails[task.attempt - 1] < self.trace.fail_probability(self.now)
        task.duration = task.services[task.attempt - 1] * (self.trace.fail_duration_factor if task.failing else 1.0)
        self._push(self.now + task.duration, _FINISH, (pod.id, task, task.run))

    def _finish(self, pod_id: int, task: _Task, run: int) -> None:
        pod = self.pods.get(pod_id)
        if pod is None or pod.tasks.get(task.id) is not task or task.run != run:
            return  # interrupted earlier
        del pod.tasks[task.id]
        self.service_total += task.duration
        if task.failing:
            self.failed += 1
            if task.attempt < self.pool.max_attempts:
                p = self.pool
                backoff = min(p.retry_max, p.retry_initial * 2 ** (task.attempt - 1))
                backoff *= 1 + p.retry_jitter * self.jitter[task.attempt - 1]
                task.attempt += 1
                self._delay(task, self.now + backoff)
            else:
                self.dead += 1
                self._done(task)
        else:
            self.completed += 1
            self._done(task)
        if pod.draining and not pod.tasks:
            self._remove(pod)
        self._dispatch()

    def _done(self, task: _Task) -> None:
        left = self.outstanding[task.domain] - 1
        if left:
            self.outstanding[task.domain] = left
        else:
            del self.outstanding[task.domain]

    def _remove(self, pod: _Pod) -> None:
        self.pods.pop(pod.id, None)

    def _alive(self) -> list[_Pod]:
        return [p for p in self.pods.values() if not p.draining]

    def _set_replicas(self, n: int, reason: str) -> None:
        if n == self.spec_replicas:
            return
        if n > self.spec_replicas and self.trace.failing(self.now):
            self.fail_scaleups += 1
        self.scale_changes += 1
        self.reasons.append((self.now, n, reason))
        self.spec_replicas = n
        alive = self._alive()
        if n > len(alive):
            for _ in range(n - len(alive)):
                pod = _Pod(self.next_pod, self.now, self.now + self.pool.startup_seconds)
                self.next_pod += 1
                self.pods[pod.id] = pod
                self._push(pod.ready_at, _POD_READY, pod.id)
            return
        for pod in self._victims(alive, len(alive) - n):
            if not pod.serving or not pod.tasks:
                self._remove(pod)
            else:
                pod.draining = True
                self._push(self.now + self.pool.drain_seconds, _DRAIN_END, pod.id)

    def _victims(self, alive: list[_Pod], count: int) -> list[_Pod]:
        # ReplicaSet ranking: not-ready pods first (newest first); then, for Trawl, the lower
        # pod-deletion-cost (the controller sets it to the pod's in-flight tasks); then the pod
        # that has been ready for the shortest time.
        def rank(p: _Pod) -> tuple[int, int, float]:
            cost = len(p.tasks) if self.policy == "trawl" else 0
            return (1 if p.serving else 0, cost, -p.ready_at)

        return sorted(alive, key=rank)[:count]

    def _drain_end(self, pod_id: int) -> None:
        pod = self.pods.get(pod_id)
        if pod is None:
            return
        for task in pod.tasks.values():
            self.interrupted += 1
            task.run += 1
            task.reserved = False
            self.ready.append(task)  # released: back to the queue without spending an attempt
        pod.tasks.clear()
        self._remove(pod)
        self._dispatch()

    # -- autoscalers ----------------------------------------------------------------------------
    def _signals(self) -> PoolSignals:
        horizon = self.now + self.pool.due_soon_seconds
        due_soon = sum(1 for d in self.delayed_due if d <= horizon)
        workers = {
            str(p.id): WorkerActivity(str(p.id), len(p.tasks), self.now, p.draining)
            for p in self.pods.values()
            if p.serving
        }
        in_flight = sum(len(p.tasks) for p in self.pods.values())
        return PoolSignals(
            ready=len(self.ready),
            delayed=self.delayed,
            delayed_due_soon=due_soon,
            in_flight=in_flight,
            dead=self.dead,
            completed_total=self.completed,
            failed_total=self.failed,
            service_seconds_total=self.service_total,
            workers=workers,
            time=self.now,
        )

    def _jobs(self) -> list[dict[str, Any]]:
        """Job-index entries as the controller sees them: a rate-limited domain is one job with that
        host and its politeness; the rest is one job over too many hosts to bound (no ceiling)."""
        jobs: list[dict[str, Any]] = []
        other = 0
        for domain, n in self.outstanding.items():
            rps = self.trace.domain_rps.get(domain)
            if rps is None:
                other += n
                continue
            politeness = {"requestsPerSecond": rps, "maxConcurrencyPerDomain": 1000}
            jobs.append({"waiting": n, "hosts": [f"d{domain}.example"], "politeness": politeness})
        if other:
            jobs.append({"waiting": other, "hosts": None, "politeness": {}})
        return jobs

    def _trawl_tick(self) -> None:
        """The controller's pool timer: a scheduled pass when one is due, else a burst pass when the
        enqueue counter shows one (:mod:`trawl.autoscale.schedule`)."""
        if self.schedule.regular_due(self.now, self.pool.autoscaling.poll_seconds):
            self._trawl_poll(scheduled=True)
        elif self.schedule.burst_due(self.now, self.enqueued):
            self._trawl_poll(scheduled=False)
        self._push(self.now + TICK_SECONDS, _TRAWL)

    def _trawl_poll(self, *, scheduled: bool) -> None:
        self.schedule = self.schedule.started(self.now, scheduled=scheduled)
        result = plan(
            self.pool.spec,
            self._signals(),
            self.spec_replicas,
            self.state,
            jobs=self._jobs(),
            pod_startups=self.startups,
        )
        self.startups = []
        self.state = result.state
        self.cordoned = result.cordoned
        self.schedule = self.schedule.decided(
            self.now,
            follow_up=result.decision.follow_up,
            enqueued=self.enqueued,
            arrival_rate=result.rates.arrival_rate,
            concurrency=self.pool.concurrency,
        )
        self._set_replicas(result.decision.desired, result.decision.reason)
        self._dispatch()  # to workers no longer cordoned

    def _keda_poll(self) -> None:
        n = self.keda.keda_poll(self.now, len(self.ready), self.spec_replicas)
        if n is not None:
            self._set_replicas(n, f"KEDA {'activation' if n else 'cooldown to zero'}, list length {len(self.ready)}")
        self._push(self.now + self.keda.config.polling_interval, _KEDA)

    def _hpa_sync(self) -> None:
        n = self.keda.hpa_sync(self.now, len(self.ready), self.spec_replicas)
        if n is not None:
            self._set_replicas(n, f"HPA, list length {len(self.ready)}")
        self._push(self.now + self.keda.config.hpa_sync_period, _HPA)

    # -- run ------------------------------------------------------------------------------------
    def run(self) -> Result:
        for task in self.tasks:
            self._push(task.enqueued, _ARRIVAL, task)
        phase = self.phase
        if self.policy == "trawl":
            self._push(phase.uniform(0, self.pool.autoscaling.poll_seconds), _TRAWL)
        elif self.policy == "static_max":
            # Reference, not an autoscaler: maxReplicas pods, already serving, all the time. No policy
            # limited to maxReplicas can wait less (it is the bound the bench's wait ratios face).
            for _ in range(self.pool.autoscaling.max_replicas):
                pod = _Pod(self.next_pod, 0.0, 0.0)
                pod.serving = True
                self.next_pod += 1
                self.pods[pod.id] = pod
            self.spec_replicas = len(self.pods)
        else:
            self._push(phase.uniform(0, self.keda.config.polling_interval), _KEDA)
            self._push(phase.uniform(0, self.keda.config.hpa_sync_period), _HPA)
        self._push(0.0, _SAMPLE)
        end = self.trace.duration
        handlers: dict[int, Callable[[object], None]] = {
            _ARRIVAL: self._on_arrival,
            _DUE: self._on_due,
            _FINISH: self._on_finish,
            _POD_READY: self._on_pod_ready,
            _DRAIN_END: lambda p: self._drain_end(p),  # type: ignore[arg-type]
            _TRAWL: lambda _: self._trawl_tick(),
            _KEDA: lambda _: self._keda_poll(),
            _HPA: lambda _: self._hpa_sync(),
            _SAMPLE: lambda _: self._sample(),
        }
        while self.events and self.events[0][0] <= end:
            t, kind, _, payload = heapq.heappop(self.events)
            self._advance(t)
            handlers[kind](payload)
        self._advance(end)
        raw, waits = polite_waits(self.tasks, self.trace.domain_rps, end)
        return Result(
            trace=self.trace.name,
            policy=self.policy,
            tasks=len(self.tasks),
            started=self.started,
            waits=waits,
            raw_waits=raw,
            replica_seconds=self.area,
            failing_replica_seconds=self.fail_area,
            scale_changes=self.scale_changes,
            scale_ups_while_failing=self.fail_scaleups,
            interrupted=self.interrupted,
            dead=self.dead,
            completed=self.completed,
            attempts_while_failing=self.fail_attempts,
            samples=self.samples,
            reasons=self.reasons,
        )

    def _on_arrival(self, payload: object) -> None:
        task = payload
        assert isinstance(task, _Task)
        self.outstanding[task.domain] = self.outstanding.get(task.domain, 0) + 1
        self.enqueued += 1
        self.ready.append(task)
        self._dispatch()

    def _on_due(self, payload: object) -> None:
        task = payload
        assert isinstance(task, _Task)
        self.delayed -= 1
        heapq.heappop(self.delayed_due)
        self.ready.appendleft(task) if task.reserved else self.ready.append(task)
        self._dispatch()

    def _on_finish(self, payload: object) -> None:
        assert isinstance(payload, tuple)
        pod_id, task, run = payload
        self._finish(int(pod_id), task, int(run))

    def _on_pod_ready(self, payload: object) -> None:
        assert isinstance(payload, int)
        pod = self.pods.get(payload)
        if pod is not None:
            pod.serving = True
            if self.policy == "trawl":
                self.startups.append((str(pod.id), pod.ready_at - pod.created))
            self._dispatch()

    def _sample(self) -> None:
        self.samples.append(
            Sample(
                self.now,
                len(self.pods),
                self.spec_replicas,
                len(self.ready),
                self.delayed,
                sum(len(p.tasks) for p in self.pods.values()),
            )
        )
        self._push(self.now + self.pool.sample_seconds, _SAMPLE)


def polite_waits(tasks: list[_Task], domain_rps: dict[int, float], end: float) -> tuple[list[float], list[float]]:
    """Each task's wait (enqueue -> first start), raw and beyond what politeness imposes.

    A domain limited to r req/s cannot start its k-th task before ``e_k = max(enqueued_k, e_(k-1) + 1/r)``
    (tasks in enqueue order) even with unlimited workers: that part of the wait is the site's rate
    limit, the same under every autoscaler. The k-th start on the domain is compared with ``e_k``.
    Tasks never started are censored at ``end``.
    """
    raw: list[float] = []
    polite: list[float] = []
    limited: dict[int, list[_Task]] = {}
    for t in tasks:
        start = t.started if t.started is not None else end
        raw.append(start - t.enqueued)
        if t.domain in domain_rps:
            limited.setdefault(t.domain, []).append(t)
        else:
            polite.append(start - t.enqueued)
    for domain, group in limited.items():
        gap = 1.0 / domain_rps[domain]
        earliest: list[float] = []
        prev = -math.inf
        for t in sorted(group, key=lambda t: t.enqueued):
            prev = max(t.enqueued, prev + gap)
            earliest.append(prev)
        starts = sorted(t.started if t.started is not None else end for t in group)
        polite.extend(max(0.0, s - e) for s, e in zip(starts, earliest, strict=True))
    return raw, polite


def simulate(trace: Trace, pool: PoolConfig, policy: str, seed: int = 1) -> Result:
    if trace.drain_seconds is not None:  # the workload's grace period, for every policy's pods
        pool = replace(pool, drain_seconds=trace.drain_seconds)
    return Simulation(trace, pool, policy, seed).run()
