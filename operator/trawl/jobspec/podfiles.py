"""Where a worker pod finds what its pool mounts: the Secrets its jobs may use, and its volumes.

The pool mounts the Secrets its jobs may use (``spec.worker.secrets``) at
``/var/run/trawl/secrets/<name>/<key>``, and the worker reads the key there (:func:`read_secret`), or,
for a worker run by hand, from the environment variable ``TRAWL_SECRET_<NAME>_<KEY>``
(:func:`secret_env_name`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

SECRETS_DIR_ENV = "TRAWL_SECRETS_DIR"


SECRETS_DIR = "/var/run/trawl/secrets"


# Local runs only (trawl dev up, cluster tests): the directory standing for the pod's root, under which the
# supervisor places the pool's volumes; a job's JsonLines directory is looked up beneath it.
VOLUMES_ROOT_ENV = "TRAWL_VOLUMES_ROOT"


def local_path(path: str, environ: Mapping[str, str] | None = None) -> str:
    """``path`` as this worker process sees it: under TRAWL_VOLUMES_ROOT when the supervisor set one."""
    root = (os.environ if environ is None else environ).get(VOLUMES_ROOT_ENV)
    return str(Path(root) / path.lstrip("/")) if root else path


class MissingSecret(LookupError):
    """A job references a Secret key the worker cannot read."""


def secret_env_name(secret_name: str, key: str) -> str:
    """The environment variable a worker reads a Secret key from: TRAWL_SECRET_<NAME>_<KEY>."""
    return "TRAWL_SECRET_" + re.sub(r"[^A-Za-z0-9]", "_", f"{secret_name}_{key}").upper()


def read_secret(name: str, key: str, environ: Mapping[str, str] | None = None) -> bytes:
    """The value of Secret ``name``'s ``key``: the mounted file, else ``TRAWL_SECRET_<NAME>_<KEY>``."""
    env = os.environ if environ is None else environ
    directory = Path(env.get(SECRETS_DIR_ENV) or SECRETS_DIR)
    if key not in (".", "..") and "/" not in name + key:
        try:
            return (directory / name / key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            pass
    value = env.get(secret_env_name(name, key))
    if value:
        return value.encode()
    raise MissingSecret(
        f"Secret key {name}/{key} is not readable: no file {directory / name / key} and no "
        f"{secret_env_name(name, key)}; list Secret {name!r} in the ScrapePool's spec.worker.secrets"
    )
