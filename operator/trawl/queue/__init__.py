"""Trawl's Redis queue: leases, priorities with fairness among jobs, delayed retries, dead letters."""

from .client import Queue
from .errors import QueueError, QueueUnavailable, UnknownJob, WorkerCordoned
from .keys import Keys, pool_prefix
from .model import (
    DeadLetterRecord,
    FailOutcome,
    JobConfig,
    JobStats,
    PoolSignals,
    QueueClient,
    RetryPolicy,
    Task,
    TenantLimits,
    TenantPolicy,
    TenantUsage,
    WorkerActivity,
)

__all__ = [
    "DeadLetterRecord",
    "FailOutcome",
    "JobConfig",
    "JobStats",
    "Keys",
    "PoolSignals",
    "Queue",
    "QueueClient",
    "QueueError",
    "QueueUnavailable",
    "RetryPolicy",
    "Task",
    "TenantLimits",
    "TenantPolicy",
    "TenantUsage",
    "UnknownJob",
    "WorkerActivity",
    "WorkerCordoned",
    "pool_prefix",
]
