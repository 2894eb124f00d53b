"""The official Kubernetes client, configured once, called off the event loop.

kopf watches and patches the objects it handles; this client serves the operator's other calls
(Secrets, Deployments, creating and deleting ScrapeJobs). Its blocking calls run in a thread.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any, TypeVar

import kubernetes
from kubernetes.client import ApiClient, ApiException

T = TypeVar("T")

GROUP = "trawl.dev"
VERSION = "v1alpha1"


@functools.cache
def api_client() -> ApiClient:
    try:
        kubernetes.config.load_incluster_config()  # type: ignore[no-untyped-call]
    except kubernetes.config.ConfigException:
        kubernetes.config.load_kube_config()  # type: ignore[no-untyped-call]
    return ApiClient()


def core() -> kubernetes.client.CoreV1Api:
    return kubernetes.client.CoreV1Api(api_client())


def apps() -> kubernetes.client.AppsV1Api:
    return kubernetes.client.AppsV1Api(api_client())


def custom() -> kubernetes.client.CustomObjectsApi:
    return kubernetes.client.CustomObjectsApi(api_client())


async def call(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    return await asyncio.to_thread(fn, *args, **kwargs)


def is_status(exc: BaseException, *codes: int) -> bool:
    return isinstance(exc, ApiException) and exc.status in codes


def to_dict(obj: Any) -> dict[str, Any]:
    """A client model object as the plain JSON-shaped dict the API server sent."""
    result: dict[str, Any] = api_client().sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
    return result
