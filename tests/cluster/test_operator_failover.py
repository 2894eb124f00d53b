"""High availability: operators elect a leader on a Lease. SIGKILL the leader mid-job and the standby
takes over within the lease duration of the leader's last renewal, the job completes, and no task is
enqueued twice; a leader whose Lease is taken while it is alive stops at once; a leader stopped
cleanly hands the Lease over without waiting for it to expire.

Takeover is measured on the Lease itself (the new holder's acquireTime minus the old holder's last
renewTime, both written by processes on this machine): what the election decides, without the test's
own polling and the load of the machine in the figure."""

from __future__ import annotations

import asyncio
import collections
import json
import os
import select
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import kubernetes
import pytest
import yaml
from operator_fixtures import apply, get, job, pool, wait_complete

from trawl.dev.bookstore import Bookstore
from trawl.dev.controlplane import ControlPlane
from trawl.dev.operator_process import OperatorProcess, rbac_objects
from trawl.dev.redis_server import RedisServer
from trawl.operator.leader import LeaderElector, parse_micro_time
from waits import wait_for

LEASE_SECONDS = 6
RENEW_SECONDS = 1.0
RENEW_DEADLINE = 4.0
# The shipped retry period: a standby that counted the lease from its own poll (client-go's rule)
# would take over up to two of these after the lease of the last renewal ran out.
RETRY_SECONDS = 2.0
# What a loaded machine may add between the computed expiry and the take's write (event-loop wake-up).
SLACK = 1.0


@pytest.fixture
def operators(
    control_plane: ControlPlane, namespace: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[OperatorProcess]]:
    apply(control_plane, *rbac_objects(namespace, "trawl-operator", [namespace]))
    kubeconfig = control_plane.service_account_kubeconfig(namespace, "trawl-operator")
    logs = tmp_path_factory.mktemp("operators")
    env = {
        "TRAWL_JOB_SYNC_SECONDS": "1",
        "TRAWL_POOL_SYNC_SECONDS": "1",
        "TRAWL_CRON_SYNC_SECONDS": "1",
        "POD_NAMESPACE": namespace,
        "TRAWL_LEASE_DURATION_SECONDS": str(LEASE_SECONDS),
        "TRAWL_LEASE_RENEW_SECONDS": str(RENEW_SECONDS),
        "TRAWL_LEASE_RENEW_DEADLINE_SECONDS": str(RENEW_DEADLINE),
        "TRAWL_LEASE_RETRY_SECONDS": str(RETRY_SECONDS),
    }
    procs = [
        OperatorProcess(
            kubeconfig, [namespace], Path(logs / f"operator-{i}.log"), env=env, extra_args=["--leader-election"]
        )
        for i in range(2)
    ]
    try:
        yield procs
    finally:
        for proc in procs:
            proc.stop()
            print(f"--- {proc.log_path}:\n{proc.log_tail(40)}")


@dataclass(frozen=True)
class LeaseEvent:
    holder: str | None
    renew: datetime | None
    acquire: datetime | None


class LeaseHistory:
    """Every version of the Lease, from a watch: the last renewal of a killed holder is known exactly."""

    def __init__(self, cp: ControlPlane, namespace: str, name: str = "trawl-operator") -> None:
        self.api: Any = kubernetes.client.CoordinationV1Api(cp.api_client())
        self.namespace, self.name = namespace, name
        self.events: list[LeaseEvent] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> LeaseHistory:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(timeout=15)

    def _run(self) -> None:
        while not self._stop.is_set():
            watch: Any = kubernetes.watch.Watch()  # type: ignore[no-untyped-call]
            try:
                for ev in watch.stream(
                    self.api.list_namespaced_lease,
                    self.namespace,
                    field_selector=f"metadata.name={self.name}",
                    timeout_seconds=5,
                ):
                    spec = ev["object"].spec
                    event = LeaseEvent(spec.holder_identity, spec.renew_time, spec.acquire_time)
                    if not self.events or self.events[-1] != event:
                        self.events.append(event)
                    if self._stop.is_set():
                        break
            except Exception:  # the API server was busy: watch again (the list replays the current state)
                time.sleep(0.2)
            finally:
                watch.stop()

    def holder(self) -> str | None:
        return self.events[-1].holder if self.events else None

    def taken_from(self, old: str) -> tuple[datetime, datetime, str]:
        """(old holder's last renewTime, the next holder's acquireTime, the next holder)."""
        last = max(i for i, e in enumerate(self.events) if e.holder == old)
        new = next(e for e in self.events[last + 1 :] if e.holder and e.holder != old)
        renew, acquire = self.events[last].renew, new.acquire
        assert renew is not None and acquire is not None and new.holder is not None
        return renew, acquire, new.holder


