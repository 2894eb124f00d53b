"""Operator shards: several operators share a cluster's Trawl objects by a label, as Flux's controllers do.

An object labelled ``sharding.trawl.dev/key: <key>`` is reconciled only by the operator started with
``--shard <key>``; the main operator, started with ``--unsharded-only`` once shards exist, reconciles the
objects without the label; an operator started with neither reconciles every object (one operator, the
default). Each shard elects its own leader on its own Lease (``trawl-operator-<key>``), so a shard whose
leader dies pauses only its own objects, for at most one lease, while the other shards go on.

What is not sharded: the indexes (pools, jobs, namespaces, Secrets) stay whole in every shard, read-only,
so a job may use a pool another shard reconciles (its tasks go to the pool's Redis either way). Only a
shard's own objects get handlers, timers and finalizers: a shard's work and memory grow with its objects.
A CronScrapeJob's jobs carry its shard label (a template's own label is overridden), so they stay with it.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import kopf

from trawl.api.naming import FIELD_MANAGER

SHARD_LABEL = "sharding.trawl.dev/key"
# A label value (RFC 1123-ish: what the API server accepts as a label value), at most 63 characters.
_KEY = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


@dataclass(frozen=True)
class Sharding:
    key: str | None = None  # this operator's shard; None: not a shard
    unsharded_only: bool = False  # the main operator beside shards: only objects without the label

    def __post_init__(self) -> None:
        if self.key is not None and not _KEY.match(self.key):
            raise ValueError(
                f"shard key {self.key!r} is not a label value (letters, digits, '-', '_', '.'; 63 at most)"
            )
        if self.key is not None and self.unsharded_only:
            raise ValueError("a shard (--shard) reconciles its own objects; --unsharded-only is the main operator's")

    def handler_labels(self) -> dict[str, Any] | None:
        """The label filter of every reconciling handler (kopf checks it before a handler or timer runs)."""
        if self.key is not None:
            return {SHARD_LABEL: self.key}
        if self.unsharded_only:
            return {SHARD_LABEL: kopf.ABSENT}
        return None

    def owns(self, labels: Mapping[str, str] | None) -> bool:
        """Whether this operator reconciles an object with these labels (the filter, for code outside kopf)."""
        value = (labels or {}).get(SHARD_LABEL)
        if self.key is not None:
            return value == self.key
        return value is None or not self.unsharded_only

    @property
    def field_manager(self) -> str:
        """Whose status writes these are: a shard's own manager, so managedFields tell which shard wrote."""
        return FIELD_MANAGER if self.key is None else f"{FIELD_MANAGER}-{self.key}"

    def lease_name(self, base: str) -> str:
        return base if self.key is None else f"{base}-{self.key}"


def inherited_labels(cron_labels: Mapping[str, str] | None) -> dict[str, str]:
    """The shard label a CronScrapeJob's run inherits from it (none for an unlabelled cron)."""
    value = (cron_labels or {}).get(SHARD_LABEL)
    return {} if value is None else {SHARD_LABEL: value}


_current = Sharding()


_HANDLERS = ("trawl.operator.job.handlers", "trawl.operator.pool.handlers", "trawl.operator.cron.handlers")


def configure(sharding: Sharding) -> None:
    """Set before the handler modules are imported: their decorators read the filter once, at import."""
    global _current
    if sharding != _current and any(m in sys.modules for m in _HANDLERS):
        raise RuntimeError("the operator's shard is set after its handlers registered with another filter")
    _current = sharding


def current() -> Sharding:
    return _current
