"""ScrapeJob access for ``submit`` and ``status``: building the object, creating it, following it."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from trawl.api.naming import API_VERSION
from trawl.api.scrapejob import ScrapeJobSpec

from .cluster import Cluster
from .exits import EXIT_NOT_FOUND, EXIT_STALLED, EXIT_TIMEOUT, CliError

TERMINAL = ("Succeeded", "Failed")


@dataclass(frozen=True)
class SubmitOptions:
    urls: list[str]
    pool: str = "default"
    crawl: bool = False
    max_pages: int | None = None
    depth: int | None = None
    priority: int | None = None
    name: str | None = None
    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    max_dead_letters: int | None = None
    priority_class: str | None = None  # a class of the pool's spec.tenancy
    pool_namespace: str | None = None  # a pool the platform shares from another namespace


def generate_name_for(url: str) -> str:
    """A DNS-label stem from the first URL's host: https://books.example.com/ -> "books-example-com-"."""
    host = (urlsplit(url).hostname or "").lower()
    if host.startswith("www."):
        host = host[4:]
    stem = re.sub(r"[^a-z0-9]+", "-", host).strip("-")[:40].strip("-")
    if not stem or not stem[0].isalpha():
        stem = "job" + (f"-{stem}" if stem else "")
    return stem + "-"


def build_job(opts: SubmitOptions) -> dict[str, Any]:
    """The ScrapeJob object to create, validated with the same models the operator uses."""
    if not opts.urls:
        raise CliError("give at least one URL")
    spec: dict[str, Any] = {"pool": opts.pool, "urls": list(opts.urls)}
    if opts.pool_namespace is not None:
        spec["poolNamespace"] = opts.pool_namespace
    if opts.crawl or opts.max_pages is not None or opts.depth is not None or opts.include or opts.exclude:
        crawl: dict[str, Any] = {}
        if opts.max_pages is not None:
            crawl["maxPages"] = opts.max_pages
        if opts.depth is not None:
            crawl["maxDepth"] = opts.depth
        if opts.include:
            crawl["include"] = list(opts.include)
        if opts.exclude:
            crawl["exclude"] = list(opts.exclude)
        spec["crawl"] = crawl
    if opts.priority is not None:
        spec["priority"] = opts.priority
    if opts.priority_class is not None:
        spec["priorityClassName"] = opts.priority_class
    if opts.max_dead_letters is not None:
        spec["maxDeadLetters"] = opts.max_dead_letters
    try:
        ScrapeJobSpec.model_validate(spec)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'spec'}: {e['msg']}" for e in exc.errors()[:3])
        raise CliError(f"invalid job: {problems}") from None
    metadata: dict[str, Any] = {"name": opts.name} if opts.name else {"generateName": generate_name_for(opts.urls[0])}
    return {"apiVersion": API_VERSION, "kind": "ScrapeJob", "metadata": metadata, "spec": spec}


def job_pool_namespace(job: dict[str, Any]) -> str:
    """The namespace of the pool a job names: its spec.poolNamespace, else its own."""
    return str((job.get("spec") or {}).get("poolNamespace") or job["metadata"]["namespace"])


def submit(cluster: Cluster, opts: SubmitOptions) -> dict[str, Any]:
    """Create the job after checking its pool exists (a missing pool would only show as Stalled later).

    A pool of another namespace (--pool-namespace) is not looked up: a team using a shared pool may not
    read the platform's namespace; the job's status says whether the pool exists and serves it."""
    body = build_job(opts)
    if opts.pool_namespace not in (None, cluster.namespace):
        return cluster.create("ScrapeJob", body)
    try:
        cluster.get("ScrapePool", opts.pool)
    except CliError as exc:
        if exc.code == EXIT_NOT_FOUND:
            raise CliError(
                f"ScrapePool {cluster.namespace}/{opts.pool} not found",
                EXIT_NOT_FOUND,
                hint=f"`kubectl get scrapepools -n {cluster.namespace}` lists the pools; choose one with --pool",
            ) from None
        raise
    return cluster.create("ScrapeJob", body)


def get_job(cluster: Cluster, name: str) -> dict[str, Any]:
    try:
        return cluster.get("ScrapeJob", name)
    except CliError as exc:
        if exc.code == EXIT_NOT_FOUND:
            exc.hint = f"`trawl status -n {cluster.namespace}` lists the jobs of the namespace"
        raise


def get_job_and_pool(cluster: Cluster, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    job = get_job(cluster, name)
    pool_name = (job.get("spec") or {}).get("pool", "")
    pool_ns = job_pool_namespace(job)
    try:
        pool = cluster.get("ScrapePool", pool_name, namespace=pool_ns)
    except CliError as exc:
        if exc.code == EXIT_NOT_FOUND:
            raise CliError(f"ScrapePool {pool_ns}/{pool_name} of job {name} not found", EXIT_NOT_FOUND) from None
        raise
    return job, pool


def phase(job: dict[str, Any]) -> str:
    return str((job.get("status") or {}).get("phase") or "Pending")


def stalled(job: dict[str, Any]) -> tuple[str, str] | None:
    """(reason, message) while the job's Stalled condition is True: the operator cannot make progress."""
    for cond in (job.get("status") or {}).get("conditions") or []:
        if cond.get("type") == "Stalled" and cond.get("status") == "True":
            return str(cond.get("reason") or "Stalled"), str(cond.get("message") or "")
    return None


def follow(
    cluster: Cluster,
    name: str,
    *,
    interval: float = 1.0,
    timeout: float | None = None,
    stalled_grace: float | None = 15.0,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[dict[str, Any]]:
    """Yield the job every ``interval`` seconds until it is Succeeded or Failed (the last one yielded).

    A job Stalled for ``stalled_grace`` seconds on end ends the wait with its reason: it will not move
    until someone fixes the cause (a blip shorter than the grace, such as a Redis restart, does not).
    """
    deadline = None if not timeout else clock() + timeout
    stalled_since: float | None = None
    while True:
        job = get_job(cluster, name)
        yield job
        if phase(job) in TERMINAL:
            return
        now = clock()
        stall = stalled(job)
        stalled_since = (stalled_since if stalled_since is not None else now) if stall else None
        if stall and stalled_grace is not None and stalled_since is not None and now - stalled_since >= stalled_grace:
            reason, message = stall
            raise CliError(
                f"ScrapeJob {cluster.namespace}/{name} is stalled ({reason}): {message}",
                EXIT_STALLED,
                hint=f"fix the cause, then `trawl status {name} -w` follows it again",
            )
        if deadline is not None and now >= deadline:
            raise CliError(
                f"timed out after {timeout:g}s waiting for ScrapeJob {cluster.namespace}/{name} (phase {phase(job)})",
                EXIT_TIMEOUT,
            )
        sleep(interval)
