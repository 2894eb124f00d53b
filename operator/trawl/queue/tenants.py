"""The tenant table as the claim script reads it, and a tenant's usage as the queue reports it.

A pool's claims are shared among tenants (the teams that submit jobs) by weight, and bounded per tenant by
its quotas: claim.lua enforces both (see docs/architecture.md, "Tenants"). This module only encodes the
table the operator writes (``P:tcfg``) and decodes what the script keeps per tenant (``P:tn:<t>``), so the
operator, ``trawl top`` and the tests read one format.
"""

from __future__ import annotations

from collections.abc import Mapping

from .model import TenantLimits, TenantUsage


def _opt(value: float | None) -> str:
    return "" if value is None else repr(value) if isinstance(value, float) else str(value)


def encode_limits(limits: TenantLimits) -> str:
    """One tenant's row: "weight|in-flight|requests per second|pages per day|URLs queued|browser seconds per
    day" (empty: no limit). The scripts read the fields they enforce by position, so a field is only ever
    added at the end: rows written before it came decode with that limit off."""
    if limits.weight < 1:
        raise ValueError("a tenant's weight must be at least 1")
    return "|".join(
        (
            str(limits.weight),
            _opt(limits.max_in_flight),
            _opt(limits.requests_per_second),
            _opt(limits.pages_per_day),
            _opt(limits.max_queued),
            _opt(limits.browser_seconds_per_day),
        )
    )


def decode_limits(row: str | None) -> TenantLimits:
    if not row:
        return TenantLimits()
    weight, inflight, rps, ppd, queued, bspd = [*row.split("|"), "", "", "", "", ""][:6]
    return TenantLimits(
        weight=int(weight or 1),
        max_in_flight=int(inflight) if inflight else None,
        requests_per_second=float(rps) if rps else None,
        pages_per_day=int(ppd) if ppd else None,
        max_queued=int(queued) if queued else None,
        browser_seconds_per_day=float(bspd) if bspd else None,
    )


def check_tenant_name(name: str) -> str:
    """Tenant names become key names and fields of the table: none may be empty, "*", "aging" or hold
    the separators of keys and rows."""
    if name in ("*", "aging") or any(c in name for c in "{}|:") or len(name) > 253:
        raise ValueError(f"invalid tenant name: {name!r}")
    return name


def tenant_usage_of(name: str, row: Mapping[str, str], table: Mapping[str, str], today: int) -> TenantUsage:
    """A tenant's usage from its ``P:tn:<t>`` hash; ``today`` is the UTC day number (unix seconds // 86400):
    the day's count of an earlier day is 0."""
    limits = decode_limits(table.get(name) or table.get("*"))
    hold = row.get("hold") or None
    return TenantUsage(
        tenant=name,
        weight=limits.weight,
        in_flight=max(0, int(row.get("clm", 0) or 0) - int(row.get("out", 0) or 0)),
        claimed_total=int(row.get("clm", 0) or 0),
        pages_today=int(row.get("pd", 0) or 0) if int(row.get("day", -1) or -1) == today else 0,
        throttled=hold,
        throttled_message=row.get("hm", "") if hold else "",
        throttled_since=float(row["hs"]) if hold and row.get("hs") else None,
        queued=max(0, int(row.get("qin", 0) or 0) - int(row.get("clm", 0) or 0)),
        queue_full_message=row.get("qhm", "") if row.get("qhold") else "",
        queue_full_since=float(row["qhs"]) if row.get("qhold") and row.get("qhs") else None,
        # bday/bms: the UTC day of the browser milliseconds and their sum (add_browser_seconds.lua)
        browser_seconds_today=int(row.get("bms", 0) or 0) / 1000 if int(row.get("bday", -1) or -1) == today else 0.0,
    )
