#!/bin/sh
# sync-guest.sh SRC DST: copies the guest files (vmlinux, initramfs.cpio, templates/)
# baked into the image at SRC onto the host's data disk at DST, for the node role.
#
# Why a copy: spaced pins a template's rootfs.ext4 by hard-linking it into
# <data-dir>/images/ (docs/templates.md), so that a newer image never changes the file
# under a running sandbox's disk overlay. A hard link needs the guest files on the data
# directory's filesystem; inside the image they are not, and a rolling update of the node
# DaemonSet replaces them. So the init container copies them next to the data directory,
# and spaced runs with --guest-dir=DST.
#
# Every file that differs is written to a temporary name and renamed over the old one,
# never overwritten in place: a pinned inode (a hard link in <data-dir>/images/) keeps
# its old contents. Unchanged files are left alone (cmp), so a restart copies nothing.
# Files that are no longer in SRC are left in DST: spaced's snapshot sweep decides what
# is still in use, not this script. Only what spaced reads is copied (vmlinux,
# initramfs.cpio, kernel.version, templates/), so SRC may also be a build tree
# (build/guest, with its objects and caches: `make install` uses this script too).
set -eu
[ $# -eq 2 ] || { echo "usage: sync-guest.sh SRC DST" >&2; exit 2; }
src=$1
dst=$2
[ -f "$src/vmlinux" ] || { echo "sync-guest: $src/vmlinux missing (image built without make guest?)" >&2; exit 1; }
mkdir -p "$dst"
dst=$(cd "$dst" && pwd) # absolute: the loops below run in SRC
cd "$src"
guest_files() {
    for f in ./vmlinux ./initramfs.cpio ./kernel.version; do [ -f "$f" ] && echo "$f"; done
    [ -d ./templates ] && find ./templates -type f
    return 0
}
[ -d ./templates ] && find ./templates -type d | while IFS= read -r d; do mkdir -p "$dst/$d"; done
guest_files | while IFS= read -r f; do
    if ! cmp -s "$f" "$dst/$f"; then
        cp --sparse=always "$f" "$dst/$f.sync-tmp"
        mv -f "$dst/$f.sync-tmp" "$dst/$f"
        echo "sync-guest: updated ${f#./}"
    fi
done
