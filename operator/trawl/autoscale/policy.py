"""The scaling policy: observation + spec + state in, desired replicas + reason + next state out.

Pure and deterministic: no clock, no I/O. Everything that must survive between calls is in
:class:`ScalerState`, which the caller passes back unchanged on the next call.

Rules, in the order they apply (each is covered by tests/unit/test_autoscale_policy.py):

1. **Need.** Two answers, the larger counts. *Drain*: outstanding work ``W = ready + delayed due
   soon + in flight`` plus ``T`` seconds of arrivals (λ) must be done within ``targetDrainSeconds``
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
2. **Useful parallelism.** Never more workers than the work can keep busy: ``ceil(W / concurrency)``
   plus the arrivals until a worker asked for at the next poll could serve (``pollSeconds`` + start-up:
   only workers asked for now can take them), and never above the rate-limit ceiling the caller computes from
   per-domain limits (the ceiling caps growth; it never removes workers that hold tasks).
3. **In-flight is counted.** Workers holding tasks are never counted out while tasks wait for a worker
   (ready), or while tasks may outlive the workers' SIGTERM drain (mean service time above a third of
   ``drainSeconds``, or unknown): the answer is at least the number of busy workers. Retries waiting
   for their backoff are not waiting for a worker: a failing site's retries must not pin the pool.
4. **Failure guard.** While the failure rate exceeds ``failureRateThreshold`` (released below 80 %
   of it), the answer never rises above the current replicas (nor below minReplicas): more workers
   would only hit a failing target harder. Scaling down still works. A pool at zero may still activate
   one worker (or minReplicas).
5. **Up fast, down slow.** A higher answer applies at once. Downward the pool follows the highest
   answer of the last ``scaleDownDelaySeconds`` (a sliding window, like the HPA's stabilization
   window, but counted in the policy's own answers): nothing goes down until the answers cover a full
   window after the last scale-up, and then every poll may step down to the window's highest answer,
   so a pool whose tasks finish one by one shrinks poll by poll instead of once per delay. The
   window holds what the work asked for; workers kept only because they hold tasks (rule 3) are a
   floor outside it, so such a worker goes as soon as its last task ends. A step down must be worth
   its Event (and its pod churn): it removes at least two workers (``MIN_DOWN_WORKERS``) and a fifth
   of the pool (``MIN_DOWN_SHARE``), or takes it to its floor (minReplicas, or the one worker kept
   before zero), and comes at least a quarter of the window (``DOWN_SPACING_SHARE``) after the
   previous change; until then the steps add up into one. **A drained backlog releases the pool**:
   answers given while a backlog waited were sized to drain it; at the second poll in a row without
   one, only the answers given without a backlog (what the arrivals ask for) hold the pool, with no
   full window owed. If the pool has to grow again within a window of such a release, the bursts
   recur: releases stop until a whole window passes without a backlog, and the full window holds as
   before.
6. **Bounds.** ``minReplicas`` and ``maxReplicas`` are hard: below min goes up at once (also during the
   failure guard), above max (after max was lowered) goes down at once.
7. **Zero.** With ``minReplicas = 0`` the pool keeps one worker until it has seen no work for
   ``idleSecondsBeforeZero``, then goes to zero; at zero, the first task activates one worker at once
   (``minReplicas`` if higher), and later polls size the pool once that worker serves and measures
   (a failing target is caught by the failure guard before the pool grows).
8. **Cordon.** Where rule 3 keeps workers only because they hold tasks that may outlive the drain,
   and a full window has passed with no backlog waiting, the workers beyond the window's highest answer
   are cordoned (:attr:`Decision.cordon` says how many, :func:`choose_cordoned` which): they claim
   nothing new and finish what they hold, so new tasks go to the others and a cordoned worker empties
   and goes at the next step down (its pod-deletion-cost, its in-flight count, is then 0). Otherwise
   every worker would keep receiving new long tasks, none would ever be idle, and the pool would hold
   its size long after the work shrank. The cordon lifts as soon as the answers need those workers
   again (or a backlog waits).
9. **Packing.** Where tasks are longer than a poll (or their length is unknown), a worker lives as long
   as the longest task it holds, so with no backlog new tasks go to the busiest workers, as few of them
   as have free slots for the arrivals expected before another worker could serve (``pollSeconds`` +
   start-up; at least one task), and the others are cordoned: idle ones stay empty instead of being
   pinned for minutes by the one task that happened to land on each, and the least busy empty sooner.
   The idle workers kept empty are not what the arrivals need, so they go at cost 0 without waiting
   for the window's answers to fall (in a step worth its Event, as in rule 5).
10. **Follow-up.** A scale-up made while at least one worker's slots of new tasks wait is looked at
   again after ``FOLLOW_UP_SECONDS`` instead of ``pollSeconds`` (:attr:`Decision.follow_up`; once, not
   again from the follow-up): a burst that is still arriving gets its remaining workers four seconds
   sooner. Smaller backlogs wait for the next regular poll (each follow-up that scales is one more
   change). A hold that waits for the first results of new work (rule 4's companion: no growth on work
   nobody has tried) is looked at again every ``FOLLOW_UP_SECONDS`` until they come, so new work is
   sized as soon as its first results are in, whatever ``pollSeconds`` is; for at most ``pollSeconds``
   plus the pods' start-up, then at the regular polls (results slower than that gain nothing from a
   look every second, and a pool whose pods cannot start is not looked at every second for ever).
11. **Burst.** Between polls the controller's timer reads the pool's enqueue counter every second and
   passes at once when a worker's slots of new tasks arrived beyond the measured rate and its noise
   (:mod:`trawl.autoscale.schedule`, which also holds rule 10's timing): a burst enqueued just after a
   poll is sized a second later, not a poll later.
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


def _need(spec: AutoscalingSpec, obs: Observation) -> tuple[int, str]:
    """Workers the work asks for, bounded by useful parallelism but not yet by min/max."""
    work = obs.work
    if work == 0 and obs.arrival_rate <= 0:
        return 0, "no work"
    mu, how = _capacity(obs)
    lam = _arrival_rate(obs)
    # Workers beyond ceil(work / slots) would sit idle: the most this backlog can use right now, plus
    # the tasks that arrive before a worker asked for at the next poll could serve (only workers asked
    # for now can take those).
    useful = math.ceil((work + lam * _arrivals_horizon(spec, obs)) / obs.concurrency - 1e-9)
    if mu is None:
        starting = obs.serving_workers is not None and obs.serving_workers < obs.current_replicas
        bound = (
            obs.current_replicas if starting else max(2 * obs.current_replicas, obs.current_replicas + COLD_START_STEP)
        )
        bound = max(bound, 1)
        need = min(useful, bound)
        return need, f"{how}: bounded guess {need} for {work} tasks ({obs.concurrency} slots each)"
    t = float(spec.target_drain_seconds)
    # Work to finish within T: the backlog plus T seconds of arrivals.
    demand = work + lam * t
    serving = obs.current_replicas if obs.serving_workers is None else min(obs.serving_workers, obs.current_replicas)
    drain = demand / (mu * t)  # workers that finish it in exactly T
    if drain <= serving + DRAIN_TOLERANCE:
        # Within a tenth of a worker of a whole number, the lower one: T is a target, not a deadline,
        # and a pool at 95 % of one worker must not flap to two on every noisy poll.
        need = max(1, math.ceil(drain - DRAIN_TOLERANCE))
    else:
        # Pods not serving yet lose their start-up time from the drain window (at most 3/4 of it).
        late = t - min(obs.startup_seconds, 0.75 * t)
        need = serving + math.ceil((demand - serving * mu * t) / (mu * late) - 1e-9)
    # The arrivals alone: as many workers as keep their queueing wait within one poll at p95 (a longer
    # wait is a backlog at the next poll, which the drain sizing above answers).
    steady = _arrival_workers(obs, lam, mu, float(spec.poll_seconds))
    need = min(useful, max(need, steady))
    return need, (
        f"{work} tasks (ready {obs.ready}, due {obs.delayed_due_soon}, in flight {obs.in_flight}), "
        f"{lam:.3g}/s arriving, {how}: {need} workers drain it within {t:g}s"
    )


def _to_pack(obs: Observation, lookahead: float) -> tuple[int, int]:
    """Workers to cordon for packing (rule 9), and how many of them are idle. A worker lives as long as
    its longest task, so new tasks go to the free slots of the busiest workers, as few of them as hold
    the arrivals expected before another worker could serve (``lookahead`` tasks, at least one); the
    rest stop claiming: idle ones stay empty and go at cost 0, the least busy empty sooner. Only workers
    that report their load can be cordoned, so without loads nothing is packed."""
    loads = sorted(obs.worker_loads, reverse=True)
    need = max(1.0, lookahead)
    spare, keep = 0, 0
    while keep < len(loads) and spare < need:
        spare += max(0, obs.concurrency - loads[keep])
        keep += 1
    return len(loads) - keep, sum(1 for load in loads[keep:] if load == 0)


def _arrivals_horizon(spec: AutoscalingSpec, obs: Observation) -> float:
    """Seconds of arrivals that only the workers asked for now can serve: until the next poll, plus the
    start-up of a worker asked for then."""
    return float(spec.poll_seconds) + obs.startup_seconds


def _min_step(current: int) -> int:
    """The smallest step down worth its Event: MIN_DOWN_WORKERS and a fifth of the pool (rule 5)."""
    return max(MIN_DOWN_WORKERS, math.ceil(MIN_DOWN_SHARE * current - 1e-9))


def _worth_a_step(current: int, step: int) -> bool:
    return step >= _min_step(current)


def choose_cordoned(workers: Mapping[str, int], count: int, previous: Collection[str] = ()) -> frozenset[str]:
    """Which ``count`` workers (id -> in-flight tasks, draining ones left out) stop claiming: idle ones
    first (the next step down removes them), then those cordoned before (their tasks only run out),
    then the least busy. Pure; ``count`` is :attr:`Decision.cordon`."""
    if count <= 0:
        return frozenset()
    ranked = sorted(workers, key=lambda w: (workers[w] > 0, w not in previous, workers[w], w))
    return frozenset(ranked[:count])


def decide(spec: AutoscalingSpec, obs: Observation, state: ScalerState | None = None) -> Decision:
    """The desired replicas for one poll; pass ``Decision.state`` back on the next call."""
    st = state or ScalerState()
    current = obs.current_replicas
    now = obs.now
    if not spec.enabled:
        return Decision(current, current, Action.DISABLED, "autoscaling disabled", st)

    work = obs.work
    idle_since = (st.idle_since if st.idle_since is not None else now) if work == 0 else None

    fr = obs.failure_rate
    if fr is None:
        guard = st.guard_active
    elif st.guard_active:
        guard = fr >= spec.failure_rate_threshold * GUARD_RELEASE_SHARE
    else:
        guard = fr > spec.failure_rate_threshold

    need, why = _need(spec, obs)
    notes: list[str] = []
    target = need
    if work == 0 and target > current:
        # Nothing outstanding means the workers keep up with arrivals: a smoothed arrival rate left
        # over from a finished burst must not grow an idle pool.
        target = current
        why = f"no work outstanding: {current} workers keep up ({why})"
    rate_limited = False
    if obs.rate_limit_ceiling_replicas is not None and target > obs.rate_limit_ceiling_replicas:
        target = obs.rate_limit_ceiling_replicas
        rate_limited = True
        notes.append(f"capped at {target} by per-domain rate limits")

    demand = target  # what the work asks for; the scale-down window is kept over these answers
    # Rule 3: workers holding tasks stay while tasks wait for a worker or while tasks may outlive the drain
    # (delayed tasks due soon wait for their time, not for a worker: they are in the drain answer's work).
    backlog = obs.ready + obs.delayed_due_soon
    long_tasks = obs.mean_service_seconds is None or obs.mean_service_seconds > DRAIN_SAFE_SHARE * obs.drain_seconds
    protect = 0
    if obs.in_flight > 0:
        protect = math.ceil(obs.in_flight / obs.concurrency)
        if obs.ready > 0 or long_tasks:
            protect = max(protect, obs.busy_workers)
    if protect > target:
        target = protect
        notes.append(f"{obs.busy_workers} workers hold {obs.in_flight} tasks")

    at_max = target > spec.max_replicas
    lo = spec.min_replicas
    to_zero = False
    if lo == 0:
        idle_for = now - idle_since if idle_since is not None else 0.0
        if work > 0 or idle_since is None or idle_for < spec.idle_seconds_before_zero:
            # Keep one worker until idle long enough (and activate one on the first task).
            lo = 1 if (work > 0 or current > 0) else 0
        else:
            to_zero = True
    target = max(lo, min(spec.max_replicas, target))
    demand = max(lo, min(spec.max_replicas, demand))
    if at_max:
        notes.append(f"at maxReplicas {spec.max_replicas}")

    def done(
        desired: int,
        action: Action,
        reason: str,
        release: bool = False,
        cordon: int = 0,
        look_again: bool = False,
        untried_since: float | None = None,
    ) -> Decision:
        changed = desired != current
        here = (now,) if obs.backlog > 0 else ()
        window = float(spec.scale_down_delay_seconds)
        released_at, suspended = st.released_at, st.release_suspended
        if release:
            released_at = now
        elif desired > current and released_at is not None and now - released_at < window:
            suspended = True  # back up within a window of a release: bursts recur, hold full windows
        elif not here and not any(t > now - window for t in st.backlog_polls):
            suspended = False  # a whole window without a backlog: the bursts no longer recur
        if desired > current:  # a scale-up starts a new window
            answers: tuple[tuple[float, int], ...] = ((now, demand),)
            backlog_polls: tuple[float, ...] = here
            since = now
        else:
            answers = (*((t, a) for t, a in st.answers if t > now - window), (now, demand))
            backlog_polls = (*(t for t in st.backlog_polls if t > now - window), *here)
            since = st.answers_since if st.answers_since is not None else now
        new_state = replace(
            st,
            follow_up=look_again or (desired > current and obs.ready >= obs.concurrency and not st.follow_up),
            last_change_at=now if changed else st.last_change_at,
            answers=answers,
            answers_since=since,
            backlog_polls=backlog_polls,
            released_at=released_at,
            release_suspended=suspended,
            idle_since=idle_since,
            guard_active=guard,
            untried_since=untried_since,
        )
        extra = "; ".join(notes)
        full = f"{reason}; {extra}" if extra else reason
        return Decision(
            desired=desired,
            current=current,
            action=action,
            reason=full[:1024],
            state=new_state,
            need=need,
            at_max=at_max,
            rate_limited=rate_limited,
            failure_guard=guard,
            notes=tuple(notes),
            cordon=cordon,
        )

    fr_txt = f"{fr:.0%}" if fr is not None else "unknown"
    if current == 0:
        if work > 0:
            # One worker first: nothing is known yet about how the new work's targets respond, so
            # sizing waits for the next poll's measurement (and the failure guard) before growing.
            desired = max(1, spec.min_replicas)
            return done(desired, Action.ACTIVATE, f"activating: {work} tasks waiting and no workers; {why}")
        if spec.min_replicas > 0:
            return done(spec.min_replicas, Action.SCALE_UP, f"scaling up to minReplicas {spec.min_replicas}")
        return done(0, Action.HOLD, "idle at zero")

    if current > spec.max_replicas:
        # maxReplicas is a hard limit (it was lowered): no delay; the drain covers busy workers.
        return done(spec.max_replicas, Action.SCALE_DOWN, f"scaling down {current}→{spec.max_replicas}: maxReplicas")

    if to_zero and obs.in_flight == 0:
        return done(0, Action.SCALE_TO_ZERO, f"no work for {now - (idle_since or now):.0f}s: scaling to zero")

    if target > current:
        # Work without results yet: nothing runs, or the pool was idle on the last poll, so what runs
        # was claimed since (a worker's first claim of a new job can land just before this poll).
        was_idle = st.idle_since is not None
        untried = obs.recent_attempts == 0 and obs.ready > 0 and (obs.in_flight == 0 or was_idle)
        if untried and not guard and current >= max(1, spec.min_replicas):
            # The running workers' results first (looked at again a second later), so a target that
            # fails fast engages the failure guard before the pool grows into it.
            notes.insert(0, f"need {target}")
            since = st.untried_since if st.untried_since is not None else now
            return done(
                current,
                Action.HOLD,
                f"holding at {current}: {obs.ready} new tasks without results yet, sizing once they have",
                # Every second until results come (a long pollSeconds must not wait), for as long as a
                # first result can take to come from a pod started now; after that the regular polls.
                look_again=now - since < float(spec.poll_seconds) + obs.startup_seconds,
                untried_since=since,
            )
        recent_bad = (
            obs.recent_attempts is not None
            and obs.recent_attempts > 0
            and (obs.recent_failed or 0) / obs.recent_attempts > spec.failure_rate_threshold * GUARD_RELEASE_SHARE
        )
        if recent_bad and not guard and current >= max(1, spec.min_replicas):
            # The poll's own attempts failed above the guard's release level: the smoothed rate may
            # still carry earlier successes (and slow failures show late), so do not grow on this poll.
            notes.insert(0, f"need {target}")
            return done(
                current,
                Action.HOLD,
                f"holding at {current}: {obs.recent_failed} of the last poll's {obs.recent_attempts} attempts failed",
            )
        if guard and current >= spec.min_replicas:
            notes.insert(0, f"need {target}")
            return done(
                current,
                Action.FAILURE_GUARD,
                f"holding at {current}: failure rate {fr_txt} above {spec.failure_rate_threshold:.0%}, "
                "more workers would only hit a failing target harder",
            )
        return done(target, Action.SCALE_UP, f"scaling up {current}→{target}: {why}")

    # target <= current: follow the highest answer of a full window after the last scale-up.
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
    # Rule 9: tasks longer than a poll pin the worker they land on; fill the busiest workers first.
    packed = packed_idle = 0
    pinning = obs.mean_service_seconds is None or obs.mean_service_seconds > float(spec.poll_seconds)
    if pinning and backlog == 0:
        lookahead = _arrival_rate(obs) * _arrivals_horizon(spec, obs)
        packed, packed_idle = _to_pack(obs, lookahead)
    cordon = packed
    # A step down comes a quarter of the window after the previous change (rule 5).
    spaced = st.last_change_at is None or now - st.last_change_at >= DOWN_SPACING_SHARE * delay
    # Rule 8: with tasks that may outlive the drain, workers the window's answers no longer need (kept
    # by rule 3 because they hold tasks) stop claiming, so new tasks go to the others and they empty;
    # an empty one goes at the next step down. (choose_cordoned takes idle workers first, so the two
    # counts combine as their maximum.)
    if long_tasks and backlog == 0 and wait <= 0:
        keep = max(lo, max([a for _, a in recent] + [demand]))
        cordon = max(cordon, current - keep)
    if target == current:
        return done(current, Action.HOLD, f"steady at {current}: {why}", cordon=cordon)
    if wait <= 0:
        # Busy workers are a floor, not an answer: one whose last long task ends goes at once when
        # the demand of the whole window did not need it. (target = this poll's demand or that floor.)
        peak = max([a for _, a in recent] + [target])
        step = current - peak
        if spaced and (peak <= lo or _worth_a_step(current, step)):
            basis = "backlog drained, the arrivals' answers" if drained else "highest answer"
            reason = f"scaling down {current}→{peak}: {basis} of the last {delay:g}s; {why}"
            return done(peak, Action.SCALE_DOWN, reason, release=drained, cordon=cordon)
        return done(
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
    if spaced and _worth_a_step(current, current - to):
        reason = f"scaling down {current}→{to}: {current - to} idle workers not needed; {why}"
        return done(to, Action.SCALE_DOWN, reason, cordon=packed - (current - to))
    return done(
        current,
        Action.SCALE_DOWN_PENDING,
        f"holding at {current}, {target} would do: scale-down in {wait:.0f}s if it stays lower; {why}",
        cordon=cordon,
    )
