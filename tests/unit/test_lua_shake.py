"""The queue's scripts carry only the library helpers they use (trawl.redisconn.luashake)."""

from __future__ import annotations

import re

import pytest
from lupa import lua51

from trawl.queue.client import SCRIPT_NAMES, load_script_source
from trawl.redisconn.luashake import names_used, shake, split_library
from trawl.redisconn.scripts import read_script

pytestmark = pytest.mark.unit

LIB = read_script("trawl.queue", "lib")


def test_the_library_splits_losslessly_into_its_helpers() -> None:
    head, helpers = split_library(LIB)
    assert head + "".join(h.text for h in helpers) == LIB
    assert [h.name for h in helpers] == re.findall(r"^local function (\w+)\(", LIB, re.MULTILINE)
    # The shape the splitter relies on: every top-level statement is a helper closed by a column-0 `end`.
    for h in helpers:
        code = "\n".join(line for line in h.text.split("\n") if line and not line.startswith("--"))
        assert code.startswith(f"local function {h.name}(") and code.endswith("\nend"), h.name
    assert "[[" not in LIB and "--[" not in LIB  # long brackets would hide names from the scan


def test_a_helper_named_only_in_a_comment_or_a_string_is_not_kept() -> None:
    lib = "-- a\nlocal function a()\n  return 1\nend\n\n-- b calls a\nlocal function b()\n  return a()\nend\n"
    assert "function a(" not in shake(lib, "-- b is not called\nreturn 'b'")
    kept = shake(lib, "return b()")
    assert "local function a(" in kept and "local function b(" in kept  # b's helper comes with it
    assert kept.index("function a(") < kept.index("function b(")  # the library's order: a is visible to b


@pytest.mark.parametrize("name", sorted(SCRIPT_NAMES))
def test_every_script_compiles_and_calls_only_what_it_defines(name: str) -> None:
    src = load_script_source(name)
    body = src.split("\n", 1)[1]  # Redis reads the shebang; plain Lua does not
    compiles = lua51.LuaRuntime().eval("function(s) local f, e = loadstring(s); return f ~= nil, e end")
    ok, err = compiles(body)
    assert ok, err
    # Every helper named anywhere in what ships (the script or a helper it kept) is defined in it; Redis
    # would only say so when the line runs ("Script attempted to access nonexistent global variable").
    _, helpers = split_library(LIB)
    for h in helpers:
        if h.name in names_used(body):
            assert f"local function {h.name}(" in body, (name, h.name)


def test_scripts_carry_fewer_helpers_than_the_library() -> None:
    _, helpers = split_library(LIB)
    kept = {n: sum(f"local function {h.name}(" in load_script_source(n) for h in helpers) for n in SCRIPT_NAMES}
    assert kept["ack"] < len(helpers) // 2 and kept["register"] <= 2
