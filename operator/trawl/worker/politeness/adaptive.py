"""This worker's adaptive per-domain delay: pure arithmetic on the latency and errors it observes.

The rate limit (:mod:`.rate`) spaces a domain's requests by it on top of the pool-wide rate; the
pipeline feeds it each fetch's latency and whether the site was in trouble.
"""

from __future__ import annotations

import time
from dataclasses import dataclass


@dataclass
class AdaptiveDelay:
    """Per-domain extra delay that grows with latency and errors and decays when the site is healthy.

    ``delay = max(0, latency_ewma - fast) * latency_weight + latency_ewma * error_ewma * error_weight``,
    capped at ``max_delay``. A domain answering fast and without errors gets no delay at all.

    The error rate and the excess latency also fade with time (half-life ``half_life`` seconds since the
    last observation): a long delay means few observations, so a slowdown that only new answers could
    undo would outlive the trouble by many minutes (one timeout spaced a host's requests 25-30 s apart
    for later jobs). Sustained trouble is the circuit breaker's business (:mod:`trawl.worker.breaker`).
    """

    fast: float = 1.0  # latency (s) below which a site is not slowed down for being slow
    latency_weight: float = 1.0
    error_weight: float = 8.0
    max_delay: float = 30.0
    alpha: float = 0.2
    half_life: float = 15.0
    latency_ewma: float = 0.0
    error_ewma: float = 0.0
    samples: int = 0
    last_at: float = 0.0  # monotonic time of the last observation

    def _faded(self, now: float) -> tuple[float, float]:
        """(latency_ewma, error_ewma) faded by the time since the last observation."""
        if self.samples == 0 or now <= self.last_at:
            return self.latency_ewma, self.error_ewma
        f = 0.5 ** ((now - self.last_at) / self.half_life)
        latency = self.latency_ewma
        if latency > self.fast:
            latency = self.fast + (latency - self.fast) * f
        return latency, self.error_ewma * f

    def observe(self, latency: float, error: bool, now: float | None = None) -> None:
        now = time.monotonic() if now is None else now
        self.latency_ewma, self.error_ewma = self._faded(now)
        if self.samples == 0:
            self.latency_ewma = latency
        else:
            self.latency_ewma += self.alpha * (latency - self.latency_ewma)
        self.error_ewma += self.alpha * ((1.0 if error else 0.0) - self.error_ewma)
        self.samples += 1
        self.last_at = now

    def delay_at(self, now: float) -> float:
        latency, errors = self._faded(now)
        slow = max(0.0, latency - self.fast) * self.latency_weight
        erring = latency * errors * self.error_weight if errors > 0.01 else 0.0
        return min(self.max_delay, slow + erring)

    @property
    def delay(self) -> float:
        return self.delay_at(time.monotonic())
