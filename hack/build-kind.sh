#!/usr/bin/env bash
# Builds kind (Kubernetes in Docker) from the Go module proxy at a pinned version (KIND_VERSION) and
# caches it; prints the binary's path (instant once built). kind needs a Docker engine to create
# clusters; building it does not.
exec "$(dirname "${BASH_SOURCE[0]}")/build-go-tool.sh" kind
