"""The scaling policy: observation + spec + state in, desired replicas + reason + next state out.

Pure and deterministic: no clock, no I/O. Everything that must survive between calls is in
:class:`ScalerState`, which the caller passes back unchanged on the next call.

:func:`decide` runs named steps: the targets (:func:`_targets`: what the work asks for, bounded), the
moves no weighing applies to (:func:`_bounds_and_zero`), then the upward (:func:`_up`) or the downward
decision (:func:`_down`), and last the next state (:func:`_next_state`) and the :class:`Decision`.

Rules, in the order they apply (each is covered by tests/unit/test_autoscale_policy.py; each rule's
text is the docstring of the function named first):

1. **Need**: :func:`_need` (its drain answer :func:`_drain_workers`, its arrivals answer
   :func:`_steady_workers` with :func:`_arrival_workers`).
2. **Useful parallelism**: :func:`_useful`; the rate-limit ceiling in :func:`_targets`.
3. **In-flight is counted**: :func:`_busy_floor`.
4. **Failure guard**: :func:`_up`; engaged and released by :func:`_failure_guard`; retries do not grow
   the pool: :func:`_retries_alone`.
5. **Up fast, down slow**: :func:`_down`; its window :func:`_window`, kept by :func:`_next_state`.
6. **Bounds**: :func:`_bounds_and_zero`; applied to the targets by :func:`_bounded`.
7. **Zero**: :func:`_bounds_and_zero`; the worker kept before zero by :func:`_floor`.
8. **Cordon**: :func:`_cordon`.
9. **Packing**: :func:`_packing`; its step down in :func:`_down`.
10. **Follow-up**: :func:`_follow_up`; the hold for first results in :func:`_first_results_hold`.
11. **Burst**: outside the policy, :meth:`trawl.autoscale.schedule.PassSchedule.burst_due` (the rule is
    in that module's docstring, with rule 10's timing).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum

from trawl.api.scrapepool import AutoscalingSpec

# Hysteresis of the failure guard: released when the failure rate drops below this share of the threshold.
GUARD_RELEASE_SHARE = 0.8
# Cold start (nothing measured): grow at most to max(2 * current, current + COLD_START_STEP) per poll.
COLD_START_STEP = 4
# Tasks longer than this share of the worker's drain period may not finish when their pod is removed.
DRAIN_SAFE_SHARE = 1 / 3
# A scale-down step removes at least this share of the pool and MIN_DOWN_WORKERS (or reaches its floor):
# fewer, larger steps, each one Event and one ReplicaSet change, instead of one pod per poll.
MIN_DOWN_SHARE = 0.2
MIN_DOWN_WORKERS = 2
# ... and comes at least this share of scaleDownDelaySeconds after the previous change.
DOWN_SPACING_SHARE = 0.25
# The drain answer (rule 1) rounds down within this share of one worker of a whole number.
DRAIN_TOLERANCE = 0.1
# A scale-up while new tasks wait is looked at again this soon (rule 10): a burst still arriving.
FOLLOW_UP_SECONDS = 1.0
# The arrivals answer (rule 1) grows the pool only if the arrival rate less this many standard errors of
# its moving average (Poisson noise) still asks for it: at the edge of a worker the noise alone must not.
ARRIVAL_NOISE_SIGMAS = 1.0


class Action(StrEnum):
    """What the decision does, as a CamelCase reason for Events and conditions."""

    SCALE_UP = "ScaleUp"
    SCALE_DOWN = "ScaleDown"
    ACTIVATE = "Activate"
    SCALE_TO_ZERO = "ScaleToZero"
    HOLD = "Hold"
    SCALE_DOWN_PENDING = "ScaleDownPending"
    FAILURE_GUARD = "FailureGuard"
    DISABLED = "Disabled"


@dataclass(frozen=True, slots=True)
class Observation:
    """What the policy knows about the pool at one poll. Times are seconds on any one clock."""

    now: float
    current_replicas: int  # the Deployment's spec.replicas
    ready: int = 0
    delayed_due_soon: int = 0
    in_flight: int = 0
    busy_workers: int = 0  # workers (not draining) that hold in-flight tasks
    arrival_rate: float = 0.0  # attempts/s entering the queue
    per_worker_throughput: float | None = None  # attempts/s of one saturated worker, if measured
    mean_service_seconds: float | None = None  # mean attempt duration, if measured
    failure_rate: float | None = None  # share of recent attempts that failed, if any finished
    rate_limit_ceiling_replicas: int | None = None  # most workers per-domain limits let do useful work
    concurrency: int = 32  # task slots per worker (spec.worker.concurrency)
    drain_seconds: float = 30.0  # the workers' SIGTERM drain (spec.worker.drainSeconds)
    serving_workers: int | None = None  # workers already reporting (None: assume all replicas serve)
    startup_seconds: float = 15.0  # how long a new pod takes to serve (measured by the controller)
    recent_attempts: int | None = None  # attempts finished since the previous poll (None: unknown)
    recent_failed: int | None = None  # of those, failed attempts
    recent_arrival_rate: float | None = None  # attempts/s that arrived since the previous poll (None: unknown)
    retry_rate: float = 0.0  # failed attempts/s (smoothed): the share of arrival_rate that is retries
    arrival_rate_stderr: float = 0.0  # standard error of arrival_rate (Poisson noise of its moving average)
    worker_loads: tuple[int, ...] = ()  # in-flight tasks of each serving worker (empty: none reported, none packed)

    @property
    def backlog(self) -> int:
        """Tasks waiting for a slot (ready, or delayed and due soon)."""
        return self.ready + self.delayed_due_soon

    @property
    def work(self) -> int:
        return self.ready + self.delayed_due_soon + self.in_flight


@dataclass(frozen=True, slots=True)
class ScalerState:
    """Everything the policy remembers between calls. Start with ``ScalerState()``."""

    last_change_at: float | None = None  # when the desired count last changed
    answers: tuple[tuple[float, int], ...] = ()  # (time, answer) of the last scaleDownDelaySeconds
    answers_since: float | None = None  # answers recorded since then (reset by a scale-up)
    backlog_polls: tuple[float, ...] = ()  # times (within the window) of answers given while a backlog waited
    released_at: float | None = None  # when a drained backlog last released the pool
    release_suspended: bool = False  # the pool grew again within a window of a release (recurring bursts)
    idle_since: float | None = None  # since when no work was seen
    guard_active: bool = False  # failure guard engaged (with hysteresis)
    follow_up: bool = False  # the next call is an early follow-up (rule 10: a scale-up, or a hold for results)
    untried_since: float | None = None  # since when the pool holds for new work's first results (rule 10)


@dataclass(frozen=True, slots=True)
class Decision:
    """The policy's answer. ``state`` must be passed to the next call."""

    desired: int
    current: int
    action: Action
    reason: str
    state: ScalerState
    need: int = 0  # what the work alone asks for, before bounds, guard and hysteresis
    at_max: bool = False  # the need exceeds maxReplicas
    rate_limited: bool = False  # the need exceeds what per-domain rate limits let workers use
    failure_guard: bool = False  # the failure guard is engaged
    notes: tuple[str, ...] = field(default_factory=tuple)
    cordon: int = 0  # workers kept only because they hold tasks: to stop claiming (rule 8)

    @property
    def follow_up(self) -> bool:
        """Poll again after :data:`FOLLOW_UP_SECONDS`, not ``pollSeconds`` (rule 10)."""
        return self.state.follow_up

    @property
    def changed(self) -> bool:
        return self.desired != self.current

    @property
    def limited(self) -> bool:
        """For the ScalingLimited condition."""
        return self.at_max or self.rate_limited


