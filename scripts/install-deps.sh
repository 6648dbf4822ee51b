#!/usr/bin/env bash
# install-deps.sh: installs the Debian packages space needs to build, test and run.
#
# Idempotent and quiet when everything is present: it only calls apt-get when a
# package is missing, so `make run` / `make test` stay fast on a prepared machine.
# Packages come from the machine's own apt configuration; nothing else is fetched.
set -euo pipefail

PKGS=(
  # build
  build-essential clang libclang-rt-14-dev pkg-config
  libevent-dev libjansson-dev libsqlite3-dev libssl-dev libpq-dev zlib1g-dev libcmocka-dev
  # VM runtime
  qemu-system-x86 qemu-utils
  # guest images
  busybox-static debootstrap cpio e2fsprogs kmod lz4 xz-utils zstd dpkg-dev jq
  # networking (gateway, namespaces) and test tools
  iproute2 nftables curl openssl socat bind9-dnsutils
  # tests
  python3 python3-pytest python3-yaml sqlite3 procps postgresql tmux
  # the web console's browser test (tests/e2e/test_console.py)
  chromium
  # the E2B Python SDK's dependencies (the SDK itself: tests/e2b/install.sh, in a venv)
  python3-venv python3-protobuf python3-dateutil python3-typing-extensions python3-wcmatch
  python3-rich python3-h2 python3-anyio python3-certifi python3-idna python3-sniffio
  python3-attr python3-packaging
)
# Node.js (for the E2B SDK tests, and npm for the web console build): any install that provides node and npm will do; some
# images ship a nodejs package that bundles npm and conflicts with Debian's npm.
command -v node >/dev/null 2>&1 || PKGS+=(nodejs)
command -v npm >/dev/null 2>&1 || PKGS+=(npm)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "install-deps: missing packages (${missing[*]}) and not root; run: sudo $0" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q --no-install-recommends "${missing[@]}"
