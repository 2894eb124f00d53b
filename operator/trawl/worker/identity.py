"""One request made as a session (trawl.worker.sessions): its cookies, user agent and pinned proxy, the
response judged by the job's block rules (trawl.worker.bans), and a blocked identity retired.

A block raises :class:`~trawl.worker.fetch.FetchError` of class ``Blocked``: the pipeline counts it apart,
tells the circuit breaker and gives the task back to be tried on another identity (trawl.worker.pipeline)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, TypeVar

from trawl.api.plain import FailureClass
from trawl.jobspec.podfiles import MissingSecret
from trawl.queue.proxyusage import ProxyUsage

from .bans import BodySizes, failure_blocked, response_blocked
from .fetch import FetchError, FetchResult
from .proxies import ProxyBusy, ProxyConfigError, ProxyDirectory, ProxyGroup
from .seeds import SeedDirectory
from .sessions import Session, SessionStore

if TYPE_CHECKING:  # a pydantic model: only jobs with spec.session build one (jobsettings)
    from trawl.api.sessions import SessionSpec

log = logging.getLogger("trawl.worker.identity")
_T = TypeVar("_T")
Call = Callable[..., Awaitable[_T]]


class Identities:
    """The worker's sessions, proxies and block rules, put together for one request."""

    def __init__(self, store: SessionStore, proxies: ProxyDirectory, usage: ProxyUsage, max_wait: float) -> None:
        self.store = store
        self.proxies = proxies
        self.usage = usage
        self.seeds = SeedDirectory()
        self.max_wait = max_wait
        self.sizes = BodySizes()

    async def run(
        self,
        call: Call[_T],
        result_of: Callable[[Any], FetchResult],
        *,
        job_id: str,
        domain: str,
        spec: SessionSpec,
        user_agent: str,
        route: dict[str, Any] | None,
        seed: dict[str, Any] | None = None,
    ) -> _T:
        """``call`` (a fetch or a render, taking ``proxy`` and ``cookies``) as a session of the job; a new
        session starts with the cookies of the pool's ``seed`` (trawl.worker.seeds), if the job names one."""
        session = await self.store.acquire(job_id, spec, domain, user_agent)
        if seed is not None and session.uses == 1:  # its first use: a new session
            try:
                self.seeds.seed(session.jar, seed)
            except MissingSecret as exc:
                raise FetchError(FailureClass.INTERNAL, f"session seed {seed.get('name')!r}: {exc}") from exc
        group = self._group(route) if route is not None else None
        try:
            out = await (
                self._proxied(call, session, group, job_id)
                if group is not None
                else call(cookies=session.jar, user_agent=session.user_agent)
            )
        except FetchError as exc:
            reason = None if exc.proxy_fault else failure_blocked(exc.status, exc.url, spec.block)
            if not isinstance(exc.__cause__, ProxyBusy):  # a busy group was counted as such, by no proxy
                self._count(
                    group,
                    session,
                    "blocked" if reason else "proxy_error" if exc.proxy_fault else exc.failure_class.value,
                )
            if reason is None:
                await self.store.save(session, job_id, spec)
                raise
            raise await self._blocked(session, job_id, domain, reason, exc.url, exc.status) from exc
        result = result_of(out)
        reason = response_blocked(
            result.status, result.url, result.final_url, result.redirects, result.body, spec.block,
            self.sizes.typical(job_id, domain),
        )  # fmt: skip
        self._count(group, session, "blocked" if reason else "ok")
        if reason is not None:
            raise await self._blocked(session, job_id, domain, reason, result.final_url, result.status)
        self.sizes.observe(job_id, domain, len(result.body))
        await self.store.save(session, job_id, spec)
        return out

    def _count(self, group: ProxyGroup | None, session: Session, outcome: str) -> None:
        """A request through the group's proxy, by outcome (trawl_worker_proxy_requests_total)."""
        if group is not None and session.proxy:
            self.usage.count(group.name, session.proxy, outcome)

    def _group(self, route: dict[str, Any]) -> ProxyGroup:
        try:
            return self.proxies.group(route)
        except (MissingSecret, ProxyConfigError) as exc:
            raise FetchError(FailureClass.INTERNAL, f"proxy group {route.get('group')!r}: {exc}") from exc

    async def _proxied(self, call: Call[_T], session: Session, group: ProxyGroup, job_id: str) -> _T:
        """``call`` through the session's proxy: the one it was made with (waiting for room on it), or for a
        new session (or one whose proxy left the list) the least busy one not cooling down for the domain."""
        pinned = group.index_of(session.proxy) if session.proxy else None
        avoid: frozenset[int] = frozenset()
        if pinned is None:
            cooling = await self.store.cooling(job_id, session.domain, [e.label for e in group.endpoints])
            avoid = frozenset(i for i, e in enumerate(group.endpoints) if e.label in cooling)
        try:
            async with group.use(self.max_wait, prefer=pinned, avoid=avoid, strict=pinned is not None) as proxy:
                if session.proxy != proxy.label:
                    session.proxy, session.new = proxy.label, True  # written back with the session
                return await call(proxy=proxy, cookies=session.jar, user_agent=session.user_agent)
        except ProxyBusy as exc:
            self.usage.count(group.name, "", "busy")
            raise FetchError(FailureClass.CONNECTION, str(exc), proxy_fault=True) from exc

    async def _blocked(
        self,
        session: Session,
        job_id: str,
        domain: str,
        reason: str,
        url: str | None,
        status: int | None,
    ) -> FetchError:
        """Retire the session, cool its proxy for the domain, count it: the block as a FetchError."""
        await self.store.retire(session)
        if session.proxy:
            await self.store.cool(job_id, session.proxy, domain)
        log.info(
            "blocked: session retired",
            extra={"job": job_id, "domain": domain, "reason": reason, "proxy": session.proxy, "uses": session.uses},
        )
        return FetchError(FailureClass.BLOCKED, f"blocked ({reason})", status=status, url=url)
