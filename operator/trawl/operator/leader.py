"""Leader election on a ``coordination.k8s.io/v1`` Lease, client-go's protocol with a tighter takeover and a fence.

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

The fence: when the leader stops acting. It acts only while it can prove it holds the Lease, on its own
monotonic clock: until ``renew_deadline`` after it sent the newest renewal that its *event loop* has
confirmed (:func:`acting_deadline`). Two threads, neither of which needs the loop, keep that promise:

- the renewal thread makes every Lease call, on a connection of its own (not the operator's shared API
  threads and connections, where a renewal could wait behind slow calls until it is too late), each
  call bounded by the time left before the deadline; after each renewal it asks the loop to confirm,
  and it does not renew again until the loop has (:func:`next_renewal`): a stalled loop must not keep
  the Lease from a standby;
- the watchdog thread sleeps until the deadline and, if no newer confirmation has moved it, tells the
  caller to stop (:func:`breach` says why: no renewal, or a loop that confirmed none).

So a leader whose API server stops answering, whose renewals fail, or whose event loop stalls (a blocking
call, a long computation) stops at the deadline, and a leader that finds another holder in the Lease at
once; the caller exits the process (what controller-runtime and client-go users do), and the Deployment
restarts it as a standby. A process paused whole (SIGSTOP, a frozen VM) cannot run its watchdog either:
when it resumes, the watchdog finds the deadline passed and exits, racing only the loop's first few
milliseconds. The decisions are pure (:func:`decide`, :func:`observe`, :func:`next_renewal`,
:func:`breach`); the loops and threads are thin.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any, TypeVar

from . import kube

log = logging.getLogger(__name__)

T = TypeVar("T")


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


@dataclass(frozen=True, slots=True)
class Renewals:
    """The leader's own account of its renewals, on its monotonic clock.

    ``sent``: when it sent its newest successful renewal (the start of that round: at or before the
    server stored it). ``confirmed``: the newest such time its event loop has confirmed (never after
    ``sent``). ``failed_at``: when its newest attempt failed, if the newest attempt failed."""

    sent: float
    confirmed: float
    failed_at: float | None = None


def acting_deadline(renewals: Renewals, renew_deadline: float) -> float:
    """Until when the leader may act: ``renew_deadline`` after the newest renewal its loop has confirmed.

    A standby takes no earlier than ``renew_deadline`` after its own sight of that renewal (see the module
    doc), and it cannot see a renewal before it was sent."""
    return renewals.confirmed + renew_deadline


def next_renewal(renewals: Renewals, renew_seconds: float, retry_seconds: float) -> float | None:
    """When to renew next; None: not until the event loop confirms the newest renewal.

    Renewing for a loop that does not answer would keep the Lease from a standby while nothing acts
    on it; a failed attempt is retried sooner (every retry period) until the deadline."""
    if renewals.sent > renewals.confirmed:
        return None
    if renewals.failed_at is not None:
        return renewals.failed_at + retry_seconds
    return renewals.sent + renew_seconds


def breach(renewals: Renewals, now: float, renew_deadline: float) -> str | None:
    """None while the leader may act; past its deadline, why it may not: ``"loop"`` (a renewal succeeded
    but the event loop never confirmed it: the loop is stalled) or ``"renewal"`` (none succeeded)."""
    if now < acting_deadline(renewals, renew_deadline):
        return None
    return "loop" if renewals.sent > renewals.confirmed else "renewal"


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


def _time_left(deadline: float) -> float:
    """A call's timeout: what is left before ``deadline`` (monotonic). Nothing left: the call is not made."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("no time left before the deadline")
    return left


