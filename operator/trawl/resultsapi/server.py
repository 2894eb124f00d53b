"""The results API's HTTP server (aiohttp): every request is authenticated (TokenReview), rate-limited per
identity and authorised (SubjectAccessReview) before anything about the job is looked up, so a caller
without the RBAC cannot even learn whether a job exists."""

from __future__ import annotations

import contextlib
import json
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web
from kubernetes.client import ApiClient

from .access import (
    AGGREGATED_GROUP,
    AGGREGATED_VERSION,
    Action,
    BadRequest,
    Identity,
    RateLimiter,
    bearer_token,
    front_proxy_identity,
    parse_cursor,
    parse_flag,
    parse_limit,
)
from .kubeauth import AuthUnavailable, KubeAuth, front_proxy_settings
from .store import JobTarget, Store, StoreError

log = logging.getLogger("trawl.resultsapi")

PREFIX = "/v1/namespaces/{namespace}/scrapejobs/{name}"
# The same routes as an aggregated API: the API server authenticates and forwards (front proxy).
AGGREGATED = f"/apis/{AGGREGATED_GROUP}/{AGGREGATED_VERSION}"
CURSOR_HEADER = "Trawl-Next-Cursor"
COUNT_HEADER = "Trawl-Count"
MAX_URL = 8192
AUTH = web.AppKey("auth", KubeAuth)
STORE = web.AppKey("store", Store)
LIMITER = web.AppKey("limiter", RateLimiter)
FRONT_PROXY_NAMES = web.AppKey("front_proxy_names", tuple)

Handler = Callable[[web.Request, JobTarget], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Serving:
    """Where and how the API listens: TLS when a certificate and key are given (the chart's Secret)."""

    host: str
    port: int
    cert_file: Path | None = None
    key_file: Path | None = None
    # The aggregation layer: the CA of the API server's front-proxy client certificate and its allowed
    # names (kube-system/extension-apiserver-authentication). Without a CA no request is a proxied one.
    requestheader_ca: Path | None = None
    requestheader_names: tuple[str, ...] = ()
    # Read both from kube-system/extension-apiserver-authentication instead, as aggregated API servers do.
    requestheader_from_cluster: bool = False
    rate: float = 20.0
    burst: float = 100.0
    # The web console on the same port (trawl.resultsapi.console), fed from the namespaces the operator
    # watches (empty: all), refreshed every console_interval seconds while a page is open.
    console: bool = False
    namespaces: tuple[str, ...] = ()
    console_interval: float = 1.0

    def ssl_context(self, requestheader_ca_pem: str | None) -> ssl.SSLContext | None:
        if self.cert_file is None or self.key_file is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        if requestheader_ca_pem is not None:
            # asked, not required: callers with a bearer token present no certificate
            context.verify_mode = ssl.CERT_OPTIONAL
            context.load_verify_locations(cadata=requestheader_ca_pem)
        return context

    async def front_proxy(self, api: ApiClient) -> tuple[str | None, tuple[str, ...]]:
        """The request-header CA (PEM) and allowed names; (None, ()) when the API is not an aggregated one."""
        if self.requestheader_from_cluster:
            return await front_proxy_settings(api)
        if self.requestheader_ca is not None:
            return self.requestheader_ca.read_text(), self.requestheader_names
        return None, ()


def problem(status: int, message: str, **headers: str) -> web.Response:
    return web.json_response({"status": status, "message": message}, status=status, headers=headers or None)


def guarded(action: Action, handler: Handler, *also: Action) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """401 without a valid token, 429 past the caller's rate, 403 without the RBAC (``action`` and every one of
    ``also``), then 404 for no job."""

    async def serve(request: web.Request) -> web.StreamResponse:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        auth = request.app[AUTH]
        try:
            limiter = request.app[LIMITER]
            identity = proxied_identity(request)
            if identity is None:
                # an address whose tokens keep failing waits before its next TokenReview
                failing = f"unauthenticated:{request.remote}"
                if wait := limiter.waiting(failing):
                    return problem(429, "too many failed authentications", **{"Retry-After": str(max(1, round(wait)))})
                token = bearer_token(request.headers.get("Authorization"))
                identity = await auth.identity(token) if token else None
                if identity is None:
                    limiter.allow(failing)
            if identity is None:
                return problem(401, "a valid Kubernetes bearer token is required", **{"WWW-Authenticate": "Bearer"})
            wait = limiter.allow(identity.username)
            if wait:
                return problem(429, "too many requests", **{"Retry-After": str(max(1, round(wait)))})
            for needed in (action, *also):
                if not await auth.allowed(identity, needed, namespace, name):
                    what = f"{needed.verb} scrapejobs/{needed.subresource}"
                    return problem(403, f"{identity.username} may not {what} of {name} in namespace {namespace}")
            job = await request.app[STORE].job(namespace, name)
            return await handler(request, job)
        except AuthUnavailable as exc:
            return problem(503, str(exc))
        except BadRequest as exc:
            return problem(400, str(exc))
        except StoreError as exc:
            return problem(exc.status, exc.message)

    return serve


def proxied_identity(request: web.Request) -> Identity | None:
    """The user of a request the API server forwarded (aggregation), from its verified certificate's headers."""
    names = request.app.get(FRONT_PROXY_NAMES)
    if names is None or request.transport is None:
        return None
    peercert = request.transport.get_extra_info("peercert")
    return front_proxy_identity(peercert, names, request.headers.items())


async def discovery(_: web.Request) -> web.Response:
    """What the API server's discovery shows for the aggregated group (names only: no job, no data)."""
    return web.json_response(
        {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{AGGREGATED_GROUP}/{AGGREGATED_VERSION}",
            "resources": [
                {"name": "scrapejobs/results", "singularName": "", "namespaced": True, "kind": "Results",
                 "verbs": ["get"]},
                {"name": "scrapejobs/deadletters", "singularName": "", "namespaced": True, "kind": "DeadLetters",
                 "verbs": ["get", "update"]},
                {"name": "scrapejobs/history", "singularName": "", "namespaced": True, "kind": "UrlHistory",
                 "verbs": ["get"]},
            ],
        }
    )  # fmt: skip


async def results(request: web.Request, job: JobTarget) -> web.StreamResponse:
    """One page of records as JSON Lines; the next page starts at the cursor header (the last record's ID)."""
    start = parse_cursor(request.query.get("cursor"))
    limit = parse_limit(request.query.get("limit"))
    page = await request.app[STORE].results_page(job, start, limit)
    cursor = page[-1][0] if page else request.query.get("cursor", "")
    body = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for _, r in page)
    headers = {CURSOR_HEADER: cursor, COUNT_HEADER: str(len(page)), "Trawl-Job-Phase": job.phase}
    return web.Response(text=body, content_type="application/jsonl", headers=headers)


