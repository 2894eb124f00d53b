"""Prometheus metrics of one worker process, on their own registry (served on the metrics port)."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app


class ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True


class _V6Server(ThreadingWSGIServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # probes every few seconds: not worth a line
        return


class WorkerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry()
        r = self.registry
        self.fetches = Counter(
            "trawl_worker_fetches_total", "Fetches by outcome (ok or a failure class).", ["outcome"], registry=r
        )
        self.proxy_requests = Counter(
            "trawl_worker_proxy_requests_total",
            "Fetches through an upstream proxy by group, proxy (host:port, never credentials) and outcome: ok, "
            "proxy_error (the proxy failed: refused, unreachable, 407), busy (every proxy at its limit), "
            "blocked (the job's session.block rules) or the fetch's failure class.",
            ["group", "proxy", "outcome"],
            registry=r,
        )
        self.blocked = Counter(
            "trawl_worker_blocked_total",
            "Responses a job's session.block rules marked blocked (their session retired).",
            registry=r,
        )
        self.fetch_seconds = Histogram(
            "trawl_worker_fetch_seconds",
            "Time to fetch a page, redirects included.",
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
            registry=r,
        )
        self.task_seconds = Histogram(
            "trawl_worker_task_seconds",
            "Time from claim to ack/fail/release of a task.",
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60),
            registry=r,
        )
        self.bytes = Counter("trawl_worker_response_bytes_total", "Response body bytes, decompressed.", registry=r)
        self.wire_bytes = Counter("trawl_worker_wire_bytes_total", "Response body bytes as received.", registry=r)
        self.in_flight = Gauge(
            "trawl_worker_in_flight",
            "Tasks this worker holds a lease on: claimed and waiting for a slot, being processed, or waiting "
            "for their results to be stored (what its heartbeat reports to the autoscaler).",
            registry=r,
        )
        self.claims = Counter("trawl_worker_claimed_tasks_total", "Tasks claimed.", registry=r)
        self.claim_calls = Counter("trawl_worker_claim_calls_total", "Claim round trips.", ["result"], registry=r)
        self.outcomes = Counter(
            "trawl_worker_task_outcomes_total", "Task outcomes: acked, failed, dead, released.", ["outcome"], registry=r
        )
        self.deferrals = Counter(
            "trawl_worker_rate_limit_deferrals_total",
            "Tasks given back with a delay because of Retry-After, a rate limit, a failed upstream proxy "
            "(reason proxy) or a blocked identity (reason blocked).",
            ["reason"],
            registry=r,
        )
        self.rate_waits = Counter(
            "trawl_worker_rate_limit_wait_seconds_total", "Seconds spent waiting for a domain's rate.", registry=r
        )
        self.late_sends = Counter(
            "trawl_worker_late_sends_total",
            "Strictly spaced requests that left too late after their token (one more rate round trip each), by "
            "outcome: moved (sent, the domain's timeline moved), retaken (a fresh token waited for), deferred "
            "(given back: a fresh token past the deadline).",
            ["outcome"],
            registry=r,
        )
        self.results = Counter("trawl_worker_results_written_total", "Result records written.", registry=r)
        self.refresh = Counter(
            "trawl_worker_refresh_pages_total",
            "Refresh jobs' pages by what changed since the lineage's last run (new, changed, unchanged, gone).",
            ["change"],
            registry=r,
        )
        self.duplicates = Counter(
            "trawl_worker_duplicate_records_total",
            "Records not written because their (job, URL) was stored already: a redelivered task's second "
            "fetch (after a lost ack, an expired lease, a Redis failover), a write retried after its reply was "
            "lost, or its job was cancelled meanwhile.",
            registry=r,
        )
        self.discovered = Counter("trawl_worker_links_enqueued_total", "Crawl links enqueued.", registry=r)
        self.skipped = Counter(
            "trawl_worker_skipped_total", "Discovered URLs skipped without a fetch, by reason.", ["reason"], registry=r
        )
        self.sink_retries = Counter(
            "trawl_worker_sink_retries_total", "Record writes retried after a sink failure.", registry=r
        )
        self.sink_failed = Counter(
            "trawl_worker_sink_failed_total", "Tasks dead-lettered as SinkFailed (retry budget spent).", registry=r
        )
        self.parse_limits = Counter(
            "trawl_worker_parse_limits_total", "Pages dead-lettered as ParseLimit (size, tags, time).", registry=r
        )
        self.format_seconds = Histogram(
            "trawl_worker_format_seconds",
            "Time one output format (extract.formats) took on one page, in a parser process.",
            ["format"],
            buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
            registry=r,
        )
        self.format_truncated = Counter(
            "trawl_worker_format_truncated_total",
            "Records with an output format cut to its bounds, or left out (failed, over its time).",
            ["format"],
            registry=r,
        )
        self.circuit_open = Gauge(
            "trawl_worker_circuit_open",
            "1 for each domain whose circuit breaker this worker last saw open.",
            ["domain"],
            registry=r,
        )
        self.draining = Gauge("trawl_worker_draining", "1 while the worker drains after SIGTERM.", registry=r)
        self.cordoned = Gauge(
            "trawl_worker_cordoned",
            "1 while the autoscaler has cordoned the worker: it claims nothing new.",
            registry=r,
        )

    def rate_waited(self, domain: str, wait: float) -> None:
        """The rate limit's ``on_wait``: a task waits ``wait`` seconds for a token of ``domain``."""
        self.rate_waits.inc(wait)

    def sent_late(self, outcome: str) -> None:
        """The rate limit's ``on_late``: a request left too late after its token (politeness.rate)."""
        self.late_sends.labels(outcome).inc()

    def set_open_circuits(self, domains: Iterable[str]) -> None:
        self.circuit_open.clear()
        for domain in domains:
            self.circuit_open.labels(domain).set(1)

    def serve(self, port: int, addr: str = "0.0.0.0", live: Callable[[], str | None] | None = None) -> None:
        """Serve /metrics (and /livez) on ``port`` from a daemon thread until :meth:`shutdown`.

        ``/livez`` answers 200, or 503 with the reason ``live`` returns: the endpoint runs in its own
        thread, so it answers even while the event loop is stuck, which is what the liveness probe needs
        (``/metrics`` answering says nothing about the loop)."""
        metrics_app = make_wsgi_app(self.registry)

        def app(environ: dict[str, Any], start_response: Any) -> Any:
            if environ.get("PATH_INFO") == "/livez":
                problem = live() if live is not None else None
                status = "503 Service Unavailable" if problem else "200 OK"
                start_response(status, [("Content-Type", "text/plain; charset=utf-8")])
                return [((problem or "ok") + "\n").encode()]
            return metrics_app(environ, start_response)

        server_class = _V6Server if ":" in addr else ThreadingWSGIServer
        server = make_server(addr, port, app, server_class, handler_class=_QuietHandler)
        thread = threading.Thread(target=server.serve_forever, name="metrics", daemon=True)
        thread.start()
        self._server: Any = server

    def shutdown(self) -> None:
        server = getattr(self, "_server", None)
        if server is not None:
            server.shutdown()
            server.server_close()
            self._server = None
