"""`trawl operator`: run the kopf operator with Trawl's handlers, metrics and health endpoint."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass

import kopf
from prometheus_client import start_http_server

from .sharding import Sharding
from .sharding import configure as configure_sharding

log = logging.getLogger("trawl.operator")

# A server the operator process runs beside the operator (the results API): started before leader election,
# so standbys serve it too, and stopped after the operator.
Sidecar = Callable[[], AbstractAsyncContextManager[None]]


@dataclass(frozen=True)
class LeaderElection:
    """Where the replicas' Lease lives and how fast a standby takes over (see trawl.operator.leader)."""

    namespace: str
    name: str = "trawl-operator"
    identity: str = ""
    lease_seconds: int = 15
    renew_seconds: float = 5.0
    renew_deadline: float = 10.0
    retry_seconds: float = 2.0

    @classmethod
    def from_env(cls, namespace: str | None, name: str) -> LeaderElection:
        """Timings from TRAWL_LEASE_* (tests shorten them); identity is the pod name plus a random suffix,
        so a restarted container never mistakes its predecessor's Lease for its own."""
        ns = namespace or os.environ.get("POD_NAMESPACE") or "default"
        identity = f"{os.environ.get('POD_NAME') or socket.gethostname()}_{os.urandom(4).hex()}"
        env = os.environ.get
        return cls(
            namespace=ns,
            name=name,
            identity=identity,
            lease_seconds=int(env("TRAWL_LEASE_DURATION_SECONDS", "15")),
            renew_seconds=float(env("TRAWL_LEASE_RENEW_SECONDS", "5")),
            renew_deadline=float(env("TRAWL_LEASE_RENEW_DEADLINE_SECONDS", "10")),
            retry_seconds=float(env("TRAWL_LEASE_RETRY_SECONDS", "2")),
        )


def run(
    *,
    namespaces: Sequence[str] = (),
    all_namespaces: bool = False,
    metrics_port: int = 8080,
    health_port: int = 8081,
    bind_address: str = "0.0.0.0",
    verbose: bool = False,
    leader_election: LeaderElection | None = None,
    sidecars: Sequence[Sidecar] = (),
    sharding: Sharding | None = None,
) -> None:
    """Run until SIGTERM/SIGINT. Watches the given namespaces, or all of them; reconciles the objects of
    its shard (every object when ``sharding`` is None)."""
    if bool(namespaces) == all_namespaces:
        raise SystemExit("give --all-namespaces or at least one --namespace")
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not verbose:
        # kopf logs every handler run at INFO ("Handler 'job_changed' succeeded."): a line per object per change.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    # Before the handlers import: their decorators read the shard's label filter once.
    configure_sharding(sharding or Sharding())
    # kopf registers on import: what every kind shares (settings, indexes), then each kind's handlers, in the
    # order they were registered when they were one module.
    # isort: off
    from . import handlers  # noqa: F401
    from .job import handlers as job_handlers  # noqa: F401
    from .pool import handlers as pool_handlers  # noqa: F401
    from .cron import handlers as cron_handlers  # noqa: F401
    # isort: on

    if metrics_port:
        start_http_server(metrics_port, addr=bind_address)
    operator = kopf.operator(
        standalone=True,
        clusterwide=all_namespaces,
        namespaces=list(namespaces),
        # With leader election, /healthz is served from the start (standbys are healthy and ready).
        liveness_endpoint=(
            f"http://{bind_address}:{health_port}/healthz" if health_port and not leader_election else None
        ),
    )
    if leader_election is None:
        from . import metrics

        metrics.IS_LEADER.set(1)
        asyncio.run(_with_sidecars(operator, sidecars))
    else:
        asyncio.run(_with_sidecars(_run_as_leader(operator, leader_election, health_port, bind_address), sidecars))


async def _with_sidecars(main: Awaitable[object], sidecars: Sequence[Sidecar]) -> None:
    async with contextlib.AsyncExitStack() as stack:
        for sidecar in sidecars:
            await stack.enter_async_context(sidecar())
        await main


async def _run_as_leader(operator: object, election: LeaderElection, health_port: int, bind_address: str) -> None:
    from aiohttp import web

    from . import metrics
    from .leader import LeaderElector

    elector = LeaderElector(
        election.namespace,
        election.name,
        election.identity,
        lease_seconds=election.lease_seconds,
        renew_seconds=election.renew_seconds,
        renew_deadline=election.renew_deadline,
        retry_seconds=election.retry_seconds,
    )

    async def healthz(_: web.Request) -> web.Response:
        return web.json_response({"leader": elector.is_leader, "identity": elector.identity})

    async def leader(_: web.Request) -> web.Response:
        return web.json_response({"identity": elector.identity}, status=200 if elector.is_leader else 503)

    runner: web.AppRunner | None = None
    if health_port:
        app = web.Application()
        app.router.add_get("/healthz", healthz)
        app.router.add_get("/leader", leader)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, bind_address, health_port).start()
    try:
        await elector.acquire()
        metrics.IS_LEADER.set(1)

        def lost(why: str) -> None:
            # Called from the elector's renewal or watchdog thread, never from the loop (which may be the
            # thing that stalled). Handlers and timers must stop now, mid-pass or not: another replica may
            # act. Exiting is what client-go's users do; the Deployment restarts this replica as a standby.
            log.error("leader election: %s; exiting so that only the new leader acts", why)
            logging.shutdown()
            os._exit(1)

        holding = asyncio.create_task(elector.hold(lost))
        try:
            await operator  # type: ignore[misc]
        finally:
            holding.cancel()
            await elector.release()
    finally:
        if runner is not None:
            await runner.cleanup()
