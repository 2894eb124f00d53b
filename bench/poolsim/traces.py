"""The benchmark's workloads: arrival times with their domain, service times, limits, failure windows.

Six traces (``build_traces``), each drawn anew from the seed: a step burst, a diurnal ramp, spiky
bursts, a backlog on one rate-limited domain, a failing downstream and long tasks. ``quick`` shortens
and shrinks them for tests and ``--quick``.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Trace:
    """A workload: arrival times with their domain, service times, limits and failure windows."""

    name: str
    description: str
    duration: float
    arrivals: list[tuple[float, int]]  # (time, domain), sorted by time
    service_mean: float = 1.5
    service_sigma: float = 0.6  # of the underlying normal
    domain_rps: dict[int, float] = field(default_factory=dict)
    fail_windows: list[tuple[float, float, float]] = field(default_factory=list)  # (start, end, probability)
    base_fail: float = 0.0
    fail_duration_factor: float = 1.0  # a failed attempt takes this share of a successful one's time
    # The workers' drainSeconds (their pods' grace period) set for this workload; None: the pool's 30 s.
    # It is the Deployment's, so every policy's pods get it.
    drain_seconds: float | None = None

    def fail_probability(self, t: float) -> float:
        for start, end, p in self.fail_windows:
            if start <= t < end:
                return p
        return self.base_fail

    def failing(self, t: float) -> bool:
        return any(start <= t < end for start, end, _ in self.fail_windows)


RATE_LIMITED_DOMAIN = 1000
DOMAINS = 200


def _poisson(rng: random.Random, rate: Callable[[float], float], peak: float, start: float, end: float) -> list[float]:
    """Arrival times of a Poisson process with intensity ``rate(t)`` <= ``peak`` (thinning)."""
    out: list[float] = []
    t = start
    while True:
        t += rng.expovariate(peak)
        if t >= end:
            return out
        if rng.random() * peak <= rate(t):
            out.append(t)


def _on_domains(rng: random.Random, times: list[float]) -> list[tuple[float, int]]:
    return [(t, rng.randrange(DOMAINS)) for t in times]


def build_traces(seed: int = 1, quick: bool = False, fail_duration_factor: float = 0.1) -> list[Trace]:
    """The six workloads of the benchmark; ``quick`` shortens and shrinks them.

    ``fail_duration_factor``: how long a failed attempt of the failing-downstream trace takes relative
    to a successful one (0.1: a site answering 5xx or refusing connections; 1.0: as long, like timeouts)."""
    scale = 0.25 if quick else 1.0
    traces: list[Trace] = []

    rng = random.Random(seed * 31 + 1)
    dur = 900.0 if quick else 1800.0
    burst = int(20000 * scale)
    arr = _on_domains(rng, _poisson(rng, lambda t: 2.0, 2.0, 0, dur))
    arr += [(120.0 + i * 1e-4, rng.randrange(DOMAINS)) for i in range(burst)]
    traces.append(Trace("step_burst", f"2/s background, {burst} tasks enqueued at t=120 s", dur, sorted(arr)))

    rng = random.Random(seed * 31 + 2)
    dur = 1200.0 if quick else 3600.0
    peak = 80.0

    def diurnal(t: float) -> float:
        return 1.0 + peak * math.sin(math.pi * t / dur) ** 2

    arr = _on_domains(rng, _poisson(rng, diurnal, peak + 1, 0, dur))
    traces.append(Trace("diurnal_ramp", f"Poisson, 1/s rising to {peak + 1:g}/s and back over {dur:g} s", dur, arr))

    rng = random.Random(seed * 31 + 3)
    arr = _on_domains(rng, _poisson(rng, lambda t: 1.0, 1.0, 0, dur))
    t = rng.uniform(30, 120)
    bursts = 0
    while t < dur - 200:
        size = int(rng.uniform(500, 4000) * (0.5 if quick else 1.0))
        arr += [(t + rng.uniform(0, 10), rng.randrange(DOMAINS)) for _ in range(size)]
        bursts += 1
        t += rng.uniform(240, 480)
    traces.append(
        Trace("spiky_bursts", f"1/s background and {bursts} bursts of 250-4000 tasks within 10 s", dur, sorted(arr))
    )

    rng = random.Random(seed * 31 + 4)
    dur = 900.0 if quick else 1200.0
    n = 1500 if quick else 3000
    rps = 5.0
    t0 = rng.uniform(50.0, 70.0)
    arr = sorted((t0 + rng.uniform(0, 5), RATE_LIMITED_DOMAIN) for _ in range(n))
    traces.append(
        Trace(
            "rate_limited",
            f"{n} tasks within 5 s at t=50-70 s, all on one domain limited to {rps:g} req/s",
            dur,
            arr,
            domain_rps={RATE_LIMITED_DOMAIN: rps},
        )
    )

    rng = random.Random(seed * 31 + 5)
    dur = 1200.0 if quick else 1800.0
    f0 = 300.0 if quick else 600.0
    arr = _on_domains(rng, _poisson(rng, lambda t: 20.0, 20.0, 0, dur))
    traces.append(
        Trace(
            "failing_downstream",
            f"20/s; 90% of attempts fail from t={f0:g} s for 600 s",
            dur,
            arr,
            fail_windows=[(f0, f0 + 600.0, 0.9)],
            fail_duration_factor=fail_duration_factor,
        )
    )

    rng = random.Random(seed * 31 + 6)
    dur = 1800.0 if quick else 3000.0
    n = int(400 * (0.5 if quick else 1.0))
    second = 900.0 if quick else 1500.0
    arr = _on_domains(rng, _poisson(rng, lambda t: 0.05, 0.05, 0, dur))
    arr += [(60.0 + rng.uniform(0, 20), rng.randrange(DOMAINS)) for _ in range(n)]
    arr += [(second + rng.uniform(0, 20), rng.randrange(DOMAINS)) for _ in range(n)]
    traces.append(
        Trace(
            "long_tasks",
            f"tasks of 120 s mean: {n} at t=60 s and {n} at t={second:g} s, 0.05/s between",
            dur,
            sorted(arr),
            service_mean=120.0,
            service_sigma=0.5,
            # Whoever runs two-minute tasks gives the pods a grace period that lets them finish (KEDA's
            # guide for long-running work under a Deployment says the same): 20 minutes, about twice the
            # longest of the ~10,000 tasks over the seeds (log-normal, mean 120 s, sigma 0.5).
            drain_seconds=1200.0,
        )
    )
    return traces
