"""Live progress of a ScrapeJob and its pool in the terminal (rich), for `trawl dev up`."""

from __future__ import annotations

import time
from typing import Any

import kubernetes
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from trawl.api.naming import deployment_name

from .supervisor import WorkerSupervisor

TERMINAL = ("Succeeded", "Failed")


def _get(custom: kubernetes.client.CustomObjectsApi, namespace: str, plural: str, name: str) -> dict[str, Any]:
    obj: dict[str, Any] = custom.get_namespaced_custom_object(  # type: ignore[assignment]
        "trawl.dev", "v1alpha1", namespace, plural, name
    )
    return obj


def watch_job(
    api: kubernetes.client.ApiClient,
    namespace: str,
    job: str,
    pool: str,
    supervisor: WorkerSupervisor | None,
    *,
    timeout: float,
    show: bool = True,
    poll: float = 0.5,
) -> tuple[dict[str, Any], list[int]]:
    """Poll until the job is Succeeded or Failed; returns the final object and the replica counts seen."""
    custom = kubernetes.client.CustomObjectsApi(api)
    apps = kubernetes.client.AppsV1Api(api)
    console = Console(stderr=False, force_terminal=None)
    replicas_seen: list[int] = []
    deadline = time.monotonic() + timeout
    obj: dict[str, Any] = {}
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        console=console,
        disable=not show,
        transient=False,
    ) as progress:
        bar = progress.add_task(f"job {job}", total=None, info="")
        line = progress.add_task(f"pool {pool}", total=None, info="", start=False)
        while time.monotonic() < deadline:
            obj = _get(custom, namespace, "scrapejobs", job)
            status = obj.get("status") or {}
            counts = status.get("counts") or {}
            total = int(counts.get("total", 0)) or None
            done = int(counts.get("succeeded", 0)) + int(counts.get("deadLettered", 0))
            progress.update(
                bar, total=total, completed=done,
                info=f"{status.get('phase', 'Pending'):<9} in flight {counts.get('inFlight', 0):>3}  "
                f"retrying {counts.get('retrying', 0)}  dead {counts.get('deadLettered', 0)}",
            )  # fmt: skip
            try:
                dep = apps.read_namespaced_deployment(deployment_name(pool), namespace)
                replicas = int(dep.spec.replicas or 0)
            except kubernetes.client.ApiException:
                replicas = 0
            replicas_seen.append(replicas)
            pool_obj = _get(custom, namespace, "scrapepools", pool)
            queue = (pool_obj.get("status") or {}).get("queue") or {}
            live = supervisor.live(namespace, deployment_name(pool)) if supervisor is not None else replicas
            progress.update(
                line,
                info=f"backlog {queue.get('ready', 0):>5}  throughput {queue.get('throughputPerSecond', 0):>6}/s  "
                f"replicas {replicas} (worker processes {live})",
            )
            if status.get("phase") in TERMINAL and status.get("observedGeneration") == obj["metadata"]["generation"]:
                break
            time.sleep(poll)
    return obj, replicas_seen
