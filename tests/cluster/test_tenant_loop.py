"""Issue 32, as the tenant (a job author's rights only): the workers' event loop is the product's. A job whose
regular expression backtracks catastrophically and whose XPath is quartic on a deep page shares a pool with a
neighbour's job; the neighbour's job completes with every record, and the hostile ones end too: the pattern
answered at once (RE2); the slow page, its XPath run in a parser child, is dead-lettered at the parse budget
(its job then Stalled/TasksDeadLettered, as any job with a URL failed for good).

Before RE2, Python's ``re`` would spend about 2^40 steps on the seed's query on the worker's loop: no job
of the pool moved again."""

from __future__ import annotations

from typing import Any

from operator_fixtures import apply, get, job, pool, wait_complete

from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer
from waits import wait_for


def _stalled(cp: ControlPlane, name: str, namespace: str) -> bool:
    """The job ended with its slow page dead-lettered (a job tolerates no dead letter by default)."""
    conditions = (get(cp, "scrapejob", name, namespace).get("status") or {}).get("conditions") or []
    return any(
        c["type"] == "Stalled" and c["status"] == "True" and c["reason"] == "TasksDeadLettered" for c in conditions
    )


CATASTROPHIC = "(a+)+$"
# Each div counts its div ancestors that count theirs: ~N^4/24 steps, past the parse budget at 400 divs.
SLOW_XPATH = "//div[count(ancestor::div[count(ancestor::div[count(ancestor::div) > 0]) > 0]) > 0]"


def test_a_tenants_pattern_and_xpath_bombs_leave_the_pool_working(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    tenant: Any,
    bookstore: Any,
    redis_server: RedisServer,
) -> None:
    apply(control_plane, pool("shared", redis_server.url), namespace=namespace)  # the pool author's
    hostile = bookstore.product_url(1) + "?q=" + "a" * 40 + "!"
    deep = bookstore.url + "/hostile/deep?n=400"
    fields = [{"name": "nested", "selector": SLOW_XPATH, "kind": "XPath", "multiple": True}]
    tenant.apply(
        job("bomb", "shared", [hostile], extract={"onlyMatching": CATASTROPHIC}),
        job("deep", "shared", [deep, bookstore.product_url(12)], extract={"fields": fields}, retry={"maxAttempts": 1}),
    )
    neighbour = [bookstore.product_url(i) for i in range(2, 12)]
    tenant.apply(job("neighbour", "shared", neighbour))
    for name in ("neighbour", "bomb"):
        wait_complete(control_plane, name, namespace, 180, operator.log_tail)
    wait_for(
        "deep Stalled/TasksDeadLettered",
        lambda: _stalled(control_plane, "deep", namespace),
        180,
        diag=operator.log_tail,
    )
    counts = {
        n: get(control_plane, "scrapejob", n, namespace)["status"]["counts"] for n in ("neighbour", "bomb", "deep")
    }
    assert (counts["neighbour"]["succeeded"], counts["neighbour"]["deadLettered"]) == (len(neighbour), 0), counts
    assert (counts["bomb"]["succeeded"], counts["bomb"]["deadLettered"]) == (1, 0), counts  # matched nothing, quickly
    assert (counts["deep"]["succeeded"], counts["deep"]["deadLettered"]) == (1, 1), counts  # the parse budget held
