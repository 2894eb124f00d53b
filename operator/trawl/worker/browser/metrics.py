"""Prometheus metrics of browser rendering, registered on the worker's registry."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram


class BrowserMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        r = registry
        self.renders = Counter(
            "trawl_worker_browser_renders_total",
            "Pages rendered in the browser by outcome (ok, timed_out: taken at the time cap, or a failure class).",
            ["outcome"],
            registry=r,
        )
        self.render_seconds = Histogram(
            "trawl_worker_browser_render_seconds",
            "Time to render a page (navigation, waits and snapshot).",
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
            registry=r,
        )
        self.blocked = Counter(
            "trawl_worker_browser_blocked_requests_total",
            "Requests of rendered pages refused by the address policy.",
            registry=r,
        )
        self.aborted = Counter(
            "trawl_worker_browser_aborted_requests_total",
            "Requests of rendered pages not made: blocked resource types, disallowed navigations.",
            ["reason"],
            registry=r,
        )
        self.restarts = Counter(
            "trawl_worker_browser_restarts_total",
            "Browser processes replaced, by reason (crash, memory).",
            ["reason"],
            registry=r,
        )
        self.browsers = Gauge("trawl_worker_browsers", "Browser processes running.", registry=r)
        self.pages = Gauge("trawl_worker_browser_pages", "Pages being rendered now.", registry=r)
        self.contexts = Gauge(
            "trawl_worker_browser_contexts",
            "Browser contexts open now (one per job and identity rendering).",
            registry=r,
        )
        self.contexts_opened = Counter(
            "trawl_worker_browser_contexts_opened_total",
            "Browser contexts opened (each shared by the pages of one job as one identity, up to a bound).",
            registry=r,
        )
        self.memory = Gauge(
            "trawl_worker_browser_memory_bytes",
            "Memory (PSS) of the current browser's processes, measured after renders.",
            registry=r,
        )
        self.memory_per_page = Gauge(
            "trawl_worker_browser_memory_per_page_bytes",
            "The current browser's memory divided by the pages open at the time of the measurement.",
            registry=r,
        )