@dataclass(frozen=True, slots=True)
class _Targets:
    """What this poll's work asks for, bounded: the answers the upward and downward decisions weigh."""

    need: int  # the work alone (rules 1 and 2), before the ceiling, the busy floor and the bounds
    why: str  # the need's reason, the tail of every reason
    demand: int  # the work's answer (need under the rate-limit ceiling), bounded: what the window holds
    target: int  # the demand raised to the busy workers' floor (rule 3), bounded
    floor: int  # the fewest workers: minReplicas, or the one worker kept before zero (rule 7)
    to_zero: bool  # idle long enough to go to zero (rule 7)
    at_max: bool  # the target exceeded maxReplicas before the bounds
    rate_limited: bool  # the need exceeded the rate-limit ceiling
    notes: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class _Move:
    """What one step decided; :func:`decide` turns it into the :class:`Decision` and the next state."""

    desired: int
    action: Action
    reason: str
    release: bool = False  # a drained backlog released the pool (rule 5)
    cordon: int = 0  # workers to stop claiming (rules 8 and 9)
    look_again: bool = False  # a hold for first results asks for a follow-up (rule 10)
    untried_since: float | None = None  # since when the pool holds for new work's first results (rule 10)
    notes: tuple[str, ...] = ()  # notes that come before the targets' ones


def _capacity(obs: Observation) -> tuple[float | None, str]:
    if obs.per_worker_throughput is not None and obs.per_worker_throughput > 0:
        return obs.per_worker_throughput, f"{obs.per_worker_throughput:.3g}/s per worker measured"
    if obs.mean_service_seconds is not None and obs.mean_service_seconds > 0:
        mu = obs.concurrency / obs.mean_service_seconds
        return mu, f"{mu:.3g}/s per worker ({obs.concurrency} slots / {obs.mean_service_seconds:.3g}s per task)"
    return None, "no throughput measured yet"


def _arrival_rate(obs: Observation) -> float:
    """The arrival rate to size for: the moving average, or the last poll's rate where it is the better
    guess. While at least a worker's slots of new tasks wait (ready), the higher of the two (a burst is
    starting: the average trails it; fewer waiting is queueing noise); with nothing waiting, the lower
    (the burst is absorbed: the average still carries it for a while, and it must not hold workers the
    arrivals no longer need). Retries waiting for their backoff (delayed) are no burst: arrivals made of
    retries are a failing target's, so the average stays."""
    raw = obs.recent_arrival_rate
    if raw is None:
        return obs.arrival_rate
    if obs.ready >= obs.concurrency:
        return max(obs.arrival_rate, raw)
    if obs.backlog == 0:
        return min(obs.arrival_rate, raw)
    return obs.arrival_rate


def queue_wait_p95(servers: int, arrival_rate: float, service_rate: float) -> float:
    """p95 of the wait before service in an M/M/c queue (Erlang C): ``servers`` slots, each finishing
    ``service_rate`` tasks/s, ``arrival_rate`` tasks/s arriving. Infinite when the slots cannot keep up."""
    if arrival_rate <= 0:
        return 0.0
    load = arrival_rate / service_rate  # offered load in slots (erlangs)
    if load >= servers:
        return math.inf
    blocked = 1.0  # Erlang B, by its recurrence over the number of servers
    for k in range(1, servers + 1):
        blocked = load * blocked / (k + load * blocked)
    waits = blocked / (1.0 - load / servers * (1.0 - blocked))  # Erlang C: P(a task waits)
    if waits <= 0.05:
        return 0.0
    return math.log(waits / 0.05) / (servers * service_rate - arrival_rate)


