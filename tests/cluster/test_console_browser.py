"""The web console (trawl.resultsapi.console) in real headless Chromium (Debian's package, through Playwright)
against a real kube-apiserver: `trawl operator --api-port … --console`, users with their own tokens and RBAC.

This is the cluster layer (the console needs the API server for TokenReview, SubjectAccessReview and the
objects); the tests skip without Chromium or Playwright, as the browser layer does. No workers run: the test
moves the queue itself (claims, acks, fails) as workers would, and the operator turns that into the status
the console shows live."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import redis
from operator_fixtures import apply, get, job, pool
from test_results_api import READ, RETRY, User, dead_letter_one, make_user, stream_key
from typer.testing import CliRunner

from tlscerts import issue_tls
from trawl.api.naming import queue_prefix
from trawl.cli import app
from trawl.dev.controlplane import ControlPlane
from trawl.dev.operator_process import OperatorProcess, rbac_objects
from trawl.dev.procs import free_port
from trawl.dev.redis_server import RedisServer
from trawl.queue import Queue
from trawl.worker.browser.settings import find_chromium, needs_no_sandbox
from waits import wait_for

playwright_sync = pytest.importorskip("playwright.sync_api")
if find_chromium() is None:
    pytest.skip("no Chromium: install Debian's chromium package (hack/bootstrap.sh)", allow_module_level=True)

T = TypeVar("T")
IMAGES = Path(__file__).resolve().parents[2] / "docs" / "images"
# what a tenant has on its jobs and pools: enough to list them, not to read results or retry
VIEW = [
    {"apiGroups": ["trawl.dev"], "resources": ["scrapejobs", "scrapepools", "cronscrapejobs"],
     "verbs": ["get", "list", "watch"]},
    {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
]  # fmt: skip


@contextlib.contextmanager
def console_served(
    cp: ControlPlane, namespaces: list[str], logs: Path, tls: tuple[Path, Path] | None = None
) -> Iterator[str]:
    """`trawl operator --api-port --console` watching ``namespaces``, as its ServiceAccount: the console's URL."""
    home = namespaces[0]
    apply(cp, *rbac_objects(home, "trawl-operator", namespaces))
    port = free_port()
    tls_args = ["--api-tls-cert", str(tls[0]), "--api-tls-key", str(tls[1])] if tls else []
    proc = OperatorProcess(
        cp.service_account_kubeconfig(home, "trawl-operator"), namespaces, logs / "operator.log",
        env={"TRAWL_JOB_SYNC_SECONDS": "0.5", "TRAWL_CONSOLE_INTERVAL_SECONDS": "0.25"},
        extra_args=["--api-port", str(port), "--console", *tls_args],
    )  # fmt: skip
    proc.start()
    try:
        wait_for("the console to listen", lambda: "web console at" in proc.log_tail(200), 60, diag=proc.log_tail)
        yield f"{'https' if tls else 'http'}://127.0.0.1:{port}"
    finally:
        proc.stop()
        print(f"--- operator log tail:\n{proc.log_tail(60)}")


@pytest.fixture
def other_namespace(control_plane: ControlPlane, namespace: str) -> Iterator[str]:
    name = f"{namespace[:50]}-b"
    control_plane.create_namespace(name)
    try:
        yield name
    finally:
        control_plane.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)


@pytest.fixture
def browser() -> Iterator[Any]:
    executable = find_chromium()
    with playwright_sync.sync_playwright() as pw:
        launched = pw.chromium.launch(
            executable_path=executable, headless=True, args=["--no-sandbox"] if needs_no_sandbox() else [],
            timeout=60_000,
        )  # fmt: skip
        try:
            yield launched
        finally:
            launched.close()


def signed_in(browser: Any, url: str, user: User, **context: Any) -> Any:
    """A fresh browser context signed in through the login form with the user's pasted token."""
    page = browser.new_context(viewport={"width": 1280, "height": 800}, **context).new_page()
    page.set_default_timeout(30_000)
    page.goto(f"{url}/console/")
    assert page.url.endswith("/console/login")
    page.get_by_label("Kubernetes bearer token").fill(user.token)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url("**/console/jobs")
    return page


