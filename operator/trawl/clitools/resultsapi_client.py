"""The CLI's side of the results API (trawl.resultsapi): pages of a job's records, its dead letters, a retry,
asked with the kubeconfig's own bearer token, so the caller needs RBAC on the job but no Redis password."""

from __future__ import annotations

import json
import os
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import urllib3

from trawl.queue.model import DeadLetterRecord

from .exits import EXIT_FAILED, EXIT_FORBIDDEN, EXIT_NOT_FOUND, EXIT_OTHER_SINK, EXIT_REDIS, EXIT_UNREACHABLE, CliError

CURSOR_HEADER = "Trawl-Next-Cursor"  # as trawl.resultsapi.server sets it
PAGE = 5000
RATE_LIMITED_RETRIES = 10
TIMEOUT = 30.0
_EXITS = {401: EXIT_FORBIDDEN, 403: EXIT_FORBIDDEN, 404: EXIT_NOT_FOUND, 409: EXIT_OTHER_SINK, 503: EXIT_REDIS}


def bearer_from_configuration(configuration: Any) -> str | None:
    """The bearer token the kubernetes client would send (a token, or one an exec plugin gave), if any."""
    keys = getattr(configuration, "api_key", None) or {}
    value = keys.get("authorization") or keys.get("BearerToken") or ""
    scheme, _, token = str(value).partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return None


class ResultsApi:
    """The results API at a URL of its own (a port-forward, an in-cluster address), with a bearer token."""

    def __init__(self, base_url: str, token: str, ca_file: str | None = None) -> None:
        self.base_url, self.token, self.ca_file = base_url, token, ca_file

    def _open(self, method: str, path: str, query: dict[str, str]) -> tuple[dict[str, str], bytes]:
        url = self.base_url.rstrip("/") + path + ("?" + urllib.parse.urlencode(query) if query else "")
        request = urllib.request.Request(url, method=method, headers={"Authorization": f"Bearer {self.token}"})
        context = ssl.create_default_context(cafile=self.ca_file) if url.startswith("https:") else None
        for attempt in range(RATE_LIMITED_RETRIES + 1):
            try:
                with urllib.request.urlopen(request, timeout=TIMEOUT, context=context) as response:
                    return dict(response.headers.items()), response.read()
            except urllib.error.HTTPError as exc:
                if exc.code != 429 or attempt == RATE_LIMITED_RETRIES:
                    raise self._error(exc) from None
                # the API's per-caller rate limit: wait as told (bounded), then ask again
                time.sleep(min(30.0, float(exc.headers.get("Retry-After") or 1)))
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                raise CliError(f"cannot reach the results API at {self.base_url}: {reason}", EXIT_UNREACHABLE) from None
        raise AssertionError("unreachable: the last attempt returns or raises")

    def _error(self, exc: urllib.error.HTTPError) -> CliError:
        try:
            message = str(json.loads(exc.read()).get("message") or exc.reason)
        except (ValueError, AttributeError, OSError):
            message = str(exc.reason)
        hint = None
        if exc.code == 403:
            hint = "ask for a Role with get on scrapejobs/results (or update on scrapejobs/deadletters to retry)"
        return CliError(f"the results API refused ({exc.code}): {message}", _EXITS.get(exc.code, EXIT_FAILED), hint)

    @staticmethod
    def _job(namespace: str, name: str) -> str:
        quote = urllib.parse.quote
        return f"/v1/namespaces/{quote(namespace, safe='')}/scrapejobs/{quote(name, safe='')}"

    def page(self, namespace: str, name: str, cursor: str, limit: int = PAGE) -> tuple[list[dict[str, Any]], str]:
        query = {"limit": str(limit)} | ({"cursor": cursor} if cursor else {})
        headers, body = self._open("GET", self._job(namespace, name) + "/results", query)
        records = [json.loads(line) for line in body.decode().splitlines() if line.strip()]
        return records, headers.get(CURSOR_HEADER, cursor)

    def records(self, namespace: str, name: str, limit: int = PAGE) -> Iterator[dict[str, Any]]:
        """Every record the stream holds, page by page, until a page comes back short."""
        cursor = ""
        while True:
            records, cursor = self.page(namespace, name, cursor, limit)
            yield from records
            if len(records) < limit:
                return

    def dead_letters(self, namespace: str, name: str) -> list[dict[str, Any]]:
        _, body = self._open("GET", self._job(namespace, name) + "/deadletters", {"limit": "10000"})
        items: list[dict[str, Any]] = json.loads(body)["items"]
        return items

    def history(self, namespace: str, name: str, url: str) -> dict[str, Any]:
        """One URL's records and dead letters (needs get on scrapejobs/results and scrapejobs/deadletters)."""
        _, body = self._open("GET", self._job(namespace, name) + "/history", {"url": url})
        found: dict[str, Any] = json.loads(body)
        return found

    def retry(self, namespace: str, name: str, include_permanent: bool) -> str:
        query = {"all": "true"} if include_permanent else {}
        _, body = self._open("POST", self._job(namespace, name) + "/deadletters/retry", query)
        return str(json.loads(body)["requested"])


