"""Errors the queue client raises."""

from __future__ import annotations


class QueueError(Exception):
    """Base class of the queue's errors."""


class QueueUnavailable(QueueError):
    """Redis could not be reached (after retries with backoff). The operation may or may not have been
    applied; nothing was reported as stored. Idempotent operations (enqueue, register, cancel, ...) can be
    repeated safely; a claim retried by the client replays its first reply instead of leasing more."""


class UnknownJob(QueueError, KeyError):
    """The job was never registered, or was cancelled or has expired."""
