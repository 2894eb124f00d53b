"""The operator as a real process, running as its ServiceAccount, for tests and the local stack.

RBAC comes from :mod:`trawl.operator.rbac` (the same rules the manifests and the chart use), and
the process authenticates by impersonating the ServiceAccount, so a permission the operator lacks
fails here exactly as it would in a cluster.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trawl.operator.rbac import CLUSTER_RULES, LEADER_ELECTION_RULES, NAMESPACED_RULES

from . import procs


def rbac_objects(sa_namespace: str, sa_name: str, watch_namespaces: list[str] | None) -> list[dict[str, Any]]:
    """ServiceAccount, Roles and bindings for an operator watching the namespaces (None: all of them)."""
    subject = [{"kind": "ServiceAccount", "name": sa_name, "namespace": sa_namespace}]
    base = f"trawl-operator-{sa_namespace}-{sa_name}"
    objs: list[dict[str, Any]] = [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": sa_name, "namespace": sa_namespace}},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": f"{base}-cluster"},
            "rules": CLUSTER_RULES + (NAMESPACED_RULES if watch_namespaces is None else []),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{base}-cluster"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": f"{base}-cluster"},
            "subjects": subject,
        },
    ]
    objs += [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": "trawl-operator-leader-election", "namespace": sa_namespace},
            "rules": LEADER_ELECTION_RULES,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": f"trawl-operator-leader-election-{sa_name}", "namespace": sa_namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "trawl-operator-leader-election",
            },
            "subjects": subject,
        },
    ]
    for ns in watch_namespaces or []:
        objs += [
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "trawl-operator", "namespace": ns},
                "rules": NAMESPACED_RULES,
            },
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": f"trawl-operator-{sa_namespace}-{sa_name}", "namespace": ns},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "trawl-operator"},
                "subjects": subject,
            },
        ]
    return objs


@dataclass
class OperatorProcess:
    """``trawl operator`` in a subprocess; :meth:`kill` simulates a crash, :meth:`start` restarts it."""

    kubeconfig: Path
    namespaces: list[str] | None  # None: --all-namespaces
    log_path: Path
    env: dict[str, str] = field(default_factory=dict)
    extra_args: list[str] = field(default_factory=list)
    health_port: int = 0
    metrics_port: int = 0
    proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> OperatorProcess:
        # A port the caller picked for another listener (e.g. --api-port) was released before these are
        # picked, so the system may hand it out again: never give the probes a port named in the arguments.
        taken = {int(a) for a in self.extra_args if a.isdigit()}
        while True:
            self.health_port, self.metrics_port = procs.free_ports(2)
            if not taken & {self.health_port, self.metrics_port}:
                break
        scope = ["--all-namespaces"] if self.namespaces is None else [a for n in self.namespaces for a in ("-n", n)]
        argv = [
            sys.executable, "-m", "trawl.cli", "operator", *scope,
            "--health-port", str(self.health_port), "--metrics-port", str(self.metrics_port),
            "--bind-address", "127.0.0.1", *self.extra_args,
        ]  # fmt: skip
        env = {**os.environ, "KUBECONFIG": str(self.kubeconfig), **self.env}
        self.proc = procs.start(argv, env=env, log_path=self.log_path)
        self.wait_healthy(timeout)
        return self

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.health_port}/healthz"
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"operator exited early; log:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=1) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"operator not healthy within {timeout}s; log:\n{self.log_tail()}")

    def is_leader(self) -> bool:
        """With --leader-election: whether this process holds the Lease (its /leader endpoint)."""
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.health_port}/leader", timeout=2) as resp:
                return bool(resp.status == 200)
        except OSError:
            return False

    def metrics_text(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as resp:
            return str(resp.read().decode())

    def kill(self) -> None:
        """SIGKILL, as a node failure or OOM kill would."""
        if self.proc is not None:
            procs.stop(self.proc, timeout=0.1, sig=9)
            self.proc = None

    def stop(self) -> None:
        if self.proc is not None:
            procs.stop(self.proc, timeout=15)
            self.proc = None

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"
