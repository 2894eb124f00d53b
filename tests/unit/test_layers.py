"""The package's rooms and layers (docs/architecture.md, "Layout" and "Layers") hold as the code grows.

- the layer contract in pyproject.toml (``[tool.importlinter]``): a package imports only the layers below
  it, and the packages of one layer not each other (the operator, the workers and the CLI share no code
  but the layers beneath them);
- the package root holds only the console script (trawl.entry, which starts a plain `trawl worker` without
  typer, then trawl.cli) and packages;
- no module imports another package's private name;
- every Lua script is a file that names its KEYS and ARGV;
- no function needs scrolling: none in the package is over 120 lines.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "operator" / "trawl"
MAX_FUNCTION_LINES = 120


def _modules() -> list[tuple[str, Path]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out.append((name, path))
    return out


def test_the_layer_contract_is_kept() -> None:
    lint = Path(sys.executable).with_name("lint-imports")
    out = subprocess.run([str(lint)], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout, out.stdout


def test_the_package_root_holds_only_the_console_script_and_packages() -> None:
    files = sorted(p.name for p in PACKAGE.iterdir() if p.is_file())
    assert files == ["__init__.py", "cli.py", "entry.py", "py.typed"], files
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    contract = (ROOT / "pyproject.toml").read_text()
    for package in packages:  # every package has its place in the layer contract
        assert f"trawl.{package}" in contract, package


def _package_of(module: str, path: Path) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def test_no_module_imports_a_private_name_of_another_package() -> None:
    found = []
    for module, path in _modules():
        own = _package_of(module, path)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = own.split(".")[: len(own.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            if not source.startswith("trawl"):
                continue
            source_package = (
                source if (PACKAGE.parent / source.replace(".", "/")).is_dir() else source.rpartition(".")[0]
            )
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__") and source_package != own:
                    found.append(f"{module}: from {source} import {alias.name}")
    assert found == []


def test_every_lua_script_is_a_file_that_names_its_keys_and_arguments() -> None:
    scripts = sorted(PACKAGE.rglob("*.lua"))
    assert len(scripts) > 20
    for script in scripts:
        if script.name == "lib.lua" or script.stem.endswith("_lib"):
            continue  # a library put in front of scripts: the scripts name the keys and arguments
        lines = script.read_text().split("\n")
        head = lines[: next(i for i, line in enumerate(lines) if not line.startswith("--"))]  # the header
        assert any(line.startswith("-- KEYS:") for line in head), script
        assert any(line.startswith("-- ARGV:") for line in head), script
    inline = []
    for module, path in _modules():
        if "register_script(" in path.read_text() and "read_script(" not in path.read_text():
            inline.append(module)
    assert inline == [], "scripts registered from Python strings"


def test_no_function_is_longer_than_a_screen() -> None:
    long = []
    for module, path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{module}.{node.name}: {lines} lines")
    assert long == []
