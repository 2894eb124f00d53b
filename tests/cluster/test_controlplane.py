"""The local control plane leaves no process behind, however its owner ends, and enforces RBAC."""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kubernetes.client import CoreV1Api, CustomObjectsApi, RbacAuthorizationV1Api
from kubernetes.client.exceptions import ApiException

from trawl.dev import procs
from trawl.dev.controlplane import ControlPlane, _sweep_stale_workdirs, find_assets

CHILD = textwrap.dedent(
    """
    import json, sys, time
    from trawl.dev import procs
    from trawl.dev.controlplane import ControlPlane

    if sys.argv[1] == "handlers":
        procs.install_signal_handlers()
    cp = ControlPlane().start()
    print(json.dumps({"pids": cp.pids, "workdir": str(cp.workdir)}), flush=True)
    while True:
        time.sleep(1)
    """
)


def _alive(pid: int) -> bool:
    """True while the process exists and is not a zombie (an orphan's zombie may wait for PID 1)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _wait_gone(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        alive = [p for p in pids if _alive(p)]
        if not alive:
            return []
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def _read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            break
        ready, _, _ = select.select([proc.stdout], [], [], 0.2)
        if ready:
            return proc.stdout.readline()
    raise AssertionError(f"child printed nothing (exit {proc.poll()}): {proc.stderr.read() if proc.stderr else ''}")


@pytest.mark.parametrize(
    ("how", "sig"),
    [("plain", signal.SIGTERM), ("plain", signal.SIGKILL), ("handlers", signal.SIGTERM)],
    ids=["sigterm", "sigkill", "sigterm-with-handlers"],
)
def test_killing_the_owner_kills_etcd_and_apiserver(how: str, sig: signal.Signals) -> None:
    find_assets()  # fail with the build-script hint rather than a child's traceback
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, how], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    pids: list[int] = []
    try:
        info = json.loads(_read_line(child, timeout=60))
        pids = list(info["pids"].values())
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        child.send_signal(sig)
        child.wait(timeout=30)  # with handlers the child first stops both servers (up to 5 s each)
        assert _wait_gone(pids, timeout=10) == [], "etcd or kube-apiserver outlived its owner"
        # A killed owner cannot remove its working directory (on tmpfs); the next start sweeps it.
        workdir = Path(info["workdir"])
        if sig == signal.SIGKILL:
            assert workdir.exists()
        _sweep_stale_workdirs(workdir.parent)
        assert not workdir.exists()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                if _alive(pid):
                    os.kill(pid, signal.SIGKILL)
        if child.stdout:
            child.stdout.close()
        if child.stderr:
            child.stderr.close()


def test_stop_leaves_nothing_running() -> None:
    cp = ControlPlane()
    try:
        cp.start()
        pids = list(cp.pids.values())
        workdir = cp.workdir
        assert len(pids) == 2 and all(_alive(p) for p in pids)
        assert cp.startup_seconds > 0
    finally:
        cp.stop()
    assert _wait_gone(pids, timeout=1) == []
    assert workdir is not None and not workdir.exists()
    assert not cp.running
    cp.stop()  # idempotent


def test_failed_start_stops_what_it_started() -> None:
    cp = ControlPlane(extra_apiserver_args=["--no-such-flag"], start_timeout=20)
    with pytest.raises(RuntimeError, match="kube-apiserver exited early"):
        cp.start()
    assert cp.pids == {}
    assert cp.workdir is not None and not cp.workdir.exists()


def test_port_taken_before_bind_is_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """free_port() is racy: another process may bind the port first. Here one really does."""
    squatter = socket.socket()
    squatter.bind(("127.0.0.1", 0))
    squatter.listen()
    taken = squatter.getsockname()[1]
    real_free_port = procs.free_port
    calls: list[int] = []

    def free_port_taken_once(host: str = "127.0.0.1") -> int:
        calls.append(1)
        return taken if len(calls) == 3 else real_free_port(host)  # the 3rd port is the API server's

    monkeypatch.setattr(procs, "free_port", free_port_taken_once)
    cp = ControlPlane()
    try:
        cp.start()
        assert cp.apiserver_port != taken
        assert cp.kubectl("get", "--raw", "/readyz").stdout == "ok"
    finally:
        cp.stop()
        squatter.close()
    assert len(calls) >= 6, "expected a second round of ports"


def test_admin_client_and_kubectl(control_plane: ControlPlane) -> None:
    client = control_plane.api_client()
    try:
        names = {ns.metadata.name for ns in CoreV1Api(client).list_namespace().items}
    finally:
        client.close()
    assert {"default", "kube-system"} <= names
    who = json.loads(control_plane.kubectl("auth", "whoami", "-o", "json").stdout)
    assert "system:masters" in who["status"]["userInfo"]["groups"]
    assert control_plane.server.startswith("https://127.0.0.1:")


def test_service_account_kubeconfig_is_subject_to_rbac(control_plane: ControlPlane, namespace: str) -> None:
    kubeconfig = control_plane.service_account_kubeconfig(namespace, "trawl-operator")
    client = control_plane.api_client(kubeconfig)
    custom = CustomObjectsApi(client)
    try:
        with pytest.raises(ApiException) as denied:
            custom.list_namespaced_custom_object("trawl.dev", "v1alpha1", namespace, "scrapejobs")
        assert denied.value.status == 403
        assert f"system:serviceaccount:{namespace}:trawl-operator" in denied.value.body
        rbac = RbacAuthorizationV1Api(control_plane.api_client())
        rbac.create_namespaced_role(
            namespace,
            {
                "metadata": {"name": "read-jobs"},
                "rules": [{"apiGroups": ["trawl.dev"], "resources": ["scrapejobs"], "verbs": ["get", "list"]}],
            },
        )
        rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": "read-jobs"},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-jobs"},
                "subjects": [{"kind": "ServiceAccount", "name": "trawl-operator", "namespace": namespace}],
            },
        )
        rbac.api_client.close()
        deadline = time.monotonic() + 10
        while True:  # the RBAC authorizer's cache catches up within a moment
            try:
                listed = custom.list_namespaced_custom_object("trawl.dev", "v1alpha1", namespace, "scrapejobs")
                break
            except ApiException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        assert listed["items"] == []
        with pytest.raises(ApiException) as still_denied:
            custom.list_namespaced_custom_object("trawl.dev", "v1alpha1", namespace, "scrapepools")
        assert still_denied.value.status == 403
    finally:
        client.close()
    # kubectl with the same token, and the impersonating variant (kubectl honours `as`).
    for config in (kubeconfig, control_plane.service_account_kubeconfig(namespace, "trawl-operator", impersonate=True)):
        assert control_plane.kubectl("get", "sj", "-n", namespace, kubeconfig=config).returncode == 0
        denied_cli = control_plane.kubectl("get", "sp", "-n", namespace, kubeconfig=config, check=False)
        assert denied_cli.returncode != 0 and "Forbidden" in denied_cli.stderr


def test_pod_security_admission_is_enabled(control_plane: ControlPlane, namespace: str) -> None:
    control_plane.kubectl("label", "namespace", namespace, "pod-security.kubernetes.io/enforce=restricted")
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "privileged"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": True}}]},
    }
    result = control_plane.kubectl("create", "-n", namespace, "-f", "-", input=json.dumps(pod), check=False)
    assert result.returncode != 0
    assert 'violates PodSecurity "restricted:latest"' in result.stderr, result.stderr
