"""How a CLI command ends: an error is one clear line (and a hint) with a distinct exit code, never a
traceback. Shared by the job tools (:mod:`trawl.clitools.app`) and ``trawl run`` (:mod:`trawl.dev.commands`)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:
    from rich.console import Console

EXIT_FAILED = 1  # the job failed (submit --wait), or another error
EXIT_UNREACHABLE = 3  # no kubeconfig, or the API server does not answer
EXIT_NO_CRDS = 4  # the Trawl CRDs are not installed
EXIT_NOT_FOUND = 5  # the job or pool does not exist
EXIT_REDIS = 6  # the pool's Redis cannot be reached or its settings cannot be resolved
EXIT_FORBIDDEN = 7  # RBAC denies the call
EXIT_OTHER_SINK = 8  # the job's results are not in a Redis stream
EXIT_TIMEOUT = 9  # --wait gave up
EXIT_STALLED = 10  # --wait: the job is Stalled (its reason says why) and will not move by itself


class CliError(Exception):
    """A user-facing failure: ``message`` is printed on stderr, ``code`` is the exit status."""

    def __init__(self, message: str, code: int = EXIT_FAILED, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.code = code
        self.hint = hint


def console(stderr: bool = False) -> Console:
    from rich.console import Console

    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:
        console = Console(stderr=stderr, highlight=False, width=max(console.width, 160))
    return console


@contextmanager
def reported() -> Iterator[None]:
    """CliError -> one red line (and a hint) on stderr and its exit code; Ctrl-C -> 130. No tracebacks."""
    try:
        yield
    except CliError as exc:
        from rich.markup import escape

        err = console(stderr=True)
        err.print(f"[bold red]error:[/] {escape(exc.message)}", soft_wrap=True)
        if exc.hint:
            err.print(f"[dim]hint: {escape(exc.hint)}[/]", soft_wrap=True)
        raise typer.Exit(exc.code) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
