#!/usr/bin/env bash
# Builds every image the one-node cluster runs, without any registry, as `docker save` tarballs in
# ~/.cache/trawl/images named by the hash of their inputs (a warm run only checks hashes):
#   pause    localhost/pause:local                      sandbox image (pause.go)
#   coredns  localhost/coredns:local                    the CoreDNS binary alone
#   redis    docker.io/library/redis:7.4.2-alpine       Debian's redis-server under the chart's default tag
#   trawl    ghcr.io/trawl-dev/trawl:e2e                the UNMODIFIED worker_image/Dockerfile via `make images`
# The Dockerfile's base (python:3.11.14-slim-bookworm) is a debootstrapped bookworm rootfs with python3 and
# the host's extra CA certificates, imported into a private dockerd under the FROM name.
#
#   hack/realnode/images.sh [pause|coredns|redis|trawl]...   # prints one line per image: NAME TARBALL
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
NICE="nice -n 19"
DOCKER="${DOCKER:-/usr/bin/docker}"   # Debian's CLI, same version as Debian's dockerd
TRAWL_IMAGE="${TRAWL_IMAGE:-ghcr.io/trawl-dev/trawl:e2e}"
PYTHON_IMAGE="docker.io/library/python:3.11.14-slim-bookworm"
REDIS_IMAGE="docker.io/library/redis:7.4.2-alpine"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
mkdir -p "$IMAGES_DIR"
TMP="$(mktemp -d)"
DOCKERD_PID=""
RUN_CONTAINERD_EXISTED=0; [[ -e /run/containerd ]] && RUN_CONTAINERD_EXISTED=1
cleanup() {
  if [[ -n "$DOCKERD_PID" ]] && kill -0 "$DOCKERD_PID" 2>/dev/null; then
    kill "$DOCKERD_PID"
    for _ in $(seq 100); do kill -0 "$DOCKERD_PID" 2>/dev/null || break; sleep 0.2; done
    kill -9 "$DOCKERD_PID" 2>/dev/null || true
  fi
  # dockerd's containerd keeps shim sockets under /run/containerd/s whatever its exec root: remove
  # what it left there if that folder is new.
  if [[ -n "$DOCKERD_PID" && "$RUN_CONTAINERD_EXISTED" == 0 ]]; then
    find /run/containerd -depth -type d -empty -delete 2>/dev/null || true
  fi
  # dockerd's exec root holds mounts (netns, overlay) while running: nothing may stay mounted.
  { grep -E " $TMP" /proc/mounts || true; } | awk '{print $2}' | sort -r | while read -r m; do umount "$m" 2>/dev/null || umount -l "$m"; done
  rm -rf "$TMP"
}
trap cleanup EXIT

hash_files() { sha256sum "$@" | sha256sum | cut -c1-16; }

