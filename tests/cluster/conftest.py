"""Fixtures of the cluster layer: one real etcd + kube-apiserver per session, a namespace per test (the
operator's fixtures are in kube_fixtures.py, shared with the Redis Cluster and Sentinel layers)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kube_fixtures import control_plane, namespace, operator, supervisor, tenant

from sites import bookstore_fixture

__all__ = ["control_plane", "namespace", "operator", "supervisor", "tenant"]


# The bookstore fixture site on a loopback port (4 categories x 25 books, hostile endpoints).
bookstore = bookstore_fixture("function", name="bookstore")


@pytest.fixture
def receiver() -> Iterator[Any]:
    """A webhook receiver (operator_fixtures.WebhookReceiver) on a free loopback port."""
    from operator_fixtures import WebhookReceiver

    with WebhookReceiver() as server:
        yield server
