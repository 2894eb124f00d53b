"""`make test` runs every test: a skipped one fails the run unless it is one of ALLOWED_SKIPS below.

hack/test.sh (so `make test`, so CI) sets TRAWL_CHECK_SKIPS=1; tests/conftest.py then registers SkipCheck,
which fails the pytest session (exit status 1, the skipped tests listed with their reasons) when a test
was skipped for a reason not allowed here. A skip means something the set-up should have provided is
missing (a tool not built, a package not installed, a node that cannot start): the run must say so, not
pass. Without the variable (`make test-unit`, a bare `pytest`) skips are only reported, as pytest does.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import pytest

ENV = "TRAWL_CHECK_SKIPS"


@dataclass(frozen=True)
class AllowedSkip:
    test: str  # a node id, or its start (a file or folder)
    reason: str  # a part of the skip's reason
    why: str  # why this skip does not hide a gap in the set-up
    applies: Callable[[], bool] = lambda: True  # where it is allowed at all

    def covers(self, nodeid: str, reason: str) -> bool:
        return nodeid.startswith(self.test) and self.reason in reason and self.applies()


# The only skips `make test` accepts.
ALLOWED_SKIPS: tuple[AllowedSkip, ...] = (
    AllowedSkip(
        "tests/e2e_kind/",
        "no Docker engine",
        "kind runs its nodes as Docker containers; the set-up installs no engine (the e2e layer runs the same "
        "scenarios on a real node instead)",
    ),
    AllowedSkip(
        "tests/setup/test_bootstrap.py::test_as_root_bootstrap_installs_what_is_missing",
        "needs root",
        "it installs a Debian package for real, which only root can; as another user `make test` runs only "
        "with E2E=skip (no real node without root) and this test goes with it",
        lambda: os.geteuid() != 0,
    ),
)


def _reason(report: pytest.TestReport | pytest.CollectReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


class SkipCheck:
    """Collects every skip of the session; at its end fails the session on those not allowed."""

    def __init__(self) -> None:
        self.allowed: list[tuple[str, str]] = []
        self.refused: list[tuple[str, str]] = []

    def _note(self, report: pytest.TestReport | pytest.CollectReport) -> None:
        if not report.skipped or hasattr(report, "wasxfail"):
            return
        reason = _reason(report)
        kept = any(rule.covers(report.nodeid, reason) for rule in ALLOWED_SKIPS)
        (self.allowed if kept else self.refused).append((report.nodeid, reason))

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self._note(report)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        self._note(report)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.refused and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        tr = terminalreporter
        for nodeid, reason in self.allowed:
            tr.write_line(f"allowed skip: {nodeid}: {reason}")
        if not self.refused:
            return
        tr.section(f"{ENV}: {len(self.refused)} skipped test(s) that make test must run", sep="=", red=True)
        for nodeid, reason in self.refused:
            tr.write_line(f"{nodeid}: {reason}", red=True)
        tr.write_line(
            "A skip here means the set-up lacks something (the reason says what); the skips make test accepts "
            "are ALLOWED_SKIPS in tests/skip_check.py."
        )

    def pytest_unconfigure(self, config: pytest.Config) -> None:
        # After pytest's own last line (N passed, M skipped), so that the verdict is the last thing seen.
        tr = config.pluginmanager.get_plugin("terminalreporter")
        if self.refused and tr is not None:
            tr.write_line(
                f"{ENV}: failed: {len(self.refused)} test(s) skipped that make test must run (listed above)", red=True
            )


def register(config: pytest.Config) -> None:
    """Install the check when the run asks for it (TRAWL_CHECK_SKIPS=1)."""
    if os.environ.get(ENV) == "1":
        config.pluginmanager.register(SkipCheck(), "trawl-skip-check")