def _arrival_workers(obs: Observation, lam: float, mu: float, budget: float) -> int:
    """Fewest workers whose slots keep the arrivals' queueing wait within ``budget`` seconds at p95."""
    if lam <= 0:
        return 0
    slot_rate = mu / obs.concurrency
    n = max(1, math.floor(lam / mu))
    while queue_wait_p95(n * obs.concurrency, lam, slot_rate) > budget:
        n += 1
    return n


def _steady_workers(spec: AutoscalingSpec, obs: Observation, lam: float, mu: float) -> int:
    """Rule 1's arrivals answer: :func:`_arrival_workers` within one ``pollSeconds``. Above the serving
    workers only when the rate less :data:`ARRIVAL_NOISE_SIGMAS` standard errors of its moving average
    asks for it too: at the edge of a worker (a pool at 94 % of one) the average wanders above the edge
    and back on Poisson noise alone, and each excursion would hold a second worker for a whole window.
    A real rise passes the margin within a poll or two, and a queue it builds is the drain answer's.
    The last poll's rate (a burst, :func:`_arrival_rate`) is taken as it is."""
    budget = float(spec.poll_seconds)
    n = _arrival_workers(obs, lam, mu, budget)
    serving = obs.current_replicas if obs.serving_workers is None else min(obs.serving_workers, obs.current_replicas)
    margin = ARRIVAL_NOISE_SIGMAS * obs.arrival_rate_stderr
    if n <= serving or margin <= 0 or lam != obs.arrival_rate:
        return n
    return max(serving, _arrival_workers(obs, max(0.0, lam - margin), mu, budget))


def _drain_workers(spec: AutoscalingSpec, obs: Observation, mu: float, lam: float) -> int:
    """Rule 1's drain answer: workers that finish the outstanding work and ``targetDrainSeconds`` of
    arrivals within ``targetDrainSeconds``."""
    t = float(spec.target_drain_seconds)
    # Work to finish within T: the backlog plus T seconds of arrivals.
    demand = obs.work + lam * t
    serving = obs.current_replicas if obs.serving_workers is None else min(obs.serving_workers, obs.current_replicas)
    drain = demand / (mu * t)  # workers that finish it in exactly T
    if drain <= serving + DRAIN_TOLERANCE:
        # Within a tenth of a worker of a whole number, the lower one: T is a target, not a deadline,
        # and a pool at 95 % of one worker must not flap to two on every noisy poll.
        return max(1, math.ceil(drain - DRAIN_TOLERANCE))
    # Pods not serving yet lose their start-up time from the drain window (at most 3/4 of it).
    late = t - min(obs.startup_seconds, 0.75 * t)
    return serving + math.ceil((demand - serving * mu * t) / (mu * late) - 1e-9)


def _useful(spec: AutoscalingSpec, obs: Observation, lam: float) -> int:
    """**Rule 2, useful parallelism.** Never more workers than the work can keep busy:
    ``ceil(W / concurrency)`` plus the arrivals until a worker asked for at the next poll could serve
    (``pollSeconds`` + start-up: only workers asked for now can take them), and never above the
    rate-limit ceiling the caller computes from per-domain limits (the ceiling caps growth; it never
    removes workers that hold tasks).

    This is the first half, which bounds :func:`_need`; :func:`_targets` applies the ceiling, before
    the busy workers' floor (rule 3)."""
    # Workers beyond ceil(work / slots) would sit idle: the most this backlog can use right now, plus
    # the tasks that arrive before a worker asked for at the next poll could serve.
    return math.ceil((obs.work + lam * _arrivals_horizon(spec, obs)) / obs.concurrency - 1e-9)


