"""Browser worker settings (from the environment, so a pool sets them with ``spec.worker.env``) and Chromium flags."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import NamedTuple

# Debian's package installs a shell wrapper at /usr/bin/chromium that adds flags from /etc/chromium.d;
# the binary itself is started directly so the flags below are the only ones.
CHROMIUM_CANDIDATES = ("/usr/lib/chromium/chromium", "/usr/bin/chromium", "/usr/bin/chromium-browser")

# Every flag is here for a reason:
#  - headless, no GPU, no first-run UI;
#  - nothing the browser does on its own (component updates, sync, safe-browsing lists, metrics, field
#    trials, domain reliability): without these Chromium contacts Google hosts by itself;
#  - no QUIC (UDP would not go through the proxy) and WebRTC restricted to proxied TCP (no UDP leaks);
#  - no popups at all, no background throttling of the pages being rendered;
#  - /dev/shm is small in containers: shared memory goes to /tmp instead.
BASE_ARGS: tuple[str, ...] = (
    "--headless",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-default-apps",
    "--disable-extensions",
    "--disable-domain-reliability",
    "--disable-client-side-phishing-detection",
    "--disable-breakpad",
    "--metrics-recording-only",
    "--disable-features=Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider,InterestFeedContentSuggestions",
    "--force-webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--webrtc-ip-handling-policy=disable_non_proxied_udp",
    "--block-new-web-contents",
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-dev-shm-usage",
    "--mute-audio",
)


def find_chromium(environ: Mapping[str, str] | None = None) -> str | None:
    env = os.environ if environ is None else environ
    explicit = env.get("TRAWL_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).exists() else None
    return next((c for c in CHROMIUM_CANDIDATES if Path(c).exists()), None)


def needs_no_sandbox() -> bool:
    """Chromium refuses to start its sandbox as root; as any other user the sandbox stays on.

    The restricted Pod Security profile runs the worker as a non-root user (the image's uid 10001) and
    drops every capability; Chromium's namespace sandbox then needs unprivileged user namespaces on the
    node. Where the node forbids them, set TRAWL_BROWSER_NO_SANDBOX=true (the pod's own isolation then
    is the only sandbox).
    """
    return os.geteuid() == 0


class BrowserSettings(NamedTuple):
    executable: str | None = None  # None: found at start (find_chromium)
    pages_per_browser: int = 8  # pages rendered at once
    pages_per_context: int = 50  # pages one shared context serves before it is replaced (trawl.worker.browser.contexts)
    memory_limit_bytes: int = 1024 * 1024 * 1024  # the browser is replaced once its processes use more (PSS)
    no_sandbox: bool | None = None  # None: only as root
    traffic_factor: int = 8  # a page's total traffic may be this many times the job's maxResponseBytes
    extra_args: tuple[str, ...] = ()

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> BrowserSettings:
        env = os.environ if environ is None else environ
        no_sandbox = env.get("TRAWL_BROWSER_NO_SANDBOX")
        return cls(
            executable=env.get("TRAWL_CHROMIUM") or None,
            pages_per_browser=max(1, int(env.get("TRAWL_BROWSER_PAGES", "8"))),
            pages_per_context=max(1, int(env.get("TRAWL_BROWSER_PAGES_PER_CONTEXT", "50"))),
            memory_limit_bytes=max(64, int(env.get("TRAWL_BROWSER_MEMORY_MIB", "1024"))) * 1024 * 1024,
            no_sandbox=None if no_sandbox is None else no_sandbox.lower() == "true",
            extra_args=tuple(a for a in env.get("TRAWL_BROWSER_ARGS", "").split() if a),
        )

    def args(self, marker: str, *, no_sandbox: bool | None = None) -> list[str]:
        """Chromium's command line; ``marker`` (ignored by Chromium) finds its processes in /proc."""
        if no_sandbox is None:
            no_sandbox = self.no_sandbox if self.no_sandbox is not None else needs_no_sandbox()
        return [*BASE_ARGS, *(["--no-sandbox"] if no_sandbox else []), *self.extra_args, f"--trawl-browser={marker}"]
