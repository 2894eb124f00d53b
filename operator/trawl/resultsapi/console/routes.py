"""The console's handlers: every one resolves the viewer (token → TokenReview), rate-limits them with the
API's limiter, and asks RBAC (SubjectAccessReview) before it shows or does anything."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import kubernetes
from aiohttp import web
from kubernetes.client import ApiClient

from trawl.api.naming import GROUP

from ..access import MAX_LIMIT, Action, Identity, RateLimiter
from ..kubeauth import AuthUnavailable, KubeAuth
from ..store import Store, StoreError
from . import pages
from .hub import Hub
from .session import (
    COOKIE,
    CSRF_FIELD,
    MAX_TOKEN,
    PAGE_HEADERS,
    cookie_attributes,
    csrf_ok,
    csrf_token,
    is_secure,
    same_origin,
    viewer_token,
)

STATIC = Path(__file__).parent / "static"
STATIC_FILES = {"console.js": "text/javascript", "console.css": "text/css"}
# Stateless across replicas: the CSRF token is keyed by the viewer's own token, which a forging site lacks.
CSRF_KEY = b"trawl-console-csrf-v1"
PREVIEW = 20
STREAM_SECONDS = 300.0  # an event stream ends then; EventSource reconnects (and the viewer is re-checked)
MAX_STREAMS_PER_VIEWER = 8
KEEPALIVE = 15.0
CONSOLE = web.AppKey("console", object)


@dataclass
class Console:
    auth: KubeAuth
    store: Store
    limiter: RateLimiter
    hub: Hub
    core: Any
    streams: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class Seen:
    identity: Identity
    token: str
    viewer: pages.Viewer


def html(body: str, status: int = 200) -> web.Response:
    return web.Response(text=body, status=status, content_type="text/html", charset="utf-8")


class Refused(Exception):
    def __init__(self, response: web.StreamResponse) -> None:
        self.response = response


def console_of(request: web.Request) -> Console:
    found = request.app[CONSOLE]
    assert isinstance(found, Console)
    return found


async def seen(request: web.Request) -> Seen:
    """The viewer, or a Refused: to the login form without a token, 429 past their rate."""
    console = console_of(request)
    token, from_cookie = viewer_token(request.headers, request.cookies)
    failing = f"unauthenticated:{request.remote}"
    if wait := console.limiter.waiting(failing):
        raise Refused(html(pages.error_page(None, 429, "Too many failed sign-ins; wait a little."), 429))
    identity = await console.auth.identity(token) if token else None
    if identity is None or token is None:
        if token:
            console.limiter.allow(failing)
        raise Refused(web.HTTPSeeOther("/console/login"))
    if wait := console.limiter.allow(identity.username):
        raise Refused(
            web.Response(status=429, text="too many requests", headers={"Retry-After": str(max(1, round(wait)))})
        )
    return Seen(identity, token, pages.Viewer(identity.username, csrf_token(CSRF_KEY, token), from_cookie))


def page(handler: Callable[[web.Request, Seen], Awaitable[web.StreamResponse]]) -> Any:
    async def serve(request: web.Request) -> web.StreamResponse:
        try:
            return await handler(request, await seen(request))
        except Refused as refused:
            if isinstance(refused.response, web.HTTPException):
                raise refused.response from None  # aiohttp sends a raised redirect; returning one is deprecated
            return refused.response
        except AuthUnavailable as exc:
            return html(pages.error_page(None, 503, str(exc)), 503)
        except StoreError as exc:
            return html(pages.error_page(None, exc.status, exc.message), exc.status)

    return serve


def attrs(verb: str, resource: str, namespace: str, name: str = "", group: str = GROUP) -> dict[str, str]:
    found = {"verb": verb, "group": group, "resource": resource, "namespace": namespace}
    return found | ({"name": name} if name else {})


async def visible(console: Console, who: Seen, kind: str, objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The objects in the namespaces where the viewer may list ``kind``."""
    namespaces = sorted({o["metadata"]["namespace"] for o in objects})
    allowed = {ns for ns in namespaces if await console.auth.may(who.identity, attrs("list", kind, ns))}
    return [o for o in objects if o["metadata"]["namespace"] in allowed]