def _lease(cp: ControlPlane, namespace: str) -> dict[str, Any]:
    out = cp.kubectl("get", "lease", "trawl-operator", "-n", namespace, "-o", "json")
    spec: dict[str, Any] = json.loads(out.stdout)["spec"]
    return spec


def _micro(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def test_a_renewal_read_late_still_expires_lease_duration_after_it(control_plane: ControlPlane, namespace: str) -> None:
    """The standby reads the dead leader's last renewal 1.5 s after it was written (its poll came just
    before the renewal): it still takes the Lease leaseDurationSeconds after the renewal, not after its
    read — by the old rule (expiry from the reader's own sight) the take came >= 1.5 s later."""
    api: Any = kubernetes.client.CoordinationV1Api(control_plane.api_client())
    # renewTime is trusted up to lease - renew_deadline = 4 s back: room for a slow first read.
    lease_seconds, late = 6, 1.5
    renewed = datetime.now(UTC) - timedelta(seconds=late)
    body = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": "trawl-operator", "namespace": namespace},
        "spec": {
            "holderIdentity": "dead-leader",
            "leaseDurationSeconds": lease_seconds,
            "renewTime": _micro(renewed),
            "acquireTime": _micro(renewed),
            "leaseTransitions": 0,
        },
    }
    api.create_namespaced_lease(namespace, body)
    elector = LeaderElector(
        namespace,
        "trawl-operator",
        "standby",
        lease_seconds=lease_seconds,
        renew_seconds=1,
        renew_deadline=2,
        retry_seconds=2,
        client=control_plane.api_client(),
    )
    asyncio.run(asyncio.wait_for(elector.acquire(), timeout=60))
    spec = api.read_namespaced_lease("trawl-operator", namespace).spec
    assert spec.holder_identity == "standby" and spec.lease_transitions == 1
    renew_time = parse_micro_time(_micro(renewed))
    assert renew_time is not None
    after = (spec.acquire_time - renew_time).total_seconds()
    print(f"takeover {after:.3f}s after the renewal (lease {lease_seconds}s, read {late}s late)")
    assert lease_seconds - 0.05 <= after <= lease_seconds + SLACK / 2, after


