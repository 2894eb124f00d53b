"""Errors the queue client raises, and the one answer it raises as an exception (:class:`WorkerCordoned`)."""

from __future__ import annotations


class QueueError(Exception):
    """Base class of the queue's errors."""


class QueueUnavailable(QueueError):
    """Redis could not be reached (after retries with backoff). The operation may or may not have been
    applied; nothing was reported as stored. Idempotent operations (enqueue, register, cancel, ...) can be
    repeated safely; a claim retried by the client replays its first reply instead of leasing more."""


class UnknownJob(QueueError, KeyError):
    """The job was never registered, or was cancelled or has expired."""


class WorkerCordoned(Exception):
    """A claim's answer when the autoscaler cordoned the worker's pod (``set_cordoned``): nothing was
    leased, and nothing will be until the cordon lifts (the heartbeat's reply says when). Not a
    :class:`QueueError`: Redis answered, and the worker only stops claiming."""
