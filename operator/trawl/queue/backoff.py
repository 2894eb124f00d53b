"""Pure retry decisions: backoff delay (fixed or exponential, capped, with jitter), ``Retry-After``, and
retry versus dead letter. No I/O; the client applies the decision in one Lua script."""

from __future__ import annotations

import email.utils
import math
from collections.abc import Callable
from typing import NamedTuple

from .model import RetryPolicy

#: The longest delay a server's Retry-After may impose (a day); longer values are clamped.
RETRY_AFTER_CAP_SECONDS = 86400.0


class FailureDecision(NamedTuple):
    retry: bool
    delay: float  # seconds from now; 0 when not retried
    reason: str  # "retry", "retry-after", "permanent" or "exhausted"


def backoff_delay(policy: RetryPolicy, attempt: int, rand: Callable[[], float]) -> float:
    """Delay after failed attempt ``attempt`` (1 = the first): Fixed -> initial; Exponential ->
    initial * 2**(attempt-1); both capped at max_delay, then shortened by up to ``jitter`` (a fraction)."""
    if attempt < 1:
        raise ValueError("attempt counts from 1")
    if policy.backoff == "Fixed":
        base = policy.initial_delay
    else:
        # 2**1000 overflows float multiplication only beyond any sane cap; clamp the exponent first.
        exponent = min(attempt - 1, 64)
        base = policy.initial_delay * math.pow(2.0, exponent)
    base = min(base, policy.max_delay)
    jitter = min(max(policy.jitter, 0.0), 1.0)
    return max(0.0, base * (1.0 - jitter * rand()))


def decide_failure(
    policy: RetryPolicy,
    attempt: int,
    error_class: str,
    rand: Callable[[], float],
    *,
    retry_after: float | None = None,
) -> FailureDecision:
    """Retry or dead-letter after failed attempt ``attempt``.

    A failure whose class is not in ``retry_on`` is permanent; a retryable one is retried while
    ``attempt < max_attempts``. The delay is the backoff delay, unless the server sent ``Retry-After``
    (seconds from now) and the policy honours it: then the server's value wins (clamped to [0, a day]).
    """
    if error_class not in policy.retry_on:
        return FailureDecision(False, 0.0, "permanent")
    if attempt >= policy.max_attempts:
        return FailureDecision(False, 0.0, "exhausted")
    if retry_after is not None and policy.honor_retry_after and math.isfinite(retry_after):
        return FailureDecision(True, min(max(retry_after, 0.0), RETRY_AFTER_CAP_SECONDS), "retry-after")
    return FailureDecision(True, backoff_delay(policy, attempt, rand), "retry")


def parse_retry_after(value: str | None, now: float) -> float | None:
    """An HTTP ``Retry-After`` header (delta-seconds or an HTTP-date) as seconds from ``now``; None if invalid."""
    if value is None:
        return None
    text = value.strip()
    if not text:
        return None
    if text.isdigit():
        return float(int(text))
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - now)
