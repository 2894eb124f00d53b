"""Fixtures of the e2e layer: one real node per session (hack/realnode/node.sh), the chart installed on it
with Helm as shipped, the bookstore fixture site as pods behind a Service.

The node is torn down after the session and a check asserts that nothing of it is left on the host
(processes, mounts, the cni0 bridge, veths, KUBE-/CNI- chains, new nf_tables tables, changed sysctls).
Where a node cannot start (not root, no cgroups, packages or binaries missing) every test skips with the
reason. `make test` sets all of that up and fails on such a skip (tests/skip_check.py); it leaves this
layer out only when asked to (`make test E2E=skip`).
"""

from __future__ import annotations

import base64
import copy
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from e2e_node import HACK, IMAGE, KIND_DIR, ROOT, RealNode, missing_prerequisites, read_env, run

from helm_chart import helm_binary
from tlscerts import issue_tls
from waits import wait_for

NAMESPACE = "trawl-system"
SITE_NAMESPACE = "trawl-e2e-site"
RELEASE = "trawl"
POOL = "e2e"
CHART_POOL = "default"  # the chart's defaultPool.name
# Values as a user gives them for a locally built image: image and pull policy, nothing else.
IMAGE_VALUES = [
    "--set", f"image.repository={IMAGE.rsplit(':', 1)[0]}",
    "--set", f"image.tag={IMAGE.rsplit(':', 1)[1]}",
    "--set", "image.pullPolicy=Never",
]  # fmt: skip


# The results API as an aggregated API, over TLS from a Secret the platform made (here: the test's own CA),
# and the console on: `trawl results` from a kubeconfig alone (tests/e2e/test_realnode.py).
API_TLS_SECRET = "trawl-api-tls"
API_VALUES = [
    "--set", f"api.tls.secretName={API_TLS_SECRET}",
    "--set", "api.aggregation.enabled=true",
    "--set", "api.console.enabled=true",
]  # fmt: skip


def node_dir(node: RealNode) -> Path:
    return Path(node.kubeconfig).parent


def api_tls_secret(node: RealNode) -> dict[str, Any]:
    """A serving certificate for the API's Service name (what the aggregator checks), signed by a CA of the
    test's; the CA is kept beside the node's kubeconfig for the APIService's caBundle."""
    folder = Path(tempfile.mkdtemp(prefix="trawl-api-tls-"))
    try:
        ca, cert, key = issue_tls(folder, (), (f"{RELEASE}-operator-api.{NAMESPACE}.svc",))
        (node_dir(node) / "api-ca.pem").write_bytes(ca.read_bytes())
        data = {"tls.crt": cert.read_bytes(), "tls.key": key.read_bytes()}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": API_TLS_SECRET, "namespace": NAMESPACE},
        "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
    }


def _log(msg: str) -> None:
    print(f"[e2e {time.strftime('%H:%M:%S')}] {msg}", flush=True)


@pytest.fixture(scope="session")
def realnode() -> Iterator[RealNode]:
    reason = missing_prerequisites()
    if reason:
        pytest.skip(f"no real node: {reason}")
    folder = Path(tempfile.mkdtemp(prefix="trawl-realnode-"))
    env = {"R": str(folder)}
    started = time.monotonic()
    try:
        try:
            run([str(HACK / "node.sh"), "up"], env=env, timeout=900)
        except Exception:
            for log in sorted((folder / "log").glob("*.log")):
                _log(f"--- {log.name}\n{log.read_text(errors='replace')[-3000:]}")
            raise
        _log(f"node up in {time.monotonic() - started:.0f}s")
        yield RealNode(root=folder, env=read_env(folder / "env"), helm_bin=helm_binary())
    finally:
        started = time.monotonic()
        run([str(HACK / "node.sh"), "down"], env=env, timeout=600, check=False)
        _log(f"node down in {time.monotonic() - started:.0f}s")
        left = run([str(HACK / "node.sh"), "leftovers"], env=env, timeout=120, check=False).strip()
        if not left:
            subprocess.run(["rm", "-rf", str(folder)], check=False)
        assert not left, f"the node left things on the host (folder {folder} kept):\n{left}"


