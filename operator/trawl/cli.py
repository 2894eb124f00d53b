"""The ``trawl`` command line: operator, worker, local stack, CRDs and job tools."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from trawl.boot.worker import is_worker_invocation as _worker_invocation

if _worker_invocation(sys.argv):
    from trawl.boot import worker as _boot

    _boot.prepare()
    if __name__ == "__main__":  # `python -m trawl.cli worker ...` (a spawned parser child runs as __mp_main__)
        from trawl.worker.cliargs import run_plain

        run_plain(sys.argv)  # runs the worker and exits, unless typer must parse (--help, errors)

import typer

app = typer.Typer(
    name="trawl",
    help="Trawl: Kubernetes-native web scraping at scale.",
    no_args_is_help=True,
    add_completion=False,
)


SHELLS = ("bash", "zsh", "fish")


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        typer.echo(f"trawl {version('trawl')}")
        raise typer.Exit()


@app.callback()
def _root(
    _version_flag: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    """Trawl: Kubernetes-native web scraping at scale."""


@app.command()
def completion(shell: str = typer.Argument(..., help="bash, zsh or fish.")) -> None:
    """Print the shell completion script: `source <(trawl completion bash)`, or save it where your shell
    loads completions from (e.g. `trawl completion fish > ~/.config/fish/completions/trawl.fish`)."""
    from typer._completion_shared import get_completion_script

    from trawl.clitools.exits import CliError

    if shell not in SHELLS:
        raise CliError(f"unknown shell {shell!r}: use {', '.join(SHELLS)}")
    typer.echo(get_completion_script(prog_name="trawl", complete_var="_TRAWL_COMPLETE", shell=shell))


@app.command()
def crd(
    root: Path = typer.Option(Path("."), help="Repository root to write into."),
    check: bool = typer.Option(False, help="Exit 1 if the committed CRDs differ instead of writing them."),
    stdout: bool = typer.Option(False, "--stdout", help="Print the CRDs instead of writing files."),
) -> None:
    """Generate the CRDs from the API models into manifests/crds and charts/trawl/crds."""
    from trawl.api.crd import DEFAULT_TARGETS, all_crds, write_crds

    files = all_crds()
    if stdout:
        typer.echo("---\n".join(files.values()), nl=False)
        return
    if check:
        stale = [
            str(root / target / name)
            for target in DEFAULT_TARGETS
            for name, text in files.items()
            if not (root / target / name).exists() or (root / target / name).read_text() != text
        ]
        if stale:
            typer.echo("CRDs out of date (run `trawl crd`): " + ", ".join(stale), err=True)
            raise typer.Exit(1)
        typer.echo("CRDs up to date")
        return
    for path in write_crds(root):
        typer.echo(f"wrote {path}")


@app.command("operator")
def operator_cmd(
    namespace: list[str] = typer.Option([], "--namespace", "-n", help="Namespace to watch (repeatable)."),
    all_namespaces: bool = typer.Option(False, "--all-namespaces", "-A", help="Watch every namespace."),
    metrics_port: int = typer.Option(8080, help="Port of the Prometheus /metrics endpoint (0: off)."),
    health_port: int = typer.Option(8081, help="Port of the /healthz liveness endpoint (0: off)."),
    bind_address: str = typer.Option(
        "0.0.0.0", "--bind-address", help="Address the metrics and health endpoints listen on."
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging."),
    leader_election: bool = typer.Option(
        False, "--leader-election", help="Act only while holding a coordination.k8s.io Lease (run 2+ replicas)."
    ),
    lease_name: str = typer.Option(
        "trawl-operator", help="Name of the leader-election Lease (a shard's gets '-<key>' appended)."
    ),
    shard: str | None = typer.Option(
        None, "--shard", envvar="TRAWL_SHARD", help="Reconcile only objects labelled sharding.trawl.dev/key=<key>."
    ),
    unsharded_only: bool = typer.Option(
        False,
        "--unsharded-only",
        envvar="TRAWL_UNSHARDED_ONLY",
        help="Reconcile only objects without the sharding.trawl.dev/key label (the main operator beside shards).",
    ),
    lease_namespace: str | None = typer.Option(
        None, help="Namespace of the Lease (default: $POD_NAMESPACE, the operator's own)."
    ),
    api_port: int = typer.Option(
        0, "--api-port", envvar="TRAWL_API_PORT", help="Port of the results API (0: off); see README 'Results API'."
    ),
    api_tls_cert: Path | None = typer.Option(
        None, "--api-tls-cert", envvar="TRAWL_API_TLS_CERT", help="Certificate (PEM) the results API serves HTTPS with."
    ),
    api_tls_key: Path | None = typer.Option(
        None, "--api-tls-key", envvar="TRAWL_API_TLS_KEY", help="Key (PEM) of --api-tls-cert."
    ),
    api_bind_address: str | None = typer.Option(
        None,
        "--api-bind-address",
        envvar="TRAWL_API_BIND_ADDRESS",
        help="Address of the results API (default: --bind-address).",
    ),
    api_requestheader_ca: Path | None = typer.Option(
        None,
        "--api-requestheader-ca",
        envvar="TRAWL_API_REQUESTHEADER_CA",
        help="Serve as an aggregated API: the CA of the API server's front-proxy client certificate (needs TLS).",
    ),
    api_requestheader_from_cluster: bool = typer.Option(
        False,
        "--api-requestheader-from-cluster",
        envvar="TRAWL_API_REQUESTHEADER_FROM_CLUSTER",
        help="Serve as an aggregated API, reading the front proxy's CA and names from "
        "kube-system/extension-apiserver-authentication (needs TLS).",
    ),
    api_requestheader_names: str = typer.Option(
        "",
        "--api-requestheader-allowed-names",
        envvar="TRAWL_API_REQUESTHEADER_ALLOWED_NAMES",
        help="Comma-separated common names the front-proxy certificate may carry (empty: any it verifies).",
    ),
    console: bool = typer.Option(
        False, "--console", envvar="TRAWL_CONSOLE", help="Serve the web console on the API's port (/console/)."
    ),
) -> None:
    """Run the operator: reconcile ScrapeJobs, ScrapePools and CronScrapeJobs."""
    from trawl.operator.main import LeaderElection, Sidecar, run
    from trawl.operator.sharding import Sharding

    try:
        sharding = Sharding(key=shard or None, unsharded_only=unsharded_only)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from exc

    sidecars: list[Sidecar] = []
    if api_port:
        if (api_tls_cert is None) != (api_tls_key is None):
            raise typer.BadParameter("give both --api-tls-cert and --api-tls-key, or neither")
        from trawl.resultsapi.server import Serving, serve

        if (api_requestheader_ca is not None or api_requestheader_from_cluster) and api_tls_cert is None:
            raise typer.BadParameter("an aggregated API needs --api-tls-cert: the API server calls over TLS")
        names = tuple(n.strip() for n in api_requestheader_names.split(",") if n.strip())
        serving = Serving(
            api_bind_address or bind_address, api_port, api_tls_cert, api_tls_key, api_requestheader_ca, names,
            api_requestheader_from_cluster, console=console, namespaces=() if all_namespaces else tuple(namespace),
            console_interval=float(os.environ.get("TRAWL_CONSOLE_INTERVAL_SECONDS", "1")),
        )  # fmt: skip
        sidecars.append(lambda: serve(serving))

    run(
        namespaces=namespace,
        all_namespaces=all_namespaces,
        metrics_port=metrics_port,
        health_port=health_port,
        bind_address=bind_address,
        verbose=verbose,
        leader_election=(
            LeaderElection.from_env(lease_namespace, sharding.lease_name(lease_name)) if leader_election else None
        ),
        sidecars=sidecars,
        sharding=sharding,
    )


@app.command("worker")
def worker_cmd(
    redis_url: str = typer.Option("redis://127.0.0.1:6379/0", envvar="TRAWL_REDIS_URL", help="The pool's Redis."),
    redis_cluster: bool = typer.Option(
        False, "--redis-cluster", envvar="TRAWL_REDIS_CLUSTER", help="The Redis URL names a node of a Redis Cluster."
    ),
    redis_sentinels: str = typer.Option(
        "",
        "--redis-sentinels",
        envvar="TRAWL_REDIS_SENTINELS",
        help="host:port,... of Redis Sentinels: the master is found through them (the URL is then unused).",
    ),
    redis_sentinel_master: str = typer.Option(
        "",
        "--redis-sentinel-master",
        envvar="TRAWL_REDIS_SENTINEL_MASTER",
        help="The name the Sentinels monitor the master under (with --redis-sentinels).",
    ),
    redis_shards: int = typer.Option(
        1, "--redis-shards", envvar="TRAWL_REDIS_SHARDS", help="Hash tags the pool's tasks are spread over."
    ),
    prefix: str = typer.Option(
        "trawl:{default/default}", envvar="TRAWL_QUEUE_PREFIX", help="The pool's key prefix (with its hash tag)."
    ),
    concurrency: int = typer.Option(32, envvar="TRAWL_CONCURRENCY", help="Tasks in flight."),
    claim_batch: str = typer.Option(
        "auto",
        envvar="TRAWL_CLAIM_BATCH",
        help="Tasks per claim: auto (from free slots and observed task time) or a number 1..1000.",
    ),
    drain_seconds: float = typer.Option(30.0, envvar="TRAWL_DRAIN_SECONDS", help="Grace period on SIGTERM."),
    metrics_port: int = typer.Option(0, envvar="TRAWL_METRICS_PORT", help="Prometheus port (0: off)."),
    metrics_address: str = typer.Option(
        "0.0.0.0", envvar="TRAWL_METRICS_ADDRESS", help="Address the metrics endpoint listens on."
    ),
    allowed_cidrs: str = typer.Option(
        "",
        envvar="TRAWL_ALLOWED_CIDRS",
        help="Comma-separated private/loopback networks the worker may fetch from and write sinks to.",
    ),
    postgres_cleartext_password: bool = typer.Option(
        False,
        envvar="TRAWL_POSTGRES_CLEARTEXT_PASSWORD",
        help="Let PostgreSQL sinks send the password to a server that asks for it in cleartext.",
    ),
    worker_id: str = typer.Option("", envvar="TRAWL_WORKER_ID", help="Worker id (default: host-pid-random)."),
    lease_seconds: float = typer.Option(30.0, envvar="TRAWL_LEASE_SECONDS", help="Lease of claimed tasks."),
    log_level: str = typer.Option("INFO", envvar="TRAWL_LOG_LEVEL", help="Log level."),
    parse_processes: int = typer.Option(
        2, envvar="TRAWL_PARSE_PROCESSES", help="Parser child processes (0: parse on the event loop, no budget)."
    ),
    parse_seconds: float = typer.Option(
        10.0, envvar="TRAWL_PARSE_SECONDS", help="Time budget of one page's parse; over it the URL is ParseLimit."
    ),
    parse_inline_max_tags: int = typer.Option(
        2048, envvar="TRAWL_PARSE_INLINE_MAX_TAGS", help="Pages with at most this many tags parse inline."
    ),
    max_tasks: int = typer.Option(
        0, envvar="TRAWL_MAX_TASKS", help="Drain and exit (to be restarted) after this many tasks; 0: never."
    ),
    max_rss_mb: int = typer.Option(
        0, envvar="TRAWL_MAX_RSS_MB", help="Drain and exit (to be restarted) above this resident memory; 0: never."
    ),
    breaker_failures: int = typer.Option(
        5,
        envvar="TRAWL_BREAKER_FAILURES",
        help="Consecutive timeouts/5xx/connection errors of a domain that open its circuit breaker; 0: off.",
    ),
    breaker_open_seconds: float = typer.Option(
        30.0, envvar="TRAWL_BREAKER_OPEN_SECONDS", help="First open period of a domain's circuit breaker."
    ),
) -> None:
    """Run a scrape worker: claim tasks of the pool, fetch, extract, write results."""
    from trawl.queue.claimsize import parse_setting
    from trawl.worker.main import main as worker_main

    try:
        parse_setting(claim_batch)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--claim-batch / TRAWL_CLAIM_BATCH") from None
    if redis_sentinels or redis_sentinel_master:
        from trawl.redisconn.sentinel import SentinelTarget

        try:
            SentinelTarget.parse(redis_sentinels, redis_sentinel_master)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--redis-sentinels / --redis-sentinel-master") from None

    raise typer.Exit(
        worker_main(
            redis_url=redis_url,
            redis_cluster=redis_cluster,
            redis_sentinels=redis_sentinels,
            redis_sentinel_master=redis_sentinel_master,
            redis_shards=redis_shards,
            prefix=prefix,
            concurrency=concurrency,
            claim_batch=claim_batch,
            drain_seconds=drain_seconds,
            metrics_port=metrics_port,
            metrics_address=metrics_address,
            allowed_cidrs=allowed_cidrs,
            postgres_cleartext_password=postgres_cleartext_password,
            worker_id=worker_id,
            lease_seconds=lease_seconds,
            log_level=log_level,
            parse_processes=parse_processes,
            parse_seconds=parse_seconds,
            max_tasks=max_tasks,
            max_rss_mb=max_rss_mb,
            parse_inline_max_tags=parse_inline_max_tags,
            breaker_failures=breaker_failures,
            breaker_open_seconds=breaker_open_seconds,
        )
    )


def _add_commands() -> None:
    from trawl.dev.commands import app as dev_app
    from trawl.dev.commands import run

    app.add_typer(dev_app, name="dev")

    # Job tools (trawl.clitools): the module imports only typer; each command loads kube/redis/rich when run.
    from trawl.clitools.app import dlq_app, pool_app, results, secret_app, status, submit, top

    app.command("submit")(submit)
    app.command("status")(status)
    app.command("results")(results)
    app.command("top")(top)
    from trawl.clitools.app import url_history

    app.command("history")(url_history)
    app.command("run")(run)
    app.add_typer(dlq_app, name="dlq")
    app.add_typer(pool_app, name="pool")
    app.add_typer(secret_app, name="secret")


if not _worker_invocation(sys.argv):
    _add_commands()


def main() -> None:
    """Every way a command can end on the user's side is an exit status and at most one line, never a
    traceback: a closed pipe (``trawl results JOB | head``), Ctrl-C, or a :class:`CliError` raised
    outside a command's own reporting."""
    import os

    from typer._completion_classes import completion_init

    from trawl.clitools.exits import CliError

    # Typer's completion classes (the scripts of `trawl completion` call back with _TRAWL_COMPLETE set).
    completion_init()
    try:
        app()
    except BrokenPipeError:
        # The reader went away: stop quietly, as `cat` does. Point stdout at /dev/null so that the
        # interpreter's final flush does not raise the same error again.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        sys.exit(141)  # 128 + SIGPIPE, what a shell reports for a writer killed by the closed pipe
    except KeyboardInterrupt:
        sys.exit(130)
    except CliError as exc:
        print(f"error: {exc.message}", file=sys.stderr)
        if exc.hint:
            print(f"hint: {exc.hint}", file=sys.stderr)
        sys.exit(exc.code)


if __name__ == "__main__":
    main()
