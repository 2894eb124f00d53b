"""Errors of browser rendering the runner handles, in a module of their own so that a worker that never
renders does not import the browser pool to catch them."""

from __future__ import annotations

from trawl.api.plain import FailureClass

from ..fetch import FetchError


class BrowserCrashed(FetchError):
    """The browser (or the page's renderer process) died while rendering: not the site's fault."""

    def __init__(self, url: str, detail: str) -> None:
        super().__init__(FailureClass.CONNECTION, f"browser crashed while rendering {url}: {detail}", url=url)
