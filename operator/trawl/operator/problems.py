"""Errors the operator meets while reconciling, as a condition reason and a message (pure)."""

from __future__ import annotations

from kubernetes.client import ApiException
from redis.exceptions import OutOfMemoryError, RedisClusterException, RedisError

from trawl.queue import QueueUnavailable
from trawl.redisconn.memory import OUT_OF_MEMORY, out_of_memory_message
from trawl.redisconn.settings import RedisConfigError, RedisUnreachable

from . import kube


def classify_error(exc: BaseException) -> tuple[str, str]:
    """(reason, message) for a status: the API server's own message for its errors."""
    if isinstance(exc, ApiException):
        status = exc.status or 0
        reason = "APIRejected" if 400 <= status < 500 else "APIUnavailable"
        return reason, f"Kubernetes API: {kube.api_message(exc)}"
    if isinstance(exc, RedisConfigError):
        return "RedisConfigInvalid", str(exc)
    if isinstance(exc, OutOfMemoryError):
        return OUT_OF_MEMORY, out_of_memory_message(None)
    if isinstance(exc, (RedisUnreachable, QueueUnavailable, RedisError, RedisClusterException)):
        return "RedisUnavailable", f"Redis: {type(exc).__name__}: {exc}"
    if isinstance(exc, (OSError, TimeoutError)):
        return "Unreachable", f"{type(exc).__name__}: {exc}"
    return "InternalError", f"{type(exc).__name__}: {exc}"[:1024]
