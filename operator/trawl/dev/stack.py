"""The local stack behind `trawl dev up` and `make demo`: every part of Trawl, for real, on one machine.

A kube-apiserver with etcd, a redis-server, the operator (running as its ServiceAccount), the
worker supervisor (runs `trawl worker` processes as the worker Deployment asks), and the demo
bookstore site, all on loopback ports. It applies a ScrapePool and a crawl ScrapeJob, shows live
progress and prints where the results are. Everything it starts is stopped by :meth:`stop`, and
dies with it if it is killed.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
import redis

from trawl.api.naming import queue_prefix
from trawl.queue.keys import Keys

from .bookstore import PRODUCT_FIELDS, PRODUCT_XPATH_FIELD, Bookstore
from .controlplane import ControlPlane, find_assets
from .operator_process import OperatorProcess, rbac_objects
from .redis_server import RedisServer
from .supervisor import WorkerSupervisor

NAMESPACE = "trawl-demo"
POOL = "demo"
JOB = "bookstore-crawl"


def demo_pool(redis_url: str) -> dict[str, Any]:
    return {
        "apiVersion": "trawl.dev/v1alpha1",
        "kind": "ScrapePool",
        "metadata": {"name": POOL, "namespace": NAMESPACE},
        "spec": {
            "redis": {"url": redis_url},
            # The demo site is on loopback, which workers refuse unless allowed.
            "worker": {"concurrency": 2, "drainSeconds": 10, "allowedCidrs": ["127.0.0.0/8"]},
            "autoscaling": {
                "minReplicas": 0,
                "maxReplicas": 4,
                "targetDrainSeconds": 10,
                "pollSeconds": 2,
                "scaleDownDelaySeconds": 5,
                "idleSecondsBeforeZero": 5,
            },
            "queue": {"leaseSeconds": 10},
        },
    }


def demo_job(site_url: str) -> dict[str, Any]:
    return {
        "apiVersion": "trawl.dev/v1alpha1",
        "kind": "ScrapeJob",
        "metadata": {"name": JOB, "namespace": NAMESPACE},
        "spec": {
            "pool": POOL,
            "urls": [site_url + "/"],
            "crawl": {"maxDepth": 8, "maxPages": 2000, "exclude": ["/private/", "/hostile/"]},
            "extract": {"fields": [*PRODUCT_FIELDS, PRODUCT_XPATH_FIELD], "onlyMatching": "/product/"},
            "politeness": {"requestsPerSecond": 60, "maxConcurrencyPerDomain": 16},
        },
    }


@dataclass
class DemoResult:
    phase: str
    pages: int
    results: int
    expected_results: int
    seconds: float
    replicas_seen: list[int]
    workers_seen: list[int]
    results_location: str
    sample: dict[str, Any] | None


@dataclass
class LocalStack:
    workdir: Path
    site_categories: int = 6
    site_books: int = 30
    site_latency: float = 0.2
    control_plane: ControlPlane | None = None
    redis: RedisServer | None = None
    site: Bookstore | None = None
    operator: OperatorProcess | None = None
    supervisor: WorkerSupervisor | None = None
    started: list[str] = field(default_factory=list)

    @property
    def kubeconfig(self) -> Path:
        assert self.control_plane is not None
        return self.control_plane.kubeconfig_path

    def start(self, log: Any = print) -> LocalStack:
        check_programs()
        self.workdir.mkdir(parents=True, exist_ok=True)
        try:
            log("starting etcd and kube-apiserver ...")
            self.control_plane = ControlPlane(assets=find_assets(build=True)).start()
            self.control_plane.apply_crds()
            self.control_plane.create_namespace(NAMESPACE)
            log("starting redis-server ...")
            (self.workdir / "redis").mkdir(exist_ok=True)
            # AOF like the chart's Redis: a restart of the local stack's Redis keeps the queue.
            self.redis = RedisServer(
                workdir=self.workdir / "redis", extra_args=["--appendonly", "yes", "--appendfsync", "everysec"]
            ).start()
            log("starting the demo bookstore site ...")
            self.site = Bookstore(
                categories=self.site_categories, books_per_category=self.site_books, latency=self.site_latency
            ).start()
            log("starting the operator (as its ServiceAccount) and the worker supervisor ...")
            cp = self.control_plane
            cp.kubectl(
                "apply",
                "-f",
                "-",
                input=json.dumps(
                    {
                        "apiVersion": "v1",
                        "kind": "List",
                        "items": rbac_objects(NAMESPACE, "trawl-operator", [NAMESPACE]),
                    }
                ),
            )
            self.operator = OperatorProcess(
                cp.service_account_kubeconfig(NAMESPACE, "trawl-operator"),
                [NAMESPACE],
                self.workdir / "operator.log",
            ).start()
            self.supervisor = WorkerSupervisor(
                cp.api_client(), self.workdir / "workers", namespaces=[NAMESPACE]
            ).start()
        except BaseException:
            self.stop()
            raise
        return self

    def apply_samples(self) -> None:
        assert self.control_plane is not None and self.redis is not None and self.site is not None
        items = [demo_pool(self.redis.url), demo_job(self.site.url)]
        self.control_plane.kubectl(
            "apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items})
        )

    def run_demo(self, timeout: float = 300.0, show: bool = True) -> DemoResult:
        """Apply the samples, show progress until the job finishes, and summarise."""
        from .progress import watch_job

        assert self.control_plane is not None and self.supervisor is not None and self.site is not None
        self.apply_samples()
        api = self.control_plane.api_client()
        started = time.monotonic()
        final, replicas = watch_job(api, NAMESPACE, JOB, POOL, self.supervisor, timeout=timeout, show=show)
        elapsed = time.monotonic() - started
        status = final.get("status") or {}
        expected = len(self.site.catalog.products)
        results, sample = self._results(final)
        workers = [n for (_t, dep, n) in self.supervisor.history if dep == f"{NAMESPACE}/{POOL}-workers"]
        return DemoResult(
            phase=str(status.get("phase")),
            pages=int((status.get("counts") or {}).get("succeeded", 0)),
            results=results,
            expected_results=expected,
            seconds=elapsed,
            replicas_seen=_changes(replicas),
            workers_seen=_changes(workers),
            results_location=str((status.get("results") or {}).get("location", "")),
            sample=sample,
        )

    def _results(self, job: dict[str, Any]) -> tuple[int, dict[str, Any] | None]:
        assert self.redis is not None
        client = redis.Redis.from_url(self.redis.url)
        try:
            key = Keys(queue_prefix(NAMESPACE, POOL)).results(job["metadata"]["uid"])
            count: int = client.xlen(key)  # type: ignore[assignment]
            first: list[Any] = client.xrange(key, count=1)  # type: ignore[assignment]
            sample = json.loads(first[0][1][b"data"]) if first else None
        finally:
            client.close()
        return count, sample

    def stop(self) -> None:
        for part in ("supervisor", "operator", "site", "redis", "control_plane"):
            obj = getattr(self, part)
            if obj is not None:
                try:
                    obj.stop()
                finally:
                    setattr(self, part, None)


def _changes(values: list[int]) -> list[int]:
    out: list[int] = []
    for v in values:
        if not out or out[-1] != v:
            out.append(v)
    return out


# Programs the stack runs that come from the system, with the Debian package that provides each.
SYSTEM_PROGRAMS = {"redis-server": "redis-server"}


def check_programs() -> None:
    """Fail at once, in one line, when a system program is missing (not after building the control plane)."""
    from trawl.clitools.exits import CliError

    missing = [pkg for prog, pkg in SYSTEM_PROGRAMS.items() if shutil.which(prog) is None]
    if missing:
        names = " ".join(missing)
        raise CliError(f"missing {names} (not on PATH)", hint=f"sudo apt-get install -y {names}")


def state_dir() -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "trawl" / "dev"
    base.mkdir(parents=True, exist_ok=True)
    return base


def fresh_workdir() -> Path:
    return Path(tempfile.mkdtemp(prefix="trawl-dev-"))


def remove_workdir(path: Path) -> None:
    shutil.rmtree(path, ignore_errors=True)


def api_for(kubeconfig: Path) -> kubernetes.client.ApiClient:
    from kubernetes import config as kube_config

    client: kubernetes.client.ApiClient = kube_config.new_client_from_config(  # type: ignore[no-untyped-call]
        config_file=str(kubeconfig)
    )
    return client