def dead_letter_record(item: dict[str, Any]) -> DeadLetterRecord:
    """A dead letter as the API sends it (trawl.clitools.output.dead_letter_json's shape), for the table."""
    when = str(item.get("time") or "")
    stamp = datetime.fromisoformat(when.replace("Z", "+00:00")).timestamp() if when else 0.0
    return DeadLetterRecord(
        task_id="",
        url=str(item.get("url") or ""),
        attempts=int(item.get("attempts") or 0),
        error_class=str(item.get("errorClass") or ""),
        message=str(item.get("lastError") or ""),
        time=stamp,
        history=list(item.get("history") or []),
    )


def connect(cluster: Any, api_url: str, ca_file: str | None) -> ResultsApi:
    """The API at ``api_url`` with the kubeconfig's bearer token; a certificate-only user cannot use it."""
    # $TRAWL_API_TOKEN: for a kubeconfig whose user holds a client certificate (kind's admin, say), a token
    # of an identity with the RBAC, e.g. `kubectl create token NAME`
    token = os.environ.get("TRAWL_API_TOKEN") or bearer_from_configuration(cluster.api.configuration)
    if not token:
        raise CliError(
            "the results API needs a bearer token, and this kubeconfig's user has none (a client certificate?)",
            EXIT_FORBIDDEN,
            hint="use a context whose user has a token (OIDC, an exec plugin, a ServiceAccount token), set "
            "TRAWL_API_TOKEN, or read Redis directly with --redis-url",
        )
    return ResultsApi(api_url, token, ca_file)


AGGREGATED = "/apis/results.trawl.dev/v1alpha1"  # as trawl.resultsapi.server serves it behind an APIService


class AggregatedApi(ResultsApi):
    """The results API reached through the Kubernetes API server (an aggregated API): the kubeconfig alone,
    whatever its user authenticates with (token, client certificate, exec plugin)."""

    def __init__(self, cluster: Any) -> None:
        super().__init__(cluster.server, "")
        self.cluster = cluster

    @staticmethod
    def _job(namespace: str, name: str) -> str:
        return AGGREGATED + ResultsApi._job(namespace, name)[len("/v1") :]

    def _open(self, method: str, path: str, query: dict[str, str]) -> tuple[dict[str, str], bytes]:
        method = "PUT" if method == "POST" else method  # the API server then checks `update`, as Trawl does
        status, headers, body = raw_request(self.cluster, method, path, query, (5, TIMEOUT))
        if status >= 400:
            raise self._status_error(status, body)
        return headers, body

    def _status_error(self, status: int, body: bytes) -> CliError:
        try:
            message = str(json.loads(body or b"{}").get("message") or status)
        except (ValueError, AttributeError):
            message = str(status)
        hint = None
        if status == 403:
            hint = "ask for the trawl-results-reader role (or trawl-dead-letter-retrier to retry) in the namespace"
        return CliError(f"the results API refused ({status}): {message}", _EXITS.get(status, EXIT_FAILED), hint)


def raw_request(
    cluster: Any, method: str, path: str, query: dict[str, str], timeout: tuple[float, float]
) -> tuple[int, dict[str, str], bytes]:
    """One request to the API server with the kubeconfig's credentials (token, certificate, exec plugin)."""
    api = cluster.api
    try:
        _, url, headers, body, post = api.param_serialize(
            method, path, query_params=list(query.items()), header_params={}, auth_settings=["BearerToken"]
        )
        response = api.call_api(
            method, url, header_params=headers, body=body, post_params=post, _request_timeout=timeout
        )
        data = response.read()
    except (OSError, urllib3.exceptions.HTTPError) as exc:
        raise CliError(f"cannot reach the results API through {cluster.server}: {exc}", EXIT_UNREACHABLE) from None
    return int(response.status), {k: v for k, v in response.getheaders().items()}, bytes(data or b"")


def aggregated(cluster: Any) -> AggregatedApi | None:
    """The results API through the API server when its APIService is registered and available, else None."""
    try:
        status, _, _ = raw_request(cluster, "GET", AGGREGATED, {}, (5, 10))
    except CliError:
        return None  # no API server: the caller's next request says so
    return AggregatedApi(cluster) if status == 200 else None