def _need(spec: AutoscalingSpec, obs: Observation) -> tuple[int, str]:
    """**Rule 1, need.** Two answers, the larger counts. *Drain*: outstanding work ``W = ready + delayed
    due soon + in flight`` plus ``T`` seconds of arrivals (λ) must be done within ``targetDrainSeconds``
    (T) at μ tasks/s per worker: ``ceil((W + λ·T) / (μ·T))`` when the serving workers suffice
    (within :data:`DRAIN_TOLERANCE` of a worker above a whole number it rounds down, as the HPA's
    tolerance does: a pool at 95 % of one worker must not flap to two on a noisy poll); otherwise
    workers not serving yet count only for ``T - startup``. *Arrivals*: the fewest workers
    whose slots (``concurrency`` each, a slot finishing μ/concurrency tasks/s) keep the p95 queueing
    wait of λ within one ``pollSeconds`` (M/M/c, Erlang C): a longer wait would be a backlog at the next
    poll, which the drain answer sizes. μ is the per-worker throughput measured under saturation
    (:mod:`trawl.autoscale.rates`: it ages toward the current work's ``concurrency / mean service
    time`` between measurements), else that Little's-law value; with no measurement at all the answer
    is a bounded guess: at most max(2 x current, current + 4), and no growth while pods asked for
    earlier are still starting (they will bring the measurement). λ is a 15 s moving average, or the
    last poll's rate where that is the better guess: the higher of the two while new tasks wait (a
    burst is starting), the lower when nothing waits (the burst is absorbed; retries waiting for
    their backoff keep the average).

    Returns the workers the work asks for, bounded by useful parallelism (rule 2) but not yet by
    min/max, and the reason."""
    work = obs.work
    if work == 0 and obs.arrival_rate <= 0:
        return 0, "no work"
    mu, how = _capacity(obs)
    lam = _arrival_rate(obs)
    useful = _useful(spec, obs, lam)
    if mu is None:
        starting = obs.serving_workers is not None and obs.serving_workers < obs.current_replicas
        bound = (
            obs.current_replicas if starting else max(2 * obs.current_replicas, obs.current_replicas + COLD_START_STEP)
        )
        bound = max(bound, 1)
        need = min(useful, bound)
        return need, f"{how}: bounded guess {need} for {work} tasks ({obs.concurrency} slots each)"
    # The arrivals alone: as many workers as keep their queueing wait within one poll at p95 (a longer
    # wait is a backlog at the next poll, which the drain sizing answers).
    steady = _steady_workers(spec, obs, lam, mu)
    need = min(useful, max(_drain_workers(spec, obs, mu, lam), steady))
    return need, (
        f"{work} tasks (ready {obs.ready}, due {obs.delayed_due_soon}, in flight {obs.in_flight}), "
        f"{lam:.3g}/s arriving, {how}: {need} workers drain it within {float(spec.target_drain_seconds):g}s"
    )


def _may_outlive_drain(obs: Observation) -> bool:
    """Whether tasks may outlive the workers' SIGTERM drain: their mean service time is above
    :data:`DRAIN_SAFE_SHARE` of ``drainSeconds``, or unknown (rules 3 and 8)."""
    return obs.mean_service_seconds is None or obs.mean_service_seconds > DRAIN_SAFE_SHARE * obs.drain_seconds


def _busy_floor(obs: Observation) -> int:
    """**Rule 3, in-flight is counted.** Workers holding tasks are never counted out while tasks wait for
    a worker (ready), or while tasks may outlive the workers' SIGTERM drain (mean service time above a
    third of ``drainSeconds``, or unknown): the answer is at least the number of busy workers. Retries
    waiting for their backoff are not waiting for a worker: a failing site's retries must not pin the
    pool.

    Returns that floor (delayed tasks due soon wait for their time, not for a worker: they are in the
    drain answer's work)."""
    if obs.in_flight <= 0:
        return 0
    protect = math.ceil(obs.in_flight / obs.concurrency)
    if obs.ready > 0 or _may_outlive_drain(obs):
        protect = max(protect, obs.busy_workers)
    return protect


def _idle_since(obs: Observation, st: ScalerState) -> float | None:
    """Since when no work was seen (None: work now), the clock of rule 7."""
    if obs.work != 0:
        return None
    return st.idle_since if st.idle_since is not None else obs.now


def _floor(spec: AutoscalingSpec, obs: Observation, idle_since: float | None) -> tuple[int, bool]:
    """The fewest workers, and whether the pool is idle long enough to go to zero (rule 7): minReplicas;
    with minReplicas 0, one worker until no work was seen for ``idleSecondsBeforeZero`` (and one on the
    first task)."""
    if spec.min_replicas != 0:
        return spec.min_replicas, False
    work = obs.work
    idle_for = obs.now - idle_since if idle_since is not None else 0.0
    if work > 0 or idle_since is None or idle_for < spec.idle_seconds_before_zero:
        return (1 if (work > 0 or obs.current_replicas > 0) else 0), False
    return 0, True


def _bounded(spec: AutoscalingSpec, floor: int, answer: int) -> int:
    """``answer`` within the floor and ``maxReplicas`` (rule 6)."""
    return max(floor, min(spec.max_replicas, answer))


def _targets(spec: AutoscalingSpec, obs: Observation, idle_since: float | None) -> _Targets:
    """What this poll's work asks for (rules 1 and 2), under the rate-limit ceiling (rule 2), raised to
    the busy workers' floor (rule 3) and bounded (rules 6 and 7). The ceiling caps the work's answer
    before the floor, so it never removes workers that hold tasks."""
    current = obs.current_replicas
    need, why = _need(spec, obs)
    notes: list[str] = []
    answer = need
    if obs.work == 0 and answer > current:
        # Nothing outstanding means the workers keep up with arrivals: a smoothed arrival rate left
        # over from a finished burst must not grow an idle pool.
        answer = current
        why = f"no work outstanding: {current} workers keep up ({why})"
    rate_limited = False
    if obs.rate_limit_ceiling_replicas is not None and answer > obs.rate_limit_ceiling_replicas:
        answer = obs.rate_limit_ceiling_replicas
        rate_limited = True
        notes.append(f"capped at {answer} by per-domain rate limits")
    target = answer  # the answer is what the work asks for; the scale-down window is kept over these
    busy = _busy_floor(obs)
    if busy > target:
        target = busy
        notes.append(f"{obs.busy_workers} workers hold {obs.in_flight} tasks")
    at_max = target > spec.max_replicas
    floor, to_zero = _floor(spec, obs, idle_since)
    if at_max:
        notes.append(f"at maxReplicas {spec.max_replicas}")
    return _Targets(
        need=need,
        why=why,
        demand=_bounded(spec, floor, answer),
        target=_bounded(spec, floor, target),
        floor=floor,
        to_zero=to_zero,
        at_max=at_max,
        rate_limited=rate_limited,
        notes=tuple(notes),
    )


