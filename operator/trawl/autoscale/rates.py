"""Turn successive :class:`~trawl.queue.model.PoolSignals` snapshots into smoothed rates.

Pure: :func:`track` takes the previous :class:`RateTracker` (or ``None``) and a new snapshot and
returns the next tracker. The controller keeps only the returned value between polls.

Rates are exponentially weighted moving averages with a time constant (``tau_seconds``), so an
irregular poll interval weighs each observation by how long it covers.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from trawl.queue.model import PoolSignals

DEFAULT_TAU_SECONDS = 15.0
# A worker not seen for this long is not counted as capacity.
WORKER_STALE_SECONDS = 30.0
# A worker is saturated when its slots are this full (or when tasks wait in the ready queue).
SATURATION_SHARE = 0.9
# The last interval's failure share counts only when at least this many attempts finished in it.
MIN_RECENT_ATTEMPTS = 10
# A per-worker throughput measured on other work goes stale: between saturated measurements it moves
# toward the current work's Little's-law capacity (slots / mean service time) with this time constant.
PER_WORKER_AGE_TAU_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class Rates:
    """Smoothed rates of a pool. ``None`` means "not measured yet"."""

    arrival_rate: float = 0.0  # attempts entering the queue per second (new tasks, retries, releases)
    throughput: float = 0.0  # attempts finished (completed or failed) per second
    completed_rate: float = 0.0  # successful attempts per second
    failed_rate: float = 0.0  # failed attempts per second
    mean_service_seconds: float | None = None  # mean claim-to-finish time of an attempt
    per_worker_throughput: float | None = None  # attempts/s one worker finishes when it has enough work
    recent_failure_rate: float | None = None  # failed share of the last interval (>= 10 attempts)
    active_workers: int = 0  # workers seen recently and not draining
    busy_workers: int = 0  # of those, workers holding in-flight tasks
    recent_attempts: int | None = None  # attempts finished since the previous snapshot (None: first snapshot)
    recent_failed: int | None = None  # of those, failed attempts
    recent_arrival_rate: float | None = None  # attempts/s that entered the queue since the previous snapshot
    arrival_rate_stderr: float = 0.0  # standard error of arrival_rate: Poisson noise of a tau-second average

    @property
    def smoothed_failure_rate(self) -> float | None:
        """Share of recent attempts that failed (smoothed), or None when nothing finished recently."""
        total = self.completed_rate + self.failed_rate
        if total <= 1e-9:
            return None
        return self.failed_rate / total

    @property
    def failure_rate(self) -> float | None:
        """Fast to rise, slow to fall: the larger of the smoothed share and the last interval's."""
        smoothed = self.smoothed_failure_rate
        if self.recent_failure_rate is None:
            return smoothed
        return max(smoothed or 0.0, self.recent_failure_rate)


@dataclass(frozen=True, slots=True)
class RateTracker:
    """What rate estimation keeps between polls: the last snapshot and the smoothed rates."""

    last: PoolSignals
    rates: Rates


def worker_counts(signals: PoolSignals, stale_seconds: float = WORKER_STALE_SECONDS) -> tuple[int, int]:
    """(active, busy) workers of a snapshot: seen within ``stale_seconds`` and not draining."""
    active = busy = 0
    for w in signals.workers.values():
        if w.draining or signals.time - w.last_seen > stale_seconds:
            continue
        active += 1
        if w.in_flight > 0:
            busy += 1
    return active, busy


def _ewma(old: float, new: float, alpha: float) -> float:
    return old + alpha * (new - old)


def track(
    tracker: RateTracker | None,
    signals: PoolSignals,
    *,
    concurrency: int,
    tau_seconds: float = DEFAULT_TAU_SECONDS,
) -> RateTracker:
    """Fold a new snapshot into the tracker.

    ``concurrency`` is the number of task slots per worker (``spec.worker.concurrency``); it tells
    whether the workers were saturated, the only time their throughput measures their capacity.
    A snapshot older than or as old as the previous one only refreshes the worker counts.
    """
    active, busy = worker_counts(signals)
    if tracker is None:
        return RateTracker(last=signals, rates=Rates(active_workers=active, busy_workers=busy))
    prev, old = tracker.last, tracker.rates
    dt = signals.time - prev.time
    if dt <= 0:
        return RateTracker(last=prev, rates=replace(old, active_workers=active, busy_workers=busy))
    # Counters can go backwards when Redis lost data or was flushed: treat that as a fresh start.
    d_completed = signals.completed_total - prev.completed_total
    d_failed = signals.failed_total - prev.failed_total
    d_service = signals.service_seconds_total - prev.service_seconds_total
    if d_completed < 0 or d_failed < 0 or d_service < 0:
        return RateTracker(last=signals, rates=Rates(active_workers=active, busy_workers=busy))
    alpha = 1.0 - math.exp(-dt / tau_seconds)
    finished = d_completed + d_failed
    outstanding_prev = prev.ready + prev.delayed + prev.in_flight
    outstanding_now = signals.ready + signals.delayed + signals.in_flight
    arrivals = max(0.0, (outstanding_now - outstanding_prev + finished) / dt)

    completed_rate = _ewma(old.completed_rate, d_completed / dt, alpha)
    failed_rate = _ewma(old.failed_rate, d_failed / dt, alpha)
    throughput = completed_rate + failed_rate
    arrival_rate = _ewma(old.arrival_rate, arrivals, alpha)

    mean_service = old.mean_service_seconds
    if finished > 0:
        sample = d_service / finished
        # Weight by how many attempts the sample covers so one slow straggler does not swing it, and by
        # the time it covers like the other rates: one poll's finishes lean toward the tasks that
        # happened to be short, and the capacity bound below divides by this.
        w = min(alpha, 1.0 - math.exp(-finished / 20.0))
        mean_service = sample if mean_service is None else mean_service + w * (sample - mean_service)

    per_worker = _per_worker(
        old.per_worker_throughput,
        prev,
        signals,
        finished,
        d_service,
        dt,
        alpha,
        concurrency,
        mean_service,
        old.mean_service_seconds,
    )
    recent = d_failed / finished if finished >= MIN_RECENT_ATTEMPTS else None
    rates = Rates(
        recent_attempts=finished,
        recent_failed=d_failed,
        recent_arrival_rate=arrivals,
        arrival_rate=arrival_rate,
        arrival_rate_stderr=math.sqrt(arrival_rate / (2.0 * tau_seconds)),
        recent_failure_rate=recent,
        throughput=throughput,
        completed_rate=completed_rate,
        failed_rate=failed_rate,
        mean_service_seconds=mean_service,
        per_worker_throughput=per_worker,
        active_workers=active,
        busy_workers=busy,
    )
    return RateTracker(last=signals, rates=rates)


