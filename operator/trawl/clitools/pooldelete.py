"""``trawl pool delete``: delete ScrapePools the way their finalizer allows, and say why when it cannot.

A pool's finalizer is removed by the operator, and only once no ScrapeJob names the pool (deleting a job
needs the pool's Redis). So a deletion either ends in seconds, or is held by the operator with a
``DeletionBlocked`` Event, or never ends because no operator runs. This command turns each of those into
an outcome within a bounded time: gone, refused with the jobs that block it (checked before deleting, so
the pool stays usable), or a timeout naming the finalizer. The chart's pre-delete hook runs it, so that
``helm uninstall`` removes the chart's pool while the operator still runs, or fails with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from trawl.api.naming import FINALIZER, GROUP, VERSION

from .cluster import PLURALS, Cluster
from .exits import EXIT_FAILED, EXIT_NOT_FOUND, EXIT_TIMEOUT, CliError

# The reason of the Warning Event the operator posts when it holds a pool's deletion
# (operator/pool/handlers.pool_deleted).
BLOCKED_REASON = "DeletionBlocked"


def jobs_naming(pool: str, jobs: Iterable[Mapping[str, Any]], namespace: str | None = None) -> list[str]:
    """Names of the jobs of the pool's ``namespace`` that block its deletion: every job naming it, finished
    or not (the operator's rule, operator/pool/handlers.pool_deleted). Jobs of other namespaces that a
    shared pool serves also block it; this command does not list them (it may not read other namespaces):
    the operator holds the deletion and its DeletionBlocked Event names them, which the wait reports."""
    return sorted(
        str(j["metadata"]["name"])
        for j in jobs
        if (j.get("spec") or {}).get("pool") == pool
        and (j.get("spec") or {}).get("poolNamespace") in (None, "", namespace, j["metadata"].get("namespace"))
    )


def blocked_message(namespace: str, pool: str, users: list[str]) -> str:
    shown = ", ".join(users[:5]) + (", ..." if len(users) > 5 else "")
    return (
        f"ScrapePool {namespace}/{pool} not deleted: {len(users)} ScrapeJobs still name it ({shown}); "
        "delete them first (their finalizers purge their queue data), then retry"
    )


def operator_hold(events: Iterable[Mapping[str, Any]], uid: str) -> str | None:
    """The operator's message if it holds this pool's deletion (its DeletionBlocked Event), else None."""
    for event in events:
        involved = event.get("involvedObject") or {}
        if event.get("reason") == BLOCKED_REASON and involved.get("uid") == uid:
            return str(event.get("message") or BLOCKED_REASON)
    return None


class PoolDeleter:
    """Thin I/O around the decisions above; ``clock``/``sleep`` are injectable for the unit tests."""

    def __init__(
        self,
        cluster: Cluster,
        *,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.cluster = cluster
        self.clock = clock
        self.sleep = sleep

    def _pool(self, name: str) -> dict[str, Any] | None:
        try:
            return self.cluster.get("ScrapePool", name)
        except CliError as exc:
            if exc.code == EXIT_NOT_FOUND:
                return None
            raise

    def _events(self, name: str) -> list[dict[str, Any]]:
        events = self.cluster.call(
            self.cluster.core.list_namespaced_event,
            self.cluster.namespace,
            field_selector=f"involvedObject.name={name},reason={BLOCKED_REASON}",
        )
        return [
            {"reason": e.reason, "message": e.message, "involvedObject": {"uid": e.involved_object.uid}}
            for e in events.items or []
        ]

    def delete(self, names: list[str], timeout: float) -> list[str]:
        """Delete each pool and wait until all are gone (at most ``timeout`` seconds in all). Returns one
        line per pool; raises CliError when a job blocks one, the operator holds one, or time runs out."""
        ns = self.cluster.namespace
        jobs = self.cluster.list("ScrapeJob")
        present: dict[str, str] = {}  # name -> uid
        lines: list[str] = []
        for name in names:
            pool = self._pool(name)
            if pool is None:
                lines.append(f"ScrapePool {ns}/{name} not found: nothing to delete")
                continue
            users = jobs_naming(name, jobs, ns)
            if users:
                # Checked before deleting: a refused pool is left untouched and keeps serving its jobs.
                raise CliError(blocked_message(ns, name, users), EXIT_FAILED)
            present[name] = pool["metadata"]["uid"]
        for name in present:
            self.cluster.call(
                self.cluster.custom.delete_namespaced_custom_object,
                GROUP,
                VERSION,
                ns,
                PLURALS["ScrapePool"],
                name,
                what=f"ScrapePool {ns}/{name}",
            )
        deadline = self.clock() + timeout
        while present:
            for name, uid in list(present.items()):
                pool = self._pool(name)
                if pool is None or pool["metadata"]["uid"] != uid:
                    lines.append(f"ScrapePool {ns}/{name} deleted")
                    del present[name]
                    continue
                # A job created after the check above: the operator holds the deletion and says why.
                held = operator_hold(self._events(name), uid)
                if held:
                    raise CliError(f"ScrapePool {ns}/{name} not deleted, the operator holds it: {held}", EXIT_FAILED)
            if not present:
                break
            if self.clock() >= deadline:
                left = ", ".join(f"{ns}/{n}" for n in present)
                raise CliError(
                    f"ScrapePools {left} still there after {timeout:g}s: their finalizer {FINALIZER} is removed "
                    "by the Trawl operator, which has not done so (is it running?)",
                    EXIT_TIMEOUT,
                )
            self.sleep(1.0)
        return lines
