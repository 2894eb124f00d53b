"""The official Kubernetes client, configured once, called off the event loop.

kopf watches and patches the objects it handles; this client serves the operator's other calls
(Secrets, Deployments, creating and deleting ScrapeJobs). Its blocking calls run in a thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import json
import os
from collections.abc import Callable
from typing import Any, TypeVar

import kubernetes
from kubernetes.client import ApiClient, ApiException

from trawl.api.naming import API_VERSION, GROUP, VERSION
from trawl.operator import sharding

T = TypeVar("T")

API_THREADS = int(os.environ.get("TRAWL_API_THREADS", "16"))
_executor = concurrent.futures.ThreadPoolExecutor(API_THREADS, thread_name_prefix="kube-api")


@functools.cache
def _load_config() -> None:
    try:
        kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]


@functools.cache
def api_client() -> ApiClient:
    # Bounded: one pooled connection per worker thread (kopf's own client opens one per request).
    return new_api_client(API_THREADS)


def new_api_client(connections: int = 1) -> ApiClient:
    """A client with a connection pool of its own: calls made with it never wait for the shared pool's
    threads or connections (the Lease renewals, which must be on time however busy the operator is)."""
    _load_config()
    conf = kubernetes.client.Configuration.get_default_copy()
    conf.connection_pool_maxsize = connections
    return ApiClient(conf)


def core() -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(api_client())


def apps() -> kubernetes.client.AppsV1Api:
    return kubernetes.client.AppsV1Api(api_client())


def batch() -> kubernetes.client.BatchV1Api:
    return kubernetes.client.BatchV1Api(api_client())


def custom() -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(api_client())


# (connect, read) seconds of one API call: the client has no bound of its own, and a call that never returns
# holds its object's lock, so a pass (and the deletion waiting behind it) would wait forever.
REQUEST_TIMEOUT = (10.0, 60.0)


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Run a blocking client call on the API thread pool (bounded, unlike the default executor's 6 on 2 cores),
    bounded in time (``REQUEST_TIMEOUT`` unless the caller gives ``_request_timeout``)."""
    kwargs.setdefault("_request_timeout", REQUEST_TIMEOUT)
    return await asyncio.get_running_loop().run_in_executor(_executor, functools.partial(fn, *args, **kwargs))


async def apply_status(plural: str, kind: str, namespace: str, name: str, status: dict[str, Any]) -> bool:
    """Server-side apply of a whole status under the operator's field manager. False if the object is gone.

    No resourceVersion precondition: the status is derived from the queue's current counters, so the
    newest derivation is always the right one to write, and a conflict retried later with an older
    derivation (what a guarded patch queued behind a stale view does) could move a job backwards.
    Conditions are a list-map keyed by type, so this never clobbers conditions other managers own."""
    body = {
        "apiVersion": API_VERSION,
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "status": status,
    }
    try:
        await call(
            custom().patch_namespaced_custom_object_status,
            GROUP,
            VERSION,
            namespace,
            plural,
            name,
            body,
            field_manager=sharding.current().field_manager,
            force=True,
            _content_type="application/apply-patch+yaml",
        )
    except Exception as exc:
        if is_status(exc, 404):
            return False
        raise
    return True


async def delete_if_present(fn: Callable[..., Any], *args: Any) -> bool:
    """Call a client ``delete_*`` method; an object already gone is not an error. False if it was gone."""
    try:
        await call(fn, *args)
    except Exception as exc:
        if is_status(exc, 404):
            return False
        raise
    return True


def api_message(exc: BaseException) -> str:
    """The API server's own message of a failed call (its Status ``message``), else the exception text."""
    if isinstance(exc, ApiException):
        try:
            body = json.loads(exc.body or "")
        except (TypeError, ValueError):
            body = None
        if isinstance(body, dict) and body.get("message"):
            return f"{exc.status} {body.get('reason') or exc.reason}: {body['message']}"
        return f"{exc.status} {exc.reason}"
    return f"{type(exc).__name__}: {exc}"


def is_status(exc: BaseException, *codes: int) -> bool:
    return isinstance(exc, ApiException) and exc.status in codes


def to_dict(obj: Any) -> dict[str, Any]:
    """A client model object as the plain JSON-shaped dict the API server sent."""
    result: dict[str, Any] = api_client().sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
    return result
