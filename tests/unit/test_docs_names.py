"""The documents name code that exists: every `trawl.…` module or attribute and every repository path
they put in backticks is still there (a move that makes one untrue changes the document with it)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCUMENTS = [
    "README.md",
    "charts/trawl/README.md",
    *(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").glob("*.md")),
]
NAME = re.compile(r"(\S*\s)?`(trawl\.[A-Za-z_][\w.]*)`")
PATH = re.compile(r"`((?:operator/trawl|tests|bench|hack|charts|docs|manifests)/[\w./-]*\w)`")


def _exists(dotted: str) -> bool:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for attribute in parts[cut:]:
            if not hasattr(found, attribute):
                return False
            found = getattr(found, attribute)
        return True
    return False


@pytest.mark.parametrize("document", DOCUMENTS)
def test_the_names_a_document_gives_exist(document: str) -> None:
    text = (ROOT / document).read_text()
    missing = [
        name
        for before, name in NAME.findall(text)
        if not before.strip().endswith("logger") and not _exists(name)  # a logger's name is not a module's
    ]
    missing += [path for path in PATH.findall(text) if not (ROOT / path).exists()]
    assert missing == []
