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

from .access import Action, BadRequest, Identity, RateLimiter, bearer_token, parse_cursor, parse_flag, parse_limit
from .kubeauth import AuthUnavailable, KubeAuth
from .store import JobTarget, Store, StoreError

log = logging.getLogger("trawl.resultsapi")

PREFIX = "/v1/namespaces/{namespace}/scrapejobs/{name}"
CURSOR_HEADER = "Trawl-Next-Cursor"
COUNT_HEADER = "Trawl-Count"
AUTH = web.AppKey("auth", KubeAuth)
STORE = web.AppKey("store", Store)
LIMITER = web.AppKey("limiter", RateLimiter)

Handler = Callable[[web.Request, JobTarget], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Serving:
    """Where and how the API listens: TLS when a certificate and key are given (the chart's Secret)."""

    host: str
    port: int
    cert_file: Path | None = None
    key_file: Path | None = None
    rate: float = 20.0
    burst: float = 100.0

    def ssl_context(self) -> ssl.SSLContext | None:
        if self.cert_file is None or self.key_file is None:
            return None
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.cert_file, self.key_file)
        return context


def problem(status: int, message: str, **headers: str) -> web.Response:
    return web.json_response({"status": status, "message": message}, status=status, headers=headers or None)


def guarded(action: Action, handler: Handler) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """401 without a valid token, 429 past the caller's rate, 403 without the RBAC, then 404 for no job."""

    async def serve(request: web.Request) -> web.StreamResponse:
        namespace, name = request.match_info["namespace"], request.match_info["name"]
        token = bearer_token(request.headers.get("Authorization"))
        auth = request.app[AUTH]
        try:
            identity: Identity | None = await auth.identity(token) if token else None
            if identity is None:
                return problem(401, "a valid Kubernetes bearer token is required", **{"WWW-Authenticate": "Bearer"})
            wait = request.app[LIMITER].allow(identity.username)
            if wait:
                return problem(429, "too many requests", **{"Retry-After": str(max(1, round(wait)))})
            if not await auth.allowed(identity, action, namespace, name):
                what = f"{action.verb} scrapejobs/{action.subresource}"
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


def make_app(auth: KubeAuth, store: Store, limiter: RateLimiter) -> web.Application:
    app = web.Application(middlewares=[security_headers], client_max_size=64 * 1024)
    app[AUTH], app[STORE], app[LIMITER] = auth, store, limiter
    app.router.add_get("/healthz", healthz)
    app.router.add_get(f"{PREFIX}/results", guarded(Action.READ_RESULTS, results))
    app.router.add_get(f"{PREFIX}/deadletters", guarded(Action.READ_DEAD_LETTERS, dead_letters))
    app.router.add_post(f"{PREFIX}/deadletters/retry", guarded(Action.RETRY_DEAD_LETTERS, retry))
    return app


async def start(serving: Serving) -> web.AppRunner:
    """Listen (HTTPS with a certificate, else plain HTTP) with the operator's Kubernetes credentials."""
    from trawl.operator.kube import new_api_client

    api = new_api_client(8)
    store = Store(api)
    app = make_app(KubeAuth(api), store, RateLimiter(serving.rate, serving.burst))

    async def close(_: web.Application) -> None:
        await store.close()
        api.close()  # type: ignore[no-untyped-call]

    app.on_cleanup.append(close)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, serving.host, serving.port, ssl_context=serving.ssl_context()).start()
    scheme = "https" if serving.cert_file else "http"
    log.info("results API listening on %s://%s:%d", scheme, serving.host, serving.port)
    return runner


@contextlib.asynccontextmanager
async def serve(serving: Serving) -> AsyncIterator[None]:
    """The API for as long as the operator process runs (a sidecar of :func:`trawl.operator.main.run`)."""
    runner = await start(serving)
    try:
        yield
    finally:
        await runner.cleanup()
