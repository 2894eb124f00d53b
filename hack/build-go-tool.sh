#!/usr/bin/env bash
# Builds a pinned Go command-line tool from the Go module proxy once and caches it under
# ~/.cache/trawl/<folder>/<name>-<version>/ (folder `tools` unless FOLDERS says otherwise). Prints the
# binary's path; a second run is instant.
#
#   hack/build-go-tool.sh rulecheck    # `promtool check rules` from Prometheus's packages (hack/rulecheck)
#   hack/build-go-tool.sh kstatus      # Flux's health computation, cli-utils' kstatus (hack/kstatus)
#   hack/build-go-tool.sh promtool     # the whole promtool (a much longer cold build: every SD SDK)
#   hack/build-go-tool.sh actionlint   # GitHub Actions workflow linter (tests of .github/workflows/)
#   hack/build-go-tool.sh minio        # MinIO server for the S3 sink tests (hack/build-minio.sh; ~25 min cold)
#   hack/build-go-tool.sh kind         # kind for tests/e2e_kind (hack/build-kind.sh; needs Docker to run)
#
# Why build instead of downloading: this environment reaches package registries only, and the Go
# module proxy serves these tools as modules. `go install pkg@version` needs no go.mod of ours.
set -euo pipefail

declare -A PACKAGES=(
  [rulecheck]="local:hack/rulecheck"   # our module (go.mod/go.sum pin Prometheus), built in place
  [kstatus]="local:hack/kstatus"       # our module (go.mod/go.sum pin sigs.k8s.io/cli-utils), built in place
  [promtool]="github.com/prometheus/prometheus/cmd/promtool"
  [actionlint]="github.com/rhysd/actionlint/cmd/actionlint"
  [minio]="github.com/minio/minio"
  [kind]="sigs.k8s.io/kind"
)
declare -A VERSIONS=(
  [rulecheck]="$(awk '$1 == "github.com/prometheus/prometheus" {print $2; exit}' "$(dirname "${BASH_SOURCE[0]}")/rulecheck/go.mod")"
  # The pinned cli-utils and a digest of our sources: an edit of main.go builds anew instead of reusing
  # the cached binary of the old source.
  [kstatus]="$(awk '$1 == "sigs.k8s.io/cli-utils" {print $2; exit}' "$(dirname "${BASH_SOURCE[0]}")/kstatus/go.mod")-$(
    cat "$(dirname "${BASH_SOURCE[0]}")"/kstatus/{go.mod,go.sum,main.go} | sha256sum | cut -c1-12)"
  [promtool]="${PROMTOOL_VERSION:-v0.316.0}"   # Prometheus 3.x (its Go module is tagged v0.3xx)
  [actionlint]="${ACTIONLINT_VERSION:-v1.7.12}"
  [minio]="${MINIO_VERSION:-v0.0.0-20260212201848-7aac2a2c5b7c}"   # MinIO publishes no semver module tags
  [kind]="${KIND_VERSION:-v0.30.0}"
)
# Where earlier scripts cached these, kept so that warm caches stay warm.
declare -A FOLDERS=([minio]="s3" [kind]="k8s")

name="${1:?usage: hack/build-go-tool.sh rulecheck|kstatus|promtool|actionlint|minio|kind}"
pkg="${PACKAGES[$name]:?unknown tool $name}"
version="${VERSIONS[$name]}"
CACHE_ROOT="${TRAWL_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/trawl}"
DEST="$CACHE_ROOT/${FOLDERS[$name]:-tools}/$name-$version"
BIN="$DEST/$name"
log() { echo "[build-go-tool] $*" >&2; }

if [[ -x "$BIN" ]]; then
  echo "$BIN"
  exit 0
fi

# shellcheck source=hack/lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
find_go
mkdir -p "$DEST"
start=$(date +%s)
log "building $name $version ($pkg) with $("$GO" version)"
export CGO_ENABLED=0 GOFLAGS="-trimpath -buildvcs=false"
if [[ "$pkg" == local:* ]]; then
  (cd "$(dirname "${BASH_SOURCE[0]}")/../${pkg#local:}" && "$GO" build -mod=readonly -ldflags "-s -w" -o "$BIN.tmp" .)
  mv "$BIN.tmp" "$BIN"
else
  GOBIN="$DEST/.tmp" "$GO" install -ldflags "-s -w" "$pkg@$version"
  mv "$DEST/.tmp/$name" "$BIN"
  rmdir "$DEST/.tmp"
fi
log "built $name in $(( $(date +%s) - start ))s"
echo "$BIN"
