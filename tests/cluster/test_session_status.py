"""Sessions end to end: a job with spec.session on the pool's workers (supervisor-run processes) against the
bookstore, whose 404 page the job's block rules call a block: the operator shows counts.blocked and
blockedDomains on the job's status, and the blocked page's dead letter has class Blocked. About 15 s."""

from __future__ import annotations

from typing import Any

from operator_fixtures import apply, get, job, pool, wait_complete

from trawl.dev.controlplane import ControlPlane
from trawl.dev.redis_server import RedisServer


def test_blocked_responses_are_counted_on_the_jobs_status(
    control_plane: ControlPlane,
    namespace: str,
    operator: Any,
    supervisor: Any,
    bookstore: Any,
    redis_server: RedisServer,
) -> None:
    apply(control_plane, pool("sess", redis_server.url), namespace=namespace)
    urls = [*list(bookstore.expected())[:3], f"{bookstore.url}/hostile/404"]
    session = {"poolSize": 2, "block": {"statusCodes": [404]}, "maxBlockedRetries": 1}
    body = job("walled", "sess", urls, session=session, retry={"maxAttempts": 1}, maxDeadLetters=1)
    apply(control_plane, body, namespace=namespace)
    wait_complete(control_plane, "walled", namespace, 120, operator.log_tail)
    status = get(control_plane, "scrapejob", "walled", namespace)["status"]
    host = bookstore.url.split("://", 1)[1]
    assert status["counts"]["succeeded"] == 3 and status["counts"]["deadLettered"] == 1, status
    # One free try on another identity per worker, then the one attempt: at least two blocks.
    assert status["counts"]["blocked"] >= 2, status
    assert status["blockedDomains"] == [{"domain": host, "blocked": status["counts"]["blocked"]}], status
    (dead,) = status["deadLetters"]
    assert dead["errorClass"] == "Blocked" and "HTTP 404" in dead["lastError"], dead