@page
async def jobs(request: web.Request, who: Seen) -> web.StreamResponse:
    console = console_of(request)
    everything = (await console.hub.fresh()).objects["scrapejobs"]
    shown = await visible(console, who, "scrapejobs", everything)
    return html(pages.jobs_page(who.viewer, shown))


@page
async def pools(request: web.Request, who: Seen) -> web.StreamResponse:
    console = console_of(request)
    snapshot = await console.hub.fresh()
    shown = await visible(console, who, "scrapepools", snapshot.objects["scrapepools"])
    # throttled domains only of jobs the viewer may see: a shared pool does not tell one tenant another's sites
    their_jobs = await visible(console, who, "scrapejobs", snapshot.objects["scrapejobs"])
    return html(pages.pools_page(who.viewer, shown, their_jobs))


@page
async def crons(request: web.Request, who: Seen) -> web.StreamResponse:
    console = console_of(request)
    shown = await visible(console, who, "cronscrapejobs", (await console.hub.fresh()).objects["cronscrapejobs"])
    return html(pages.crons_page(who.viewer, shown))


async def job_object(console: Console, who: Seen, namespace: str, name: str) -> dict[str, Any]:
    """The job, once RBAC lets the viewer get it (else 403 before anything about it is said)."""
    if not await console.auth.may(who.identity, attrs("get", "scrapejobs", namespace, name)):
        raise StoreError(403, f"{who.identity.username} may not get ScrapeJob {name} in namespace {namespace}")
    for job in (await console.hub.fresh()).objects["scrapejobs"]:
        if (job["metadata"]["namespace"], job["metadata"]["name"]) == (namespace, name):
            return job
    raise StoreError(404, f"ScrapeJob {namespace}/{name} not found")


async def events_of(console: Console, who: Seen, namespace: str, name: str) -> list[dict[str, Any]] | None:
    if not await console.auth.may(who.identity, attrs("list", "events", namespace, group="")):
        return None
    selector = f"involvedObject.kind=ScrapeJob,involvedObject.name={name}"
    try:
        found = await asyncio.to_thread(
            console.core.list_namespaced_event, namespace, field_selector=selector, _request_timeout=(5, 15)
        )
    except Exception:  # the operator may lack list on events (older RBAC): the page says none
        return []
    items = [console.core.api_client.sanitize_for_serialization(ev) for ev in found.items]
    return sorted(items, key=lambda ev: str(ev.get("lastTimestamp") or ev.get("eventTime") or ""))[-20:]


async def extras(console: Console, who: Seen, namespace: str, name: str) -> pages.JobExtras:
    auth, identity = console.auth, who.identity
    may_read = await auth.allowed(identity, Action.READ_RESULTS, namespace, name)
    may_dead = await auth.allowed(identity, Action.READ_DEAD_LETTERS, namespace, name)
    may_retry = await auth.allowed(identity, Action.RETRY_DEAD_LETTERS, namespace, name)
    dead: list[dict[str, Any]] | None = None
    preview: list[dict[str, Any]] | None = None
    problem: str | None = None
    if may_read or may_dead:
        try:
            target = await console.store.job(namespace, name)
            dead = await console.store.dead_letters(target, 100) if may_dead else None
            preview = [r for _, r in await console.store.results_page(target, "-", PREVIEW)] if may_read else None
        except StoreError as exc:
            problem = exc.message
    return pages.JobExtras(dead, preview, problem, await events_of(console, who, namespace, name), may_retry)


@page
async def job(request: web.Request, who: Seen) -> web.StreamResponse:
    console = console_of(request)
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    found = await job_object(console, who, namespace, name)
    return html(pages.job_page(who.viewer, found, await extras(console, who, namespace, name)))


