"""Whether a response means the site blocked the identity that asked (pure decisions, plus a bounded memory
of each domain's typical body size).

A job's ``session.block`` rules (trawl.api.sessions.BlockRules) say it: a status code, a marker in the body,
a redirect that ends on a challenge path, or a body that collapsed to a fraction of the domain's typical
size. The verdict is a short reason (for logs, the breaker and the status), never the body."""

from __future__ import annotations

from collections import OrderedDict, deque
from collections.abc import Sequence
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:  # a pydantic model: only jobs with spec.session build one (jobsettings)
    from trawl.api.sessions import BlockRules


MARKER_WINDOW = 64 * 1024  # the bytes of a body searched for markers
SIZE_SAMPLES = 20  # body sizes remembered per domain
MIN_SAMPLES = 5  # sizes known before a collapse can be judged
MAX_DOMAINS = 2048  # domains whose sizes a worker remembers


def status_blocked(status: int | None, rules: BlockRules) -> str | None:
    if status is not None and status in rules.status_codes:
        return f"HTTP {status}"
    return None


def challenge_blocked(urls: Sequence[str], rules: BlockRules) -> str | None:
    """A hop of the redirect chain (the final URL included) on a challenge path."""
    for url in urls:
        try:
            path = urlsplit(url).path or "/"
        except ValueError:
            continue
        for prefix in rules.challenge_paths:
            if path.startswith(prefix):
                return f"redirected to challenge {prefix}"
    return None


def marker_blocked(body: bytes, rules: BlockRules) -> str | None:
    if not rules.markers:
        return None
    text = body[:MARKER_WINDOW].decode("utf-8", "replace").casefold()
    for marker in rules.markers:
        if marker.casefold() in text:
            return f"marker {marker[:64]!r}"
    return None


def collapsed(size: int, typical: Sequence[int], fraction: float) -> str | None:
    """A body of ``size`` bytes far below the domain's median of ``typical`` (``fraction`` 0: never)."""
    if fraction <= 0 or len(typical) < MIN_SAMPLES:
        return None
    import statistics  # only jobs with sessions get here; it imports fractions and decimal: 2 ms of every start

    median = statistics.median(typical)
    if median > 0 and size < fraction * median:
        return f"body collapsed to {size} bytes (typical {int(median)})"
    return None


class BodySizes:
    """The last body sizes of each (job, domain), to judge a collapse; bounded in domains and samples."""

    def __init__(self) -> None:
        self._sizes: OrderedDict[tuple[str, str], deque[int]] = OrderedDict()

    def typical(self, job_id: str, domain: str) -> list[int]:
        return list(self._sizes.get((job_id, domain), ()))

    def observe(self, job_id: str, domain: str, size: int) -> None:
        key = (job_id, domain)
        sizes = self._sizes.pop(key, None) or deque(maxlen=SIZE_SAMPLES)
        sizes.append(size)
        self._sizes[key] = sizes
        while len(self._sizes) > MAX_DOMAINS:
            self._sizes.popitem(last=False)


def response_blocked(
    status: int,
    url: str,
    final_url: str,
    redirects: Sequence[str],
    body: bytes,
    rules: BlockRules,
    typical: Sequence[int],
) -> str | None:
    """Why a successful response is a block, or None: status, challenge redirect, marker, collapse."""
    return (
        status_blocked(status, rules)
        or challenge_blocked([*redirects, final_url] if final_url != url else redirects, rules)
        or marker_blocked(body, rules)
        or collapsed(len(body), typical, rules.min_body_fraction)
    )


def failure_blocked(status: int | None, url: str | None, rules: BlockRules) -> str | None:
    """Why a failed fetch (an error status, maybe after a redirect) is a block, or None."""
    return status_blocked(status, rules) or (challenge_blocked([url], rules) if url else None)
