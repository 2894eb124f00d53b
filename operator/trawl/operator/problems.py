"""Why the operator cannot make progress, as a condition reason and a message (pure).

A Problem is what every kind reports as Stalled=True (conditions.stalled); classify_error turns an
error no reconcile step anticipated into one.
"""

from __future__ import annotations

from typing import NamedTuple

from kubernetes.client import ApiException
from redis.exceptions import OutOfMemoryError, RedisClusterException, RedisError

from trawl.queue import QueueUnavailable
from trawl.redisconn.memory import OUT_OF_MEMORY, out_of_memory_message
from trawl.redisconn.settings import RedisConfigError, RedisUnreachable

from . import kube


class Problem(NamedTuple):
    """Why the operator cannot make progress (Stalled=True). A (reason, message) pair: it unpacks as one."""

    reason: str  # CamelCase: InvalidSpec, PoolNotFound, PoolNotReady, RedisUnavailable, SecretNotMounted
    message: str


def classify_error(exc: BaseException) -> Problem:
    """The problem for a status: the API server's own message for its errors."""
    if isinstance(exc, ApiException):
        status = exc.status or 0
        reason = "APIRejected" if 400 <= status < 500 else "APIUnavailable"
        return Problem(reason, f"Kubernetes API: {kube.api_message(exc)}")
    if isinstance(exc, RedisConfigError):
        return Problem("RedisConfigInvalid", str(exc))
    if isinstance(exc, OutOfMemoryError):
        return Problem(OUT_OF_MEMORY, out_of_memory_message(None))
    if isinstance(exc, (RedisUnreachable, QueueUnavailable, RedisError, RedisClusterException)):
        return Problem("RedisUnavailable", f"Redis: {type(exc).__name__}: {exc}")
    if isinstance(exc, (OSError, TimeoutError)):
        return Problem("Unreachable", f"{type(exc).__name__}: {exc}")
    return Problem("InternalError", f"{type(exc).__name__}: {exc}"[:1024])
