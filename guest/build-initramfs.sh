#!/bin/sh
# build-initramfs.sh OUTDIR INIT_BINARY [OUTPUT [EXTRA_DIR]]: pack the guest's initramfs.
#
# The archive (newc cpio, uncompressed: see docs/guest.md for the measurement) holds
#   /init            INIT_BINARY (normally build/guest/space-agent, PID 1)
#   /modules/*.ko    the virtio modules from OUTDIR/modules (made by fetch-kernel.sh)
#   /modules/order   their load order, one file name per line
#   /dev/console     so PID 1 starts with a console (only when run as root: mknod)
#   /dev /proc /sys /newroot /tmp   empty mount points the agent uses
# OUTPUT defaults to OUTDIR/initramfs.cpio. EXTRA_DIR, if given, is copied over the tree
# (the boot test uses it to add busybox); the agent's initramfs never needs it.
# Set SPACE_INITRAMFS_COMPRESS=lz4 to get an lz4 (legacy format) archive instead.
set -eu

die() { echo "build-initramfs: error: $*" >&2; exit 1; }
say() { echo "build-initramfs: $*"; }

[ $# -ge 2 ] && [ $# -le 4 ] || die "usage: $0 OUTDIR INIT_BINARY [OUTPUT [EXTRA_DIR]]"
OUT=$1
INIT=$2
OUTPUT=${3:-$OUT/initramfs.cpio}
EXTRA=${4:-}
COMPRESS=${SPACE_INITRAMFS_COMPRESS:-none}

[ -f "$INIT" ] || die "init binary $INIT not found (make agent)"
[ -f "$OUT/modules/order" ] || die "$OUT/modules/order not found (run guest/fetch-kernel.sh $OUT first)"
[ -z "$EXTRA" ] || [ -d "$EXTRA" ] || die "extra directory $EXTRA not found"
command -v cpio >/dev/null 2>&1 || die "cpio not found (see scripts/install-deps.sh)"

STAGE=$(mktemp -d "${TMPDIR:-/tmp}/space-initramfs.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT INT TERM

say "staging $INIT as /init"
mkdir -p "$STAGE/dev" "$STAGE/proc" "$STAGE/sys" "$STAGE/newroot" "$STAGE/tmp" "$STAGE/modules"
chmod 1777 "$STAGE/tmp"
cp "$INIT" "$STAGE/init"
chmod 0755 "$STAGE/init"
while read -r mod; do
    [ -n "$mod" ] || continue
    case $mod in */*|.*) die "bad module name '$mod' in $OUT/modules/order" ;; esac
    [ -f "$OUT/modules/$mod" ] || die "module $mod listed in order but missing"
    cp "$OUT/modules/$mod" "$STAGE/modules/$mod"
done < "$OUT/modules/order"
cp "$OUT/modules/order" "$STAGE/modules/order"
say "added $(wc -l < "$OUT/modules/order") modules"
if [ "$(id -u)" -eq 0 ]; then
    mknod -m 0600 "$STAGE/dev/console" c 5 1
else
    say "warning: not root, no /dev/console in the archive (init starts without a console)"
fi
if [ -n "$EXTRA" ]; then
    say "adding $EXTRA"
    cp -a "$EXTRA/." "$STAGE/"
fi

mkdir -p "$(dirname "$OUTPUT")"
# Sorted names and a fixed owner make the archive reproducible for the same inputs.
(cd "$STAGE" && find . -mindepth 1 | LC_ALL=C sort |
    cpio --quiet -o -H newc -R 0:0 --reproducible) > "$OUTPUT.tmp"
case $COMPRESS in
    none) ;;
    lz4)  lz4 -l -q -9 -f "$OUTPUT.tmp" "$OUTPUT.tmp.lz4" && mv "$OUTPUT.tmp.lz4" "$OUTPUT.tmp" ;;
    *)    die "SPACE_INITRAMFS_COMPRESS must be none or lz4" ;;
esac
mv "$OUTPUT.tmp" "$OUTPUT"
say "wrote $OUTPUT ($(wc -c < "$OUTPUT") bytes, compression $COMPRESS)"
