"""A local stand-in for the kubelet: runs `trawl worker` processes for each worker Deployment.

The local control plane has no controller manager, scheduler or kubelet, so a Deployment never
becomes pods. The supervisor closes that gap for development and tests: it watches the worker
Deployments the operator owns, runs as many ``trawl worker`` processes as each one's
``spec.replicas`` asks for, with the environment of its pod template (Secret references resolved,
``metadata.name`` given a pod-like name), stops surplus workers with SIGTERM so they drain as in
a cluster, and reports the live count back on the Deployment's status. Which workers are surplus
follows the ReplicaSet's ranking by ``pod-deletion-cost``, which the operator sets from each pod's
in-flight tasks: the supervisor reads each worker's ``trawl_worker_in_flight`` and stops the least
busy (the newest among equals). Autoscaling is then
visible on one machine: the operator changes replicas, the number of worker processes follows.
"""

from __future__ import annotations

import base64
import logging
import math
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
from kubernetes.client import ApiClient

from trawl.api.naming import LABEL_COMPONENT, LABEL_NAME
from trawl.jobspec.podfiles import SECRETS_DIR_ENV, VOLUMES_ROOT_ENV

from . import procs

log = logging.getLogger(__name__)

SELECTOR = f"{LABEL_NAME}=trawl,{LABEL_COMPONENT}=worker"


@dataclass
class _Worker:
    name: str
    proc: subprocess.Popen[bytes]
    started: float
    stop_requested: float | None = None
    metrics_port: int = 0
    root: Path | None = None  # where its Secret volumes were written