# The Debian rootfs every image starts from; the include list and the CA certificates key it.
ROOTFS_KEY="$(printf 'bookworm minbase python3 python3-venv python-is-python3 ca-certificates\n' | cat - /usr/local/share/ca-certificates/*.crt 2>/dev/null | sha256sum | cut -c1-16)"
ROOTFS="$IMAGES_DIR/rootfs-bookworm-$ROOTFS_KEY"
rootfs() {
  [[ -x "$ROOTFS/usr/bin/python" ]] && return 0
  log "debootstrap bookworm into $ROOTFS"
  rm -rf "$ROOTFS.tmp"
  $NICE debootstrap --variant=minbase --include=python3,python3-venv,python-is-python3,ca-certificates \
    bookworm "$ROOTFS.tmp" "$DEBIAN_MIRROR" > "$TMP/debootstrap.log" 2>&1 || { tail -20 "$TMP/debootstrap.log"; return 1; }
  # TLS to the package registries is re-signed by CAs installed on the host: pip inside builds needs them.
  cp /usr/local/share/ca-certificates/*.crt "$ROOTFS.tmp/usr/local/share/ca-certificates/" 2>/dev/null || true
  chroot "$ROOTFS.tmp" update-ca-certificates >/dev/null
  chroot "$ROOTFS.tmp" apt-get clean
  rm -rf "$ROOTFS.tmp"/var/lib/apt/lists/* "$ROOTFS.tmp"/var/cache/apt/*.bin
  : > "$ROOTFS.tmp/etc/resolv.conf"
  mv "$ROOTFS.tmp" "$ROOTFS"
}

image_pause() {
  local bin; bin="$("$REALNODE_HACK/build.sh" pause >/dev/null && source "$REALNODE_HACK/lib.sh" && echo "$CACHE_ROOT/k8s/pause-$(sha256sum "$REALNODE_HACK/pause.go" | cut -c1-12)/pause")"
  local out; out="$IMAGES_DIR/pause-$(hash_files "$bin" "$REALNODE_HACK/mkimage.py").tar"
  if [[ ! -f "$out" ]]; then
    mkdir -p "$TMP/pause"; cp "$bin" "$TMP/pause/pause"
    python3 "$REALNODE_HACK/mkimage.py" --rootfs "$TMP/pause" --tag localhost/pause:local --out "$out.tmp" --entrypoint '["/pause"]'
    mv "$out.tmp" "$out"
  fi
  echo "pause $out"
}

image_coredns() {
  local out; out="$IMAGES_DIR/coredns-$(hash_files "$COREDNS_DIR/coredns" "$REALNODE_HACK/mkimage.py").tar"
  if [[ ! -f "$out" ]]; then
    mkdir -p "$TMP/coredns/etc"; cp "$COREDNS_DIR/coredns" "$TMP/coredns/coredns"
    python3 "$REALNODE_HACK/mkimage.py" --rootfs "$TMP/coredns" --tag localhost/coredns:local --out "$out.tmp" --entrypoint '["/coredns"]'
    mv "$out.tmp" "$out"
  fi
  echo "coredns $out"
}

image_redis() {
  local out="$IMAGES_DIR/redis-$ROOTFS_KEY.tar"
  if [[ ! -f "$out" ]]; then
    rootfs
    log "redis image from Debian's redis-server"
    local r="$TMP/redis"
    cp -a "$ROOTFS" "$r"; cp /etc/resolv.conf "$r/etc/resolv.conf"
    # No service starts inside the chroot.
    printf '#!/bin/sh\nexit 101\n' > "$r/usr/sbin/policy-rc.d"; chmod +x "$r/usr/sbin/policy-rc.d"
    $NICE chroot "$r" sh -c 'apt-get update -qq && apt-get install -y -qq --no-install-recommends redis-server >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*'
    rm -f "$r/usr/sbin/policy-rc.d"; : > "$r/etc/resolv.conf"; mkdir -p -m 777 "$r/data"
    python3 "$REALNODE_HACK/mkimage.py" --rootfs "$r" --tag "$REDIS_IMAGE" --out "$out.tmp" --cmd '["redis-server"]' --workdir /data
    mv "$out.tmp" "$out"; rm -rf "$r"
  fi
  echo "redis $out"
}

dockerd_up() {
  [[ -n "$DOCKERD_PID" ]] && return 0
  command -v dockerd >/dev/null || { log "no dockerd: apt-get install docker.io (hack/realnode/deps.sh)"; return 1; }
  # Its layer cache stays in ~/.cache/trawl/docker so a rebuild after a code change reuses the
  # dependency layers. No iptables and no bridge: it must not touch the host's or the node's network;
  # builds use the host network instead.
  export DOCKER_HOST="unix://$TMP/docker.sock"
  dockerd --data-root "$CACHE_ROOT/docker" --exec-root "$TMP/exec" -H "$DOCKER_HOST" --pidfile "$TMP/docker.pid" \
    --iptables=false --ip-forward=false --ip-masq=false --bridge=none > "$TMP/dockerd.log" 2>&1 &
  DOCKERD_PID=$!
  for _ in $(seq 120); do "$DOCKER" info >/dev/null 2>&1 && return 0; sleep 0.5; done
  log "dockerd did not start"; tail -20 "$TMP/dockerd.log"; return 1
}

image_trawl() {
  # Inputs: the Dockerfile, its build context (.dockerignore lets in only these) and the base rootfs.
  local key
  key="$(cd "$REPO_ROOT" && find worker_image/Dockerfile .dockerignore pyproject.toml README.md requirements operator -type f \
    ! -path '*__pycache__*' ! -name '*.pyc' ! -path '*.egg-info*' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)"
  local out="$IMAGES_DIR/trawl-$key-$ROOTFS_KEY.tar"
  if [[ ! -f "$out" ]]; then
    rootfs
    dockerd_up
    if ! "$DOCKER" image inspect "$PYTHON_IMAGE" >/dev/null 2>&1; then
      tar -C "$ROOTFS" -c . | "$DOCKER" import -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        -c 'ENV LANG=C.UTF-8' -c 'CMD ["python3"]' - "$PYTHON_IMAGE" >/dev/null
    fi
    log "make images ($TRAWL_IMAGE)"
    # Legacy builder: BuildKit would fetch the `# syntax=` frontend from a registry. Host network for apt/pip.
    DOCKER_BUILDKIT=0 $NICE make -s -C "$REPO_ROOT" images DOCKER="$DOCKER" IMAGE="${TRAWL_IMAGE%:*}" IMAGE_TAG="${TRAWL_IMAGE##*:}" \
      DOCKER_BUILD_FLAGS="--network host -q" > "$TMP/build.log" 2>&1 || { tail -40 "$TMP/build.log"; return 1; }
    "$DOCKER" save "$TRAWL_IMAGE" -o "$out.tmp"
    mv "$out.tmp" "$out"
    # Old tarballs of this image are superseded.
    find "$IMAGES_DIR" -maxdepth 1 -name 'trawl-*.tar' ! -path "$out" -delete
  fi
  echo "trawl $out"
}

for name in "${@:-pause coredns redis trawl}"; do
  # shellcheck disable=SC2086
  for n in $name; do timed "image $n" "image_$n"; done
done