def _retries_alone(spec: AutoscalingSpec, obs: Observation, idle_since: float | None) -> bool:
    """Rule 4's companion: **retries do not grow the pool.** A growth the work asks for only with the
    retries counted (those due soon, and the failed attempts' share of the arrival rate) is held: they
    are a failing target's, and slow failures show in the failure rate only after the pool has grown
    into them (a pool at the edge of a worker, seconds into an outage of 1.5 s timeouts). Only while
    attempts fail (since the last poll): a recovered target's retries are work like any. Retries still
    count in the answers that hold the pool."""
    if not obs.recent_failed or (obs.delayed_due_soon <= 0 and obs.retry_rate <= 0):
        return False  # no attempt failed since the last poll: the retries left are a recovered target's
    raw = obs.recent_arrival_rate
    fresh = replace(
        obs,
        delayed_due_soon=0,
        arrival_rate=max(0.0, obs.arrival_rate - obs.retry_rate),
        recent_arrival_rate=None if raw is None else max(0.0, raw - obs.retry_rate),
    )
    return _targets(spec, fresh, idle_since).target <= obs.current_replicas


def _failure_guard(spec: AutoscalingSpec, failure_rate: float | None, active: bool) -> bool:
    """Whether rule 4's failure guard holds: engaged above ``failureRateThreshold``, released below
    :data:`GUARD_RELEASE_SHARE` of it; unchanged while no attempt finished."""
    if failure_rate is None:
        return active
    if active:
        return failure_rate >= spec.failure_rate_threshold * GUARD_RELEASE_SHARE
    return failure_rate > spec.failure_rate_threshold


def _bounds_and_zero(
    spec: AutoscalingSpec, obs: Observation, targets: _Targets, idle_since: float | None
) -> _Move | None:
    """**Rule 6, bounds.** ``minReplicas`` and ``maxReplicas`` are hard: below min goes up at once (also
    during the failure guard), above max (after max was lowered) goes down at once.

    **Rule 7, zero.** With ``minReplicas = 0`` the pool keeps one worker until it has seen no work for
    ``idleSecondsBeforeZero``, then goes to zero; at zero, the first task activates one worker at once
    (``minReplicas`` if higher), and later polls size the pool once that worker serves and measures
    (a failing target is caught by the failure guard before the pool grows).

    The moves no weighing applies to: from zero, above max, to zero (None: none of them). Below min
    the bounded target is above the pool, and :func:`_up` grows it whatever the guard."""
    current, work = obs.current_replicas, obs.work
    if current == 0:
        if work > 0:
            # One worker first: nothing is known yet about how the new work's targets respond, so
            # sizing waits for the next poll's measurement (and the failure guard) before growing.
            desired = max(1, spec.min_replicas)
            return _Move(desired, Action.ACTIVATE, f"activating: {work} tasks waiting and no workers; {targets.why}")
        if spec.min_replicas > 0:
            return _Move(spec.min_replicas, Action.SCALE_UP, f"scaling up to minReplicas {spec.min_replicas}")
        return _Move(0, Action.HOLD, "idle at zero")
    if current > spec.max_replicas:
        # maxReplicas is a hard limit (it was lowered): no delay; the drain covers busy workers.
        return _Move(spec.max_replicas, Action.SCALE_DOWN, f"scaling down {current}→{spec.max_replicas}: maxReplicas")
    if targets.to_zero and obs.in_flight == 0:
        now = obs.now
        return _Move(0, Action.SCALE_TO_ZERO, f"no work for {now - (idle_since or now):.0f}s: scaling to zero")
    return None


def _first_results_hold(spec: AutoscalingSpec, obs: Observation, st: ScalerState, guard: bool) -> _Move | None:
    """Rule 4's companion (no growth on work nobody has tried): while new tasks wait and no attempt has
    finished, the pool holds for the running workers' first results, so a target that fails fast engages
    the failure guard before the pool grows into it; looked at again as rule 10 says."""
    current = obs.current_replicas
    # Work without results yet: nothing runs, or the pool was idle on the last poll, so what runs
    # was claimed since (a worker's first claim of a new job can land just before this poll).
    was_idle = st.idle_since is not None
    untried = obs.recent_attempts == 0 and obs.ready > 0 and (obs.in_flight == 0 or was_idle)
    if not untried or guard or current < max(1, spec.min_replicas):
        return None
    since = st.untried_since if st.untried_since is not None else obs.now
    return _Move(
        current,
        Action.HOLD,
        f"holding at {current}: {obs.ready} new tasks without results yet, sizing once they have",
        # Every second until results come (a long pollSeconds must not wait), for as long as a
        # first result can take to come from a pod started now; after that the regular polls.
        look_again=obs.now - since < float(spec.poll_seconds) + obs.startup_seconds,
        untried_since=since,
    )


