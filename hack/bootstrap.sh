#!/usr/bin/env bash
# Installs (as root) or names (otherwise) the system packages Trawl's demo, tests and CI need.
#
#   hack/bootstrap.sh            # run by the Makefile first (so by `make demo`, `make test`, CI's `.ci/run`)
#
# It runs before anything is built, so a missing program is reported within seconds instead of
# after minutes of building. The list is hack/debian-packages. As root with apt-get, missing
# packages are installed; otherwise it prints one line (stdout) with the exact command and exits 1.
# TRAWL_SKIP_BOOTSTRAP=1 skips the check (e.g. a machine that provides the programs another way).
set -euo pipefail

[[ "${TRAWL_SKIP_BOOTSTRAP:-}" == 1 ]] && exit 0
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
list="${TRAWL_PACKAGE_LIST:-$here/debian-packages}"

present() {
  local proof="$1"
  case "$proof" in
    python3:*) command -v python3 >/dev/null 2>&1 && python3 -c "import ${proof#python3:}" >/dev/null 2>&1 ;;
    /*) compgen -G "$proof" >/dev/null ;;
    *) command -v "$proof" >/dev/null 2>&1 ;;
  esac
}

missing=()
while read -r package proof _; do
  [[ -z "$package" || "$package" == \#* ]] && continue
  present "${proof:-$package}" || missing+=("$package")
done <"$list"

if ((${#missing[@]} == 0)); then
  # python3 is present: check its version too (the package needs 3.11+).
  if ! python3 -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
    echo "trawl: Python 3.11 or newer is needed (python3 is $(python3 -V 2>&1)); install it and retry"
    exit 1
  fi
  exit 0
fi

if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
  echo "[bootstrap] installing Debian packages: ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  # Wait for a dpkg lock held by another apt run rather than fail on it.
  apt=(apt-get -o DPkg::Lock::Timeout=300)
  if ! { "${apt[@]}" update -qq && "${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
    echo "trawl: apt-get install -y ${missing[*]} failed (its error is above)"
    exit 1
  fi
  # Debian starts packaged services on install; the tests and the demo start their own on free ports.
  for service in redis-server nginx postgresql; do
    if [[ " ${missing[*]} " == *" $service "* || ( "$service" == nginx && " ${missing[*]} " == *" nginx-light "* ) ]]; then
      (systemctl stop "$service" >/dev/null 2>&1 || service "$service" stop >/dev/null 2>&1 || true)
    fi
  done
  exit 0
fi

# On stdout: the Makefile shows this line as its one error (progress above goes to stderr).
echo "trawl: missing ${missing[*]}; install with: sudo apt-get install -y ${missing[*]}"
exit 1
