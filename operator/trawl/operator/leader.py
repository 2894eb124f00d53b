"""Leader election on a ``coordination.k8s.io/v1`` Lease, client-go's protocol with a tighter takeover.

Replicas race for one Lease; the holder renews it every ``renew_seconds``. Every write is guarded by
resourceVersion: of two candidates, one wins, the other re-reads.

When a standby may take the Lease. client-go counts ``leaseDurationSeconds`` from the moment the
candidate *observed* a renewal, and polls every retry period: it takes over up to two retry periods
after the lease of the leader's last renewal has run out. Here the candidate counts from the renewal
itself: it backdates its own observation by how old the record's ``renewTime`` was when it read it
(the polling lag), and it wakes exactly at the expiry it computed instead of at its next poll, then
writes the take against the resourceVersion it saw (a renewal in between makes that write fail with
409, so a live leader is never displaced). The backdating uses the leader's clock, so it is bounded:
never more than ``lease_seconds - renew_deadline``. That keeps the safety of client-go's rule under
any clock skew — the candidate still never takes before ``renew_deadline`` after its own sight of the
record, and the leader, which counts its deadline from the moment it *sent* its last successful
renewal (at or before the server stored it), has stopped acting by then.

The leader that cannot renew within ``renew_deadline`` (API unreachable, Lease taken by another
holder) must stop acting at once; the caller exits the process (what controller-runtime and client-go
users do), and the Deployment restarts it as a standby. The decisions are pure (:func:`decide`,
:func:`observe`); the loops are thin.
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
    """A record this candidate saw, and when (by its own monotonic clock) it reckons it was renewed."""

    holder: str | None
    renew_time: str | None
    renewed_at: float


def parse_micro_time(value: str | None) -> datetime | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def observe(
    record: LeaseRecord, seen: Observation | None, now: float, wall_now: datetime, max_backdate: float
) -> Observation:
    """The observation after reading ``record`` at monotonic ``now`` / wall clock ``wall_now``.

    The same record as before keeps its first observation (its lease runs from then, not from every
    re-read). A new record was renewed ``wall_now - renewTime`` ago by the leader's clock: trusted up
    to ``max_backdate`` seconds (a clock ahead of ours counts as zero, one far behind as the bound)."""
    if seen is not None and (seen.holder, seen.renew_time) == (record.holder, record.renew_time):
        return seen
    renewed = parse_micro_time(record.renew_time)
    age = (wall_now - renewed).total_seconds() if renewed is not None else 0.0
    return Observation(record.holder, record.renew_time, now - min(max(age, 0.0), max_backdate))


def expires_at(record: LeaseRecord, seen: Observation) -> float:
    return seen.renewed_at + record.lease_seconds


def decide(record: LeaseRecord | None, seen: Observation | None, identity: str, now: float) -> str:
    """ "create" (no Lease), "renew" (ours), "take" (expired or released), or "wait" (another holds it).

    ``seen`` must be the observation of this very record (see :func:`observe`)."""
    if record is None:
        return "create"
    if record.holder == identity:
        return "renew"
    if not record.holder:
        return "take"  # released by a leader that shut down cleanly
    if seen is None or (seen.holder, seen.renew_time) != (record.holder, record.renew_time):
        return "wait"
    return "take" if now >= expires_at(record, seen) else "wait"


def _record(lease: dict[str, Any]) -> LeaseRecord:
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
        client: Any = None,
    ) -> None:
        if not renew_seconds < renew_deadline < lease_seconds:
            raise ValueError("need renew_seconds < renew_deadline < lease_seconds")
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_seconds = lease_seconds
        self.renew_seconds = renew_seconds
        self.retry_seconds = retry_seconds
        self.renew_deadline = renew_deadline
        self.is_leader = False
        self._client = client  # a kubernetes ApiClient; None: the operator's (kube.api_client())
        self._seen: Observation | None = None
        self._record: LeaseRecord | None = None

    @property
    def max_backdate(self) -> float:
        return float(self.lease_seconds) - self.renew_deadline

    def _api(self) -> Any:
        import kubernetes

        return kubernetes.client.CoordinationV1Api(self._client or kube.api_client())

    async def _read(self) -> LeaseRecord | None:
        client = self._client or kube.api_client()
        try:
            lease = await kube.call(self._api().read_namespaced_lease, self.name, self.namespace)
            return _record(client.sanitize_for_serialization(lease))
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

    async def try_once(self, *, reread: bool = True) -> bool:
        """One round: create, renew or take the Lease if this candidate may. True if it holds it now.

        ``reread=False`` acts on the record last read: used at the computed expiry, where a read would
        only delay the take (the write is guarded by that record's resourceVersion anyway)."""
        record = await self._read() if reread or self._record is None else self._record
        now = time.monotonic()
        if record is not None:
            self._seen = observe(record, self._seen, now, datetime.now(UTC), self.max_backdate)
        self._record = record
        action = decide(record, self._seen, self.identity, now)
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
            if kube.is_status(exc, 409):  # another candidate (or a renewal) wrote first: read again
                self._record = None
                return False
            raise
        self._record = None  # our own write: the next round reads what the server stored
        if action != "renew":
            log.info("leader election: %s now holds Lease %s/%s (%s)", self.identity, self.namespace, self.name, action)
        return True

    def _until_expiry(self) -> float | None:
        """Seconds until the Lease last read expires (None: no record another holder renews)."""
        record, seen = self._record, self._seen
        if record is None or seen is None or not record.holder or record.holder == self.identity:
            return None
        if (seen.holder, seen.renew_time) != (record.holder, record.renew_time):
            return None
        return max(0.0, expires_at(record, seen) - time.monotonic())

    async def acquire(self) -> None:
        """Wait until this candidate holds the Lease: poll every retry period, but wake at the expiry."""
        log.info("leader election: %s waiting for Lease %s/%s", self.identity, self.namespace, self.name)
        reread = True
        while True:
            try:
                if await self.try_once(reread=reread):
                    self.is_leader = True
                    return
            except Exception as exc:
                self._record = None
                log.warning("leader election: %s", kube.api_message(exc))
            until = self._until_expiry()
            # Polling still matters: it sees renewals (which move the expiry) and releases.
            reread = until is None or until >= self.retry_seconds
            await asyncio.sleep(self.retry_seconds if until is None or reread else until)

    async def hold(self, on_lost: Callable[[str], None]) -> None:
        """Renew until the Lease is lost or cannot be renewed within renew_deadline; then call on_lost.

        The deadline counts from when the last successful renewal was *sent*, and no wait outlives it:
        a standby's takeover (see the module doc) can only come after it."""
        last_renewed = time.monotonic()
        pause = self.renew_seconds
        while True:
            deadline = last_renewed + self.renew_deadline
            await asyncio.sleep(max(0.0, min(pause, deadline - time.monotonic())))
            sent = time.monotonic()
            renewed = False
            if sent < deadline:
                try:
                    renewed = await asyncio.wait_for(self.try_once(), timeout=deadline - sent)
                except TimeoutError:
                    log.warning("leader election: renew timed out")
                except Exception as exc:
                    log.warning("leader election: renew failed: %s", kube.api_message(exc))
            if renewed:
                last_renewed, pause = sent, self.renew_seconds
                continue
            holder = self._record.holder if self._record else (self._seen.holder if self._seen else None)
            if holder not in (None, self.identity) or time.monotonic() >= deadline:
                self.is_leader = False
                on_lost(
                    f"Lease {self.namespace}/{self.name} lost (holder now {holder!r})"
                    if holder not in (None, self.identity)
                    else f"Lease {self.namespace}/{self.name} not renewed within {self.renew_deadline:g}s"
                )
                return
            pause = self.retry_seconds  # a failed renewal is retried sooner, until the deadline

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
