"""One ScrapeJob's passes through the operator's own job pass (``reconcile_job``) on a real Redis, each from
the status the previous pass wrote, as the operator runs them: for the tests that drive a job's lifecycle
without a Kubernetes API server."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from trawl.operator.connections import RedisConnections
from trawl.operator.events import Transition
from trawl.operator.job.reconcile import reconcile_job


class JobPasses:
    """``run()`` is one pass; ``status`` and ``events`` hold what the passes wrote; ``restart()`` drops every
    connection and queue client, as a restarted operator starts with none."""

    def __init__(
        self,
        name: str,
        uid: str,
        spec: dict[str, Any],
        pool_index: dict[tuple[str, str], list[dict[str, Any]]],
        *,
        namespace: str,
        connections: RedisConnections | None = None,
    ) -> None:
        self.name, self.uid, self.spec, self.index, self.namespace = name, uid, spec, pool_index, namespace
        self.connections = connections or RedisConnections()
        self.status: dict[str, Any] = {}
        self.events: list[Transition] = []

    def restart(self) -> None:
        self.connections = RedisConnections()

    async def run(self) -> dict[str, Any]:
        outcome = await reconcile_job(
            name=self.name,
            namespace=self.namespace,
            uid=self.uid,
            generation=1,
            spec_raw=self.spec,
            status=self.status,
            annotations={},
            pool_index=self.index,
            connections=self.connections,
            now=datetime.now(UTC),
        )
        self.status = outcome.status
        self.events += outcome.events
        return self.status

    def condition(self, type_: str) -> dict[str, Any] | None:
        return next((c for c in self.status.get("conditions") or [] if c["type"] == type_), None)


def one_pool(namespace: str, pool: str, spec: dict[str, Any]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """A pool index holding one pool (as the operator's kopf index does)."""
    return {(namespace, pool): [{"spec": spec, "uid": "pool-uid"}]}
