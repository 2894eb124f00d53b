"""Kubernetes access for the CLI: the current kubeconfig like kubectl, Trawl objects as plain dicts.

Every API failure becomes a :class:`CliError` with a clear message: no kubeconfig, API server not
reachable, CRDs not installed, object not found, not allowed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import kubernetes
import urllib3
from kubernetes.client import ApiClient, ApiException, Configuration

from trawl.api.naming import ANNOTATION_RETRY_DEAD, API_VERSION, GROUP, RETRY_ALL_SUFFIX, VERSION

from .exits import EXIT_FORBIDDEN, EXIT_NO_CRDS, EXIT_NOT_FOUND, EXIT_UNREACHABLE, CliError

PLURALS = {"ScrapeJob": "scrapejobs", "ScrapePool": "scrapepools", "CronScrapeJob": "cronscrapejobs"}
SHORT = {"ScrapeJob": "sj", "ScrapePool": "sp", "CronScrapeJob": "csj"}
REQUEST_TIMEOUT = (5, 20)  # connect, read (seconds)
IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


@dataclass(frozen=True)
class Target:
    """Where to connect, as given on the command line (None: the kubeconfig's choice)."""

    kubeconfig: str | None = None
    context: str | None = None
    namespace: str | None = None


class Cluster:
    """The Trawl objects of one cluster, through the official client with its own configuration."""

    def __init__(self, api: ApiClient, namespace: str, server: str) -> None:
        self.api = api
        self.namespace = namespace
        self.server = server
        self.custom = kubernetes.client.CustomObjectsApi(api)
        self.core = kubernetes.client.CoreV1Api(api)

    # ------------------------------------------------------------------ connecting

    @classmethod
    def connect(cls, target: Target) -> Cluster:
        """Load the kubeconfig like kubectl: --kubeconfig, else $KUBECONFIG, else ~/.kube/config, else in-cluster."""
        config = Configuration()
        path = target.kubeconfig or os.environ.get("KUBECONFIG") or None
        default_path = Path("~/.kube/config").expanduser()
        namespace = target.namespace
        if path is None and not default_path.exists() and os.environ.get("KUBERNETES_SERVICE_HOST"):
            try:
                kubernetes.config.load_incluster_config(client_configuration=config)  # type: ignore[no-untyped-call]
            except kubernetes.config.ConfigException as exc:
                raise CliError(f"no Kubernetes configuration: {exc}", EXIT_UNREACHABLE) from None
            if namespace is None and IN_CLUSTER_NAMESPACE.exists():
                namespace = IN_CLUSTER_NAMESPACE.read_text().strip()
        else:
            file = path or str(default_path)
            if not any(Path(p).expanduser().exists() for p in file.split(os.pathsep) if p):
                raise CliError(
                    f"no kubeconfig found at {file}",
                    EXIT_UNREACHABLE,
                    hint="set KUBECONFIG or pass --kubeconfig (`trawl dev up --keep` prints one for the local stack)",
                )
            try:
                kubernetes.config.load_kube_config(  # type: ignore[no-untyped-call]
                    config_file=file, context=target.context, client_configuration=config, persist_config=False
                )
                contexts, active = kubernetes.config.list_kube_config_contexts(config_file=file)  # type: ignore[no-untyped-call]
            except kubernetes.config.ConfigException as exc:
                raise CliError(f"invalid kubeconfig {file}: {exc}", EXIT_UNREACHABLE) from None
            except (OSError, ValueError) as exc:
                raise CliError(f"cannot read kubeconfig {file}: {exc}", EXIT_UNREACHABLE) from None
            if namespace is None:
                chosen = next((c for c in contexts or [] if c.get("name") == target.context), None) or active or {}
                namespace = (chosen.get("context") or {}).get("namespace")
        config.retries = 0  # fail fast and quietly when the server is down; callers decide about retrying
        return cls(ApiClient(config), namespace or "default", config.host)

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]

    # ------------------------------------------------------------------ error translation

    def call(self, fn: Callable[..., Any], *args: Any, what: str | None = None, **kwargs: Any) -> Any:
        """Call the API; failures become CliError. ``what`` ("ScrapeJob ns/name") names a 404."""
        try:
            return fn(*args, _request_timeout=REQUEST_TIMEOUT, **kwargs)
        except ApiException as exc:
            raise self._api_error(exc, what) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self.unreachable(exc) from None

    def try_call(self, fn: Callable[..., Any], *args: Any, tolerate: tuple[int, ...], **kwargs: Any) -> tuple[Any, int]:
        """Like :meth:`call`, but an API error whose status is in ``tolerate`` (a 404, a 409 the caller
        handles) is returned as ``(None, status)`` instead of raised; success is ``(result, 200)``."""
        try:
            return fn(*args, _request_timeout=REQUEST_TIMEOUT, **kwargs), 200
        except ApiException as exc:
            if exc.status in tolerate:
                return None, int(exc.status)
            raise self._api_error(exc, None) from None
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            raise self.unreachable(exc) from None

    def unreachable(self, exc: BaseException) -> CliError:
        host = urlsplit(self.server).netloc or self.server
        reason = getattr(exc, "reason", None) or exc
        text = str(reason)
        if "Connection refused" in text or "Errno 111" in text:
            text = "connection refused"
        elif "timed out" in text.lower():
            text = "timed out"
        elif "CERTIFICATE_VERIFY_FAILED" in text:
            text = "TLS certificate not trusted"
        return CliError(
            f"cannot reach the Kubernetes API server at {host} ({text})",
            EXIT_UNREACHABLE,
            hint="is the cluster running and the kubeconfig's current context the right one?",
        )

    def _api_error(self, exc: ApiException, what: str | None) -> CliError:
        if exc.status in (401, 403):
            return CliError(f"not allowed: {_api_message(exc)}", EXIT_FORBIDDEN)
        if exc.status == 404:
            if self._crds_missing():
                return crds_missing()
            return CliError(f"{what or 'object'} not found", EXIT_NOT_FOUND)
        if exc.status in (0, 502, 503, 504):
            return self.unreachable(exc)
        return CliError(f"the API server refused the request ({exc.status}): {_api_message(exc)}")

    def _crds_missing(self) -> bool:
        try:
            resources = kubernetes.client.CustomObjectsApi(self.api).get_api_resources(
                GROUP, VERSION, _request_timeout=REQUEST_TIMEOUT
            )
        except ApiException as exc:
            return bool(exc.status == 404)
        except (urllib3.exceptions.HTTPError, OSError):
            return False
        names = {r.name for r in resources.resources or []}
        return not set(PLURALS.values()) <= names

    # ------------------------------------------------------------------ objects

    def list(self, kind: str, *, all_namespaces: bool = False) -> list[dict[str, Any]]:
        plural = PLURALS[kind]
        if all_namespaces:
            obj = self.call(self.custom.list_cluster_custom_object, GROUP, VERSION, plural)
        else:
            obj = self.call(self.custom.list_namespaced_custom_object, GROUP, VERSION, self.namespace, plural)
        items: list[dict[str, Any]] = obj.get("items", [])
        return sorted(items, key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any]:
        """The object ``name`` of ``namespace`` (default: the command's namespace)."""
        ns = namespace or self.namespace
        obj: dict[str, Any] = self.call(
            self.custom.get_namespaced_custom_object,
            GROUP,
            VERSION,
            ns,
            PLURALS[kind],
            name,
            what=f"{kind} {ns}/{name}",
        )
        return obj

    def create(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        obj: dict[str, Any] = self.call(
            self.custom.create_namespaced_custom_object, GROUP, VERSION, self.namespace, PLURALS[kind], body
        )
        return obj

    def annotate(self, kind: str, name: str, annotations: dict[str, str]) -> dict[str, Any]:
        obj: dict[str, Any] = self.call(
            self.custom.patch_namespaced_custom_object,
            GROUP,
            VERSION,
            self.namespace,
            PLURALS[kind],
            name,
            {"metadata": {"annotations": annotations}},
            what=f"{kind} {self.namespace}/{name}",
        )
        return obj

    def request_dead_letter_retry(self, name: str, *, include_permanent: bool = False) -> tuple[dict[str, Any], str]:
        """Set the retry annotation to a new value; the operator requeues the dead letters (only those of
        retryable classes unless ``include_permanent``). Returns the value."""
        value = str(time.time_ns()) + (RETRY_ALL_SUFFIX if include_permanent else "")
        return self.annotate("ScrapeJob", name, {ANNOTATION_RETRY_DEAD: value}), value

    def read_secret_key(self, name: str, key: str, namespace: str | None = None) -> str:
        """Secret ``name``'s ``key`` in ``namespace`` (default: the command's namespace)."""
        import base64

        ns = namespace or self.namespace
        what = f"Secret {ns}/{name}"
        secret = self.call(self.core.read_namespaced_secret, name, ns, what=what)
        data = secret.data or {}
        if key not in data:
            raise CliError(f"Secret {ns}/{name} has no key {key!r}", EXIT_NOT_FOUND)
        return base64.b64decode(data[key]).decode()


def crds_missing() -> CliError:
    return CliError(
        f"the Trawl CRDs ({API_VERSION}) are not installed in this cluster",
        EXIT_NO_CRDS,
        hint="install them with `helm install trawl charts/trawl` or `kubectl apply -k manifests/`",
    )


def _api_message(exc: ApiException) -> str:
    import json

    try:
        body = json.loads(exc.body or "{}")
    except (TypeError, ValueError):
        body = {}
    message = body.get("message") if isinstance(body, dict) else None
    return str(message or exc.reason or exc.status)