@page
async def retry(request: web.Request, who: Seen) -> web.StreamResponse:
    console = console_of(request)
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    form = await request.post()
    if not same_origin(request.headers, request.host) or not csrf_ok(CSRF_KEY, who.token, str(form.get(CSRF_FIELD))):
        return html(pages.error_page(who.viewer, 403, "This form did not come from this console (CSRF)."), 403)
    if not await console.auth.allowed(who.identity, Action.RETRY_DEAD_LETTERS, namespace, name):
        return html(
            pages.error_page(who.viewer, 403, f"{who.identity.username} may not retry {name}'s dead letters"), 403
        )
    target = await console.store.job(namespace, name)
    requested = await console.store.request_retry(target, form.get("all") == "true")
    if "application/json" in request.headers.get("Accept", ""):
        return web.json_response({"requested": requested}, status=202)
    raise web.HTTPSeeOther(pages.job_href({"metadata": {"namespace": namespace, "name": name}}))


@page
async def download(request: web.Request, who: Seen) -> web.StreamResponse:
    """Every record of the job as JSON Lines, page by page (the API's cursor), streamed to the browser."""
    console = console_of(request)
    namespace, name = request.match_info["namespace"], request.match_info["name"]
    if not await console.auth.allowed(who.identity, Action.READ_RESULTS, namespace, name):
        return html(pages.error_page(who.viewer, 403, f"{who.identity.username} may not read {name}'s results"), 403)
    target = await console.store.job(namespace, name)
    response = web.StreamResponse(headers={"Content-Type": "application/jsonl; charset=utf-8"})
    response.headers["Content-Disposition"] = f'attachment; filename="{name}.jsonl"'
    await response.prepare(request)
    start = "-"
    while page := await console.store.results_page(target, start, MAX_LIMIT):
        body = "".join(json.dumps(r, ensure_ascii=False, separators=(",", ":")) + "\n" for _, r in page)
        await response.write(body.encode())
        start = f"({page[-1][0]}"
    await response.write_eof()
    return response


