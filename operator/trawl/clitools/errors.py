"""Errors the CLI reports as one clear line and a distinct exit code (never a traceback)."""

from __future__ import annotations

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