def hourly() -> dict[str, Any]:
    spec = {"schedule": "0 * * * *", "jobTemplate": {"spec": {"pool": "shop", "urls": ["http://127.0.0.1:9/"]}}}
    return {"apiVersion": "trawl.dev/v1alpha1", "kind": "CronScrapeJob", "metadata": {"name": "hourly"}, "spec": spec}


def next_of(cp: ControlPlane, namespace: str) -> str:
    return str((get(cp, "cronscrapejob", "hourly", namespace).get("status") or {}).get("nextScheduleTime") or "")


def counts(cp: ControlPlane, name: str, namespace: str) -> dict[str, Any]:
    return dict((get(cp, "scrapejob", name, namespace).get("status") or {}).get("counts") or {})


def off_loop(fn: Callable[..., T], *args: Any) -> T:
    """``fn`` in a thread of its own: Playwright's sync API keeps an event loop running in this one."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool_:
        return pool_.submit(fn, *args).result(timeout=120)


def move_queue(redis_url: str, namespace: str, ack: int) -> None:
    """As workers would: claim ``ack`` tasks and finish them."""

    async def run() -> None:
        client = redis.asyncio.Redis.from_url(redis_url)
        try:
            queue = Queue(client, queue_prefix(namespace, "shop"))
            for task in await queue.claim("test-worker", ack):
                assert await queue.ack(task, "test-worker")
        finally:
            await client.aclose()

    asyncio.run(run())


def fetch(url: str, method: str = "GET", headers: dict[str, str] | None = None, data: bytes | None = None) -> Any:
    request = urllib.request.Request(url, method=method, headers=headers or {}, data=data)
    opener = urllib.request.build_opener(NoRedirect())
    try:
        return opener.open(request, timeout=30)
    except urllib.error.HTTPError as exc:
        return exc


class NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


def test_a_reader_sees_only_their_namespace_and_no_retry_button(
    control_plane: ControlPlane, namespace: str, other_namespace: str, redis_server: RedisServer,
    browser: Any, tmp_path: Path,
) -> None:  # fmt: skip
    cp = control_plane
    redis.Redis.from_url(redis_server.url).flushall()
    for ns, name in ((namespace, "books"), (other_namespace, "secret-crawl")):
        apply(cp, pool("shop", redis_server.url), namespace=ns)
        apply(cp, job(name, "shop", [f"http://127.0.0.1:9/{i}" for i in range(4)]), namespace=ns)
        apply(cp, hourly(), namespace=ns)
    reader = make_user(cp, namespace, "reader", READ + VIEW)
    with console_served(cp, [namespace, other_namespace], tmp_path) as url:
        wait_for("the operator to enqueue", lambda: counts(cp, "books", namespace).get("total") == 4, 60)
        off_loop(
            dead_letter_one, redis_server.url, namespace, get(cp, "scrapejob", "books", namespace)["metadata"]["uid"]
        )
        # the pages' rules, seen from outside a browser: a login page without a token, headers, CSRF
        answer = fetch(f"{url}/console/jobs")
        assert (answer.status, answer.headers["Location"]) == (303, "/console/login")
        answer = fetch(f"{url}/console/jobs", headers={"Authorization": f"Bearer {reader.token}"})
        assert answer.status == 200
        csp = answer.headers["Content-Security-Policy"]
        assert "script-src 'self'" in csp and "frame-ancestors 'none'" in csp and "unsafe-inline" not in csp
        assert answer.headers["X-Frame-Options"] == "DENY" and answer.headers["X-Content-Type-Options"] == "nosniff"
        assert answer.headers["Referrer-Policy"] == "no-referrer"
        body = answer.read().decode()
        assert "<script>" not in body and reader.token not in body and "redis://" not in body
        forged = fetch(
            f"{url}/console/jobs/{namespace}/books/retry", "POST", data=b"csrf=forged",
            headers={"Authorization": f"Bearer {reader.token}", "Content-Type": "application/x-www-form-urlencoded",
                     "Origin": "https://evil.example"},
        )  # fmt: skip
        assert forged.status == 403

        page = signed_in(browser, url, reader)
        jobs = page.get_by_role("table", name="ScrapeJobs")
        playwright_sync.expect(jobs.get_by_role("link", name="books")).to_be_visible()
        assert "secret-crawl" not in page.content() and other_namespace not in page.content()
        playwright_sync.expect(page.locator("#live-state")).to_contain_text("live", timeout=15_000)
        cookie = next(c for c in page.context.cookies() if c["name"] == "trawl_console_token")
        assert cookie["httpOnly"] and cookie["sameSite"] == "Strict"

        page.get_by_role("link", name="books").click()
        page.wait_for_url(f"**/console/jobs/{namespace}/books")
        playwright_sync.expect(page.get_by_role("table", name="Dead letters")).to_contain_text("HTTP 404")
        assert page.locator("#retry").count() == 0, "a reader gets no retry button"
        # the other namespace's job: refused, nothing about it shown
        answer = page.goto(f"{url}/console/jobs/{other_namespace}/secret-crawl")
        assert answer is not None and answer.status == 403

        # CronScrapeJobs with their next run, this namespace's only
        next_run = f'td[data-live="cron/{namespace}/hourly/next"]'
        wait_for("the next run on the status", lambda: next_of(cp, namespace), 60)
        page.goto(f"{url}/console/crons")
        playwright_sync.expect(page.locator(next_run)).to_have_text(next_of(cp, namespace))
        assert other_namespace not in page.content()
        # the keyboard: the first Tab reaches the skip link, which leads to the content
        page.keyboard.press("Tab")
        assert page.evaluate("document.activeElement.textContent") == "Skip to content"
        page.close()

        # behind an OIDC proxy: the Authorization header it adds is the identity, no sign-in, no log-out button
        proxied = browser.new_context(extra_http_headers={"Authorization": f"Bearer {reader.token}"}).new_page()
        proxied.goto(f"{url}/console/jobs")
        playwright_sync.expect(proxied.get_by_role("link", name="books")).to_be_visible()
        assert proxied.get_by_role("button", name="Log out").count() == 0
        proxied.close()


def test_a_retrier_retries_and_sees_the_count_change_live(
    control_plane: ControlPlane, namespace: str, redis_server: RedisServer, browser: Any, tmp_path: Path
) -> None:
    cp = control_plane
    redis.Redis.from_url(redis_server.url).flushall()
    apply(cp, pool("shop", redis_server.url), namespace=namespace)
    apply(cp, job("books", "shop", [f"http://127.0.0.1:9/{i}" for i in range(4)]), namespace=namespace)
    retrier = make_user(cp, namespace, "retrier", RETRY + VIEW)
    with console_served(cp, [namespace], tmp_path) as url:
        wait_for("the operator to enqueue", lambda: counts(cp, "books", namespace).get("total") == 4, 60)
        off_loop(
            dead_letter_one, redis_server.url, namespace, get(cp, "scrapejob", "books", namespace)["metadata"]["uid"]
        )
        dead_lettered = lambda: counts(cp, "books", namespace).get("deadLettered") == 1  # noqa: E731
        wait_for("the dead letter on the status", dead_lettered, 60)
        page = signed_in(browser, url, retrier)
        page.goto(f"{url}/console/jobs/{namespace}/books")
        dead = page.locator(f'dd[data-live="job/{namespace}/books/deadLettered"]')
        playwright_sync.expect(dead).to_have_text("1")
        playwright_sync.expect(page.locator("#live-state")).to_contain_text("live", timeout=15_000)
        page.evaluate("window.notReloaded = true")
        page.get_by_label("also permanent failures (4xx, blocked)").check()
        clicked = time.monotonic()
        page.get_by_role("button", name="Retry dead letters").click()
        playwright_sync.expect(dead).to_have_text("0", timeout=2_000)
        took = time.monotonic() - clicked
        assert page.evaluate("window.notReloaded") is True, "the page was not reloaded"
        print(f"dead-letter count changed {took:.2f} s after the click")
        page.close()


def test_progress_moves_live_and_the_preview_matches_trawl_results(
    control_plane: ControlPlane, namespace: str, redis_server: RedisServer, browser: Any, tmp_path: Path
) -> None:
    cp = control_plane
    redis.Redis.from_url(redis_server.url).flushall()
    apply(cp, pool("shop", redis_server.url), namespace=namespace)
    apply(cp, job("books", "shop", [f"http://127.0.0.1:9/{i}" for i in range(4)]), namespace=namespace)
    reader = make_user(cp, namespace, "reader", READ + VIEW)
    with console_served(cp, [namespace], tmp_path) as url:
        wait_for("the operator to enqueue", lambda: counts(cp, "books", namespace).get("total") == 4, 60)
        uid = get(cp, "scrapejob", "books", namespace)["metadata"]["uid"]
        client = redis.Redis.from_url(redis_server.url)
        for i in range(7):
            record = {"url": f"http://shop/{i}", "title": f"Book «{i}» <b>", "price": i * 1.5}
            client.xadd(stream_key(namespace, uid), {"url": record["url"], "data": json.dumps(record)})
        page = signed_in(browser, url, reader)
        page.goto(f"{url}/console/jobs/{namespace}/books")
        bar = page.locator(f'progress[data-live="job/{namespace}/books/progress"]')
        playwright_sync.expect(bar).to_have_attribute("value", "0")
        playwright_sync.expect(page.locator("#live-state")).to_contain_text("live", timeout=15_000)
        page.evaluate("window.notReloaded = true")
        off_loop(move_queue, redis_server.url, namespace, 2)
        playwright_sync.expect(bar).to_have_attribute("value", "50", timeout=15_000)
        off_loop(move_queue, redis_server.url, namespace, 2)
        playwright_sync.expect(bar).to_have_attribute("value", "100", timeout=15_000)
        assert page.evaluate("window.notReloaded") is True

        # the preview is what `trawl results` prints, record for record
        shown = [json.loads(line) for line in page.locator("#preview").inner_text().splitlines()]
        argv = ["results", "books", "--api-url", url, "--kubeconfig", str(reader.kubeconfig), "-n", namespace]
        out = off_loop(CliRunner().invoke, app, argv)
        assert out.exit_code == 0, out.output
        assert shown == [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
        with page.expect_download() as download:
            page.get_by_role("link", name="Download all results (JSON Lines)").click()
        lines = Path(download.value.path()).read_text().splitlines()
        assert [json.loads(line) for line in lines] == shown

        IMAGES.mkdir(parents=True, exist_ok=True)
        page.reload()  # conditions and Events are drawn with the page (only the figures are live)
        page.screenshot(path=str(IMAGES / "console-job.png"), full_page=True)
        page.goto(f"{url}/console/pools")
        playwright_sync.expect(page.get_by_role("table", name="ScrapePools")).to_contain_text("shop")
        page.screenshot(path=str(IMAGES / "console-pools.png"))
        phone = browser.new_context(viewport={"width": 390, "height": 844}, is_mobile=True)
        phone.add_cookies(page.context.cookies())
        small = phone.new_page()
        small.goto(f"{url}/console/jobs/{namespace}/books")
        width = small.evaluate("document.documentElement.scrollWidth")
        assert width <= 390, f"the job page scrolls sideways on a phone ({width} px)"
        phone.close()
        page.close()


def test_over_https_the_cookie_is_secure_and_the_page_stays_live(
    control_plane: ControlPlane, namespace: str, redis_server: RedisServer, browser: Any, tmp_path: Path
) -> None:
    cp = control_plane
    redis.Redis.from_url(redis_server.url).flushall()
    apply(cp, pool("shop", redis_server.url), namespace=namespace)
    apply(cp, job("books", "shop", [f"http://127.0.0.1:9/{i}" for i in range(2)]), namespace=namespace)
    reader = make_user(cp, namespace, "reader", READ + VIEW)
    _, cert, key = issue_tls(tmp_path)
    with console_served(cp, [namespace], tmp_path, tls=(cert, key)) as url:
        assert url.startswith("https://")
        page = signed_in(browser, url, reader, ignore_https_errors=True)
        cookie = next(c for c in page.context.cookies() if c["name"] == "trawl_console_token")
        assert cookie["secure"] and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
        playwright_sync.expect(page.locator("#live-state")).to_contain_text("live", timeout=15_000)
        total = page.locator(f'td[data-live="job/{namespace}/books/total"]')
        playwright_sync.expect(total).to_have_text("2", timeout=30_000)
        page.get_by_role("button", name="Log out").click()
        page.wait_for_url("**/console/login")
        assert not [c for c in page.context.cookies() if c["name"] == "trawl_console_token"]
        page.close()
