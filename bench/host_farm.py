"""The pure parts of ``bench/many_hosts.py``: the farm's hosts (address, latency, politeness limit), the
theoretical maximum pages/s, and the check of a request log against the limits.

Host ``i`` of a farm of ``n`` is the loopback address ``127.1.(i // 250).(1 + i % 250)`` (all of 127/8 is
loopback on Linux; one listening socket on the any-address answers each of them). Its kind comes from its
index, so every size has the same mix:

* ``hard`` (i % 10 == 3): rate-limited hard, 0.5 requests/s, 1 at a time, 50 ms latency;
* ``slow`` (i % 10 == 7): 2 requests/s, 2 at a time, 1.5 s latency (so at most 2 / 1.5 = 1.33 pages/s);
* ``fast`` (the rest): 2 requests/s, 2 at a time, 20 ms latency.

A host's *allowed rate* is min(rate, concurrency / latency): what a perfect crawler gets from it. The
theoretical maximum of a farm is the sum of the allowed rates, capped by the machine (the bare loop's
pages/s on the same farm with no limit and no latency, measured in the same run).

A request log is checked per host against both limits:

* rate: the arrivals must conform to GCRA(T = 1 / rate, tau = ``JITTER``) (ITU-T I.371's virtual
  scheduling: an arrival earlier than its theoretical time minus tau is a violation), so arrivals that left a
  crawler exactly spaced and were bunched by the machine's scheduling by less than tau pass, while any
  sustained excess over the rate, however small, fails. An arrival's time is the kernel's receive timestamp
  of the request (bench/farm_server.py), not the time the farm's loop read it: that loop stalls under load,
  and a request it read late made the next one look early. The farm also logs when its handler ran, so the
  same check on the handler's clock (:func:`handler_clock`) and the handler's delay after the kernel
  (:func:`handler_delays`) say how much a loop-clocked log would have been off;
* concurrency: the requests the farm was serving for the host when one was handled (itself included) must
  never exceed the host's concurrency. This count is the handler's: a request counts from its handler's
  start to its answer, so a farm that is late counts fewer in flight, never more than the client had.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

JITTER = 0.05  # seconds of arrival jitter the rate check tolerates (tau of the GCRA)
HOSTS_PER_OCTET = 250


@dataclass(frozen=True)
class HostLimit:
    kind: str
    rate: float  # requests per second
    concurrency: int
    latency: float  # seconds the farm waits before it answers

    @property
    def allowed(self) -> float:
        """Pages/s a perfect crawler gets from the host: its rate, or fewer when its latency binds first."""
        return min(self.rate, self.concurrency / self.latency)


KINDS: Mapping[str, HostLimit] = {
    "fast": HostLimit("fast", 2.0, 2, 0.02),
    "slow": HostLimit("slow", 2.0, 2, 1.5),
    "hard": HostLimit("hard", 0.5, 1, 0.05),
}


def kind_of(i: int) -> str:
    return {3: "hard", 7: "slow"}.get(i % 10, "fast")


def limit_of(i: int) -> HostLimit:
    return KINDS[kind_of(i)]


def address(i: int) -> str:
    """The loopback address of host ``i`` (never a .0 or .255 octet)."""
    if not 0 <= i < HOSTS_PER_OCTET * 256:
        raise ValueError(f"host {i} out of range")
    return f"127.1.{i // HOSTS_PER_OCTET}.{1 + i % HOSTS_PER_OCTET}"


def index_of(addr: str) -> int | None:
    """The host index of a farm address, None for any other address."""
    parts = addr.split(".")
    if len(parts) != 4 or parts[0] != "127" or parts[1] != "1":
        return None
    hi, lo = int(parts[2]), int(parts[3])
    if not 1 <= lo <= HOSTS_PER_OCTET:
        return None
    return hi * HOSTS_PER_OCTET + lo - 1


def limit_sum(hosts: int) -> float:
    """The sum of the hosts' allowed rates (pages/s)."""
    return sum(limit_of(i).allowed for i in range(hosts))


def theoretical(hosts: int, machine_cap: float) -> float:
    """The theoretical maximum pages/s: the sum of the allowed rates, capped by the machine."""
    return min(limit_sum(hosts), machine_cap)


