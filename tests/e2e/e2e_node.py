"""Drive the project's one-node Kubernetes (hack/realnode/node.sh) and the objects the e2e scenarios use.

Everything goes through the real binaries the node runs with (kubectl of the same version, helm), the
node's own API server on the bridge address the run created, and nothing else on the network.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
HACK = ROOT / "hack" / "realnode"
KIND_DIR = ROOT / "tests" / "e2e_kind"
CACHE = Path(
    os.environ.get("TRAWL_CACHE_DIR") or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trawl"
)
KUBE_VERSION = "v1.35.4"
IMAGE = "ghcr.io/trawl-dev/trawl:e2e"


def coredns_dir() -> Path:
    """Where hack/realnode/build.sh puts CoreDNS (keyed by the Corefile's plugins: lib.sh says)."""
    out = subprocess.run(
        ["bash", "-c", f'source "{HACK}/lib.sh" && echo "$COREDNS_DIR"'], capture_output=True, text=True, check=True
    )
    return Path(out.stdout.strip())


def host_problem() -> str | None:
    """Why this host cannot run a node whatever is installed (None: it can). `make test` asks first, with
    the system python3 and no dependency: hack/test.sh stops at once on it unless E2E=skip."""
    if os.geteuid() != 0:
        return "a real node needs root (network namespaces, mounts, cgroups); run the e2e layer as root"
    if not (Path("/sys/fs/cgroup/memory").is_dir() or Path("/sys/fs/cgroup/cgroup.controllers").exists()):
        return "no cgroup file system at /sys/fs/cgroup: the kubelet cannot run pods"
    return None


def missing_prerequisites() -> str | None:
    """Why a node cannot start here (None: it can). The e2e layer skips with exactly this reason (and
    `make test` fails on that skip: tests/skip_check.py)."""
    problem = host_problem()
    if problem:
        return problem
    for tool in ("runc", "iptables", "debootstrap", "dockerd", "nft", "openssl"):
        if shutil.which(tool) is None:
            return f"{tool} is missing: run hack/realnode/deps.sh (Debian packages; needs apt)"
    node_bin = CACHE / "k8s" / f"{KUBE_VERSION}-node"
    wanted = [node_bin / c for c in ("kubelet", "kube-controller-manager", "kube-scheduler", "kube-proxy", "kubectl")]
    wanted += [CACHE / "containerd-v2.4.2" / "containerd", coredns_dir() / "coredns"]
    assets = Path(os.environ.get("KUBEBUILDER_ASSETS") or CACHE / "k8s" / f"{KUBE_VERSION}-etcd-v3.6.16")
    wanted += [assets / "kube-apiserver", assets / "etcd"]
    absent = [str(p) for p in wanted if not p.exists()]
    if absent:
        return f"node binaries not built ({', '.join(absent)}): run `make e2e-build` (~30 min cold, cached)"
    return None


class CommandFailed(RuntimeError):
    """A kubectl/helm/script call exited non-zero; the message carries its output."""


def run(
    args: list[str],
    *,
    input: str | None = None,
    timeout: float = 300,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> str:
    # Its own process group: a timeout or an interrupt ends the command's children too (node.sh up runs
    # image imports in the background), not only the command; `down` then removes what they started.
    proc = subprocess.Popen(
        args,
        stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
        start_new_session=True,
    )
    try:
        stdout, stderr = proc.communicate(input, timeout=timeout)
    except BaseException:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    if check and proc.returncode != 0:
        raise CommandFailed(f"{' '.join(args[:6])}... exited {proc.returncode}:\n{stdout[-3000:]}\n{stderr[-3000:]}")
    return stdout


@dataclass
class RealNode:
    """A running node: its folder, kubeconfig and tools."""

    root: Path
    env: dict[str, str]
    helm_bin: str

    @property
    def kubeconfig(self) -> str:
        return self.env["KUBECONFIG"]

    def kubectl(self, *args: str, input: str | None = None, timeout: float = 300, check: bool = True) -> str:
        return run(
            [self.env["KUBECTL"], "--kubeconfig", self.kubeconfig, *args], input=input, timeout=timeout, check=check
        )

    def helm(self, *args: str, timeout: float = 600) -> str:
        return run([self.helm_bin, "--kubeconfig", self.kubeconfig, *args], timeout=timeout)

    def helm_uninstall_quietly(self, release: str, namespace: str) -> None:
        """Uninstall if still installed, without waiting (cleanup after a failed uninstall)."""
        run(
            [
                self.helm_bin,
                "--kubeconfig",
                self.kubeconfig,
                "uninstall",
                release,
                "-n",
                namespace,
                "--ignore-not-found",
            ],
            check=False,
        )

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        ns = ["-n", namespace] if namespace else []
        out = self.kubectl("get", kind, name, *ns, "-o", "json", "--ignore-not-found", check=False)
        return json.loads(out) if out.strip() else None

    def items(self, kind: str, namespace: str, selector: str | None = None) -> list[dict[str, Any]]:
        sel = ["-l", selector] if selector else []
        return list(json.loads(self.kubectl("get", kind, "-n", namespace, *sel, "-o", "json"))["items"])

    def apply(self, objects: Iterable[dict[str, Any]], namespace: str | None = None) -> None:
        ns = ["-n", namespace] if namespace else []
        body = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
        self.kubectl("apply", *ns, "-f", "-", input=body)

    def ctr(self, *args: str) -> str:
        return run([self.env["CTR"], "-a", self.env["CONTAINERD_SOCK"], "-n", "k8s.io", *args])


def read_env(path: Path) -> dict[str, str]:
    pairs = (line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)
    return {k: v for k, v in pairs}


def pod_ready(pod: dict[str, Any]) -> bool:
    conditions = pod.get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) and not pod["metadata"].get(
        "deletionTimestamp"
    )


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any] | None:
    for c in (obj or {}).get("status", {}).get("conditions") or []:
        if c.get("type") == kind:
            return dict(c)
    return None
