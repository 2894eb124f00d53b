"""When a strictly spaced request left later than its token was due, on Redis's clock: how this worker reads
Redis's clock, and how late is too late.

Redis grants a domain's tokens one interval apart on its own clock (``TIME``), and each script that grants one
returns that clock's ``now`` with it. :class:`RedisClock` turns Redis's times into this worker's monotonic
times: the offset between the two is the least, over recent replies, of (monotonic time the reply was read
- Redis's ``now`` in it), the true offset plus the shortest one-way latency seen. A reply read late (a busy
event loop) only raises that reply's sample, so the least of them still holds; it is kept over a sliding
window (OFFSET_WINDOW to twice that), so a drift of either clock, or a Redis restarted or failed over to
another host, replaces it within the window.

A token's due time read that way is what the request is late against (:func:`too_late`): the reply that
granted it may itself have been read late, which a due time taken as ``monotonic() + wait`` at the read
would hide. Redis's grants are one interval apart and each request leaves at most ``LATE_SHARE`` of an
interval after its own, so two leave at least ``(1 - LATE_SHARE)`` intervals apart, still over ``1 / rate``
(the interval is ``1 / (rate * RATE_SAFETY)``, .rate). A later one asks Redis again (:mod:`.rate`).

A busy worker's requests are late as a rule, not by exception (its loop lags by tens of milliseconds under
CPU pressure), and asking Redis again for each would add a round trip per request just when the worker has
least CPU to spare. So each token a worker takes reserves a margin after its due time (:class:`Lag`: how late
this worker's requests have been leaving lately, at most MAX_MARGIN of an interval): Redis's next token of
the domain is due an interval after the margin, and the request is late only past due time + margin. An
idle worker's margin is about zero; a busy one's costs its domains that much of their rate, not a round trip.
"""

from __future__ import annotations

OFFSET_WINDOW = 10.0  # seconds: the clock offset is the least sample of the last 10 to 20 s
LATE_SHARE = 0.04  # of an interval: how late a request may leave after its token's due time (+ its margin)
MAX_MARGIN = 0.1  # of an interval: the most a token reserves for its request's lateness (that much of the rate)
LAG_FALL = 0.05  # share of the gap a lower lateness takes off the lag (a higher one sets it at once)


class RedisClock:
    """Redis's clock (microseconds, as its scripts return ``TIME``) on this worker's ``time.monotonic()``."""

    __slots__ = ("_best", "_previous", "_window_end", "lag")

    def __init__(self) -> None:
        self.lag = Lag()  # how late this worker's requests leave against that clock (the margin of its tokens)
        self._best = float("inf")  # least sample of the current window
        self._previous = float("inf")  # ... and of the window before it (inf: none, or not the one just before)
        self._window_end = float("-inf")

    def observe(self, redis_us: int, local: float) -> None:
        """A reply carrying Redis's ``now`` (``redis_us``), read at monotonic ``local``."""
        if local >= self._window_end:
            # the window just over is the previous one only when it ended less than a window ago
            self._previous = self._best if local - self._window_end < OFFSET_WINDOW else float("inf")
            self._best = float("inf")
            self._window_end = local + OFFSET_WINDOW
        sample = local - redis_us / 1_000_000
        if sample < self._best:
            self._best = sample

    def local(self, redis_us: int) -> float:
        """Redis's time ``redis_us`` on the monotonic clock (after at least one :meth:`observe`), no earlier
        than it truly is by the shortest one-way latency seen: a lateness read against it errs short by that."""
        return redis_us / 1_000_000 + min(self._best, self._previous)


def too_late(late: float, interval: float) -> bool:
    """Whether a request leaving ``late`` seconds after its token's due time (read with
    :meth:`RedisClock.local`) is too late to keep the domain's interval (seconds) from the next token: by more
    than ``LATE_SHARE`` of an interval."""
    return late > interval * LATE_SHARE


class Lag:
    """How late this worker's strictly spaced requests have been leaving after their tokens' due times: up at
    once to a later one, down slowly (LAG_FALL of the gap per request)."""

    __slots__ = ("seconds",)

    def __init__(self) -> None:
        self.seconds = 0.0

    def seen(self, late: float) -> None:
        """A request left ``late`` seconds after its token's due time (its margin not counted)."""
        if late > self.seconds:
            self.seconds = late
        else:
            self.seconds += LAG_FALL * (late - self.seconds)

    def margin_us(self, interval: float) -> int:
        """The margin (microseconds) a token of a domain with this interval (seconds) reserves."""
        return int(min(max(self.seconds, 0.0), interval * MAX_MARGIN) * 1_000_000)
