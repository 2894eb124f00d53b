"""One shared feed of ScrapeJobs, ScrapePools and CronScrapeJobs for every open console page.

One loop reads the objects with the operator's credentials (one list per kind and namespace per interval,
however many browsers watch) while at least one page is subscribed, and wakes the subscribers when
anything changed; each subscriber then filters what it sends by its own viewer's RBAC."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import kubernetes
from kubernetes.client import ApiClient

from trawl.api.naming import GROUP, VERSION

from ..store import StoreError

log = logging.getLogger("trawl.resultsapi.console")
KINDS = ("scrapejobs", "scrapepools", "cronscrapejobs")
REQUEST_TIMEOUT = (5, 15)


@dataclass
class Snapshot:
    version: int = 0
    objects: dict[str, list[dict[str, Any]]] = field(default_factory=lambda: {k: [] for k in KINDS})


class Hub:
    def __init__(self, api: ApiClient, namespaces: Sequence[str], interval: float = 1.0) -> None:
        self._custom: Any = kubernetes.client.CustomObjectsApi(api)
        self._namespaces = tuple(namespaces)
        self.interval = interval
        self.snapshot = Snapshot()
        self._changed = asyncio.Condition()
        self._subscribers = 0
        self._wanted = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._digest = ""

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="console-hub")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    @contextlib.asynccontextmanager
    async def subscription(self) -> Any:
        self._subscribers += 1
        self._wanted.set()
        try:
            yield
        finally:
            self._subscribers -= 1

    async def fresh(self) -> Snapshot:
        """The objects now (a page being rendered reads them once, subscribed or not)."""
        if self._subscribers == 0 or self.snapshot.version == 0:
            try:
                await self._refresh()
            except Exception as exc:  # said as a 503 page, never a traceback
                raise StoreError(
                    503, f"the Kubernetes API server did not list the objects: {type(exc).__name__}"
                ) from None
        return self.snapshot

    async def changed_after(self, version: int, wait: float) -> Snapshot:
        async with self._changed:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait_for(lambda: self.snapshot.version > version), wait)
        return self.snapshot

    async def _run(self) -> None:
        while True:
            if self._subscribers == 0:
                self._wanted.clear()
                await self._wanted.wait()
            try:
                await self._refresh()
            except Exception as exc:  # the API server restarting: the pages keep their last state
                log.warning("console feed: cannot list objects: %s", type(exc).__name__)
            await asyncio.sleep(self.interval)

    async def _refresh(self) -> None:
        objects = {kind: await self._list(kind) for kind in KINDS}
        digest = json.dumps(objects, sort_keys=True, default=str)
        if digest == self._digest:
            return
        self._digest = digest
        async with self._changed:
            self.snapshot = Snapshot(self.snapshot.version + 1, objects)
            self._changed.notify_all()

    async def _list(self, kind: str) -> list[dict[str, Any]]:
        if not self._namespaces:
            found: dict[str, Any] = await asyncio.to_thread(
                self._custom.list_cluster_custom_object, GROUP, VERSION, kind, _request_timeout=REQUEST_TIMEOUT
            )
            return list(found.get("items") or [])
        items: list[dict[str, Any]] = []
        for namespace in self._namespaces:
            listed: dict[str, Any] = await asyncio.to_thread(
                self._custom.list_namespaced_custom_object, GROUP, VERSION, namespace, kind,
                _request_timeout=REQUEST_TIMEOUT,
            )  # fmt: skip
            items += listed.get("items") or []
        return sorted(items, key=lambda o: (o["metadata"]["namespace"], o["metadata"]["name"]))
