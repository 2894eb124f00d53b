"""A fixture site that bans per identity, for the sessions tests and bench/proxies.py: it hands each new
visitor a session cookie, answers an identity's requests until it has made ``ban_after`` of them within
``window`` seconds, then bans that cookie for good (HTTP 403, or a captcha page with ``soft``). A cookie that
comes back through another proxy than the one it was handed to (``X-Proxy``) is banned at once: a session's
cookie and address belong together. A request without the cookie gets a new one (a fresh identity), but only
``ban_after`` such new visitors a proxy a window: past that, a cookieless request is refused (403) too, so a
crawler that drops its cookies is blocked. It runs
in the caller's event loop (aiohttp) on a loopback address and logs every request (path, cookie, the proxy it
came through: ``X-Proxy``, which bench/proxies.py's proxies add)."""

from __future__ import annotations

import secrets
import time
from collections import defaultdict, deque
from dataclasses import dataclass, field

from aiohttp import web

from .procs import free_port

PAGE_PADDING = "<p>" + "lorem ipsum " * 150 + "</p>"


@dataclass(frozen=True, slots=True)
class Visit:
    path: str
    sid: str | None  # the farm's cookie the request carried
    cookie: str  # the whole Cookie header
    proxy: str  # X-Proxy, "" when none
    answer: int  # the status it got (200 for a soft ban's captcha page)
    banned: bool
    user_agent: str = ""


@dataclass
class BanFarm:
    host: str = "127.0.0.2"
    port: int = 0
    ban_after: int = 5  # requests per identity per window before it is banned
    window: float = 60.0
    always: bool = False  # ban every request (a site that blocks everyone)
    soft: bool = False  # a ban is a 200 captcha page, not a 403
    set_cookies: tuple[str, ...] = ()  # more Set-Cookie values on every page (scoping tests)
    visits: list[Visit] = field(default_factory=list)
    _runner: web.AppRunner | None = None
    _seen: dict[str, deque[float]] = field(default_factory=lambda: defaultdict(deque))
    _banned: set[str] = field(default_factory=set)
    _issued: dict[str, str] = field(default_factory=dict)  # cookie -> the proxy it was handed to

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def page_url(self, n: int) -> str:
        return f"{self.url}/page/{n}"

    async def start(self) -> BanFarm:
        app = web.Application()
        app.router.add_get("/page/{n}", self._page)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        self.port = self.port or free_port()
        await web.TCPSite(self._runner, self.host, self.port).start()
        return self

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> BanFarm:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def banned(self, sid: str) -> bool:
        return sid in self._banned

    def _ban(self, sid: str | None, proxy: str) -> bool:
        """Whether this request is banned, counting it against its identity."""
        if self.always:
            return True
        if sid is None:  # a new visitor: counted against its address
            return self._over(f"new|{proxy}")
        if sid in self._banned or self._issued.get(sid, proxy) != proxy:
            self._banned.add(sid)
            return True
        if self._over(sid):
            self._banned.add(sid)
            return True
        return False

    def _over(self, key: str) -> bool:
        """Count a request of ``key``: whether it is past ``ban_after`` within the window."""
        now = time.monotonic()
        seen = self._seen[key]
        while seen and seen[0] < now - self.window:
            seen.popleft()
        seen.append(now)
        return len(seen) > self.ban_after

    async def _page(self, request: web.Request) -> web.Response:
        sid = request.cookies.get("sid")
        proxy = request.headers.get("X-Proxy", "")
        banned = self._ban(sid, proxy)
        answer = 200 if not banned or self.soft else 403
        cookie, agent = request.headers.get("Cookie", ""), request.headers.get("User-Agent", "")
        self.visits.append(Visit(request.path, sid, cookie, proxy, answer, banned, agent))
        if banned:
            body = "<html><title>captcha</title><body>Please solve the captcha</body></html>"
            return web.Response(status=answer, text=body, content_type="text/html")
        n = request.match_info["n"]
        response = web.Response(
            text=f"<html><head><title>Page {n}</title></head><body><h1>Page {n}</h1>{PAGE_PADDING}</body></html>",
            content_type="text/html",
        )
        if sid is None:
            sid = secrets.token_hex(8)
            self._issued[sid] = proxy
            response.headers.add("Set-Cookie", f"sid={sid}; Path=/; HttpOnly")
        for value in self.set_cookies:
            response.headers.add("Set-Cookie", value)
        return response
