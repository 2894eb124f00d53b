"""Fixtures of the cluster layer: one real etcd + kube-apiserver per session, a namespace per test.

There is no controller manager: a deleted namespace stays Terminating and owner references are not
garbage collected, so each test gets a fresh, uniquely named namespace instead of cleaning up.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator

import pytest

from trawl.dev.controlplane import BinariesNotFound, ControlPlane, find_assets


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """A running control plane with the Trawl CRDs applied and Established."""
    try:
        assets = find_assets()
    except BinariesNotFound as exc:
        pytest.fail(f"cluster tests need kube-apiserver and etcd: {exc}", pytrace=False)
    with ControlPlane(assets=assets) as cp:
        cp.apply_crds()
        yield cp


@pytest.fixture
def namespace(control_plane: ControlPlane, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace named after the test; deleted (without waiting) afterwards."""
    stem = re.sub(r"[^a-z0-9]+", "-", request.node.name.lower()).strip("-")[:40].strip("-")
    name = f"{stem}-{uuid.uuid4().hex[:6]}"
    control_plane.create_namespace(name)
    try:
        yield name
    finally:
        control_plane.kubectl("delete", "namespace", name, "--wait=false", "--ignore-not-found", check=False)