def test_standby_takes_over_when_the_leader_is_killed_mid_job(
    control_plane: ControlPlane,
    namespace: str,
    operators: list[OperatorProcess],
    supervisor: Any,
    redis_server: RedisServer,
    bookstore: Bookstore,
) -> None:
    cp = control_plane
    first, second = operators
    first.start()
    wait_for("first operator leads", first.is_leader, timeout=60, diag=first.log_tail)
    second.start()  # healthy (its /healthz answers) while standing by
    assert not second.is_leader()

    body = pool("p", redis_server.url)
    body["spec"]["autoscaling"]["minReplicas"] = 1
    apply(cp, body, namespace=namespace)
    products = bookstore.catalog.products[:30]
    urls = [bookstore.url + p.path for p in products]
    # Two requests a second to the one host (the default politeness): the job runs for ~15 s.
    apply(cp, job("j", "p", urls), namespace=namespace)

    def running() -> bool:
        status = get(cp, "scrapejob", "j", namespace).get("status") or {}
        return status.get("phase") == "Running" and 0 < (status.get("counts") or {}).get("succeeded", 0) < len(urls)

    wait_for("job running", running, timeout=120, diag=first.log_tail)
    with LeaseHistory(cp, namespace) as history:
        holder_before = wait_for("lease seen", history.holder, timeout=30)
        first.kill()
        killed = datetime.now(UTC)
        wait_for("standby leads", second.is_leader, timeout=LEASE_SECONDS * 4 + 30, diag=second.log_tail)
        wait_for("take seen", lambda: history.holder() not in (None, holder_before), timeout=30)
    last_renew, acquired, holder_after = history.taken_from(holder_before)
    after_renewal = (acquired - last_renew).total_seconds()
    after_kill = (acquired - killed).total_seconds()
    print(
        f"failover: standby took the Lease {after_renewal:.2f}s after the killed leader's last renewal, "
        f"{after_kill:.2f}s after SIGKILL (lease {LEASE_SECONDS}s)"
    )
    assert holder_after != holder_before and _lease(cp, namespace)["leaseTransitions"] >= 1
    # Never before the lease ran out; within it, plus what a loaded machine adds to the wake-up. Counting
    # from the standby's own sight of the renewal (client-go's rule) adds up to one retry period of
    # read lag and the take waits for the next poll: up to 2 x RETRY_SECONDS more.
    assert LEASE_SECONDS - 0.1 <= after_renewal <= LEASE_SECONDS + SLACK, after_renewal
    assert after_kill <= LEASE_SECONDS + SLACK, after_kill

    wait_complete(cp, "j", namespace, timeout=180, diag=second.log_tail)
    status = get(cp, "scrapejob", "j", namespace)["status"]
    assert status["counts"]["total"] == len(urls)  # the new leader's enqueue added nothing
    assert status["counts"]["succeeded"] == len(urls)
    assert status["observedGeneration"] == get(cp, "scrapejob", "j", namespace)["metadata"]["generation"]
    fetched = _fetched(bookstore)
    assert {p.path: fetched[p.path] for p in products} == {p.path: 1 for p in products}
    # The new leader keeps the pool's status converging too.
    pool_status = get(cp, "scrapepool", "p", namespace)["status"]
    assert pool_status["observedGeneration"] == get(cp, "scrapepool", "p", namespace)["metadata"]["generation"]
    assert "Traceback" not in second.log_path.read_text(errors="replace"), second.log_tail(100)


def _fetched(bookstore: Bookstore) -> collections.Counter[str]:
    return collections.Counter(
        line.split()[2] for line in bookstore.access_log.read_text().splitlines() if "/product/" in line
    )


def _take_lease(api: Any, namespace: str, holder: str) -> bool:
    """Write ``holder`` into the operator's Lease, guarded by its resourceVersion: False when the leader
    renewed between the read and the write (409), so that the caller reads it again."""
    lease = api.read_namespaced_lease("trawl-operator", namespace)
    lease.spec.holder_identity = holder
    lease.spec.renew_time = datetime.now(UTC)
    lease.spec.lease_transitions += 1
    try:
        api.replace_namespaced_lease("trawl-operator", namespace, lease)
    except kubernetes.client.ApiException as exc:
        if exc.status == 409:
            return False
        raise
    return True