def _per_worker(
    old: float | None,
    prev: PoolSignals,
    signals: PoolSignals,
    finished: int,
    d_service: float,
    dt: float,
    alpha: float,
    concurrency: int,
    mean_service: float | None,
    old_service: float | None = None,
) -> float | None:
    """Attempts/s one worker finishes when it has enough work, for the work the pool has now.

    Measured only while the workers are saturated (a ready backlog, or their slots nearly full, at both
    snapshots), where a saturated interval in which nothing finished counts as a measurement too (slow
    tasks). Between such measurements it ages: it moves toward the Little's-law capacity of the current
    work (``concurrency / mean service``, time constant :data:`PER_WORKER_AGE_TAU_SECONDS`) and never
    exceeds it, so a value measured on a fast crawl does not size a later backlog of slow pages.
    """
    per_worker = old
    active, _ = worker_counts(signals)
    prev_active, _ = worker_counts(prev)
    workers = min(active, prev_active) if prev_active else active
    observed = finished / dt / workers if workers > 0 else 0.0
    if workers > 0 and finished > 0 and d_service > 0:
        # Little's law on the interval: the slots the workers kept busy (at the two snapshots) over the
        # interval's own service time. Unlike finished/dt it is not lowered by moments in between when
        # the queue ran dry, which make a pool at the edge of keeping up look slower than it is.
        slots = min(float(concurrency), (prev.in_flight + signals.in_flight) / 2 / workers)
        observed = max(observed, slots * finished / d_service)
    saturated = workers > 0 and (
        (prev.ready > 0 and signals.ready > 0)
        or (
            prev.in_flight >= SATURATION_SHARE * concurrency * workers
            and signals.in_flight >= SATURATION_SHARE * concurrency * workers
        )
    )
    if saturated and (finished > 0 or per_worker is not None):
        per_worker = observed if per_worker is None else _ewma(per_worker, observed, alpha)
    elif per_worker is not None and observed > per_worker:
        # Capacity is at least what the workers just did, saturated or not.
        per_worker = observed
    elif per_worker is not None and mean_service:
        if old_service and mean_service < old_service:
            # The work got faster (e.g. a target failing fast): a worker finishes as many more of it
            # as its slots turn over faster; what it measured was its slots' efficiency, not the work's.
            per_worker *= old_service / mean_service
        aging = 1.0 - math.exp(-dt / PER_WORKER_AGE_TAU_SECONDS)
        per_worker = _ewma(per_worker, concurrency / mean_service, aging)
    if per_worker is not None and mean_service:
        # Little's law: a worker cannot finish more than its slots per service time of the current work.
        per_worker = min(per_worker, concurrency / mean_service)
    return per_worker


@dataclass(frozen=True, slots=True)
class DomainBacklog:
    """Work waiting for one domain and the rate the pool's politeness allows it."""

    tasks: int
    requests_per_second: float | None  # None: not rate limited
    max_concurrency: int | None = None  # per-domain concurrency limit shared by the pool, if any


def rate_limit_ceiling(
    domains: Mapping[str, DomainBacklog] | Iterable[DomainBacklog],
    *,
    mean_service_seconds: float | None,
    concurrency: int,
) -> int | None:
    """The most workers the backlog can keep busy under per-domain limits, or None when unbounded.

    Useful slots of a domain are ``requests_per_second * mean service time`` (Little's law), or its
    concurrency limit, whichever is lower; a domain without limits makes the ceiling unbounded.
    Domains with no tasks do not count. Returns at least 1 when any task waits.
    """
    items = domains.values() if isinstance(domains, Mapping) else domains
    service = mean_service_seconds if mean_service_seconds and mean_service_seconds > 0 else 1.0
    slots = 0.0
    any_work = False
    for d in items:
        if d.tasks <= 0:
            continue
        any_work = True
        limits: list[float] = [float(d.tasks)]
        if d.requests_per_second is not None:
            limits.append(d.requests_per_second * service)
        if d.max_concurrency is not None:
            limits.append(float(d.max_concurrency))
        if len(limits) == 1:
            return None
        slots += min(limits)
    if not any_work:
        return None
    return max(1, math.ceil(slots / max(1, concurrency) - 1e-9))
