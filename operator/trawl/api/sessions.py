"""Sessions and ban detection of a job (issue 35): an identity (cookies, user agent, proxy) kept across requests,
and the rules that say a response means the site blocked that identity.

Every field is the job author's, so untrusted: each is bounded here (the worker bounds the stored sessions
again, trawl.worker.sessions), and nothing here names an address, a Secret or code."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, StringConstraints

from .common import DNSLabel, SecretKeyRef, TrawlModel
from .plain import SessionScope as SessionScope  # plain Python: read by the workers without pydantic

MAX_MARKERS = 16
Marker = Annotated[str, StringConstraints(min_length=1, max_length=256)]
ChallengePath = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^/")]
# A header value: printable ASCII only, so no CR/LF can start another header (or request) after it.
UserAgent = Annotated[str, StringConstraints(min_length=1, max_length=256, pattern=r"^[\x20-\x7e]+$")]


class BlockRules(TrawlModel):
    """What makes a response "blocked": the site refused this identity, not the page."""

    status_codes: list[Annotated[int, Field(ge=400, le=599)]] = Field(
        default_factory=lambda: [403],
        max_length=16,
        description="HTTP statuses that mean blocked (429 here overrides its Retry-After handling).",
    )
    markers: list[Marker] = Field(
        default_factory=list,
        max_length=MAX_MARKERS,
        description="Texts whose presence in the first 64 KiB of a 2xx body means blocked (e.g. a captcha's "
        "name). Compared case-insensitively.",
    )
    challenge_paths: list[ChallengePath] = Field(
        default_factory=list,
        max_length=MAX_MARKERS,
        description="URL path prefixes (e.g. /captcha): a redirect that ends on one means blocked.",
    )
    min_body_fraction: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="A 2xx body smaller than this fraction of the domain's typical body (the median of its "
        "last pages, once 5 are known) means blocked: the sudden collapse of a soft block. 0: off.",
    )


class SessionSeed(TrawlModel):
    """Cookies a pool offers its jobs' new sessions (a login made elsewhere), from a Secret it mounts."""

    name: DNSLabel = Field(description="The seed's name, which a job gives in spec.session.seed.")
    secret_ref: SecretKeyRef = Field(
        description="Secret key holding the cookies, one a line: the URL that sets it, a space, then a Set-Cookie "
        "value (https://shop.example.com/ sid=abc; Path=/; Secure). Each is taken as that URL's response would "
        "set it (RFC 6265 scoping). The Secret must be listed in spec.worker.secrets."
    )


class SessionSpec(TrawlModel):
    """Keep an identity (cookie jar, user agent, proxy) across requests, shared by the pool's workers."""

    scope: SessionScope = Field(
        default=SessionScope.JOB,
        description="Job: the job's sessions serve all its domains; Domain: each domain has its own sessions.",
    )
    pool_size: int = Field(
        default=10, ge=1, le=50, description="Sessions kept in rotation per scope (the job, or each domain)."
    )
    max_age_seconds: int = Field(default=1800, ge=10, le=86400, description="A session is retired this old.")
    max_uses: int = Field(default=100, ge=1, le=10000, description="A session is retired after this many requests.")
    block: BlockRules = Field(
        default_factory=BlockRules, description="What marks a response as blocked (retires its session)."
    )
    user_agents: list[UserAgent] = Field(
        default_factory=list,
        max_length=16,
        description="User agents a new session picks one of, at random, and keeps for its life (its fetches and "
        "renders). Empty: every session uses the job's request.userAgent.",
    )
    seed: DNSLabel | None = Field(
        default=None,
        description="A seed of the pool's spec.sessionSeeds: each new session starts with its cookies. A seed the "
        "pool does not define is refused when the job is accepted.",
    )
    max_blocked_retries: int = Field(
        default=3,
        ge=0,
        le=10,
        description="A blocked page is given back to be tried on another identity this many times without "
        "spending an attempt (per worker); past that each block spends one.",
    )
