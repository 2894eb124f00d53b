"""`trawl operator`: run the kopf operator with Trawl's handlers, metrics and health endpoint."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

import kopf
from prometheus_client import start_http_server


def run(
    *,
    namespaces: Sequence[str] = (),
    all_namespaces: bool = False,
    metrics_port: int = 8080,
    health_port: int = 8081,
    bind_address: str = "0.0.0.0",
    verbose: bool = False,
) -> None:
    """Run until SIGTERM/SIGINT. Watches the given namespaces, or all of them."""
    if bool(namespaces) == all_namespaces:
        raise SystemExit("give --all-namespaces or at least one --namespace")
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not verbose:
        # kopf logs every timer run at INFO ("Timer 'job_sync' succeeded."): one line per job per second.
        logging.getLogger("kopf.objects").setLevel(logging.WARNING)
        logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    from . import handlers  # noqa: F401 - registers the handlers with kopf

    if metrics_port:
        start_http_server(metrics_port, addr=bind_address)
    asyncio.run(
        kopf.operator(
            standalone=True,
            clusterwide=all_namespaces,
            namespaces=list(namespaces),
            liveness_endpoint=f"http://{bind_address}:{health_port}/healthz" if health_port else None,
        )
    )
