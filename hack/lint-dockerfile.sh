#!/usr/bin/env bash
# Lints Dockerfiles with BuildKit's own Dockerfile frontend — the checks `docker build --check` runs
# (syntax, instruction parsing, stage/ARG/variable use, casing, JSON-form CMD/ENTRYPOINT, ...) —
# without a Docker engine or registry access (base images resolve to an empty config).
#
#   hack/lint-dockerfile.sh worker_image/Dockerfile     # exit 0 clean, 1 warnings/errors
#
# The linter is built once from the Go module proxy (github.com/moby/buildkit, pinned) and cached
# next to the Kubernetes test binaries.
set -euo pipefail

BUILDKIT_VERSION="${BUILDKIT_VERSION:-v0.34.2}"
CACHE_ROOT="${TRAWL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trawl}"
BIN="$CACHE_ROOT/k8s/dockerfile-lint-buildkit-${BUILDKIT_VERSION}/dockerfile-lint"

log() { echo "[lint-dockerfile] $*" >&2; }

if [[ ! -x "$BIN" ]]; then
  # shellcheck source=hack/lib.sh
  source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
  find_go
  WORK="$(mktemp -d)"
  trap 'rm -rf "$WORK"' EXIT
  export GOFLAGS="-mod=mod -buildvcs=false" CGO_ENABLED=0
  log "building the BuildKit Dockerfile linter $BUILDKIT_VERSION"
  mkdir -p "$(dirname "$BIN")"
  cat > "$WORK/go.mod" <<MOD
module trawl.dev/hack/dockerfilelint

go 1.24

require github.com/moby/buildkit $BUILDKIT_VERSION
MOD
  cat > "$WORK/main.go" <<'GOF'
// dockerfile-lint FILE...: BuildKit's DockerfileLint (what `docker build --check` runs), offline.
package main

import (
	"context"
	"fmt"
	"os"

	"github.com/moby/buildkit/client/llb"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	digest "github.com/opencontainers/go-digest"
)

// offline resolves every base image to a minimal config, so no registry is contacted.
type offline struct{}

func (offline) ResolveImageConfig(ctx context.Context, ref string, opt sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	cfg := `{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},"rootfs":{"type":"layers","diff_ids":[]}}`
	return ref, digest.FromString(cfg), []byte(cfg), nil
}

func main() {
	failed := false
	for _, path := range os.Args[1:] {
		dt, err := os.ReadFile(path)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		st := llb.Local("dockerfile")
		def, err := st.Marshal(context.Background())
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		sm := llb.NewSourceMap(&st, path, "Dockerfile", dt)
		sm.Definition = def
		res, err := dockerfile2llb.DockerfileLint(context.Background(), dt, dockerfile2llb.ConvertOpt{
			SourceMap: sm, MetaResolver: offline{},
		})
		if err != nil {
			fmt.Printf("%s: error: %v\n", path, err)
			failed = true
			continue
		}
		for _, w := range res.Warnings {
			line := 0
			if len(w.Location.Ranges) > 0 {
				line = int(w.Location.Ranges[0].Start.Line)
			}
			fmt.Printf("%s:%d: %s: %s (%s)\n", path, line, w.RuleName, w.Detail, w.URL)
			failed = true
		}
		if res.Error != nil {
			fmt.Printf("%s: error: %s\n", path, res.Error.Message)
			failed = true
		}
		if !failed {
			fmt.Printf("%s: ok\n", path)
		}
	}
	if failed {
		os.Exit(1)
	}
}
GOF
  (cd "$WORK" && go mod tidy >/dev/null 2>&1 && "$GO" build -trimpath -ldflags "-s -w" -o "$BIN.tmp" . && mv "$BIN.tmp" "$BIN")
fi

if [[ $# -eq 0 ]]; then
  set -- worker_image/Dockerfile
fi
exec "$BIN" "$@"
