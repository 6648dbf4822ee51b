#!/bin/sh
# build-test-initramfs.sh OUTDIR: the boot-test initramfs, OUTDIR/test/initramfs-test.cpio.
#
# Same layout as the agent's (guest/build-initramfs.sh), but /init is test-init.sh run by
# Debian's busybox-static, so the boot path is checked without the agent.
set -eu
die() { echo "build-test-initramfs: error: $*" >&2; exit 1; }
[ $# -eq 1 ] || die "usage: $0 OUTDIR"
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=$1
BUSYBOX=${SPACE_BUSYBOX:-/bin/busybox}
[ -x "$BUSYBOX" ] || die "$BUSYBOX not found (apt-get install busybox-static)"
ldd "$BUSYBOX" 2>&1 | grep -q -E 'not a dynamic executable|statically linked' || die "$BUSYBOX is not static (need busybox-static)"
EXTRA=$(mktemp -d "${TMPDIR:-/tmp}/space-test-extra.XXXXXX")
trap 'rm -rf "$EXTRA"' EXIT INT TERM
mkdir -p "$EXTRA/bin"
cp "$BUSYBOX" "$EXTRA/bin/busybox"
"$HERE/../build-initramfs.sh" "$OUT" "$HERE/test-init.sh" "$OUT/test/initramfs-test.cpio" "$EXTRA"
