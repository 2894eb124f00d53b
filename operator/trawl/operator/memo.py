"""Results of pure work the operator's passes repeat, kept by what they depend on.

Every active ScrapeJob is reconciled every second, and a pass validated the job's spec, the pool's spec and
the job's admission on its pool (the worker spec it resolves to) each time, though they change only when
someone edits a spec: about a third of the operator's event-loop time at 1,000 jobs (py-spy,
docs/benchmarks.md "Operator scale"). A memo keeps the last results by a key that names every input, and
forgets the least recently used beyond its size, so its memory is bounded whatever the number of jobs.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Hashable, Mapping
from typing import Any, Generic, TypeVar

V = TypeVar("V")


class Memo(Generic[V]):
    """A bounded least-recently-used map from a key to a value computed once (exceptions are not kept)."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._items: OrderedDict[Hashable, V] = OrderedDict()
        self.hits = self.misses = 0

    def get(self, key: Hashable, make: Callable[[], V]) -> V:
        try:
            value = self._items[key]
        except KeyError:
            self.misses += 1
            value = make()
            self._items[key] = value
            if len(self._items) > self.size:
                self._items.popitem(last=False)
            return value
        self.hits += 1
        self._items.move_to_end(key)
        return value

    def __len__(self) -> int:
        return len(self._items)


def digest(obj: Mapping[str, Any]) -> str:
    """A fingerprint of a spec as the API server returned it (key order does not matter)."""
    text = json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()
