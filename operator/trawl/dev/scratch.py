"""What the fixture servers that live in a scratch folder share (PostgreSQL, MinIO).

``stop`` ends the process but keeps the folder, so a test can stage an outage and start the same
server again with its data and port; ``close`` stops and removes the folder. Used as a context
manager, a server that fails to come up is closed before the error propagates.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import TracebackType
from typing import ClassVar, Self


class ScratchServer:
    workdir: Path | None
    log_name: ClassVar[str]  # the process's log file inside ``workdir``

    def _begin(self) -> Self:
        """Create the folder and start the server (what ``with`` does first)."""
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.stop()
        if self.workdir is not None:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    def log_tail(self, n: int = 40) -> str:
        if self.workdir is None:
            return ""
        try:
            return "\n".join((self.workdir / self.log_name).read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""

    def __enter__(self) -> Self:
        try:
            return self._begin()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
