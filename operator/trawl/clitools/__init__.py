"""The job tools of the ``trawl`` CLI: submit, status, results, dlq, top.

Each command group has an access module (Kubernetes and Redis calls, returning plain data) and the
rendering lives in :mod:`trawl.clitools.output`; :mod:`trawl.clitools.app` holds the typer commands
and imports nothing heavy at module level, so ``trawl worker`` and ``trawl operator`` start fast.
"""
