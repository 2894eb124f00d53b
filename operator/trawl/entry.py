"""The ``trawl`` console script: ``trawl worker`` without typer when its options are plain, else trawl.cli.

A worker pod runs ``trawl worker`` at every start; its options come from the operator's environment
variables, which :mod:`trawl.worker.cliargs` reads without importing typer (a tenth of the start-up).
Every other command, and a worker command line that is not plain (``--help``, an error), goes to
:func:`trawl.cli.main` as before.
"""

from __future__ import annotations

import sys

from trawl.boot.worker import is_worker_invocation, prepare


def main() -> None:
    if is_worker_invocation(sys.argv):
        prepare()
        from trawl.worker.cliargs import run_plain

        run_plain(sys.argv)  # exits when it ran the worker
    from trawl.cli import main as cli_main

    cli_main()