async def live_values(console: Console, who: Seen, objects: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    jobs_seen = await visible(console, who, "scrapejobs", objects["scrapejobs"])
    values: dict[str, str] = {}
    for j in jobs_seen:
        values |= pages.job_live(j)
    for p in await visible(console, who, "scrapepools", objects["scrapepools"]):
        values |= pages.pool_live(p, jobs_seen)
    for c in await visible(console, who, "cronscrapejobs", objects["cronscrapejobs"]):
        values |= pages.cron_live(c)
    return values


@page
async def events(request: web.Request, who: Seen) -> web.StreamResponse:
    """Server-sent events: the viewer's live values whenever the shared feed changes; ends after a while
    (the browser reconnects, and the token and RBAC are asked again)."""
    console = console_of(request)
    user = who.identity.username
    if console.streams.get(user, 0) >= MAX_STREAMS_PER_VIEWER:
        return web.Response(status=429, text="too many open pages", headers={"Retry-After": "10"})
    # X-Accel-Buffering: an NGINX Ingress would otherwise hold the events back in its buffer
    headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    response = web.StreamResponse(headers=headers)
    console.streams[user] = console.streams.get(user, 0) + 1
    try:
        await response.prepare(request)
        async with console.hub.subscription():
            await stream(console, who, response)
    except ConnectionResetError:  # the browser went away
        pass
    finally:
        console.streams[user] -= 1
        if console.streams[user] <= 0:
            del console.streams[user]
    return response


async def stream(console: Console, who: Seen, response: web.StreamResponse) -> None:
    version, sent, ends = -1, "", time.monotonic() + STREAM_SECONDS
    while time.monotonic() < ends:
        snapshot = await console.hub.changed_after(version, KEEPALIVE)
        if snapshot.version == version:
            await response.write(b": keepalive\n\n")
            continue
        version = snapshot.version
        if await console.auth.identity(who.token) is None:  # the token expired or was revoked
            await response.write(b"event: signedout\ndata: {}\n\n")
            return
        data = json.dumps(await live_values(console, who, snapshot.objects), separators=(",", ":"))
        if data != sent:
            await response.write(f"event: values\ndata: {data}\n\n".encode())
            sent = data


async def login_form(_: web.Request) -> web.StreamResponse:
    return html(pages.login_page(None))


async def login(request: web.Request) -> web.StreamResponse:
    console = console_of(request)
    if not same_origin(request.headers, request.host):
        return html(pages.login_page("This form did not come from this console."), 403)
    failing = f"unauthenticated:{request.remote}"
    if console.limiter.waiting(failing):
        return html(pages.login_page("Too many failed sign-ins; wait a little."), 429)
    token = str((await request.post()).get("token") or "").strip()
    try:
        identity = await console.auth.identity(token) if token and len(token) <= MAX_TOKEN else None
    except AuthUnavailable as exc:
        return html(pages.login_page(str(exc)), 503)
    if identity is None:
        console.limiter.allow(failing)
        return html(pages.login_page("The API server does not accept this token."), 401)
    response = web.HTTPSeeOther("/console/jobs")
    response.set_cookie(COOKIE, token, **cookie_attributes(is_secure(request.scheme, request.headers)))  # type: ignore[arg-type]
    raise response


@page
async def logout(request: web.Request, who: Seen) -> web.StreamResponse:
    form = await request.post()
    if not same_origin(request.headers, request.host) or not csrf_ok(CSRF_KEY, who.token, str(form.get(CSRF_FIELD))):
        return html(pages.error_page(who.viewer, 403, "This form did not come from this console (CSRF)."), 403)
    response = web.HTTPSeeOther("/console/login")
    response.del_cookie(COOKIE, path="/console")
    raise response


async def static(request: web.Request) -> web.StreamResponse:
    name = request.match_info["file"]
    if name not in STATIC_FILES:  # a fixed list: no path from the request reaches the file system
        raise web.HTTPNotFound()
    return web.Response(
        body=(STATIC / name).read_bytes(), content_type=STATIC_FILES[name], headers={"Cache-Control": "max-age=300"}
    )


async def home(_: web.Request) -> web.StreamResponse:
    raise web.HTTPSeeOther("/console/jobs")


def with_page_headers(request: web.Request, headers: Any) -> None:
    for name, value in PAGE_HEADERS.items():
        if name != "Cache-Control" or not request.path.startswith("/console/static/"):
            headers[name] = value


@web.middleware
async def page_headers(request: web.Request, handler: Any) -> web.StreamResponse:
    if not request.path.startswith("/console"):
        return await handler(request)  # type: ignore[no-any-return]
    try:
        response: web.StreamResponse = await handler(request)
    except web.HTTPException as exc:  # redirects and 404s: the same headers
        with_page_headers(request, exc.headers)
        raise
    if not response.prepared:
        with_page_headers(request, response.headers)
    return response


def add_console(
    app: web.Application, auth: KubeAuth, store: Store, limiter: RateLimiter, hub: Hub, api: ApiClient
) -> None:
    """The console's routes on the API's application (the same process, port and limiter)."""
    app[CONSOLE] = Console(auth, store, limiter, hub, kubernetes.client.CoreV1Api(api))
    app.middlewares.append(page_headers)
    job_path = "/console/jobs/{namespace}/{name}"
    app.router.add_get("/console", home)
    app.router.add_get("/console/", home)
    app.router.add_get("/console/login", login_form)
    app.router.add_post("/console/login", login)
    app.router.add_post("/console/logout", logout)
    app.router.add_get("/console/jobs", jobs)
    app.router.add_get("/console/pools", pools)
    app.router.add_get("/console/crons", crons)
    app.router.add_get("/console/events", events)
    app.router.add_get(job_path, job)
    app.router.add_post(job_path + "/retry", retry)
    app.router.add_get(job_path + "/results.jsonl", download)
    app.router.add_get("/console/static/{file}", static)

    async def on_startup(_: web.Application) -> None:
        hub.start()

    async def on_cleanup(_: web.Application) -> None:
        await hub.stop()

    app.on_startup.append(on_startup)
    app.on_cleanup.append(on_cleanup)
