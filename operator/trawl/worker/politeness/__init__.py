"""Polite fetching: what a worker does before each request to a site, one concern per module.

- :mod:`.robots`: robots.txt per origin, cached in the pool's Redis and in memory (one worker fetches it);
- :mod:`.rate`: the per-domain request rate shared by the pool's workers (GCRA tokens on Redis time);
- :mod:`.lateness`: Redis's clock on the worker's, and how late a strictly spaced request may leave;
- :mod:`.slots`: the per-domain concurrency shared by the pool's workers (leased slots);
- :mod:`.adaptive`: this worker's extra per-domain delay, from the site's latency and errors;
- :mod:`.backlog`: which of a domain's tasks this worker keeps waiting, and when the others are given back;
- :mod:`.parking`: a task waiting for its domain holds none of the worker's places (still one of its leases);
- :mod:`.domain`: the record of one domain these share, and the wait they refuse (:class:`RateWaitTooLong`);
- :mod:`.limiter`: :class:`DomainLimiter`, the rate, the slots and the adaptive delay over those records.

Shared state lives in Lua scripts on the pool's Redis (``worker/lua``), under the pool's hash tag.
"""

from .domain import RateWaitTooLong
from .limiter import DomainLimiter
from .robots import UNAVAILABLE_SECONDS, RobotsCache

__all__ = ["UNAVAILABLE_SECONDS", "DomainLimiter", "RateWaitTooLong", "RobotsCache"]