class _Holding:
    """What the renewal thread, the watchdog thread and the event loop share while this process leads."""

    def __init__(self, sent: float) -> None:
        self.cond = threading.Condition()
        self.renewals = Renewals(sent, sent)
        self.stopped = False

    def confirm(self, sent: float) -> None:
        """Called on the event loop: it runs, so the renewal sent at ``sent`` now counts for acting."""
        with self.cond:
            if sent > self.renewals.confirmed:
                self.renewals = replace(self.renewals, confirmed=sent)
            self.cond.notify_all()

    def stop(self) -> bool:
        """Stop both threads; True for the first caller only."""
        with self.cond:
            first = not self.stopped
            self.stopped = True
            self.cond.notify_all()
        return first


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
        self._client = client  # a kubernetes ApiClient; None: one of its own (kube.new_api_client())
        self._coordination: Any = None
        # Every Lease call runs on this one thread, in order: a release waits for a renewal in flight.
        self._thread = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="lease")
        self._seen: Observation | None = None
        self._record: LeaseRecord | None = None
        self._sent: float | None = None  # when the round that won the Lease was sent

    @property
    def max_backdate(self) -> float:
        return float(self.lease_seconds) - self.renew_deadline

    def _api(self) -> Any:
        if self._coordination is None:
            import kubernetes

            self._coordination = kubernetes.client.CoordinationV1Api(self._client or kube.new_api_client())
        return self._coordination

    async def _on_lease_thread(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._thread, functools.partial(fn, *args))

    def _read(self, deadline: float) -> LeaseRecord | None:
        api = self._api()
        try:
            lease = api.read_namespaced_lease(self.name, self.namespace, _request_timeout=_time_left(deadline))
        except Exception as exc:
            if kube.is_status(exc, 404):
                return None
            raise
        return _record(api.api_client.sanitize_for_serialization(lease))

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

    def _round(self, reread: bool, deadline: float) -> bool:
        """One round, on the Lease's thread: create, renew or take the Lease if this candidate may. True if
        it holds it now. Every call ends by ``deadline`` (monotonic).

        ``reread=False`` acts on the record last read: used at the computed expiry, where a read would
        only delay the take (the write is guarded by that record's resourceVersion anyway)."""
        record = self._read(deadline) if reread or self._record is None else self._record
        now = time.monotonic()
        if record is not None:
            self._seen = observe(record, self._seen, now, datetime.now(UTC), self.max_backdate)
        self._record = record
        action = decide(record, self._seen, self.identity, now)
        if action == "wait":
            return False
        api = self._api()
        try:
            if action == "create":
                body = self._body(0, _now_micro(), None)
                api.create_namespaced_lease(self.namespace, body, _request_timeout=_time_left(deadline))
            else:
                assert record is not None
                taking = action == "take"
                body = self._body(
                    record.transitions + (1 if taking else 0),
                    _now_micro() if taking else None,
                    record.resource_version,
                )
                api.patch_namespaced_lease(self.name, self.namespace, body, _request_timeout=_time_left(deadline))
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
            sent = time.monotonic()
            try:
                # Bounded like a renewal: an API server that stops answering delays the next poll, no more.
                if await self._on_lease_thread(self._round, reread, sent + self.renew_deadline):
                    self._sent = sent
                    self.is_leader = True
                    return
            except Exception as exc:
                self._record = None
                log.warning("leader election: %s", kube.api_message(exc))
            until = self._until_expiry()
            # Polling still matters: it sees renewals (which move the expiry) and releases.
            reread = until is None or until >= self.retry_seconds
            await asyncio.sleep(self.retry_seconds if until is None or reread else until)

    def _message(self, why: str) -> str:
        lease = f"Lease {self.namespace}/{self.name}"
        if why == "loop":
            return f"{lease}: the event loop confirmed no renewal within {self.renew_deadline:g}s"
        return f"{lease} not renewed within {self.renew_deadline:g}s"

    async def hold(self, on_lost: Callable[[str], None]) -> None:
        """Keep the Lease won by :meth:`acquire` until it is lost; then call ``on_lost`` (from another
        thread) and return. Cancelled (a clean shutdown), it stops renewing; :meth:`release` follows.

        Renewals and the deadline run on two threads of their own (see the module doc): neither waits
        for the event loop, which only confirms each renewal."""
        if self._sent is None:
            raise RuntimeError("hold() needs the Lease: call acquire() first")
        loop = asyncio.get_running_loop()
        holding = _Holding(self._sent)

        def lost(why: str) -> None:
            if holding.stop():
                self.is_leader = False
                on_lost(why)

        watchdog = threading.Thread(target=self._watch, args=(holding, lost), name="lease-watchdog", daemon=True)
        watchdog.start()
        try:
            await loop.run_in_executor(self._thread, self._renew, holding, loop, lost)
        finally:
            holding.stop()

    def _watch(self, holding: _Holding, lost: Callable[[str], None]) -> None:
        """The watchdog thread: sleep until the acting deadline; past it, stop (a confirmation moves it)."""
        with holding.cond:
            while True:
                if holding.stopped:
                    return
                now = time.monotonic()
                why = breach(holding.renewals, now, self.renew_deadline)
                if why is not None:
                    break
                holding.cond.wait(acting_deadline(holding.renewals, self.renew_deadline) - now)
        lost(self._message(why))

    def _renew(self, holding: _Holding, loop: asyncio.AbstractEventLoop, lost: Callable[[str], None]) -> None:
        """The renewal thread (the Lease's own): renew when due, each round bounded by the acting deadline."""
        while True:
            with holding.cond:
                while True:
                    if holding.stopped:
                        return
                    now = time.monotonic()
                    due = next_renewal(holding.renewals, self.renew_seconds, self.retry_seconds)
                    if due is not None and due <= now:
                        break
                    holding.cond.wait(None if due is None else due - now)
                deadline = acting_deadline(holding.renewals, self.renew_deadline)
            sent = time.monotonic()
            renewed = False
            try:
                renewed = self._round(True, deadline)
            except Exception as exc:
                log.warning("leader election: renew failed: %s", kube.api_message(exc))
            with holding.cond:
                if renewed:
                    holding.renewals = Renewals(sent, holding.renewals.confirmed)
                else:
                    holding.renewals = replace(holding.renewals, failed_at=time.monotonic())
            if renewed:
                try:
                    loop.call_soon_threadsafe(holding.confirm, sent)
                except RuntimeError:  # the loop is closed: the process is shutting down
                    return
                continue
            holder = self._record.holder if self._record else (self._seen.holder if self._seen else None)
            if holder not in (None, self.identity):
                lost(f"Lease {self.namespace}/{self.name} lost (holder now {holder!r})")
                return

    def _release(self, deadline: float) -> None:
        record = self._read(deadline)
        if record is None or record.holder != self.identity:
            return
        body = {
            "metadata": {"resourceVersion": record.resource_version},
            "spec": {"holderIdentity": None, "renewTime": _now_micro(), "leaseDurationSeconds": 1},
        }
        self._api().patch_namespaced_lease(self.name, self.namespace, body, _request_timeout=_time_left(deadline))
        log.info("leader election: released Lease %s/%s", self.namespace, self.name)

    async def release(self) -> None:
        """On a clean shutdown: empty the holder so a standby takes over without waiting for expiry.

        On the Lease's thread, so after a renewal in flight; bounded by the renew deadline."""
        if not self.is_leader:
            return
        self.is_leader = False
        try:
            await self._on_lease_thread(self._release, time.monotonic() + self.renew_deadline)
        except Exception as exc:  # best effort: expiry hands it over anyway
            log.warning("leader election: could not release the Lease: %s", kube.api_message(exc))
