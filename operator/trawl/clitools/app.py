"""The typer commands of the job tools. Only typer is imported here; each command loads what it needs.

Registered on the root app by ``trawl.cli``: ``submit``, ``status``, ``results``, ``top`` and the ``dlq``,
``pool`` and ``secret`` groups. Every command connects like kubectl (``--kubeconfig``, ``--context``,
``-n``) and reports a failure as one line on stderr with a distinct exit code (see
:mod:`trawl.clitools.exits`).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import typer

from .exits import EXIT_OTHER_SINK, CliError, console, reported

if TYPE_CHECKING:
    from .cluster import Cluster
    from .resultsapi_client import ResultsApi

T = TypeVar("T")

KUBECONFIG = typer.Option(None, "--kubeconfig", help="Path of the kubeconfig (default: $KUBECONFIG, ~/.kube/config).")
CONTEXT = typer.Option(None, "--context", help="Kubeconfig context to use (default: the current one).")
NAMESPACE = typer.Option(None, "--namespace", "-n", help="Namespace (default: the context's, else 'default').")
REDIS_URL = typer.Option(
    None, "--redis-url", help="Read the pool's Redis at this URL instead (e.g. through kubectl port-forward)."
)
API_URL = typer.Option(
    None,
    "--api-url",
    envvar="TRAWL_API_URL",
    help="Read through the results API at this URL with the kubeconfig's token (no Redis password needed).",
)
API_CA = typer.Option(
    None, "--api-ca", envvar="TRAWL_API_CA", help="CA certificate (PEM) to verify the results API's HTTPS with."
)


OUTPUTS = ("table", "json", "yaml")


def _check_output(output: str) -> None:
    if output not in OUTPUTS:
        raise CliError(f"unknown output {output!r}: use {', '.join(OUTPUTS)}")


def _dump(data: Any, output: str) -> None:
    """Machine-readable output: JSON, or YAML (one document) as kubectl prints it."""
    if output == "yaml":
        import yaml

        typer.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), nl=False)
    else:
        typer.echo(json.dumps(data, indent=2))


def _connect(kubeconfig: str | None, context: str | None, namespace: str | None) -> Cluster:
    from .cluster import Cluster, Target

    return Cluster.connect(Target(kubeconfig, context, namespace))


def _run_async(fn: Callable[[], Any]) -> Any:
    return asyncio.run(fn())


# ---------------------------------------------------------------------------------------------- submit


def submit(
    urls: list[str] = typer.Argument(..., help="URLs to fetch (crawl seeds with --crawl)."),
    crawl: bool = typer.Option(False, "--crawl", help="Follow links from the URLs (within the same host)."),
    max_pages: int | None = typer.Option(None, "--max-pages", help="Crawl: most pages fetched (implies --crawl)."),
    depth: int | None = typer.Option(None, "--depth", help="Crawl: link hops from a seed (implies --crawl)."),
    include: list[str] = typer.Option([], "--include", help="Crawl: follow only links matching (regex, repeatable)."),
    exclude: list[str] = typer.Option([], "--exclude", help="Crawl: skip links matching (regex, repeatable)."),
    pool: str = typer.Option("default", "--pool", "-p", help="ScrapePool whose workers run the job."),
    pool_namespace: str | None = typer.Option(
        None,
        "--pool-namespace",
        help="Namespace of the pool (spec.poolNamespace), for a pool the platform shares from another namespace.",
    ),
    priority: int | None = typer.Option(None, "--priority", min=0, max=9, help="0 (lowest) to 9 (highest)."),
    priority_class: str | None = typer.Option(
        None, "--priority-class", help="A priority class of the pool's spec.tenancy (spec.priorityClassName)."
    ),
    max_dead_letters: int | None = typer.Option(
        None, "--max-dead-letters", min=0, help="Dead-lettered URLs the job tolerates and still succeeds."
    ),
    name: str | None = typer.Option(None, "--name", help="Job name (default: generated from the first URL's host)."),
    wait: bool = typer.Option(False, "--wait", "-w", help="Show progress until the job is Complete or Failed."),
    timeout: float = typer.Option(0, "--timeout", help="With --wait: give up after this many seconds (0: never)."),
    kubeconfig: str | None = KUBECONFIG,
    context: str | None = CONTEXT,
    namespace: str | None = NAMESPACE,
) -> None:
    """Create a ScrapeJob; with --wait, follow it with a progress bar (exit 0 Succeeded, 1 Failed)."""
    with reported():
        from .submit import SubmitOptions
        from .submit import submit as create

        cluster = _connect(kubeconfig, context, namespace)
        opts = SubmitOptions(
            list(urls), pool, crawl, max_pages, depth, priority, name, tuple(include), tuple(exclude), max_dead_letters,
            priority_class, pool_namespace,
        )  # fmt: skip
        created = create(cluster, opts)
        job_name = created["metadata"]["name"]
        out = console()
        out.print(f"scrapejob.trawl.dev/{job_name} created in namespace {cluster.namespace}", markup=False)
        if wait:
            raise typer.Exit(_wait(cluster, job_name, timeout))


def _wait(cluster: Cluster, name: str, timeout: float) -> int:
    from rich.markup import escape
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .submit import follow, phase, stalled

    err = console(stderr=True)
    last: dict[str, Any] = {}
    with Progress(
        TextColumn("[bold]{task.fields[name]}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[phase]}"),
        TextColumn("[red]{task.fields[dead]}"),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as progress:
        task = progress.add_task("job", total=None, name=name, phase="Pending", dead="")
        for job in follow(cluster, name, timeout=timeout or None):
            last = job
            counts = (job.get("status") or {}).get("counts") or {}
            total = int(counts.get("total") or 0) or None
            done = int(counts.get("succeeded") or 0) + int(counts.get("deadLettered") or 0)
            dead = int(counts.get("deadLettered") or 0)
            stall = stalled(job)
            shown = f"{phase(job)}, Stalled: {stall[0]}" if stall else phase(job)
            progress.update(task, total=total, completed=done, phase=shown, dead=f"{dead} dead" if dead else "")
    status = last.get("status") or {}
    final = phase(last)
    out = console()
    style = "green" if final == "Succeeded" else "red"
    out.print(f"[{style}]{final}[/]: {escape(str(status.get('message', '')))}")
    results = status.get("results") or {}
    if results.get("location"):
        out.print(f"results: {results.get('count', 0)} in {results.get('sink')} at {results['location']}", markup=False)
    return 0 if final == "Succeeded" else 1


# ---------------------------------------------------------------------------------------------- status


def status(
    job: str | None = typer.Argument(None, help="A job's name for its detail; omit for a table of jobs."),
    all_namespaces: bool = typer.Option(False, "--all-namespaces", "-A", help="Jobs of every namespace."),
    output: str = typer.Option("table", "--output", "-o", help="table, json or yaml."),
    watch: bool = typer.Option(
        False, "--watch", "-w", help="Keep showing it as it changes (until the job finishes, or Ctrl-C)."
    ),
    interval: float = typer.Option(2.0, "--interval", min=0.2, help="With --watch: seconds between reads."),
    kubeconfig: str | None = KUBECONFIG,
    context: str | None = CONTEXT,
    namespace: str | None = NAMESPACE,
) -> None:
    """A table of ScrapeJobs, or one job's detail: counts, conditions, dead letters, where the results are."""
    with reported():
        from . import output as render
        from .submit import TERMINAL, get_job, phase

        _check_output(output)
        cluster = _connect(kubeconfig, context, namespace)
        out = console()

        def read() -> Any:
            return get_job(cluster, job) if job else cluster.list("ScrapeJob", all_namespaces=all_namespaces)

        def view(data: Any) -> Any:
            if job:
                return render.job_detail(data)
            if not data:
                where = "any namespace" if all_namespaces else f"namespace {cluster.namespace}"
                return f"No ScrapeJobs in {where}."
            return render.jobs_table(data, show_namespace=all_namespaces)

        def done(data: Any) -> bool:
            return bool(job) and phase(data) in TERMINAL

        data = read()
        if not watch:
            if output == "table":
                out.print(view(data))
            else:
                _dump(data, output)
            return
        if output != "table":
            # As kubectl -w: a document each time the object (or list) changes.
            last = None
            while True:
                if data != last:
                    _dump(data, output)
                    if output == "yaml":
                        typer.echo("---")
                    sys.stdout.flush()
                    last = data
                if done(data):
                    return
                time.sleep(interval)
                data = read()
        from rich.live import Live

        with Live(view(data), console=out, auto_refresh=False) as live:
            while not done(data):
                time.sleep(interval)
                data = read()
                live.update(view(data), refresh=True)


