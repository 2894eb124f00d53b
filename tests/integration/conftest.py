"""Fixtures of the integration layer (real redis-server, worker in-process or as processes): the bookstore
fixture site on 127.0.0.2, the address the worker tests allow, one per test module."""

from __future__ import annotations

from sites import bookstore_fixture

site = bookstore_fixture("module", host="127.0.0.2")