def _up(spec: AutoscalingSpec, obs: Observation, st: ScalerState, targets: _Targets, guard: bool) -> _Move:
    """**Rule 4, failure guard.** While the failure rate exceeds ``failureRateThreshold`` (released below
    80 % of it), the answer never rises above the current replicas (nor below minReplicas): more workers
    would only hit a failing target harder. Scaling down still works. A pool at zero may still activate
    one worker (or minReplicas).

    The upward decision (the target is above the pool): the holds of rule 4 and its companions, else
    the target at once (rule 5: up fast). A hold notes the need it holds below."""
    current, target = obs.current_replicas, targets.target
    held = (f"need {target}",)
    first_results = _first_results_hold(spec, obs, st, guard)
    if first_results is not None:
        return replace(first_results, notes=held)
    recent_bad = (
        obs.recent_attempts is not None
        and obs.recent_attempts > 0
        and (obs.recent_failed or 0) / obs.recent_attempts > spec.failure_rate_threshold * GUARD_RELEASE_SHARE
    )
    if recent_bad and not guard and current >= max(1, spec.min_replicas):
        # The poll's own attempts failed above the guard's release level: the smoothed rate may
        # still carry earlier successes (and slow failures show late), so do not grow on this poll.
        reason = f"holding at {current}: {obs.recent_failed} of the last poll's {obs.recent_attempts} attempts failed"
        return _Move(current, Action.HOLD, reason, notes=held)
    if guard and current >= spec.min_replicas:
        fr = obs.failure_rate
        fr_txt = f"{fr:.0%}" if fr is not None else "unknown"
        return _Move(
            current,
            Action.FAILURE_GUARD,
            f"holding at {current}: failure rate {fr_txt} above {spec.failure_rate_threshold:.0%}, "
            "more workers would only hit a failing target harder",
            notes=held,
        )
    return _Move(target, Action.SCALE_UP, f"scaling up {current}→{target}: {targets.why}")


@dataclass(frozen=True, slots=True)
class _Window:
    """Rule 5's window at one poll."""

    answers: tuple[int, ...]  # the answers that hold the pool (those given while a drained backlog waited left out)
    wait: float  # seconds until the window lets the pool step down (<= 0: now)
    drained: bool  # a drained backlog releases the pool at this poll


def _window(spec: AutoscalingSpec, obs: Observation, st: ScalerState) -> _Window:
    """The answers of the last ``scaleDownDelaySeconds`` and how long until they allow a step down: a
    full window of answers after the last scale-up (or a restart), and a window after the last answer
    that needed the whole pool; a drained backlog releases the pool from both (rule 5)."""
    now, current = obs.now, obs.current_replicas
    delay = float(spec.scale_down_delay_seconds)
    recent = [(t, a) for t, a in st.answers if t > now - delay]
    since = st.answers_since if st.answers_since is not None else now
    wait = delay - (now - since)  # a full window of answers first (after a scale-up or a restart)
    # Drained: a backlog waited within the window but not at this poll nor the previous one (one empty
    # poll between two backlogs is not the end of a burst).
    drained = (
        not st.release_suspended
        and obs.backlog == 0
        and bool(st.backlog_polls)
        and bool(st.answers)
        and st.answers[-1][0] != st.backlog_polls[-1]
    )
    if drained:
        # The backlog those answers were sized to drain is gone: only the answers given without one
        # (what the arrivals ask for) hold the pool, and no full window is owed to the drained ones.
        drained_at = set(st.backlog_polls)
        recent = [(t, a) for t, a in recent if t not in drained_at]
        wait = 0.0
    high = [t for t, a in recent if a >= current]
    if high:
        wait = max(wait, max(high) + delay - now)
    return _Window(tuple(a for _, a in recent), wait, drained)


def _packing(spec: AutoscalingSpec, obs: Observation) -> tuple[int, int]:
    """**Rule 9, packing.** Where tasks are longer than a poll (or their length is unknown), a worker
    lives as long as the longest task it holds, so with no backlog new tasks go to the busiest workers,
    as few of them as have free slots for the arrivals expected before another worker could serve
    (``pollSeconds`` + start-up; at least one task), and the others are cordoned: idle ones stay empty
    instead of being pinned for minutes by the one task that happened to land on each, and the least
    busy empty sooner. The idle workers kept empty are not what the arrivals need, so they go at cost 0
    without waiting for the window's answers to fall, nor for rule 5's spacing after the previous
    change (two at a time at least: no task is drained, so the fifth of the pool rule 5 asks of a step
    does not apply, and the pods a burst's last scale-up brought up after the burst ended go as soon
    as they are seen idle).

    Returns the workers to cordon for packing, and how many of them are idle (:func:`_down` steps
    those down). Only workers that report their load can be cordoned, so without loads nothing is
    packed."""
    pinning = obs.mean_service_seconds is None or obs.mean_service_seconds > float(spec.poll_seconds)
    if not pinning or obs.backlog != 0:
        return 0, 0
    loads = sorted(obs.worker_loads, reverse=True)
    need = max(1.0, _arrival_rate(obs) * _arrivals_horizon(spec, obs))
    spare, keep = 0, 0
    while keep < len(loads) and spare < need:
        spare += max(0, obs.concurrency - loads[keep])
        keep += 1
    return len(loads) - keep, sum(1 for load in loads[keep:] if load == 0)


