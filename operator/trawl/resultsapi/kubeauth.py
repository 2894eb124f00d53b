"""Who is calling and what RBAC lets them do, asked of the Kubernetes API server (TokenReview and
SubjectAccessReview), each answer kept a few seconds."""

from __future__ import annotations

import asyncio
import hashlib
import json
from typing import Any

import kubernetes
from kubernetes.client import ApiClient

from .access import Action, Identity, TtlCache, resource_attributes

TOKEN_TTL = 10.0
DECISION_TTL = 5.0
REQUEST_TIMEOUT = (5, 10)


class AuthUnavailable(Exception):
    """The API server could not answer a review: the request fails closed (503), never allowed."""


def identity_from_review(status: Any) -> Identity | None:
    """The TokenReview status's user, None unless it says authenticated."""
    if status is None or not getattr(status, "authenticated", False) or status.user is None:
        return None
    user = status.user
    extra = tuple(sorted((str(k), tuple(v or ())) for k, v in (user.extra or {}).items()))
    return Identity(str(user.username or ""), str(user.uid or ""), tuple(user.groups or ()), extra)


def review_body(identity: Identity, action: Action, namespace: str, name: str) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "user": identity.username,
        "groups": list(identity.groups),
        "resourceAttributes": resource_attributes(action, namespace, name),
    }
    if identity.uid:
        spec["uid"] = identity.uid
    if identity.extra:
        spec["extra"] = {k: list(v) for k, v in identity.extra}
    return {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}


class KubeAuth:
    """TokenReview and SubjectAccessReview with the operator's own credentials (it needs ``create`` on both)."""

    def __init__(self, api: ApiClient) -> None:
        self._authn = kubernetes.client.AuthenticationV1Api(api)
        self._authz = kubernetes.client.AuthorizationV1Api(api)
        # keyed by a digest: the cache never holds a caller's token
        self._tokens: TtlCache[str, Identity | None] = TtlCache(TOKEN_TTL)
        self._decisions: TtlCache[tuple[Identity, Action, str, str], bool] = TtlCache(DECISION_TTL)
        self._attribute_decisions: TtlCache[tuple[Identity, tuple[tuple[str, str], ...]], bool] = TtlCache(DECISION_TTL)

    async def identity(self, token: str) -> Identity | None:
        key = hashlib.sha256(token.encode()).hexdigest()
        kept, hit = self._tokens.lookup(key)
        if kept:
            return hit
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
        review = await self._call(self._authn.create_token_review, body)
        found = identity_from_review(review.status)
        self._tokens.put(key, found)
        return found

    async def allowed(self, identity: Identity, action: Action, namespace: str, name: str) -> bool:
        key = (identity, action, namespace, name)
        kept, verdict = self._decisions.lookup(key)
        if kept and verdict is not None:
            return verdict
        body = review_body(identity, action, namespace, name)
        review = await self._call(self._authz.create_subject_access_review, body)
        verdict = bool(review.status and review.status.allowed and not review.status.denied)
        self._decisions.put(key, verdict)
        return verdict

    async def may(self, identity: Identity, attributes: dict[str, str]) -> bool:
        """Any RBAC question (the console's: may this viewer list scrapejobs, or events, in a namespace?)."""
        key = (identity, tuple(sorted(attributes.items())))
        kept, verdict = self._attribute_decisions.lookup(key)
        if kept and verdict is not None:
            return verdict
        body = review_body(identity, Action.READ_RESULTS, "", "")
        body["spec"]["resourceAttributes"] = dict(attributes)
        review = await self._call(self._authz.create_subject_access_review, body)
        verdict = bool(review.status and review.status.allowed and not review.status.denied)
        self._attribute_decisions.put(key, verdict)
        return verdict

    @staticmethod
    async def _call(fn: Any, body: dict[str, Any]) -> Any:
        try:
            return await asyncio.to_thread(fn, body, _request_timeout=REQUEST_TIMEOUT)
        except Exception as exc:  # ApiException, urllib3 errors: no answer is a refusal, said as such
            raise AuthUnavailable(f"the Kubernetes API server did not answer a review: {type(exc).__name__}") from None


AUTHENTICATION_CONFIGMAP = ("kube-system", "extension-apiserver-authentication")


def parse_front_proxy(data: dict[str, str] | None) -> tuple[str, tuple[str, ...]]:
    """The request-header CA and allowed names the API server publishes for aggregated API servers."""
    data = data or {}
    ca = data.get("requestheader-client-ca-file") or ""
    if "BEGIN CERTIFICATE" not in ca:
        raise RuntimeError(
            f"{'/'.join(AUTHENTICATION_CONFIGMAP)} has no requestheader-client-ca-file: the API server runs "
            "without --requestheader-client-ca-file, so it cannot forward to an aggregated API"
        )
    names = json.loads(data.get("requestheader-allowed-names") or "[]")
    return ca, tuple(str(n) for n in names)


async def front_proxy_settings(api: ApiClient) -> tuple[str, tuple[str, ...]]:
    """Read them once at start (needs the built-in Role extension-apiserver-authentication-reader)."""
    core = kubernetes.client.CoreV1Api(api)
    namespace, name = AUTHENTICATION_CONFIGMAP
    try:
        configmap = await asyncio.to_thread(
            core.read_namespaced_config_map, name, namespace, _request_timeout=REQUEST_TIMEOUT
        )
    except Exception as exc:
        raise RuntimeError(f"cannot read {namespace}/{name}: {type(exc).__name__}: {exc}") from None
    return parse_front_proxy(configmap.data)
