#!/usr/bin/env bash
# Regenerates the dependency locks in requirements/ from pyproject.toml (run after changing a dependency):
#
#   make lock                          # or hack/lock.sh
#   hack/lock.sh --upgrade-package X   # extra arguments go to `uv pip compile` (e.g. raise one package)
#
# Three locks, each a superset of the previous, with every file's sha256 (pip --require-hashes):
#   requirements/runtime.txt  the package's own dependencies   (worker_image/Dockerfile)
#   requirements/test.txt     + the test extra                  (make setup, so make test and .ci/run)
#   requirements/bench.txt    + the bench extra                 (make bench-setup, docs/benchmarks.md)
#   requirements/browser.txt  runtime + the browser extra       (worker_image/Dockerfile.browser)
# They are universal (valid for any platform and Python >= 3.11), so one set serves laptops, CI and
# the image. Without other arguments the versions already locked are kept where pyproject.toml allows
# them; `--upgrade` moves everything to the newest allowed versions.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

UV_VERSION="${UV_VERSION:-0.13.9}"
CACHE_ROOT="${TRAWL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trawl}"
UV_VENV="$CACHE_ROOT/uv-$UV_VERSION"
if [[ ! -x "$UV_VENV/bin/uv" ]]; then
  echo "[lock] installing uv $UV_VERSION from PyPI into $UV_VENV" >&2
  python3 -m venv "$UV_VENV"
  "$UV_VENV/bin/python" -m pip install --quiet "uv==$UV_VERSION"
fi

compile() {
  local out="$1"
  shift
  "$UV_VENV/bin/uv" pip compile pyproject.toml --quiet --universal --python-version 3.11 --generate-hashes \
    --custom-compile-command "make lock" -o "requirements/$out" "$@"
}
# The largest set first; the smaller ones are constrained to its versions, so the three agree.
compile bench.txt --extra test --extra bench "$@"
compile test.txt --extra test -c requirements/bench.txt "$@"
compile runtime.txt -c requirements/bench.txt "$@"
compile browser.txt --extra browser -c requirements/bench.txt "$@"
echo "[lock] wrote requirements/runtime.txt test.txt bench.txt browser.txt" >&2
