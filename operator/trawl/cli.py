"""The ``trawl`` command line: operator, worker, local stack, CRDs and job tools."""

from __future__ import annotations

from pathlib import Path

import typer

app = typer.Typer(
    name="trawl",
    help="Trawl: Kubernetes-native web scraping at scale.",
    no_args_is_help=True,
    add_completion=False,
)


@app.callback()
def _root() -> None:
    """Trawl: Kubernetes-native web scraping at scale."""


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
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Debug logging."),
) -> None:
    """Run the operator: reconcile ScrapeJobs, ScrapePools and CronScrapeJobs."""
    from trawl.operator.main import run

    run(
        namespaces=namespace,
        all_namespaces=all_namespaces,
        metrics_port=metrics_port,
        health_port=health_port,
        verbose=verbose,
    )


def main() -> None:
    app()


if __name__ == "__main__":
    main()
