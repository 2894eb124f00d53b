"""The results API as an aggregated API (an APIService, as metrics-server): `kubectl get --raw /apis/...` and
`trawl results|dlq` from a kubeconfig alone. The real kube-apiserver authenticates the user, checks RBAC on
the aggregated path, and forwards over TLS with its front-proxy certificate and the user in X-Remote-*
headers; the API verifies that certificate and asks RBAC again (Trawl's own check, group trawl.dev).

The API listens on the machine's non-loopback address: the API server routes to the Service's endpoints
(--enable-aggregator-routing, there is no kube-proxy), and Endpoints may not name a loopback address."""

from __future__ import annotations

import base64
import contextlib
import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import redis
from operator_fixtures import apply, get
from test_results_api import JOB_ONLY, READ, RETRY, books, make_user, serving_api, stream_key
from typer.testing import CliRunner

from tlscerts import issue_tls
from trawl.api.naming import ANNOTATION_RETRY_DEAD
from trawl.cli import app
from trawl.clitools.exits import EXIT_FORBIDDEN
from trawl.dev.controlplane import FRONT_PROXY_CLIENT, ControlPlane
from trawl.dev.redis_server import RedisServer
from trawl.operator.rbac import AGGREGATED_API_READER_ROLE
from waits import wait_for

__all__ = ["books"]  # the fixture, shared with test_results_api.py

APISERVICE = "v1alpha1.results.trawl.dev"
SERVICE = "trawl-results-api"
RAW = "/apis/results.trawl.dev/v1alpha1/namespaces/{ns}/scrapejobs/books/{what}"
# RBAC the API server passes (the aggregated group) but Trawl's own check refuses (nothing in trawl.dev)
AGGREGATED_ONLY = [{"apiGroups": ["results.trawl.dev"], "resources": ["scrapejobs/results"], "verbs": ["get"]}]


