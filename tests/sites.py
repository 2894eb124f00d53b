"""The bookstore fixture site (trawl.dev.bookstore.Bookstore, a process on a loopback port) as a pytest fixture:
one definition, bound in the conftest of each layer that fetches it, with the layer's scope and arguments
(``site = bookstore_fixture("module", host="127.0.0.2")``). A test module that needs another shape of the
site (fewer books, slower answers) overrides the ``site_options`` fixture (tests/conftest.py): its arguments
are laid over the layer's."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import pytest

from trawl.dev.bookstore import AccessEntry, Bookstore


def bookstore_fixture(scope: Literal["function", "module"], *, name: str = "site", **arguments: Any) -> Any:
    """A fixture ``name`` of ``scope``: a running Bookstore(**arguments, **site_options), stopped after."""

    @pytest.fixture(scope=scope, name=name)
    def bookstore(site_options: dict[str, Any]) -> Iterator[Bookstore]:
        with Bookstore(**(arguments | site_options)) as store:
            yield store

    return bookstore


def peak_overlap(entries: list[AccessEntry]) -> int:
    """The most requests the site was answering at one instant (its access log's own times)."""
    edges = sorted([(e.time, 1) for e in entries] + [(e.finished or e.time, -1) for e in entries])
    peak = cur = 0
    for _, step in edges:  # an answer at the instant another arrives frees its slot first (-1 sorts first)
        cur += step
        peak = max(peak, cur)
    return peak
