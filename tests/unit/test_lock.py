"""The dependency locks (requirements/*.txt, `make lock`) match pyproject.toml and agree with each other."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
LOCKS = {"runtime": [], "test": ["test"], "bench": ["test", "bench"], "browser": ["browser"]}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;\\]+)(?:\s*;\s*([^\\]+?))?\s*\\?$", re.M)


def _pins(name: str) -> dict[str, str]:
    text = (ROOT / "requirements" / f"{name}.txt").read_text()
    return {canonicalize_name(m[1]): m[2] for m in PIN.finditer(text)}


def _requirements(extras: list[str]) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"]) + [r for e in extras for r in project["optional-dependencies"][e]]
    return [Requirement(line) for line in lines]


@pytest.mark.parametrize("lock", LOCKS)
def test_every_declared_dependency_is_locked_within_its_bounds(lock: str) -> None:
    pins = _pins(lock)
    for req in _requirements(LOCKS[lock]):
        if req.marker is not None and not req.marker.evaluate({"python_version": "3.11"}):
            continue
        name = canonicalize_name(req.name)
        assert name in pins, f"{req.name} missing from requirements/{lock}.txt: run `make lock`"
        assert req.specifier.contains(pins[name], prereleases=True), (
            f"requirements/{lock}.txt pins {req.name}=={pins[name]} outside {req.specifier}: run `make lock`"
        )


@pytest.mark.parametrize("lock", LOCKS)
def test_every_pin_carries_hashes(lock: str) -> None:
    text = (ROOT / "requirements" / f"{lock}.txt").read_text()
    blocks = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[2])
    for block in blocks:
        if "==" in block.split("\n", 1)[0]:
            assert "--hash=sha256:" in block, block.split("\n", 1)[0]


def test_the_locks_agree_on_shared_packages() -> None:
    bench = _pins("bench")
    for lock in ("runtime", "test", "browser"):
        pins = _pins(lock)
        assert pins, lock
        differ = {n: (v, bench.get(n)) for n, v in pins.items() if bench.get(n) != v}
        assert not differ, f"requirements/{lock}.txt disagrees with bench.txt: {differ}"


def test_redis_client_and_kombu_fit_together() -> None:
    """The regression behind the lock: kombu[redis] 5.7 needs redis>=6, which arq rules out."""
    bench = _pins("bench")
    assert int(bench["redis"].split(".")[0]) < 6
    assert tuple(int(x) for x in bench["kombu"].split(".")[:2]) < (5, 7)