def site_objects(name: str = "bookstore", latency: float = 0.0) -> list[dict[str, Any]]:
    """The kind run's fixture site (tests/e2e_kind/site.yaml) under ``name``, optionally answering slowly."""
    docs = [d for d in yaml.safe_load_all((KIND_DIR / "site.yaml").read_text()) if d]
    out = []
    for doc in docs:
        doc = copy.deepcopy(doc)
        if doc["kind"] == "Namespace":
            if name != "bookstore":
                continue
        else:
            doc["metadata"]["name"] = name
            labels = {"app.kubernetes.io/name": name}
            if doc["kind"] == "Deployment":
                doc["metadata"]["labels"] = labels
                doc["spec"]["selector"]["matchLabels"] = labels
                doc["spec"]["template"]["metadata"]["labels"] = labels
                if latency:
                    # The access log on stdout: the scale-down scenario counts the fetches of each page.
                    doc["spec"]["template"]["spec"]["containers"][0]["command"] += [
                        "--latency", str(latency), "--access-log", "/dev/stdout",
                    ]  # fmt: skip
            else:
                doc["spec"]["selector"] = labels
        out.append(doc)
    return out


def pool_object(name: str = POOL, **worker: Any) -> dict[str, Any]:
    """A ScrapePool of the test on the chart's bundled Redis. Its own object, not a chart value: the
    workers must be allowed to fetch the in-cluster site (pod and Service ranges), which the SSRF
    guard forbids by default."""
    spec_worker = {
        "image": IMAGE,
        "imagePullPolicy": "Never",
        "concurrency": 4,  # small, so a backlog of slow pages needs more than one pod
        "allowedCidrs": ["10.244.0.0/16", "10.96.0.0/16"],
        "drainSeconds": 30,
        "resources": {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"memory": "384Mi"}},
        **worker,
    }
    return {
        "apiVersion": "trawl.dev/v1alpha1",
        "kind": "ScrapePool",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "redis": {"urlSecretRef": {"name": f"{RELEASE}-redis", "key": "url"}},
            "worker": spec_worker,
            # Short windows so a scenario sees scale-up, scale-down and zero within a minute or two.
            "autoscaling": {
                "enabled": True,
                "minReplicas": 0,
                "maxReplicas": 3,
                "pollSeconds": 2,
                "targetDrainSeconds": 10,
                "scaleDownDelaySeconds": 10,
                "idleSecondsBeforeZero": 15,
            },
            "queue": {"leaseSeconds": 20},
            # The scenarios' jobs fetch the in-cluster site faster than the default ceilings allow.
            "jobLimits": {"requestsPerSecond": 1000, "maxConcurrencyPerDomain": 64},
        },
    }


def hostpath_volume(node: RealNode, name: str) -> dict[str, Any]:
    """A pre-made PersistentVolume on a folder of the run (no dynamic provisioner on this node)."""
    data = node.root / "pv" / name
    data.mkdir(parents=True)
    data.chmod(0o777)  # the Redis pod runs as 999; a hostPath volume gets no fsGroup change
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": name},
        "spec": {
            "capacity": {"storage": "2Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "hostPath": {"path": str(data), "type": "Directory"},
        },
    }


@pytest.fixture(scope="session")
def release(realnode: RealNode) -> Iterator[RealNode]:
    """The chart installed with Helm as shipped into a Pod Security `restricted` namespace, the bundled
    Redis on a real PersistentVolume (pre-made, hostPath), the fixture site serving."""
    node = realnode
    started = time.monotonic()
    node.apply(site_objects() + site_objects("bookstore-slow", latency=3.0))
    node.apply(
        [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE, "labels": {
                "pod-security.kubernetes.io/enforce": "restricted", "pod-security.kubernetes.io/warn": "restricted"}}},
            hostpath_volume(node, "trawl-e2e-redis"),
        ]
    )  # fmt: skip
    node.apply([api_tls_secret(node)])
    node.helm(
        "install",
        RELEASE,
        str(ROOT / "charts" / "trawl"),
        "-n",
        NAMESPACE,
        *IMAGE_VALUES,
        *API_VALUES,
        "--set",
        f"api.aggregation.caBundle={base64.b64encode((node_dir(node) / 'api-ca.pem').read_bytes()).decode()}",
        "--wait",
        "--timeout",
        "600s",
    )
    _log(f"helm install --wait in {time.monotonic() - started:.0f}s")
    node.kubectl(
        "-n", SITE_NAMESPACE, "rollout", "status", "deploy/bookstore", "deploy/bookstore-slow", "--timeout=300s"
    )
    node.apply([pool_object()])
    wait_for(
        "the e2e pool to be observed",
        lambda: (node.get("scrapepool", POOL, NAMESPACE) or {}).get("status", {}).get("observedGeneration") == 1,
        120,
        1.0,
    )
    yield node