def pages_per_host(hosts: int, seconds: float, machine_cap: float) -> list[int]:
    """Pages to give each host so that none runs dry within ``seconds`` of a crawl at the theoretical maximum:
    its allowed rate times the duration, scaled down where the machine caps the farm (a host cannot get more
    than its share of the cap) but with 3x headroom over that share, and at least 3."""
    scale = min(1.0, 3 * machine_cap / limit_sum(hosts)) if hosts else 1.0
    return [max(3, math.ceil(limit_of(i).allowed * seconds * scale) + 2) for i in range(hosts)]


class Arrival(NamedTuple):
    """One request in the farm's log."""

    at: float  # when it reached the machine: the kernel's receive timestamp (monotonic seconds)
    in_flight: int  # the host's requests being served when it was handled, itself included
    handled: float  # when the farm's handler got it (monotonic seconds): ``at`` plus the farm's own delay


Log = Mapping[int, Sequence[Arrival]]


@dataclass(frozen=True)
class Violation:
    host: int
    what: str  # "rate" or "concurrency"
    at: float  # arrival time (monotonic seconds)
    detail: str


def rate_violations(host: int, arrivals: Sequence[float], rate: float, tau: float = JITTER) -> list[Violation]:
    """Arrivals (sorted) that do not conform to GCRA(1 / rate, tau): the virtual scheduling algorithm."""
    period = 1.0 / rate
    out: list[Violation] = []
    tat: float | None = None  # theoretical arrival time of the next conforming request
    for t in arrivals:
        if tat is None or t >= tat - tau:
            tat = max(t, tat if tat is not None else t) + period
        else:  # non-conforming: counted, and (as in the GCRA) it does not move the schedule
            out.append(Violation(host, "rate", t, f"{tat - t:.3f}s early at {rate:g}/s"))
    return out


def concurrency_violations(host: int, in_flight: Iterable[tuple[float, int]], limit: int) -> list[Violation]:
    """Arrivals that found the host already serving ``limit`` requests (``in_flight`` counts the arrival)."""
    return [Violation(host, "concurrency", t, f"{n} in flight > {limit}") for t, n in in_flight if n > limit]


def violations(log: Log) -> list[Violation]:
    """Every violation in a farm's request log (host -> its arrivals) against the hosts' limits."""
    out: list[Violation] = []
    for host, entries in log.items():
        lim = limit_of(host)
        out += rate_violations(host, sorted(e.at for e in entries), lim.rate)
        out += concurrency_violations(host, ((e.at, e.in_flight) for e in entries), lim.concurrency)
    return out


def handler_clock(log: Log) -> dict[int, list[Arrival]]:
    """The log as a farm that stamps arrivals in its handler would have kept it: each at its handled time."""
    return {h: [e._replace(at=e.handled) for e in entries] for h, entries in log.items()}


def handler_delays(log: Log) -> list[float]:
    """How long after the kernel received each request the farm's handler got it (seconds, sorted)."""
    return sorted(e.handled - e.at for entries in log.values() for e in entries)


def quantile(xs: Sequence[float], q: float) -> float:
    """The ``q`` quantile of sorted ``xs`` (nearest rank; 0.0 for none)."""
    if not xs:
        return 0.0
    return xs[min(len(xs) - 1, max(0, math.ceil(q * len(xs)) - 1))]


def send_violations(sends: Iterable[tuple[float, str]]) -> list[Violation]:
    """Rate violations in a crawler's own log of when each request left it (time, host address): the same
    GCRA check on the sender's clock, no farm in between (see bench/sendlog)."""
    by_host: dict[int, list[float]] = {}
    for t, addr in sends:
        i = index_of(addr)
        if i is not None:
            by_host.setdefault(i, []).append(t)
    return [v for i, ts in by_host.items() for v in rate_violations(i, sorted(ts), limit_of(i).rate)]


def window_rate(log: Log, start: float, end: float) -> float:
    """Requests per second that arrived in [start, end)."""
    n = sum(1 for entries in log.values() for e in entries if start <= e.at < end)
    return n / (end - start)
