"""`trawl dev`: the local stack (control plane, Redis, operator, workers, demo site) on one machine."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time
from pathlib import Path
from types import FrameType
from typing import Any

import typer
from rich.console import Console

from trawl.clitools.exits import CliError, reported
from trawl.clitools.exits import console as cli_console

from . import procs

app = typer.Typer(help="Run Trawl locally: a real API server, Redis, the operator, workers and a demo site.")
console = Console()


def _summary(result: object) -> None:
    from .stack import DemoResult

    assert isinstance(result, DemoResult)
    ok = result.phase == "Succeeded" and result.results == result.expected_results
    colour = "green" if ok else "red"
    console.print(
        f"\n[bold {colour}]ScrapeJob {result.phase}[/] in {result.seconds:.1f}s: {result.pages} pages "
        f"fetched, {result.results} product records (expected {result.expected_results})."
    )
    console.print(f"Deployment replicas over time: {' -> '.join(map(str, result.replicas_seen))}")
    console.print(f"Local worker processes over time: {' -> '.join(map(str, result.workers_seen))}")
    console.print(f"Results: {result.results_location}")
    if result.sample:
        console.print(f"A record: {json.dumps(result.sample, ensure_ascii=False)[:400]}")
    # One machine-readable line for scripts and tests.
    print(
        f"DEMO phase={result.phase} pages={result.pages} results={result.results} "
        f"expected={result.expected_results} replicas={','.join(map(str, result.replicas_seen))} "
        f"workers={','.join(map(str, result.workers_seen))} seconds={result.seconds:.1f}",
        flush=True,
    )


@app.command()
def up(
    keep: bool = typer.Option(False, "--keep", help="Leave the stack running; `trawl dev down` stops it."),
    timeout: float = typer.Option(300.0, help="Seconds to wait for the sample job."),
) -> None:
    """Start the local stack, run a sample crawl with live progress, print a summary, stop everything."""
    from .stack import LocalStack, check_programs, fresh_workdir, remove_workdir

    check_programs()
    if keep:
        _up_detached(timeout)
        return
    procs.install_signal_handlers()
    workdir = fresh_workdir()
    stack = LocalStack(workdir)
    ok = False
    try:
        stack.start(log=lambda m: console.print(f"[dim]{m}[/]"))
        console.print(f"[bold]Stack up.[/] KUBECONFIG={stack.kubeconfig}")
        result = stack.run_demo(timeout=timeout)
        _wait_idle(stack)
        result.workers_seen = _worker_history(stack)
        _summary(result)
        ok = result.phase == "Succeeded" and result.results == result.expected_results
    finally:
        console.print("[dim]stopping the stack ...[/]")
        stack.stop()
        remove_workdir(workdir)
    raise typer.Exit(0 if ok else 1)


def _worker_history(stack: object) -> list[int]:
    from .stack import NAMESPACE, POOL, LocalStack, _changes

    assert isinstance(stack, LocalStack) and stack.supervisor is not None
    return _changes([n for (_t, dep, n) in stack.supervisor.history if dep == f"{NAMESPACE}/{POOL}-workers"])


def _wait_idle(stack: object, timeout: float = 90.0) -> None:
    """After the job, watch the pool scale back to zero (the demo shows both directions). The bound is
    generous: on a loaded machine the operator's passes and the workers' drains come late; if it is reached,
    say how far the pool got instead of leaving the summary to look as if it never tried."""
    from .stack import NAMESPACE, POOL, LocalStack

    assert isinstance(stack, LocalStack) and stack.supervisor is not None
    deadline = time.monotonic() + timeout
    with console.status("waiting for the pool to scale back to zero ..."):
        while time.monotonic() < deadline and stack.supervisor.live(NAMESPACE, f"{POOL}-workers") > 0:
            time.sleep(0.5)
    live = stack.supervisor.live(NAMESPACE, f"{POOL}-workers")
    if live:
        console.print(f"[yellow]the pool did not scale back to zero within {timeout:.0f}s: {live} worker(s) left[/]")


def _up_detached(timeout: float) -> None:
    from .progress import watch_job
    from .stack import JOB, NAMESPACE, POOL, api_for, fresh_workdir, state_dir

    state = state_dir() / "state.json"
    if state.exists():
        console.print(f"[red]A stack is already running ({state}); run `trawl dev down` first.[/]")
        raise typer.Exit(1)
    workdir = fresh_workdir()
    proc = procs.start(
        [sys.executable, "-m", "trawl.cli", "dev", "serve", "--workdir", str(workdir), "--state", str(state)],
        log_path=workdir / "stack.log",
        die_with_parent=False,
    )
    procs.forget(proc)
    deadline = time.monotonic() + 180
    with console.status("starting the stack ..."):
        while not state.exists():
            if proc.poll() is not None or time.monotonic() > deadline:
                console.print(f"[red]The stack did not start; see {workdir / 'stack.log'}[/]")
                raise typer.Exit(1)
            time.sleep(0.3)
    info = json.loads(state.read_text())
    final, _ = watch_job(api_for(Path(info["kubeconfig"])), NAMESPACE, JOB, POOL, None, timeout=timeout)
    console.print(f"\nScrapeJob {JOB}: {(final.get('status') or {}).get('phase')}")
    console.print(
        f"The stack keeps running. Use it with:\n\n  export KUBECONFIG={info['kubeconfig']}\n"
        f"  kubectl get scrapejobs,scrapepools -n {NAMESPACE}\n\nStop it with `trawl dev down`."
    )


@app.command(hidden=True)
def serve(
    workdir: Path = typer.Option(..., help="Working directory of the stack."),
    state: Path = typer.Option(..., help="Where to write the stack's state when ready."),
) -> None:
    """Run the stack until SIGTERM (what `trawl dev up --keep` starts in the background)."""
    from .stack import LocalStack, remove_workdir

    def stop(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    stack = LocalStack(workdir)
    try:
        stack.start()
        stack.apply_samples()
        assert stack.redis is not None and stack.site is not None
        state.write_text(json.dumps({
            "pid": os.getpid(), "kubeconfig": str(stack.kubeconfig), "workdir": str(workdir),
            "redis": stack.redis.url, "site": stack.site.url,
        }))  # fmt: skip
        while True:
            time.sleep(1)
    except KeyboardInterrupt:
        pass
    finally:
        stack.stop()
        state.unlink(missing_ok=True)
        remove_workdir(workdir)


@app.command()
def down(timeout: float = typer.Option(90.0, help="Seconds to wait for the stack to stop.")) -> None:
    """Stop a stack started with `trawl dev up --keep`."""
    from .stack import state_dir

    state = state_dir() / "state.json"
    if not state.exists():
        console.print("No local stack is running.")
        return
    pid = int(json.loads(state.read_text())["pid"])
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        state.unlink(missing_ok=True)
        console.print("The stack was not running any more; cleaned up its state.")
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            console.print("Stack stopped.")
            return
        time.sleep(0.3)
    os.killpg(pid, signal.SIGKILL)
    state.unlink(missing_ok=True)
    console.print("[yellow]The stack did not stop in time and was killed.[/]")


def run(
    manifest: Path = typer.Argument(..., help="A ScrapeJob manifest (YAML), as you would kubectl apply it."),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the results (JSON Lines) here."),
    dead_letters: Path | None = typer.Option(
        None, "--dead-letters", help="Write the dead letters (JSON Lines) here (default: listed on stderr)."
    ),
    redis_url: str | None = typer.Option(
        None, "--redis-url", help="Use this Redis (e.g. the dev stack's) instead of starting a redis-server."
    ),
    workers: int = typer.Option(1, "--workers", min=1, max=16, help="In-process workers."),
    concurrency: int = typer.Option(8, "--concurrency", min=1, max=512, help="Tasks in flight per worker."),
    allow_cidr: list[str] = typer.Option(
        [],
        "--allow-cidr",
        help="Private/loopback network the workers may fetch from and write sinks to, e.g. 127.0.0.0/8 (repeatable).",
    ),
    timeout: float = typer.Option(600.0, "--timeout", help="Give up after this many seconds (0: never)."),
) -> None:
    """Run a ScrapeJob manifest on this machine, without a cluster: print its results and dead letters.

    The manifest is validated by the operator's own models; a local redis-server (or --redis-url) holds
    the queue, in-process workers fetch, extract and write exactly as in a cluster. Results of the
    default sink (a Redis stream) go to stdout or --output; JsonLines and Webhook sinks write where the
    manifest says.
    """
    with reported():
        import contextlib

        from .localrun import load_manifest, run_job

        spec = load_manifest(manifest)
        for cidr in allow_cidr:
            import ipaddress

            try:
                ipaddress.ip_network(cidr, strict=False)
            except ValueError as exc:
                raise CliError(f"--allow-cidr {cidr!r}: {exc}") from None
        err = cli_console(stderr=True)
        with contextlib.ExitStack() as stack:
            url = redis_url
            if url is None:
                from .redis_server import RedisServer
                from .stack import check_programs

                check_programs()
                url = stack.enter_context(RedisServer()).url
            results_out = stack.enter_context(output.open("w", encoding="utf-8")) if output else sys.stdout
            dead_file = stack.enter_context(dead_letters.open("w", encoding="utf-8")) if dead_letters else None
            dead_buffer = None
            if dead_file is None:
                import io

                dead_buffer = io.StringIO()
            status = stack.enter_context(err.status("queued ...")) if err.is_terminal else None

            def progress(stats: Any) -> None:
                if status is not None:
                    status.update(
                        f"{stats.succeeded + stats.dead}/{stats.total} done, {stats.in_flight} in flight, "
                        f"{stats.dead} dead"
                    )

            outcome = asyncio.run(
                run_job(
                    spec,
                    url,
                    workers=workers,
                    concurrency=concurrency,
                    allowed_cidrs=list(allow_cidr),
                    time_limit=timeout,
                    results_out=results_out,
                    dead_out=dead_file or dead_buffer,
                    progress=progress,
                )
            )
            results_out.flush()
        if dead_buffer is not None and dead_buffer.getvalue():
            err.print("dead letters:", style="bold red", markup=False)
            for line in dead_buffer.getvalue().splitlines():
                rec = json.loads(line)
                err.print(f"  {rec['url']}  {rec['errorClass']}: {rec['error']}", markup=False)
        where = f" to {output}" if output else ""
        err.print(
            f"{outcome.total} tasks: {outcome.succeeded} succeeded, {outcome.dead} dead-lettered; "
            f"{outcome.results} results written{where} in {outcome.seconds:.1f}s",
            markup=False,
        )
        raise typer.Exit(0 if outcome.dead <= spec.max_dead_letters else 1)
