"""How a ScrapeJob's pages are loaded: plain HTTP fetching (the default) or rendering in a headless browser."""

from __future__ import annotations

from enum import StrEnum
from typing import Self

from pydantic import Field, field_validator, model_validator

from .common import TrawlModel
from .patterns import SYNTAX as PATTERN_SYNTAX
from .patterns import check as check_pattern
from .patterns import compiled as compiled_pattern
from .plain import RenderMode as RenderMode  # plain Python: read by the workers without pydantic


class RenderWait(StrEnum):
    LOAD = "Load"
    NETWORK_IDLE = "NetworkIdle"
    SELECTOR = "Selector"
    DELAY = "Delay"


class BlockedResource(StrEnum):
    IMAGE = "image"
    FONT = "font"
    MEDIA = "media"
    STYLESHEET = "stylesheet"


class RenderSpec(TrawlModel):
    """Load pages in headless Chromium before extraction (for sites that build their content with JavaScript).

    The rendered HTML goes through the same extraction rules as a fetched page. Every request the page
    makes passes the workers' address policy, robots.txt and the rate limit apply to the page URL.
    """

    mode: RenderMode = Field(
        default=RenderMode.FETCH,
        description="Fetch (plain HTTP, the fast default) or Browser (headless Chromium; the pool's workers must "
        "run the browser image).",
    )
    wait_for: RenderWait = Field(
        default=RenderWait.LOAD,
        description="When the page counts as rendered: Load (the load event), NetworkIdle (no request for 500 ms), "
        "Selector (an element matching `selector` exists) or Delay (delaySeconds after the load event).",
    )
    selector: str | None = Field(
        default=None, min_length=1, max_length=1024, description="CSS selector waited for (waitFor Selector)."
    )
    delay_seconds: float = Field(default=0, ge=0, le=60, description="Pause after the load event (waitFor Delay).")
    timeout_seconds: float = Field(
        default=30,
        ge=1,
        le=300,
        description="Time cap of one page render. A page still busy at the cap (NetworkIdle or Delay) is taken as "
        "it is then; a selector that never appears fails the attempt with class Timeout.",
    )
    screenshot: bool = Field(
        default=False, description="Add a PNG screenshot of the viewport (base64) to each record as `screenshot`."
    )
    only_matching: str | None = Field(
        default=None,
        max_length=512,
        description=f"Regular expression in {PATTERN_SYNTAX}; only URLs that match are rendered in the browser, "
        "the others are fetched plainly (e.g. render the script-built listings of a crawl, fetch its static "
        "product pages).",
    )
    block_resources: list[BlockedResource] | None = Field(
        default=None,
        max_length=4,
        description="Resource types not loaded at all: image, font, media, stylesheet (faster, less traffic).",
    )

    @model_validator(mode="after")
    def _selector_for_selector_wait(self) -> Self:
        if self.wait_for == RenderWait.SELECTOR and not self.selector:
            raise ValueError("render.selector is required when render.waitFor is Selector")
        return self

    @field_validator("only_matching")
    @classmethod
    def _valid_regex(cls, value: str | None) -> str | None:
        return check_pattern(value) if value else value

    @property
    def browser(self) -> bool:
        return self.mode == RenderMode.BROWSER

    def applies(self, url: str) -> bool:
        """Whether ``url`` is rendered in the browser (mode Browser and, if set, onlyMatching matches)."""
        return self.browser and (not self.only_matching or compiled_pattern(self.only_matching).search(url))


class BrowserWorkerSpec(TrawlModel):
    """The pool's workers render pages in headless Chromium (run the browser worker image)."""

    pages_per_browser: int = Field(
        default=8,
        ge=1,
        le=64,
        description="Pages rendered at once per worker, each in its own browser context (set worker.concurrency "
        "to the same number: tasks beyond it only wait for a page).",
    )
    memory_limit_mib: int = Field(
        default=1024,
        ge=64,
        le=65536,
        alias="memoryLimitMiB",
        description="The browser is replaced once its processes use more memory than this (PSS, MiB); keep it "
        "below the container's memory limit.",
    )

    def env(self) -> list[dict[str, str]]:
        """The worker's environment for these settings (read by trawl.worker.browser.settings)."""
        return [
            {"name": "TRAWL_BROWSER_PAGES", "value": str(self.pages_per_browser)},
            {"name": "TRAWL_BROWSER_MEMORY_MIB", "value": str(self.memory_limit_mib)},
        ]