def test_a_leader_whose_lease_is_taken_stops_and_a_clean_stop_hands_over_at_once(
    control_plane: ControlPlane,
    namespace: str,
    operators: list[OperatorProcess],
    supervisor: Any,
    redis_server: RedisServer,
    bookstore: Bookstore,
) -> None:
    """Another holder writes the Lease while the leader is alive and well: the leader exits (so none of
    its handlers or timers writes again) before anyone else acts, the standby leads once that holder's
    lease runs out, and the job finishes with every URL fetched once. Then the new leader is stopped
    cleanly (SIGTERM, as a rolling update does): it releases the Lease and the restarted replica takes
    it before the lease would have expired."""
    cp = control_plane
    first, second = operators
    first.start()
    wait_for("first operator leads", first.is_leader, timeout=60, diag=first.log_tail)
    second.start()
    body = pool("p", redis_server.url)
    body["spec"]["autoscaling"]["minReplicas"] = 1
    apply(cp, body, namespace=namespace)
    products = bookstore.catalog.products[:30]
    urls = [bookstore.url + p.path for p in products]
    apply(cp, job("j", "p", urls), namespace=namespace)
    wait_for(
        "job running",
        lambda: (get(cp, "scrapejob", "j", namespace).get("status") or {}).get("phase") == "Running",
        timeout=120,
        diag=first.log_tail,
    )

    api: Any = kubernetes.client.CoordinationV1Api(cp.api_client())
    wait_for("the Lease taken", lambda: _take_lease(api, namespace, "intruder"), timeout=30)
    stolen = time.monotonic()
    robbed = first.proc
    assert robbed is not None
    wait_for("the robbed leader exits", lambda: robbed.poll() is not None, timeout=60, diag=first.log_tail)
    exited_after = time.monotonic() - stolen
    assert robbed.returncode == 1
    first.stop()  # reaps it (it has exited)
    assert "lost (holder now 'intruder')" in first.log_path.read_text(errors="replace"), first.log_tail()
    # It noticed at its next renewal (every RENEW_SECONDS), long before the intruder's lease ran out,
    # and nobody else acted in between: the standby still waits.
    assert not second.is_leader()
    print(f"the leader exited {exited_after:.2f}s after its Lease was taken (renews every {RENEW_SECONDS}s)")
    wait_for("standby leads", second.is_leader, timeout=LEASE_SECONDS * 4 + 30, diag=second.log_tail)
    assert _lease(cp, namespace)["holderIdentity"] not in ("intruder", None)

    # A rolling update: the old pod's replacement starts as a standby, then the leader gets SIGTERM.
    first.start()
    assert not first.is_leader()
    with LeaseHistory(cp, namespace) as history:
        holder_before = wait_for("lease seen", history.holder, timeout=30)
        second.stop()
        wait_for("restarted replica leads", first.is_leader, timeout=LEASE_SECONDS * 4 + 30, diag=first.log_tail)
        wait_for("take seen", lambda: history.holder() not in (None, "", holder_before), timeout=30)
    assert "released Lease" in second.log_path.read_text(errors="replace"), second.log_tail()
    renewed = max(e.renew for e in history.events if e.holder == holder_before and e.renew is not None)
    acquired = next(e.acquire for e in reversed(history.events) if e.holder not in (None, "", holder_before))
    assert acquired is not None
    handover = (acquired - renewed).total_seconds()
    print(f"clean stop: the Lease changed hands {handover:.2f}s after the old leader's last renewal")
    assert handover < LEASE_SECONDS, handover  # released: no waiting for expiry

    wait_complete(cp, "j", namespace, timeout=180, diag=first.log_tail)
    status = get(cp, "scrapejob", "j", namespace)["status"]
    assert status["counts"]["total"] == len(urls)
    assert status["counts"]["succeeded"] == len(urls)
    fetched = _fetched(bookstore)
    assert {p.path: fetched[p.path] for p in products} == {p.path: 1 for p in products}


