"""The console's pure rules: where the viewer's token comes from, the CSRF token bound to it, the cookie's
attributes and the security headers of every page."""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from urllib.parse import urlsplit

from ..access import bearer_token

COOKIE = "trawl_console_token"
CSRF_FIELD = "csrf"
# No inline script or style anywhere: the pages load /console/static/* only, and no one may frame them.
CONTENT_SECURITY_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; connect-src 'self'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)
PAGE_HEADERS = {
    "Content-Security-Policy": CONTENT_SECURITY_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
MAX_TOKEN = 16 * 1024  # a JWT with many groups fits; a pasted novel does not


def viewer_token(headers: Mapping[str, str], cookies: Mapping[str, str]) -> tuple[str | None, bool]:
    """(token, from_cookie): an OIDC proxy's ``Authorization: Bearer`` first, else the login cookie."""
    token = bearer_token(headers.get("Authorization"))
    if token:
        return token, False
    kept = cookies.get(COOKIE, "")
    return (kept, True) if kept and len(kept) <= MAX_TOKEN and " " not in kept else (None, False)


def csrf_token(secret: bytes, token: str) -> str:
    """Bound to the viewer's token and the process's secret: a page of another viewer's, or of another
    process, carries one that does not pass."""
    return hmac.new(secret, hashlib.sha256(token.encode()).digest(), hashlib.sha256).hexdigest()


def csrf_ok(secret: bytes, token: str, presented: str | None) -> bool:
    return bool(presented) and hmac.compare_digest(csrf_token(secret, token), str(presented))


def same_origin(headers: Mapping[str, str], host: str) -> bool:
    """A form post must come from the console's own pages: Sec-Fetch-Site when the browser sends it, else
    Origin (a browser sends one of them on every POST); neither means it is not a browser's cross-site post."""
    site = headers.get("Sec-Fetch-Site")
    if site is not None:
        return site in ("same-origin", "none")
    origin = headers.get("Origin")
    if origin is None or origin == "null":
        return origin is None
    return urlsplit(origin).netloc == host


def cookie_attributes(secure: bool) -> dict[str, object]:
    """HttpOnly (no script reads it), SameSite=Strict (no other site's request carries it), Secure over TLS."""
    return {"httponly": True, "samesite": "Strict", "secure": secure, "path": "/console", "max_age": 8 * 3600}


def is_secure(scheme: str, headers: Mapping[str, str]) -> bool:
    """HTTPS here, or at the TLS-terminating proxy in front (which says so: X-Forwarded-Proto)."""
    return scheme == "https" or headers.get("X-Forwarded-Proto", "").split(",")[0].strip() == "https"