def _cordon(obs: Observation, targets: _Targets, window: _Window) -> int:
    """**Rule 8, cordon.** Where rule 3 keeps workers only because they hold tasks that may outlive the
    drain, and a full window has passed with no backlog waiting, the workers beyond the window's highest
    answer are cordoned (:attr:`Decision.cordon` says how many, :func:`choose_cordoned` which): they claim
    nothing new and finish what they hold, so new tasks go to the others and a cordoned worker empties
    and goes at the next step down (its pod-deletion-cost, its in-flight count, is then 0). Otherwise
    every worker would keep receiving new long tasks, none would ever be idle, and the pool would hold
    its size long after the work shrank. The cordon lifts as soon as the answers need those workers
    again (or a backlog waits).

    Returns how many (0 where the rule does not apply). :func:`choose_cordoned` takes idle workers
    first, so this count and packing's (rule 9) combine as their maximum."""
    if not _may_outlive_drain(obs) or obs.backlog != 0 or window.wait > 0:
        return 0
    keep = max(targets.floor, max((*window.answers, targets.demand)))
    return obs.current_replicas - keep


def _arrivals_horizon(spec: AutoscalingSpec, obs: Observation) -> float:
    """Seconds of arrivals that only the workers asked for now can serve: until the next poll, plus the
    start-up of a worker asked for then."""
    return float(spec.poll_seconds) + obs.startup_seconds


def _min_step(current: int) -> int:
    """The smallest step down worth its Event: MIN_DOWN_WORKERS and a fifth of the pool (rule 5)."""
    return max(MIN_DOWN_WORKERS, math.ceil(MIN_DOWN_SHARE * current - 1e-9))


def _worth_a_step(current: int, step: int) -> bool:
    return step >= _min_step(current)


def _down(spec: AutoscalingSpec, obs: Observation, st: ScalerState, targets: _Targets) -> _Move:
    """**Rule 5, up fast, down slow.** A higher answer applies at once. Downward the pool follows the
    highest answer of the last ``scaleDownDelaySeconds`` (a sliding window, like the HPA's stabilization
    window, but counted in the policy's own answers): nothing goes down until the answers cover a full
    window after the last scale-up, and then every poll may step down to the window's highest answer,
    so a pool whose tasks finish one by one shrinks poll by poll instead of once per delay. The
    window holds what the work asked for; workers kept only because they hold tasks (rule 3) are a
    floor outside it, so such a worker goes as soon as its last task ends. A step down must be worth
    its Event (and its pod churn): it removes at least two workers (``MIN_DOWN_WORKERS``) and a fifth
    of the pool (``MIN_DOWN_SHARE``), or takes it to its floor (minReplicas, or the one worker kept
    before zero), and comes at least a quarter of the window (``DOWN_SPACING_SHARE``) after the
    previous change; until then the steps add up into one (idle workers packing keeps empty, rule 9,
    go two at a time and unspaced). **A drained backlog releases the pool**:
    answers given while a backlog waited were sized to drain it; at the second poll in a row without
    one, only the answers given without a backlog (what the arrivals ask for) hold the pool, with no
    full window owed. If the pool has to grow again within a window of such a release, the bursts
    recur: releases stop until a whole window passes without a backlog, and the full window holds as
    before.

    The downward decision (the target is not above the pool), with its cordon (rules 8 and 9)."""
    current, target, why = obs.current_replicas, targets.target, targets.why
    delay = float(spec.scale_down_delay_seconds)
    window = _window(spec, obs, st)
    packed, packed_idle = _packing(spec, obs)
    cordon = max(packed, _cordon(obs, targets, window))
    spaced = st.last_change_at is None or obs.now - st.last_change_at >= DOWN_SPACING_SHARE * delay
    if target == current:
        return _Move(current, Action.HOLD, f"steady at {current}: {why}", cordon=cordon)
    if window.wait <= 0:
        # Busy workers are a floor, not an answer: one whose last long task ends goes at once when
        # the demand of the whole window did not need it. (target = this poll's demand or that floor.)
        peak = max((*window.answers, target))
        step = current - peak
        if spaced and (peak <= targets.floor or _worth_a_step(current, step)):
            basis = "backlog drained, the arrivals' answers" if window.drained else "highest answer"
            reason = f"scaling down {current}→{peak}: {basis} of the last {delay:g}s; {why}"
            return _Move(peak, Action.SCALE_DOWN, reason, release=window.drained, cordon=cordon)
        return _Move(
            current,
            Action.SCALE_DOWN_PENDING,
            f"holding at {current}, {peak} would do: a step of {step} waits until it removes "
            f"{_min_step(current)} workers "
            f"and {DOWN_SPACING_SHARE * delay:g}s have passed since the last change; {why}",
            cordon=cordon,
        )
    # Rule 9: idle workers the packing keeps empty are not what the arrivals need (the busy workers'
    # slots hold those), so they go without waiting for the window, in a step worth its Event.
    to = max(target, current - packed_idle)
    # Idle workers go at cost 0 (no task is drained): MIN_DOWN_WORKERS of them are worth an Event,
    # whatever their share of the pool, and without the spacing after the previous change: the pods a
    # burst's last scale-up started after the burst ended come up idle, and each poll they wait for the
    # spacing is a pod-poll paid for nothing (the spacing groups steps that drain busy workers).
    if current - to >= MIN_DOWN_WORKERS:
        reason = f"scaling down {current}→{to}: {current - to} idle workers not needed; {why}"
        return _Move(to, Action.SCALE_DOWN, reason, cordon=packed - (current - to))
    return _Move(
        current,
        Action.SCALE_DOWN_PENDING,
        f"holding at {current}, {target} would do: scale-down in {window.wait:.0f}s if it stays lower; {why}",
        cordon=cordon,
    )


