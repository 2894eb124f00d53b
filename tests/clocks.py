"""A clock the test sets: the queue's ``clock`` argument, so leases, backoff, aging and quotas move only when
a test says time passed."""

from __future__ import annotations


class Clock:
    def __init__(self, t: float = 1_800_000_000.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds
