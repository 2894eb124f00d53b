"""The job settings a worker reads from the queue (``JobConfig.spec``), and how they are built.

The operator calls :func:`build_worker_spec` when it registers a job; workers call
:func:`parse_worker_spec` (cached per job). Layout (JSON, snake_case keys)::

    {
      "version": 1,
      "request":    ResolvedRequest dump     (headers, user_agent, timeouts, max_response_bytes, max_redirects)
      "politeness": ResolvedPoliteness dump  (respect_robots_txt, requests_per_second, ...)
      "retry":      ResolvedRetry dump
      "extract":    ExtractSpec dump         (fields, links, images, title, text, only_matching)
      "crawl":      CrawlSpec dump or None   (max_depth, max_pages, scope, include, exclude)
      "output":     OutputSpec dump          (sink, redis_stream, json_lines, webhook incl. secret_ref)
      "render":     RenderSpec dump or None  (mode Browser: waits, time cap, screenshot, blocked resources)
    }

Secrets never travel through Redis: a webhook's ``secretRef`` is a reference (Secret name and key).
The pool mounts the Secrets its jobs may use (``spec.worker.secrets``) at
``/var/run/trawl/secrets/<name>/<key>``, and the worker reads the key there (:func:`read_secret`), or,
for a worker run by hand, from the environment variable ``TRAWL_SECRET_<NAME>_<KEY>``
(:func:`secret_env_name`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from trawl.api.policies import (
    ResolvedPoliteness,
    ResolvedRequest,
    ResolvedRetry,
    resolve_politeness,
    resolve_request,
    resolve_retry,
)
from trawl.api.render import RenderSpec
from trawl.api.scrapejob import CrawlSpec, ExtractSpec, OutputSpec, ScrapeJobSpec

from .extract import ExtractOptions
from .urlpolicy import CrawlPolicy

if TYPE_CHECKING:  # the operator's side; a worker never builds the pool's model
    from trawl.api.scrapepool import ScrapePoolSpec

SPEC_VERSION = 1
SECRETS_DIR_ENV = "TRAWL_SECRETS_DIR"
SECRETS_DIR = "/var/run/trawl/secrets"


# Local runs only (trawl dev up, cluster tests): the directory standing for the pod's root, under which the
# supervisor places the pool's volumes; a job's JsonLines directory is looked up beneath it.
VOLUMES_ROOT_ENV = "TRAWL_VOLUMES_ROOT"


def local_path(path: str, environ: Mapping[str, str] | None = None) -> str:
    """``path`` as this worker process sees it: under TRAWL_VOLUMES_ROOT when the supervisor set one."""
    root = (os.environ if environ is None else environ).get(VOLUMES_ROOT_ENV)
    return str(Path(root) / path.lstrip("/")) if root else path


class MissingSecret(LookupError):
    """A job references a Secret key the worker cannot read."""


def secret_env_name(secret_name: str, key: str) -> str:
    """The environment variable a worker reads a Secret key from: TRAWL_SECRET_<NAME>_<KEY>."""
    return "TRAWL_SECRET_" + re.sub(r"[^A-Za-z0-9]", "_", f"{secret_name}_{key}").upper()


def read_secret(name: str, key: str, environ: Mapping[str, str] | None = None) -> bytes:
    """The value of Secret ``name``'s ``key``: the mounted file, else ``TRAWL_SECRET_<NAME>_<KEY>``."""
    env = os.environ if environ is None else environ
    directory = Path(env.get(SECRETS_DIR_ENV) or SECRETS_DIR)
    if key not in (".", "..") and "/" not in name + key:
        try:
            return (directory / name / key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            pass
    value = env.get(secret_env_name(name, key))
    if value:
        return value.encode()
    raise MissingSecret(
        f"Secret key {name}/{key} is not readable: no file {directory / name / key} and no "
        f"{secret_env_name(name, key)}; list Secret {name!r} in the ScrapePool's spec.worker.secrets"
    )


def unmounted_secrets(job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec) -> list[str]:
    """Secrets the job references that its pool does not mount into the workers."""
    mounted = set(pool_spec.worker.secrets or ())
    output = job_spec.output
    refs = []
    if output is not None and output.webhook is not None:
        refs.append(output.webhook.secret_ref)
    if output is not None and output.postgres is not None:
        refs.append(output.postgres.password_secret_ref)
    if output is not None and output.s3 is not None:
        refs += [output.s3.access_key_id_secret_ref, output.s3.secret_access_key_secret_ref]
    return [r.name for r in refs if r is not None and r.name not in mounted]


def unmounted_directory(job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec) -> str | None:
    """Why a JsonLines job's directory is not on a writable volume its pool mounts, or None when it is."""
    output = job_spec.output
    if output is None or output.sink != "JsonLines" or output.json_lines is None:
        return None
    directory = output.json_lines.directory
    if pool_spec.worker.writable_mount_for(directory) is not None:
        return None
    mounted = ", ".join(m.mount_path for m in pool_spec.worker.volume_mounts or []) or "none"
    return (
        f"output.jsonLines.directory {directory} is not on a writable volume of the pool's workers (their root "
        f"filesystem is read-only; mounts: {mounted}): add a volume (e.g. a persistentVolumeClaim) and a "
        f"volumeMount to the ScrapePool's spec.worker"
    )


def browser_missing(job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec) -> str | None:
    """Why a job that renders in a browser cannot run on its pool (plain workers), or None when it can.

    Caught at admission so the job is Stalled once, with the fix, instead of failing every URL on
    workers that have no browser.
    """
    if job_spec.render is None or not job_spec.render.browser or pool_spec.worker.browser is not None:
        return None
    return (
        f"the job renders pages in a headless browser (render.mode Browser), but ScrapePool {job_spec.pool!r} "
        f"runs plain workers: set the pool's spec.worker.browser and use the browser worker image, or pick a "
        f"pool that has them"
    )


def build_worker_spec(job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec | None) -> dict[str, Any]:
    """Resolve a job's settings against its pool's defaults into the dict stored in JobConfig.spec."""
    defaults = pool_spec.defaults if pool_spec is not None else None
    request = resolve_request(defaults.request if defaults else None, job_spec.request)
    politeness = resolve_politeness(defaults.politeness if defaults else None, job_spec.politeness)
    retry = resolve_retry(defaults.retry if defaults else None, job_spec.retry)
    extract = job_spec.extract or ExtractSpec()
    output = job_spec.output or OutputSpec()
    return {
        "version": SPEC_VERSION,
        "request": request.model_dump(mode="json"),
        "politeness": politeness.model_dump(mode="json"),
        "retry": retry.model_dump(mode="json"),
        "extract": extract.model_dump(mode="json"),
        "crawl": job_spec.crawl.model_dump(mode="json") if job_spec.crawl is not None else None,
        "output": output.model_dump(mode="json"),
        # Only a Browser render is sent: plain fetching stays the spec that workers have always read.
        "render": job_spec.render.model_dump(mode="json") if job_spec.render and job_spec.render.browser else None,
    }


_HEADER_NAME = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")  # an HTTP token (RFC 9110 5.1)


def spec_problem(spec: dict[str, Any]) -> str | None:
    """What in a worker spec (:func:`build_worker_spec`) a worker could not use, naming the field; None if
    nothing. Checked when the job is accepted, with the libraries the worker uses, so a bad selector or
    header is ``Stalled/InvalidSpec`` on the job instead of a null field or an Internal failure per URL."""
    from parsel import Selector
    from selectolax.lexbor import LexborHTMLParser

    probe = LexborHTMLParser("<html><body><p>probe</p></body></html>")
    xprobe = Selector(text="<html><body><p>probe</p></body></html>")
    for i, f in enumerate((spec.get("extract") or {}).get("fields") or []):
        where = f"spec.extract.fields[{i}].selector ({f.get('name')!r})"
        selector = str(f.get("selector") or "")
        try:
            if str(f.get("kind") or "CSS").lower() == "xpath":
                xprobe.xpath(selector)
            else:
                probe.css(selector)
        except Exception as exc:
            kind = "XPath" if str(f.get("kind") or "CSS").lower() == "xpath" else "CSS"
            return f"{where}: invalid {kind} selector {selector!r}: {exc}"
    for name, value in ((spec.get("request") or {}).get("headers") or {}).items():
        where = f"spec.request.headers[{name!r}] (or the pool's defaults.request.headers)"
        if not _HEADER_NAME.fullmatch(name):
            return f"{where}: {name!r} is not a valid header name"
        if any(c in str(value) for c in "\r\n\0"):
            return f"{where}: the value contains CR, LF or NUL (header injection)"
    return None


@dataclass(frozen=True)
class WorkerJobSpec:
    """A parsed worker spec: everything needed to process one task of the job."""

    request: ResolvedRequest
    politeness: ResolvedPoliteness
    retry: ResolvedRetry
    extract: ExtractOptions
    crawl: CrawlPolicy | None
    max_pages: int | None
    output: OutputSpec
    render: RenderSpec | None = None  # set only for mode Browser


def parse_worker_spec(spec: dict[str, Any] | None) -> WorkerJobSpec:
    """The inverse of :func:`build_worker_spec`; missing sections take the built-in defaults."""
    spec = spec or {}
    crawl_raw = spec.get("crawl")
    crawl = CrawlSpec.model_validate(crawl_raw) if crawl_raw is not None else None
    extract = ExtractSpec.model_validate(spec.get("extract") or {})
    return WorkerJobSpec(
        request=ResolvedRequest.model_validate(spec.get("request") or {}),
        politeness=ResolvedPoliteness.model_validate(spec.get("politeness") or {}),
        retry=ResolvedRetry.model_validate(spec.get("retry") or {}),
        extract=ExtractOptions.from_dict(extract.model_dump(mode="json")),
        crawl=(
            CrawlPolicy.build(
                scope=str(crawl.scope.value if hasattr(crawl.scope, "value") else crawl.scope),
                include=crawl.include,
                exclude=crawl.exclude,
                max_depth=crawl.max_depth,
            )
            if crawl is not None
            else None
        ),
        max_pages=crawl.max_pages if crawl is not None else None,
        output=OutputSpec.model_validate(spec.get("output") or {}),
        render=RenderSpec.model_validate(spec["render"]) if spec.get("render") else None,
    )


def build_job_config(job_id: str, job_spec: ScrapeJobSpec, pool_spec: ScrapePoolSpec | None) -> Any:
    """The queue's JobConfig for a job (retry policy, crawl caps, priority, dedupe) with its worker spec."""
    from trawl.queue.model import JobConfig, RetryPolicy

    spec = build_worker_spec(job_spec, pool_spec)
    retry = ResolvedRetry.model_validate(spec["retry"])
    dedupe = job_spec.dedupe
    return JobConfig(
        job_id=job_id,
        priority=job_spec.priority,
        retry=RetryPolicy(
            max_attempts=retry.max_attempts,
            backoff=str(retry.backoff.value),
            initial_delay=retry.initial_delay_seconds,
            max_delay=retry.max_delay_seconds,
            jitter=retry.jitter,
            retry_on=tuple(str(c.value) for c in retry.retry_on),
            honor_retry_after=retry.honor_retry_after,
        ),
        max_pages=job_spec.crawl.max_pages if job_spec.crawl is not None else None,
        max_depth=job_spec.crawl.max_depth if job_spec.crawl is not None else 0,
        dedupe_across_jobs=dedupe.across_jobs if dedupe is not None else False,
        dedupe_window_seconds=dedupe.window_seconds if dedupe is not None else 3600,
        spec=spec,
    )