@dataclass
class WorkerSupervisor:
    """Call :meth:`start` to run in a background thread; :meth:`stop` drains and stops every worker."""

    api_client: ApiClient
    log_dir: Path
    namespaces: list[str] | None = None  # None: every namespace
    poll_seconds: float = 1.0
    extra_env: dict[str, str] = field(default_factory=dict)
    drain_timeout: float = 60.0
    _workers: dict[tuple[str, str], list[_Worker]] = field(default_factory=dict)
    _stopping: list[_Worker] = field(default_factory=list)
    _thread: threading.Thread | None = None
    _halt: threading.Event = field(default_factory=threading.Event)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    history: list[tuple[float, str, int]] = field(default_factory=list)  # (time, deployment, live workers)

    def start(self) -> WorkerSupervisor:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        self._thread = threading.Thread(target=self._run, name="trawl-worker-supervisor", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._halt.set()
        if self._thread is not None:
            self._thread.join(timeout=self.drain_timeout + 30)

    def _stop_everyone(self) -> None:
        # Runs on the supervisor thread: workers die with the thread that started them
        # (PR_SET_PDEATHSIG), so the thread outlives their drain.
        with self._lock:
            everyone = [w for ws in self._workers.values() for w in ws] + self._stopping
            self._workers.clear()
            self._stopping.clear()
        for worker in everyone:
            procs.signal_group(worker.proc)
        for worker in everyone:
            procs.stop(worker.proc, timeout=self.drain_timeout)
            _remove_root(worker)

    def live(self, namespace: str, deployment: str) -> int:
        with self._lock:
            return sum(1 for w in self._workers.get((namespace, deployment), []) if w.proc.poll() is None)

    def metrics_ports(self, namespace: str, deployment: str) -> list[int]:
        """The loopback metrics ports of the deployment's live workers (each has its own)."""
        with self._lock:
            workers = self._workers.get((namespace, deployment), [])
            return [w.metrics_port for w in workers if w.proc.poll() is None and w.metrics_port]

    def worker_pids(self) -> list[int]:
        with self._lock:
            return [w.proc.pid for ws in self._workers.values() for w in ws] + [w.proc.pid for w in self._stopping]

    # ------------------------------------------------------------------ loop

    def _run(self) -> None:
        apps = kubernetes.client.AppsV1Api(self.api_client)
        while not self._halt.is_set():
            try:
                self._sync(apps)
            except Exception as exc:  # the API server may be restarting; try again next tick
                log.warning("worker supervisor: %s", exc)
            self._halt.wait(self.poll_seconds)
        self._stop_everyone()

    def _sync(self, apps: kubernetes.client.AppsV1Api) -> None:
        if self.namespaces is None:
            listings = [apps.list_deployment_for_all_namespaces(label_selector=SELECTOR)]
        else:
            listings = [apps.list_namespaced_deployment(ns, label_selector=SELECTOR) for ns in self.namespaces]
        seen: set[tuple[str, str]] = set()
        for listing in listings:
            for dep in self.api_client.sanitize_for_serialization(listing).get("items", []):  # type: ignore[no-untyped-call]
                meta = dep["metadata"]
                key = (meta["namespace"], meta["name"])
                seen.add(key)
                try:
                    self._reconcile(key, dep, int(dep["spec"].get("replicas") or 0))
                    self._report(apps, dep, self.live(*key))
                except Exception as exc:  # one broken Deployment (e.g. a missing Secret) must not stop the others
                    log.warning("worker supervisor: %s/%s: %s", key[0], key[1], exc)
        with self._lock:
            gone = [k for k in self._workers if k not in seen]
        for key in gone:
            self._reconcile(key, None, 0)
        self._reap()

    def _report(self, apps: kubernetes.client.AppsV1Api, dep: dict[str, Any], live: int) -> None:
        meta = dep["metadata"]
        status = dep.get("status") or {}
        if status.get("replicas", 0) != live or status.get("readyReplicas", 0) != live:
            body = {
                "status": {
                    "replicas": live,
                    "readyReplicas": live,
                    "availableReplicas": live,
                    "updatedReplicas": live,
                    "observedGeneration": meta.get("generation", 1),
                }
            }
            apps.patch_namespaced_deployment_status(meta["name"], meta["namespace"], body)

    def _reconcile(self, key: tuple[str, str], dep: dict[str, Any] | None, desired: int) -> None:
        with self._lock:
            workers = [w for w in self._workers.get(key, []) if w.proc.poll() is None]
            self._workers[key] = workers
        while len(workers) < desired and dep is not None:
            workers.append(self._spawn(key, dep))
        if len(workers) > desired > 0:
            # The ReplicaSet removes the pods of lowest pod-deletion-cost (the operator's in-flight count).
            busy = {id(w): _in_flight(w) for w in workers}
            workers.sort(key=lambda w: -busy[id(w)])  # stable: the newest go first among equals
        surplus = workers[desired:] if len(workers) > desired else []
        for worker in surplus:
            # SIGTERM, as the kubelet sends: the worker stops claiming and drains its in-flight tasks.
            workers.remove(worker)
            worker.stop_requested = time.monotonic()
            procs.signal_group(worker.proc)
            with self._lock:
                self._stopping.append(worker)
        if dep is not None or surplus:
            with self._lock:
                self._workers[key] = workers
                self.history.append((time.time(), f"{key[0]}/{key[1]}", len(workers)))

    def _reap(self) -> None:
        with self._lock:
            still = []
            for worker in self._stopping:
                draining = time.monotonic() - (worker.stop_requested or 0) < self.drain_timeout
                if worker.proc.poll() is None and draining:
                    still.append(worker)
                else:
                    procs.stop(worker.proc, timeout=1)  # exited: unregister; overdue: SIGKILL
                    _remove_root(worker)
            self._stopping = still

    def _spawn(self, key: tuple[str, str], dep: dict[str, Any]) -> _Worker:
        namespace, name = key
        pod_name = f"{name}-{secrets.token_hex(3)}"
        container = dep["spec"]["template"]["spec"]["containers"][0]
        env = {"PATH": "/usr/bin:/bin", **_base_env(), **self.extra_env}
        for item in container.get("env") or []:
            env[item["name"]] = self._env_value(namespace, pod_name, item)
        root = self._mount_secrets(namespace, pod_name, dep, container, env)
        root = self._mount_volumes(namespace, pod_name, dep, container, env, root)
        metrics_port = 0
        if int(env.get("TRAWL_METRICS_PORT") or 0):
            # Pods each have their own IP; local processes share one host, where the template's port
            # (9090 by default) may be anyone's: every worker gets a free loopback port instead.
            metrics_port = procs.free_port()
            env["TRAWL_METRICS_PORT"] = str(metrics_port)
            env["TRAWL_METRICS_ADDRESS"] = "127.0.0.1"
        argv = [sys.executable, "-m", "trawl.cli", *container.get("args", ["worker"])]
        # Bound to this thread, which outlives its workers: a killed parent leaves no worker behind.
        proc = procs.start(argv, env=env, log_path=self.log_dir / f"{namespace}_{pod_name}.log", bind_to_thread=True)
        log.info("started worker %s/%s (pid %d)", namespace, pod_name, proc.pid)
        return _Worker(pod_name, proc, time.monotonic(), metrics_port=metrics_port, root=root)

    def _mount_secrets(
        self, namespace: str, pod_name: str, dep: dict[str, Any], container: dict[str, Any], env: dict[str, str]
    ) -> Path | None:
        """Write the template's Secret volumes under a private directory, as the kubelet mounts them,
        and point the worker's secrets directory there."""
        volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"].get("volumes") or []}
        mounts = [(m, volumes.get(m["name"], {}).get("secret")) for m in container.get("volumeMounts") or []]
        mounts = [(m, sv) for m, sv in mounts if sv]
        if not mounts:
            return None
        root = Path(tempfile.mkdtemp(prefix=f"{pod_name}-", dir=self.log_dir))
        core = kubernetes.client.CoreV1Api(self.api_client)
        try:
            for mount, volume in mounts:
                # A missing Secret raises, as the kubelet would not start the pod either.
                secret = core.read_namespaced_secret(volume["secretName"], namespace)
                target = root / mount["mountPath"].lstrip("/")
                target.mkdir(parents=True, mode=0o700)
                for key, value in (secret.data or {}).items():
                    path = target / key
                    path.write_bytes(base64.b64decode(value))
                    path.chmod(0o400)
        except BaseException:
            shutil.rmtree(root, ignore_errors=True)
            raise
        if SECRETS_DIR_ENV in env:
            env[SECRETS_DIR_ENV] = str(root / env[SECRETS_DIR_ENV].lstrip("/"))
        return root

    def _mount_volumes(
        self,
        namespace: str,
        pod_name: str,
        dep: dict[str, Any],
        container: dict[str, Any],
        env: dict[str, str],
        root: Path | None,
    ) -> Path | None:
        """Give the pool's persistentVolumeClaim and emptyDir mounts local directories, as the kubelet mounts
        them: a claim is one directory shared by every worker of the namespace (like ReadWriteMany), an
        emptyDir one per worker. The worker finds them under its volumes root (TRAWL_VOLUMES_ROOT)."""
        volumes = {v["name"]: v for v in dep["spec"]["template"]["spec"].get("volumes") or []}
        mounts = [
            (m, volumes[m["name"]])
            for m in container.get("volumeMounts") or []
            if m["name"] != "tmp" and m["name"] in volumes and "secret" not in volumes[m["name"]]
        ]
        mounts = [(m, v) for m, v in mounts if "persistentVolumeClaim" in v or "emptyDir" in v]
        if not mounts:
            return root
        if root is None:
            root = Path(tempfile.mkdtemp(prefix=f"{pod_name}-", dir=self.log_dir))
        for mount, volume in mounts:
            if "persistentVolumeClaim" in volume:
                source = self.log_dir / "volumes" / namespace / volume["persistentVolumeClaim"]["claimName"]
            else:
                source = root / "emptydir" / mount["name"]
            source = source / mount.get("subPath", "")
            source.mkdir(parents=True, exist_ok=True)
            link = root / mount["mountPath"].lstrip("/")
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to(source, target_is_directory=True)
        env[VOLUMES_ROOT_ENV] = str(root)
        return root

    def claim_dir(self, namespace: str, claim: str) -> Path:
        """Where this supervisor keeps a PersistentVolumeClaim's files."""
        return self.log_dir / "volumes" / namespace / claim

    def _env_value(self, namespace: str, pod_name: str, item: dict[str, Any]) -> str:
        if "value" in item:
            return str(item["value"])
        source = item.get("valueFrom") or {}
        if "fieldRef" in source:
            path = source["fieldRef"]["fieldPath"]
            return {"metadata.name": pod_name, "metadata.namespace": namespace}.get(path, "")
        if "secretKeyRef" in source:
            ref = source["secretKeyRef"]
            core = kubernetes.client.CoreV1Api(self.api_client)
            secret = core.read_namespaced_secret(ref["name"], namespace)
            return base64.b64decode((secret.data or {})[ref["key"]]).decode()
        return ""


def _in_flight(worker: _Worker) -> float:
    """The worker's ``trawl_worker_in_flight`` gauge (0 without a metrics port). A worker that does not
    answer (a loaded machine) counts as the busiest: stopping it could interrupt what it holds, whereas
    stopping one that answered with fewer tasks is what the ReplicaSet's pod-deletion-cost would do."""
    if not worker.metrics_port:
        return 0.0
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{worker.metrics_port}/metrics", timeout=5) as reply:
            for line in reply.read().decode().splitlines():
                if line.startswith("trawl_worker_in_flight "):
                    return float(line.split()[1])
    except (OSError, ValueError):
        return math.inf
    return 0.0


def _remove_root(worker: _Worker) -> None:
    if worker.root is not None:
        shutil.rmtree(worker.root, ignore_errors=True)


def _base_env() -> dict[str, str]:
    import os

    keep = ("PATH", "HOME", "LANG", "PYTHONPATH", "VIRTUAL_ENV", "TMPDIR")
    return {k: v for k, v in os.environ.items() if k in keep}