# ---------------------------------------------------------------------------------------------- results


def results(
    job: str = typer.Argument(..., help="The job's name."),
    fmt: str = typer.Option("jsonl", "--format", "-f", help="jsonl or csv."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write to this file instead of stdout."),
    redis_url: str | None = REDIS_URL,
    postgres_address: str | None = typer.Option(
        None, "--postgres-address", help="Reach the job's PostgreSQL at this host:port instead (e.g. a port-forward)."
    ),
    s3_endpoint: str | None = typer.Option(
        None, "--s3-endpoint", help="Reach the job's S3 store at this URL instead (e.g. a port-forward)."
    ),
    api_url: str | None = API_URL,
    api_ca: str | None = API_CA,
    kubeconfig: str | None = KUBECONFIG,
    context: str | None = CONTEXT,
    namespace: str | None = NAMESPACE,
) -> None:
    """Export a job's results from its Redis stream, PostgreSQL or S3 sink as JSON Lines or CSV.

    With --api-url (or $TRAWL_API_URL) a Redis stream is read through the results API: RBAC on the job
    (get scrapejobs/results) is all it takes."""
    with reported():
        from . import results as res
        from .queueaccess import job_ref, resolve_redis
        from .submit import get_job_and_pool

        if fmt not in res.FORMATS:
            raise CliError(f"unknown format {fmt!r}: use jsonl or csv")
        cluster = _connect(kubeconfig, context, namespace)
        if not redis_url and not postgres_address and not s3_endpoint:
            from .resultsapi_client import aggregated, connect

            api = connect(cluster, api_url, api_ca) if api_url else aggregated(cluster)
            if api is not None:
                try:
                    _results_through_api(cluster, job, fmt, output, api)
                    return
                except CliError as exc:  # a PostgreSQL or S3 sink: read it as before
                    if api_url or exc.code != EXIT_OTHER_SINK:
                        raise
        obj, pool = get_job_and_pool(cluster, job)
        res.check_sink(obj)
        ref = job_ref(obj, pool)
        if res.sink_of(obj) == "PostgreSQL":
            pg = ((obj.get("spec") or {}).get("output") or {}).get("postgres") or {}
            ref_pw = pg.get("passwordSecretRef")
            pool_ns = pool["metadata"].get("namespace")  # the workers' Secrets, which the sink uses
            password = cluster.read_secret_key(ref_pw["name"], ref_pw["key"], pool_ns) if ref_pw else None
            target = res.postgres_target(obj, password, postgres_address, pool)

            def export(out: Any) -> Any:
                return res.export_postgres(target, ref.uid, fmt, out)
        elif res.sink_of(obj) == "S3":
            s3 = ((obj.get("spec") or {}).get("output") or {}).get("s3") or {}
            access_ref, secret_ref = s3.get("accessKeyIdSecretRef") or {}, s3.get("secretAccessKeySecretRef") or {}
            s3_target = res.s3_target(
                obj,
                cluster.read_secret_key(
                    access_ref.get("name", ""), access_ref.get("key", ""), pool["metadata"].get("namespace")
                ),
                cluster.read_secret_key(
                    secret_ref.get("name", ""), secret_ref.get("key", ""), pool["metadata"].get("namespace")
                ),
                s3_endpoint,
                pool,
            )

            def export(out: Any) -> Any:
                return res.export_s3(s3_target, ref.uid, fmt, out)
        else:
            cfg = resolve_redis(cluster, pool, redis_url)

            def export(out: Any) -> Any:
                return res.export(cfg, obj, ref, fmt, out)

        if output is None:
            count = _run_async(lambda: export(sys.stdout))
            sys.stdout.flush()
        else:
            tmp = output.with_name(output.name + ".part")
            try:
                with tmp.open("w", encoding="utf-8", newline="") as fh:
                    count = _run_async(lambda: export(fh))
                tmp.replace(output)
            except OSError as exc:
                raise CliError(f"cannot write {output}: {exc.strerror or exc}") from None
            finally:
                tmp.unlink(missing_ok=True)
        where = f" to {output}" if output else ""
        console(stderr=True).print(
            f"{count} results of {ref.namespace}/{ref.name} written{where}", style="dim", markup=False
        )
        where_status = (obj.get("status") or {}).get("results") or {}
        written = int(where_status.get("count") or 0)
        if where_status.get("sink", "RedisStream") == "RedisStream" and count < written:
            console(stderr=True).print(
                f"warning: {written - count} of the job's {written} records are no longer in its stream (trimmed at "
                "output.redisStream.maxLen); raise maxLen or use a JsonLines, Webhook or database sink to keep all",
                style="yellow",
                markup=False,
            )


def _write_output(output: Path | None, export: Callable[[Any], Any]) -> int:
    """Run ``export`` into stdout, or into ``output`` through a .part file renamed once complete."""
    if output is None:
        count = int(_run_async(lambda: export(sys.stdout)))
        sys.stdout.flush()
        return count
    tmp = output.with_name(output.name + ".part")
    try:
        with tmp.open("w", encoding="utf-8", newline="") as fh:
            count = int(_run_async(lambda: export(fh)))
        tmp.replace(output)
    except OSError as exc:
        raise CliError(f"cannot write {output}: {exc.strerror or exc}") from None
    finally:
        tmp.unlink(missing_ok=True)
    return count


def _results_through_api(cluster: Cluster, job: str, fmt: str, output: Path | None, api: ResultsApi) -> None:
    from . import results as res

    async def export(out: Any) -> int:
        async def stream() -> Any:
            for record in api.records(cluster.namespace, job):
                yield record

        return await res.write_records(stream(), fmt, out)

    count = _write_output(output, export)
    where = f" to {output}" if output else ""
    console(stderr=True).print(
        f"{count} results of {cluster.namespace}/{job} written{where}", style="dim", markup=False
    )


# ---------------------------------------------------------------------------------------------- dlq

dlq_app = typer.Typer(
    name="dlq", help="A job's dead letters: list them, send them back to the queue.", no_args_is_help=True
)


@dlq_app.command("list")
def dlq_list(
    job: str = typer.Argument(..., help="The job's name."),
    output: str = typer.Option(
        "table", "--output", "-o", help="table, json or yaml (json and yaml with each attempt's history)."
    ),
    redis_url: str | None = REDIS_URL,
    api_url: str | None = API_URL,
    api_ca: str | None = API_CA,
    kubeconfig: str | None = KUBECONFIG,
    context: str | None = CONTEXT,
    namespace: str | None = NAMESPACE,
) -> None:
    """Every dead letter of a job (read from Redis, or through the results API with --api-url): URL,
    attempts, error class, last error."""
    with reported():
        from . import output as render
        from .queueaccess import dead_letters, job_ref, resolve_redis
        from .resultsapi_client import aggregated, connect, dead_letter_record
        from .submit import get_job_and_pool

        _check_output(output)
        cluster = _connect(kubeconfig, context, namespace)
        api = None if redis_url else connect(cluster, api_url, api_ca) if api_url else aggregated(cluster)
        if api is not None:
            items = api.dead_letters(cluster.namespace, job)
            records = [dead_letter_record(item) for item in items]
            ns, name = cluster.namespace, job
        else:
            obj, pool = get_job_and_pool(cluster, job)
            cfg = resolve_redis(cluster, pool, redis_url)
            ref = job_ref(obj, pool)
            records = _run_async(lambda: dead_letters(cfg, ref))
            ns, name = ref.namespace, ref.name
        if output != "table":
            _dump([render.dead_letter_json(r) for r in records], output)
            return
        out = console()
        if not records:
            out.print(f"ScrapeJob {ns}/{name} has no dead letters.", markup=False)
            return
        out.print(render.dead_letters_table(records))
        out.print(f"{len(records)} dead letters; `trawl dlq retry {name}` sends them back to the queue.", markup=False)


@dlq_app.command("retry")
def dlq_retry(
    job: str = typer.Argument(..., help="The job's name."),
    wait: bool = typer.Option(True, "--wait/--no-wait", help="Wait until the operator has requeued them."),
    timeout: float = typer.Option(60, "--timeout", help="With --wait: seconds to wait for the operator."),
    include_permanent: bool = typer.Option(
        False,
        "--all",
        help="Also retry permanent failures (HTTP4xx, RobotsDisallowed, BlockedAddress, ParseLimit, ...).",
    ),
    api_url: str | None = API_URL,
    api_ca: str | None = API_CA,
    kubeconfig: str | None = KUBECONFIG,
    context: str | None = CONTEXT,
    namespace: str | None = NAMESPACE,
) -> None:
    """Send a job's dead letters back to the queue (sets the trawl.dev/retry-dead-letters annotation).

    Only failures another attempt may fix are retried (timeouts, 5xx, SinkFailed, ...) unless --all. With
    --api-url the results API sets it: RBAC update on scrapejobs/deadletters suffices (--wait also reads
    the job, which needs get on scrapejobs)."""
    with reported():
        from .exits import EXIT_TIMEOUT
        from .submit import get_job

        cluster = _connect(kubeconfig, context, namespace)
        out = console()
        from .resultsapi_client import aggregated, connect

        api = connect(cluster, api_url, api_ca) if api_url else aggregated(cluster)
        if api is not None:
            value = api.retry(cluster.namespace, job, include_permanent)
            out.print(f"requested a retry of the dead letters of {cluster.namespace}/{job} ({value})", markup=False)
        else:
            obj = get_job(cluster, job)
            dead = int(((obj.get("status") or {}).get("counts") or {}).get("deadLettered") or 0)
            if dead == 0:
                out.print(f"ScrapeJob {cluster.namespace}/{job} has no dead letters: nothing to retry.", markup=False)
                return
            _, value = cluster.request_dead_letter_retry(job, include_permanent=include_permanent)
            out.print(
                f"requested a retry of {dead} dead letters of {cluster.namespace}/{job} (annotation value {value})",
                markup=False,
            )
        if not wait:
            return
        deadline = time.monotonic() + timeout
        while True:
            status = get_job(cluster, job).get("status") or {}
            if status.get("retryDeadLettersHandled") == value:
                counts = status.get("counts") or {}
                out.print(
                    f"the operator requeued them: phase {status.get('phase')}, "
                    f"{counts.get('deadLettered', 0)} dead letters left",
                    markup=False,
                )
                return
            if time.monotonic() >= deadline:
                raise CliError(
                    f"the operator has not acted on the retry within {timeout:g}s (is it running?)", EXIT_TIMEOUT
                )
            time.sleep(0.5)


# ---------------------------------------------------------------------------------------------- pool

pool_app = typer.Typer(
    name="pool", help="ScrapePools: delete them the way their finalizer allows.", no_args_is_help=True
)


@pool_app.command("delete")
def pool_delete(
    names: list[str] = typer.Argument(..., help="The pools' names."),
    timeout: float = typer.Option(120, "--timeout", help="Seconds to wait for the operator to let them go."),
    kubeconfig: str | None = KUBECONFIG,
    context: str | None = CONTEXT,
    namespace: str | None = NAMESPACE,
) -> None:
    """Delete ScrapePools and wait until they are gone. Refused, pool untouched, while a ScrapeJob names
    one; fails with the operator's message if it holds one, or after --timeout (no operator running).

    The chart's pre-delete hook runs it, so `helm uninstall` removes the chart's pool first."""
    with reported():
        from .pooldelete import PoolDeleter

        cluster = _connect(kubeconfig, context, namespace)
        for line in PoolDeleter(cluster).delete(names, timeout):
            typer.echo(line)


# ---------------------------------------------------------------------------------------------- secret

secret_app = typer.Typer(
    name="secret", help="Secrets made inside the cluster (the chart's hooks).", no_args_is_help=True
)


@secret_app.command("ensure")
def secret_ensure(
    name: str = typer.Argument(..., help="The Secret's name."),
    random: list[str] = typer.Option([], "--random", help="A key to hold a random value (32 letters and digits)."),
    derived: list[str] = typer.Option(
        [], "--derived", help="KEY=TEMPLATE: a key made from the others, {key} replaced by its value (URL-encoded)."
    ),
    label: list[str] = typer.Option([], "--label", help="KEY=VALUE: a label the Secret carries."),
    kubeconfig: str | None = KUBECONFIG,
    context: str | None = CONTEXT,
    namespace: str | None = NAMESPACE,
) -> None:
    """Create the Secret with random values if it does not exist; otherwise keep every value it holds and
    add only what is missing (a key, a label). Prints what it did, never a value.

    The chart's pre-install/pre-upgrade hook runs it for the bundled Redis's password, so that no render of
    the chart holds a password and an upgrade or a GitOps sync never changes it."""
    with reported():
        from .secretensure import SecretEnsurer, parse_pairs

        templates, labels = parse_pairs(derived, "--derived"), parse_pairs(label, "--label")
        if not random and not templates:
            raise CliError("nothing to ensure: give --random or --derived keys")
        cluster = _connect(kubeconfig, context, namespace)
        typer.echo(SecretEnsurer(cluster).ensure(name, random, templates, labels))


# ---------------------------------------------------------------------------------------------- run


# ---------------------------------------------------------------------------------------------- top


def top(
    once: bool = typer.Option(False, "--once", help="Print one frame and exit."),
    interval: float = typer.Option(2.0, "--interval", min=0.2, help="Seconds between refreshes."),
    window: float = typer.Option(5.0, "--window", min=0.1, help="Minutes of history in the sparklines."),
    all_namespaces: bool = typer.Option(False, "--all-namespaces", "-A", help="Pools of every namespace."),
    kubeconfig: str | None = KUBECONFIG,
    context: str | None = CONTEXT,
    namespace: str | None = NAMESPACE,
) -> None:
    """A live view of the pools: replicas, backlog, in flight, throughput and failure rate, with sparklines.

    On a terminal the view refreshes in place; piped, it prints a frame per refresh. Ctrl-C stops it.
    """
    with reported():
        from rich.live import Live

        from . import output as render
        from .top import History, poll

        cluster = _connect(kubeconfig, context, namespace)
        history = History(window=window * 60)
        out = console()
        poll(cluster, history, time.time(), all_namespaces=all_namespaces)
        if once:
            out.print(render.top_frame(history, show_namespace=all_namespaces, columns=out.width))
            return
        width = max(10, min(40, int(window * 60 / interval)))
        if not out.is_terminal:  # piped or redirected: a frame per refresh, like `top -b`
            while True:
                out.print(render.top_frame(history, show_namespace=all_namespaces, width=width, columns=out.width))
                out.print()
                out.file.flush()
                time.sleep(interval)
                try:
                    poll(cluster, history, time.time(), all_namespaces=all_namespaces)
                except CliError as exc:
                    out.print(f"last refresh failed: {exc.message}", markup=False)
        with Live(
            render.top_frame(history, show_namespace=all_namespaces, width=width, columns=out.width), console=out
        ) as live:
            while True:
                time.sleep(interval)
                error = None
                try:
                    poll(cluster, history, time.time(), all_namespaces=all_namespaces)
                except CliError as exc:  # keep showing the last frame while the API server is away
                    error = exc.message
                live.update(
                    render.top_frame(
                        history, show_namespace=all_namespaces, width=width, error=error, columns=out.width
                    )
                )


# ---------------------------------------------------------------------------------------------- history


def url_history(
    job: str = typer.Argument(..., help="The job's name."),
    url: str = typer.Argument(..., help="The URL, as the job fetched it."),
    api_url: str | None = API_URL,
    api_ca: str | None = API_CA,
    kubeconfig: str | None = KUBECONFIG,
    context: str | None = CONTEXT,
    namespace: str | None = NAMESPACE,
) -> None:
    """One URL of a job: its records and dead letters, as JSON, through the results API (--api-url, or the
    aggregated API when registered). RBAC: get on scrapejobs/results and scrapejobs/deadletters."""
    with reported():
        from .resultsapi_client import aggregated, connect

        cluster = _connect(kubeconfig, context, namespace)
        api = connect(cluster, api_url, api_ca) if api_url else aggregated(cluster)
        if api is None:
            raise CliError("a URL's history needs the results API: give --api-url, or register the aggregated API")
        typer.echo(json.dumps(api.history(cluster.namespace, job, url), indent=2, ensure_ascii=False))