class StallingProxy:
    """A TCP relay to the API server that can stall: while stalled it forwards nothing, in either
    direction, and new connections hang. To the client that is an API server that stopped answering
    (a partition), the case where only a timeout notices."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.server.settimeout(0.2)
        self.port = self.server.getsockname()[1]
        self.stalled = threading.Event()
        self.closed = threading.Event()
        self.threads = [threading.Thread(target=self._accept, daemon=True)]
        self.threads[0].start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                conn, _ = self.server.accept()
            except TimeoutError:
                continue
            thread = threading.Thread(target=self._relay, args=(conn,), daemon=True)
            self.threads.append(thread)
            thread.start()

    def _relay(self, client: socket.socket) -> None:
        with client, socket.create_connection(("127.0.0.1", self.upstream_port)) as upstream:
            peer = {client: upstream, upstream: client}
            while not self.closed.is_set():
                if self.stalled.is_set():
                    self.closed.wait(0.1)
                    continue
                readable, _, _ = select.select(list(peer), [], [], 0.2)
                for sock in readable:
                    data = sock.recv(65536)
                    if not data:
                        return
                    peer[sock].sendall(data)

    def close(self) -> None:
        self.closed.set()
        for thread in self.threads:
            thread.join(timeout=5)
        self.server.close()


def test_a_leader_cut_off_from_the_api_server_exits_before_the_standby_takes_over(
    control_plane: ControlPlane, namespace: str, operators: list[OperatorProcess], tmp_path: Path
) -> None:
    """The leader's API server stops answering (its connections hang): it cannot renew, so it exits
    once the renew deadline has passed since it sent its last renewal — before the standby, which
    counts the lease from that renewal, may take over."""
    cp = control_plane
    first, second = operators
    proxy = StallingProxy(int(cp.server.rsplit(":", 1)[1]))
    try:
        config = yaml.safe_load(first.kubeconfig.read_text())
        for cluster in config["clusters"]:
            cluster["cluster"]["server"] = f"https://127.0.0.1:{proxy.port}"
        first.kubeconfig = tmp_path / "through-proxy.kubeconfig"
        first.kubeconfig.write_text(yaml.safe_dump(config))
        first.start()
        wait_for("first operator leads", first.is_leader, timeout=60, diag=first.log_tail)
        second.start()
        with LeaseHistory(cp, namespace) as history:
            holder = wait_for("lease seen", history.holder, timeout=30)
            proxy.stalled.set()
            robbed = first.proc
            assert robbed is not None
            wait_for("the cut-off leader exits", lambda: robbed.poll() is not None, timeout=60, diag=first.log_tail)
            exited = datetime.now(UTC)
            wait_for("standby leads", second.is_leader, timeout=LEASE_SECONDS * 4 + 30, diag=second.log_tail)
            wait_for("take seen", lambda: history.holder() not in (None, holder), timeout=30)
        assert robbed.returncode == 1
        assert f"not renewed within {RENEW_DEADLINE:g}s" in first.log_path.read_text(errors="replace")
        last_renew, acquired, _ = history.taken_from(holder)
        print(
            f"cut off: the leader exited within {(exited - last_renew).total_seconds():.2f}s of its last renewal "
            f"(renew deadline {RENEW_DEADLINE:g}s); the standby took over "
            f"{(acquired - last_renew).total_seconds():.2f}s after it"
        )
        # Seen exited (this poll is late, if anything) before the standby's take: never two leaders.
        assert exited < acquired, (exited, acquired)
        assert LEASE_SECONDS - 0.1 <= (acquired - last_renew).total_seconds() <= LEASE_SECONDS + SLACK
    finally:
        proxy.stalled.clear()
        first.stop()
        proxy.close()


# Loaded by the operator's interpreter at start-up (PYTHONPATH): SIGUSR1 runs a handler in the main
# thread, which is the event loop's, and the handler sleeps there. The loop is blocked (no task, timer or
# callback runs) while every other thread goes on, as with a blocking call or a long computation on the loop.
STALL_HOOK = """
import signal, time
signal.signal(signal.SIGUSR1, lambda *_: time.sleep({seconds}))
"""


def test_a_leader_whose_event_loop_stalls_exits_before_the_standby_takes_over(
    control_plane: ControlPlane, namespace: str, operators: list[OperatorProcess], tmp_path: Path
) -> None:
    """The leader's event loop stops running (its API server answers; its process lives): a watchdog
    thread, not the loop, sees that the loop confirmed no renewal within the renew deadline and exits
    the process, before the standby may take the Lease. (Renewals made on the loop stopped with it, the
    standby took over, and the leader acted again when its loop came back.)"""
    cp = control_plane
    first, second = operators
    stall = LEASE_SECONDS * 4
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(STALL_HOOK.format(seconds=stall))
    paths = [str(hook), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    first.env = {**first.env, "PYTHONPATH": os.pathsep.join(paths)}
    first.start()
    wait_for("first operator leads", first.is_leader, timeout=60, diag=first.log_tail)
    second.start()
    with LeaseHistory(cp, namespace) as history:
        holder = wait_for("lease seen", history.holder, timeout=30)
        stalled = first.proc
        assert stalled is not None
        stalled.send_signal(signal.SIGUSR1)
        wait_for("the stalled leader exits", lambda: stalled.poll() is not None, timeout=stall, diag=first.log_tail)
        exited = datetime.now(UTC)
        wait_for("standby leads", second.is_leader, timeout=LEASE_SECONDS * 4 + 30, diag=second.log_tail)
        wait_for("take seen", lambda: history.holder() not in (None, holder), timeout=30)
    assert stalled.returncode == 1
    log_text = first.log_path.read_text(errors="replace")
    assert f"the event loop confirmed no renewal within {RENEW_DEADLINE:g}s" in log_text, first.log_tail()
    last_renew, acquired, _ = history.taken_from(holder)
    print(
        f"stalled loop: the leader exited {(exited - last_renew).total_seconds():.2f}s after its last renewal "
        f"(renew deadline {RENEW_DEADLINE:g}s); the standby took over {(acquired - last_renew).total_seconds():.2f}s "
        "after it"
    )
    assert exited < acquired, (exited, acquired)
    assert LEASE_SECONDS - 0.1 <= (acquired - last_renew).total_seconds() <= LEASE_SECONDS + SLACK


def test_renewals_do_not_wait_behind_the_operators_other_api_calls(control_plane: ControlPlane, namespace: str) -> None:
    """Every thread of the operator's API pool is busy (slow calls: a big list, an API server under
    load): the leader still renews on time, on its own thread and connection, and keeps the Lease."""
    from trawl.operator import kube

    api: Any = kubernetes.client.CoordinationV1Api(control_plane.api_client())
    lost: list[str] = []
    release = threading.Event()

    def slow_api_call(_request_timeout: tuple[float, float]) -> bool:
        # Stands in for a client method taking long: kube.call gives every call its request timeout.
        return release.wait(60)

    async def scenario() -> list[str]:
        elector = LeaderElector(
            namespace,
            "trawl-operator",
            "leader",
            lease_seconds=LEASE_SECONDS,
            renew_seconds=RENEW_SECONDS,
            renew_deadline=RENEW_DEADLINE,
            retry_seconds=RETRY_SECONDS,
            client=control_plane.api_client(),
        )
        await asyncio.wait_for(elector.acquire(), timeout=30)
        holding = asyncio.create_task(elector.hold(lost.append))
        busy = [asyncio.ensure_future(kube.call(slow_api_call)) for _ in range(kube.API_THREADS)]
        renewals: set[str] = set()
        try:
            # Long enough for the renew deadline to pass several times over.
            until = time.monotonic() + RENEW_DEADLINE * 3
            while time.monotonic() < until and not lost:
                lease = await asyncio.to_thread(api.read_namespaced_lease, "trawl-operator", namespace)
                renewals.add(_micro(lease.spec.renew_time))
                await asyncio.sleep(0.2)
        finally:
            release.set()
            await asyncio.gather(*busy)
            holding.cancel()
            await elector.release()
        return sorted(renewals)

    renewals = asyncio.run(scenario())
    assert not lost, lost
    assert len(renewals) >= RENEW_DEADLINE * 3 / RENEW_SECONDS - 2, renewals