async def dead_letters(request: web.Request, job: JobTarget) -> web.StreamResponse:
    limit = parse_limit(request.query.get("limit"))
    records = await request.app[STORE].dead_letters(job, limit)
    return web.json_response({"namespace": job.namespace, "name": job.name, "items": records})


async def url_history(request: web.Request, job: JobTarget) -> web.StreamResponse:
    """One URL of the job: its records (the result stream, scanned up to a bound) and its dead letters."""
    url = request.query.get("url") or ""
    if not url or len(url) > MAX_URL:
        raise BadRequest(f"url is required (at most {MAX_URL} characters)")
    history = await request.app[STORE].url_history(job, url)
    return web.json_response({"namespace": job.namespace, "name": job.name, "url": url, **history})


async def retry(request: web.Request, job: JobTarget) -> web.StreamResponse:
    include_permanent = parse_flag(request.query.get("all"), "all")
    value = await request.app[STORE].request_retry(job, include_permanent)
    return web.json_response({"namespace": job.namespace, "name": job.name, "requested": value}, status=202)


@web.middleware
async def security_headers(request: web.Request, handler: Any) -> web.StreamResponse:
    response: web.StreamResponse = await handler(request)
    response.headers.setdefault("Cache-Control", "no-store")
    response.headers.setdefault("X-Content-Type-Options", "nosniff")
    return response


async def healthz(_: web.Request) -> web.Response:
    return web.json_response({"ok": True})


def make_app(
    auth: KubeAuth, store: Store, limiter: RateLimiter, front_proxy_names: tuple[str, ...] | None = None
) -> web.Application:
    """``front_proxy_names``: None unless requests forwarded by the API server are accepted (the handshake
    verified the certificate against the request-header CA); then the allowed names (empty: any)."""
    app = web.Application(middlewares=[security_headers], client_max_size=64 * 1024)
    app[AUTH], app[STORE], app[LIMITER] = auth, store, limiter
    if front_proxy_names is not None:
        app[FRONT_PROXY_NAMES] = front_proxy_names
    app.router.add_get("/healthz", healthz)
    app.router.add_get(AGGREGATED, discovery)
    for prefix in (PREFIX, AGGREGATED + PREFIX[len("/v1") :]):
        app.router.add_get(f"{prefix}/results", guarded(Action.READ_RESULTS, results))
        app.router.add_get(f"{prefix}/deadletters", guarded(Action.READ_DEAD_LETTERS, dead_letters))
        # one URL's records and dead letters: both rights, as reading each alone would need
        app.router.add_get(f"{prefix}/history", guarded(Action.READ_RESULTS, url_history, Action.READ_DEAD_LETTERS))
        # PUT through the API server (whose RBAC check is then `update`, as Trawl's), POST for direct callers
        app.router.add_post(f"{prefix}/deadletters/retry", guarded(Action.RETRY_DEAD_LETTERS, retry))
        app.router.add_put(f"{prefix}/deadletters/retry", guarded(Action.RETRY_DEAD_LETTERS, retry))
    return app


async def start(serving: Serving) -> web.AppRunner:
    """Listen (HTTPS with a certificate, else plain HTTP) with the operator's Kubernetes credentials."""
    from trawl.operator.kube import new_api_client

    api = new_api_client(8)
    store = Store(api)
    ca_pem, names = await serving.front_proxy(api)
    front_proxy = names if ca_pem is not None else None
    auth, limiter = KubeAuth(api), RateLimiter(serving.rate, serving.burst)
    app = make_app(auth, store, limiter, front_proxy)
    if serving.console:
        from .console.hub import Hub
        from .console.routes import add_console

        add_console(app, auth, store, limiter, Hub(api, serving.namespaces, serving.console_interval), api)

    async def close(_: web.Application) -> None:
        await store.close()
        api.close()  # type: ignore[no-untyped-call]

    app.on_cleanup.append(close)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, serving.host, serving.port, ssl_context=serving.ssl_context(ca_pem)).start()
    scheme = "https" if serving.cert_file else "http"
    log.info("results API listening on %s://%s:%d", scheme, serving.host, serving.port)
    if serving.console:
        log.info("web console at %s://%s:%d/console/", scheme, serving.host, serving.port)
    return runner


@contextlib.asynccontextmanager
async def serve(serving: Serving) -> AsyncIterator[None]:
    """The API for as long as the operator process runs (a sidecar of :func:`trawl.operator.main.run`)."""
    runner = await start(serving)
    try:
        yield
    finally:
        await runner.cleanup()
