"""Events the operator posts: what a pass decided to tell (Transition), and the aggregated kind.

The reconcile modules return Transitions; the kinds' handlers post them through kopf, except the
recurring reasons, which are aggregated here.

A job that dead-letters URLs over minutes would otherwise post one Warning per status pass (41 for
81 dead letters in one run). Like the kubelet's event series, an aggregated reason keeps one Event per
object, named after it, whose ``count``, ``message`` and ``lastTimestamp`` are updated in place.
"""

from __future__ import annotations

import logging
import os
import socket
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from . import kube

log = logging.getLogger(__name__)

COMPONENT = "trawl-operator"
AGGREGATED = frozenset({"DeadLettered"})
_INSTANCE = os.environ.get("POD_NAME") or socket.gethostname()


@dataclass(frozen=True, slots=True)
class Transition:
    """An Event to post: type Normal/Warning, CamelCase reason, message."""

    type: str
    reason: str
    message: str


def event_name(name: str, uid: str, reason: str) -> str:
    """Stable per object incarnation and reason (names allow 253 characters; object names are shorter)."""
    return f"{name}.{uid[:8]}.{reason.lower()}"[:253]


def event_body(
    involved: dict[str, Any], reason: str, type_: str, message: str, count: int, first: str, now: str
) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": event_name(involved["name"], involved["uid"], reason),
            "namespace": involved["namespace"],
        },
        "involvedObject": involved,
        "reason": reason,
        "type": type_,
        "message": message[:1024],
        "count": count,
        "firstTimestamp": first,
        "lastTimestamp": now,
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "reportingInstance": _INSTANCE[:128],
    }


async def post_aggregated(involved: dict[str, Any], reason: str, type_: str, message: str) -> None:
    """Create the object's Event for ``reason``, or bump its count and message. Best effort: an Event
    that cannot be written is logged, never a reason to fail the reconcile that produced it."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    name = event_name(involved["name"], involved["uid"], reason)
    namespace = involved["namespace"]
    try:
        try:
            await kube.call(
                kube.core().create_namespaced_event,
                namespace,
                event_body(involved, reason, type_, message, 1, now, now),
            )
            return
        except Exception as exc:
            if not kube.is_status(exc, 409):
                raise
        current = kube.to_dict(await kube.call(kube.core().read_namespaced_event, name, namespace))
        patch = {
            "count": int(current.get("count") or 1) + 1,
            "message": message[:1024],
            "lastTimestamp": now,
            "metadata": {"resourceVersion": (current.get("metadata") or {}).get("resourceVersion")},
        }
        await kube.call(kube.core().patch_namespaced_event, name, namespace, patch)
    except Exception as exc:  # a conflict or outage: the next transition updates it again
        log.warning("event %s/%s (%s): %s", namespace, name, reason, kube.api_message(exc))