def _follow_up(obs: Observation, st: ScalerState, move: _Move) -> bool:
    """**Rule 10, follow-up.** A scale-up made while at least one worker's slots of new tasks wait is
    looked at again after ``FOLLOW_UP_SECONDS`` instead of ``pollSeconds`` (:attr:`Decision.follow_up`;
    once, not again from the follow-up): a burst that is still arriving gets its remaining workers four
    seconds sooner. Smaller backlogs wait for the next regular poll (each follow-up that scales is one
    more change). A hold that waits for the first results of new work (rule 4's companion: no growth on
    work nobody has tried) is looked at again every ``FOLLOW_UP_SECONDS`` until they come, so new work
    is sized as soon as its first results are in, whatever ``pollSeconds`` is; for at most
    ``pollSeconds`` plus the pods' start-up, then at the regular polls (results slower than that gain
    nothing from a look every second, and a pool whose pods cannot start is not looked at every second
    for ever).

    Whether the next call is such a follow-up (the hold's own timing: :func:`_first_results_hold`)."""
    scaled_into_burst = move.desired > obs.current_replicas and obs.ready >= obs.concurrency
    return move.look_again or (scaled_into_burst and not st.follow_up)


def _released(spec: AutoscalingSpec, obs: Observation, st: ScalerState, move: _Move) -> tuple[float | None, bool]:
    """When a drained backlog last released the pool, and whether releases are suspended because the
    bursts recur (rule 5)."""
    now = obs.now
    window = float(spec.scale_down_delay_seconds)
    if move.release:
        return now, st.release_suspended
    if move.desired > obs.current_replicas and st.released_at is not None and now - st.released_at < window:
        return st.released_at, True  # back up within a window of a release: bursts recur, hold full windows
    if obs.backlog <= 0 and not any(t > now - window for t in st.backlog_polls):
        return st.released_at, False  # a whole window without a backlog: the bursts no longer recur
    return st.released_at, st.release_suspended


def _next_state(
    spec: AutoscalingSpec,
    obs: Observation,
    st: ScalerState,
    move: _Move,
    *,
    demand: int,
    idle_since: float | None,
    guard: bool,
) -> ScalerState:
    """What the next call needs: the window's answers (``demand``) and the polls a backlog waited at,
    both restarted by a scale-up (rule 5), the release (rule 5), the idle clock (rule 7), the failure
    guard (rule 4) and the follow-up (rule 10)."""
    now = obs.now
    window = float(spec.scale_down_delay_seconds)
    here = (now,) if obs.backlog > 0 else ()
    if move.desired > obs.current_replicas:  # a scale-up starts a new window
        answers: tuple[tuple[float, int], ...] = ((now, demand),)
        backlog_polls: tuple[float, ...] = here
        since = now
    else:
        answers = (*((t, a) for t, a in st.answers if t > now - window), (now, demand))
        backlog_polls = (*(t for t in st.backlog_polls if t > now - window), *here)
        since = st.answers_since if st.answers_since is not None else now
    released_at, suspended = _released(spec, obs, st, move)
    return replace(
        st,
        follow_up=_follow_up(obs, st, move),
        last_change_at=now if move.desired != obs.current_replicas else st.last_change_at,
        answers=answers,
        answers_since=since,
        backlog_polls=backlog_polls,
        released_at=released_at,
        release_suspended=suspended,
        idle_since=idle_since,
        guard_active=guard,
        untried_since=move.untried_since,
    )


def choose_cordoned(workers: Mapping[str, int], count: int, previous: Collection[str] = ()) -> frozenset[str]:
    """Which ``count`` workers (id -> in-flight tasks, draining ones left out) stop claiming: idle ones
    first (the next step down removes them), then those cordoned before (their tasks only run out),
    then the least busy. Pure; ``count`` is :attr:`Decision.cordon`."""
    if count <= 0:
        return frozenset()
    ranked = sorted(workers, key=lambda w: (workers[w] > 0, w not in previous, workers[w], w))
    return frozenset(ranked[:count])


def decide(spec: AutoscalingSpec, obs: Observation, state: ScalerState | None = None) -> Decision:
    """The desired replicas for one poll; pass ``Decision.state`` back on the next call.

    The targets first; then a move no weighing applies to (bounds, zero), else the upward or the
    downward decision; then the next state and the Decision, with the targets' notes."""
    st = state or ScalerState()
    current = obs.current_replicas
    if not spec.enabled:
        return Decision(current, current, Action.DISABLED, "autoscaling disabled", st)
    idle_since = _idle_since(obs, st)
    guard = _failure_guard(spec, obs.failure_rate, st.guard_active)
    targets = _targets(spec, obs, idle_since)
    move = _bounds_and_zero(spec, obs, targets, idle_since)
    if move is None:
        if targets.target > current and _retries_alone(spec, obs, idle_since):
            move = _Move(current, Action.HOLD, f"holding at {current}: only retries ask for more; {targets.why}")
        else:
            move = _up(spec, obs, st, targets, guard) if targets.target > current else _down(spec, obs, st, targets)
    notes = (*move.notes, *targets.notes)
    extra = "; ".join(notes)
    reason = f"{move.reason}; {extra}" if extra else move.reason
    return Decision(
        desired=move.desired,
        current=current,
        action=move.action,
        reason=reason[:1024],
        state=_next_state(spec, obs, st, move, demand=targets.demand, idle_since=idle_since, guard=guard),
        need=targets.need,
        at_max=targets.at_max,
        rate_limited=targets.rate_limited,
        failure_guard=guard,
        notes=notes,
        cordon=move.cordon,
    )