def machine_address() -> str:
    """A non-loopback IPv4 address of this machine (the source address of its default route)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.connect(("192.0.2.254", 9))  # UDP: no packet is sent
        address = str(sock.getsockname()[0])
    assert not address.startswith("127."), address
    return address


@contextlib.contextmanager
def registered(cp: ControlPlane, namespace: str, address: str, port: int, ca: Path) -> Iterator[None]:
    """The Service, its endpoints (no controller makes them here) and the APIService; the APIService, which
    is cluster-wide and would make discovery fail for every later test, is deleted whatever happens."""
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": SERVICE},
               "spec": {"ports": [{"name": "https", "port": 443, "targetPort": port}]}}  # fmt: skip
    endpoints = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": SERVICE},
                 "subsets": [{"addresses": [{"ip": address}], "ports": [{"name": "https", "port": port}]}]}  # fmt: skip
    slice_ = {
        "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
        "metadata": {"name": SERVICE, "labels": {"kubernetes.io/service-name": SERVICE}},
        "addressType": "IPv4", "endpoints": [{"addresses": [address], "conditions": {"ready": True}}],
        "ports": [{"name": "https", "port": port, "protocol": "TCP"}],
    }  # fmt: skip
    apiservice = {
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": APISERVICE},
        "spec": {
            "group": "results.trawl.dev", "version": "v1alpha1", "groupPriorityMinimum": 1000, "versionPriority": 15,
            "service": {"namespace": namespace, "name": SERVICE, "port": 443},
            "caBundle": base64.b64encode(ca.read_bytes()).decode(),
        },
    }  # fmt: skip
    apply(cp, service, endpoints, slice_, namespace=namespace)
    try:
        apply(cp, apiservice)

        def available() -> bool:
            out = cp.kubectl("get", "apiservice", APISERVICE, "-o", "json", check=False)
            conditions = json.loads(out.stdout or "{}").get("status", {}).get("conditions") or []
            return any(c["type"] == "Available" and c["status"] == "True" for c in conditions)

        wait_for(
            "the APIService to be Available", available, 90,
            diag=lambda: cp.kubectl("get", "apiservice", APISERVICE, "-o", "yaml", check=False).stdout,
        )  # fmt: skip
        yield
    finally:
        cp.kubectl("delete", "apiservice", APISERVICE, "--ignore-not-found", "--wait=false", check=False)


def raw(cp: ControlPlane, user: Any, namespace: str, what: str) -> Any:
    path = RAW.format(ns=namespace, what=what)
    return cp.kubectl("get", "--raw", path, check=False, kubeconfig=user.kubeconfig if user else None)


def test_from_a_kubeconfig_alone_through_the_api_server(
    control_plane: ControlPlane, namespace: str, books: dict[str, Any], redis_server: RedisServer, tmp_path: Path
) -> None:
    cp = control_plane
    client = redis.Redis.from_url(redis_server.url)
    key = stream_key(namespace, books["metadata"]["uid"])
    for i in range(7):
        client.xadd(key, {"url": f"http://shop/{i}", "data": json.dumps({"url": f"http://shop/{i}", "i": i})})
    users = {name: make_user(cp, namespace, name, rules) for name, rules in [
        ("reader", READ), ("retrier", RETRY), ("nobody", None), ("job-only", JOB_ONLY),
        ("aggregated-only", AGGREGATED_ONLY),
    ]}  # fmt: skip
    address = machine_address()
    ca, cert, key_file = issue_tls(tmp_path, (address,), (f"{SERVICE}.{namespace}.svc",))
    # the front proxy's CA and names as the API server publishes them, read through the built-in Role
    role_ns, role = AGGREGATED_API_READER_ROLE
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": f"trawl-results-api-{namespace}"[:63], "namespace": role_ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
        "subjects": [{"kind": "ServiceAccount", "name": "trawl-operator", "namespace": namespace}],
    }  # fmt: skip
    apply(cp, binding)
    published = json.loads(cp.kubectl("get", "configmap", "-n", role_ns, "extension-apiserver-authentication",
                                      "-o", "json").stdout)["data"]  # fmt: skip
    assert json.loads(published["requestheader-allowed-names"]) == [FRONT_PROXY_CLIENT]
    assert published["requestheader-client-ca-file"].strip() == cp.front_proxy_ca_path.read_text().strip()
    extra = ("--api-bind-address", address, "--api-requestheader-from-cluster")
    with serving_api(cp, namespace, tmp_path, tls=(cert, key_file), extra=extra) as api:
        port = int(api.url.rsplit(":", 1)[1])
        with registered(cp, namespace, address, port, ca):
            # kubectl get --raw as the reader: the records, as JSON Lines
            out = raw(cp, users["reader"], namespace, "results")
            assert out.returncode == 0, out.stderr
            assert [json.loads(line)["i"] for line in out.stdout.splitlines()] == list(range(7))
            # refused by the API server's RBAC on the aggregated path, or by Trawl's own check after it
            for name in ("nobody", "job-only", "aggregated-only"):
                out = raw(cp, users[name], namespace, "results")
                assert out.returncode != 0 and "forbidden" in out.stderr.lower(), (name, out.stdout, out.stderr)
            # forged front-proxy headers sent straight to the API, without its certificate, are ignored
            forged = {"X-Remote-User": "system:admin", "X-Remote-Group": "system:masters"}
            assert api_call(api, ca, "results", forged)[0] == 401
            assert (
                api_call(api, ca, "results", {**forged, "Authorization": f"Bearer {users['nobody'].token}"})[0] == 403
            )

            # trawl results and dlq from the kubeconfig alone: no URL, no token, no Redis password
            def trawl(user: str, *args: str) -> Any:
                kubeconfig = str(users[user].kubeconfig) if user != "admin" else str(cp.kubeconfig_path)
                return CliRunner().invoke(app, [*args, "--kubeconfig", kubeconfig, "-n", namespace])

            out = trawl("reader", "results", "books")
            assert out.exit_code == 0, out.output
            assert [json.loads(line)["i"] for line in out.stdout.splitlines() if line.startswith("{")] == list(range(7))
            out = trawl("admin", "results", "books")  # a client-certificate user: the API server vouches for it
            assert out.exit_code == 0 and out.stdout.count('"i":') == 7, out.output
            out = trawl("reader", "dlq", "list", "books", "-o", "json")
            assert out.exit_code == 0 and json.loads(out.stdout) == [], out.output
            out = trawl("reader", "dlq", "retry", "books", "--no-wait")
            assert out.exit_code == EXIT_FORBIDDEN, out.output
            assert ANNOTATION_RETRY_DEAD not in (
                get(cp, "scrapejob", "books", namespace)["metadata"].get("annotations") or {}
            )
            out = trawl("retrier", "dlq", "retry", "books", "--all", "--no-wait")
            assert out.exit_code == 0, out.output
            annotations = get(cp, "scrapejob", "books", namespace)["metadata"].get("annotations") or {}
            assert annotations.get(ANNOTATION_RETRY_DEAD, "").endswith("/all"), annotations


def api_call(api: Any, ca: Path, what: str, headers: dict[str, str]) -> tuple[int, bytes]:
    import ssl
    import urllib.error
    import urllib.request

    url = f"{api.url}/v1/namespaces/{api.namespace}/scrapejobs/books/{what}"
    context = ssl.create_default_context(cafile=str(ca))
    context.check_hostname = False  # the certificate names the address; the URL too, but keep it simple
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=30, context=context) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()
