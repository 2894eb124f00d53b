"""Leader election on a ``coordination.k8s.io/v1`` Lease, as client-go's leaderelection does it.

Replicas race for one Lease; the holder renews it every ``renew_seconds``. A candidate takes the
Lease only after it has seen the same record (holder, renewTime) unchanged for ``lease_seconds`` of
its *own* clock — no comparison of timestamps across machines, so clock skew cannot split the
brain. Every write is guarded by resourceVersion: of two candidates, one wins, the other re-reads.

The leader that cannot renew for ``renew_deadline`` seconds (API unreachable, Lease taken) must stop
acting at once; the caller exits the process (what controller-runtime and client-go users do), and
the Deployment restarts it as a standby. The decisions are pure (:func:`decide`); the loop is thin.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from . import kube

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    holder: str | None
    renew_time: str | None
    lease_seconds: int
    transitions: int
    resource_version: str | None


@dataclass(frozen=True, slots=True)
class Observation:
    """What this candidate last saw, and when by its own monotonic clock."""

    holder: str | None
    renew_time: str | None
    seen_at: float


def decide(record: LeaseRecord | None, seen: Observation | None, identity: str, now: float) -> str:
    """ "create" (no Lease), "renew" (ours), "take" (expired or released), or "wait" (another holds it)."""
    if record is None:
        return "create"
    if record.holder == identity:
        return "renew"
    if not record.holder:
        return "take"  # released by a leader that shut down cleanly
    if seen is None or (seen.holder, seen.renew_time) != (record.holder, record.renew_time):
        return "wait"  # the record moved (or we just started): its holder is alive as of now
    return "take" if now - seen.seen_at >= record.lease_seconds else "wait"


def _record(obj: Any) -> LeaseRecord:
    lease = kube.to_dict(obj)
    spec = lease.get("spec") or {}
    return LeaseRecord(
        holder=spec.get("holderIdentity"),
        renew_time=spec.get("renewTime"),
        lease_seconds=int(spec.get("leaseDurationSeconds") or 15),
        transitions=int(spec.get("leaseTransitions") or 0),
        resource_version=(lease.get("metadata") or {}).get("resourceVersion"),
    )


def _now_micro() -> str:
    # MicroTime: the API server rejects a renewTime without fractional seconds in some versions.
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LeaderElector:
    def __init__(
        self,
        namespace: str,
        name: str,
        identity: str,
        *,
        lease_seconds: int = 15,
        renew_seconds: float = 5.0,
        retry_seconds: float = 2.0,
        renew_deadline: float = 10.0,
    ) -> None:
        if not renew_seconds < renew_deadline < lease_seconds:
            raise ValueError("need renew_seconds < renew_deadline < lease_seconds")
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.retry_seconds = retry_seconds
        self.renew_deadline = renew_deadline
        self.is_leader = False
        self._seen: Observation | None = None
        self._record: LeaseRecord | None = None

    def _api(self) -> Any:
        import kubernetes

        return kubernetes.client.CoordinationV1Api(kube.api_client())

    async def _read(self) -> LeaseRecord | None:
        try:
            return _record(await kube.call(self._api().read_namespaced_lease, self.name, self.namespace))
        except Exception as exc:
            if kube.is_status(exc, 404):
                return None
            raise

    def _body(self, transitions: int, acquire_time: str | None, rv: str | None) -> dict[str, Any]:
        now = _now_micro()
        spec: dict[str, Any] = {
            "holderIdentity": self.identity,
            "leaseDurationSeconds": self.lease_seconds,
            "renewTime": now,
            "leaseTransitions": transitions,
        }
        if acquire_time is not None:
            spec["acquireTime"] = acquire_time
        meta: dict[str, Any] = {"name": self.name, "namespace": self.namespace}
        if rv is not None:
            meta["resourceVersion"] = rv
        return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": meta, "spec": spec}

    async def try_once(self) -> bool:
        """One round: create, renew or take the Lease if this candidate may. True if it holds it now."""
        record = await self._read()
        now = time.monotonic()
        action = decide(record, self._seen, self.identity, now)
        if record is not None and (
            self._seen is None or (self._seen.holder, self._seen.renew_time) != (record.holder, record.renew_time)
        ):
            self._seen = Observation(record.holder, record.renew_time, now)
        if action == "wait":
            return False
        try:
            if action == "create":
                body = self._body(0, _now_micro(), None)
                await kube.call(self._api().create_namespaced_lease, self.namespace, body)
            else:
                assert record is not None
                taking = action == "take"
                body = self._body(
                    record.transitions + (1 if taking else 0),
                    _now_micro() if taking else None,
                    record.resource_version,
                )
                await kube.call(self._api().patch_namespaced_lease, self.name, self.namespace, body)
        except Exception as exc:
            if kube.is_status(exc, 409):  # another candidate wrote first: read again next round
                return False
            raise
        if action != "renew":
            log.info("leader election: %s now holds Lease %s/%s (%s)", self.identity, self.namespace, self.name, action)
        return True

    async def acquire(self) -> None:
        """Wait until this candidate holds the Lease."""
        log.info("leader election: %s waiting for Lease %s/%s", self.identity, self.namespace, self.name)
        while True:
            try:
                if await self.try_once():
                    self.is_leader = True
                    return
            except Exception as exc:
                log.warning("leader election: %s", kube.api_message(exc))
            await asyncio.sleep(self.retry_seconds)

    async def hold(self, on_lost: Callable[[str], None]) -> None:
        """Renew until the Lease is lost or cannot be renewed within renew_deadline; then call on_lost."""
        last_renewed = time.monotonic()
        while True:
            await asyncio.sleep(self.renew_seconds)
            try:
                renewed = await asyncio.wait_for(self.try_once(), timeout=self.renew_deadline)
            except Exception as exc:
                renewed = False
                log.warning("leader election: renew failed: %s", kube.api_message(exc))
            if renewed:
                last_renewed = time.monotonic()
                continue
            holder = self._seen.holder if self._seen else None
            if holder not in (None, self.identity) or time.monotonic() - last_renewed >= self.renew_deadline:
                self.is_leader = False
                on_lost(f"Lease {self.namespace}/{self.name} lost (holder now {holder!r})")
                return

    async def release(self) -> None:
        """On a clean shutdown: empty the holder so a standby takes over without waiting for expiry."""
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            record = await self._read()
            if record is None or record.holder != self.identity:
                return
            body = {
                "metadata": {"resourceVersion": record.resource_version},
                "spec": {"holderIdentity": None, "renewTime": _now_micro(), "leaseDurationSeconds": 1},
            }
            await kube.call(self._api().patch_namespaced_lease, self.name, self.namespace, body)
            log.info("leader election: released Lease %s/%s", self.namespace, self.name)
        except Exception as exc:  # best effort: expiry hands it over anyway
            log.warning("leader election: could not release the Lease: %s", kube.api_message(exc))
