#!/bin/sh
# fetch-kernel.sh OUTDIR: fetch Debian's cloud kernel and lay out what a space guest boots.
#
# Produces, under OUTDIR:
#   vmlinux          uncompressed ELF with a PVH entry note (QEMU microvm boots it directly)
#   vmlinuz          only if no PVH vmlinux could be made: the bzImage as shipped
#   kernel.version   key=value lines: package, version, release (uname -r), boot, kernel
#   kernel.config    the kernel's build configuration (for reference and checks)
#   modules/*.ko     the virtio drivers that are modules in this kernel, uncompressed
#   modules/order    one .ko file name per line, in the order they must be loaded
#   cache/           the downloaded .deb (kept so a re-run never downloads again)
#
# The package comes from Debian's archive through the machine's own apt configuration
# (apt-get download), never from a URL written here. Re-running with the same package
# version does nothing. SPACE_KERNEL_FLAVOUR picks another flavour (default cloud-amd64,
# whose ext4 is built in; "amd64" also works).
set -eu

die() { echo "fetch-kernel: error: $*" >&2; exit 1; }
say() { echo "fetch-kernel: $*"; }

[ $# -eq 1 ] || die "usage: $0 OUTDIR"
OUT=$1
FLAVOUR=${SPACE_KERNEL_FLAVOUR:-cloud-amd64}
META=linux-image-$FLAVOUR
# Drivers the guest needs; each is loaded with its dependencies, built-in ones are skipped.
# fuse: volume mounts (the agent relays /dev/fuse to the host's space-volfs).
WANTED="virtio_ring virtio virtio_mmio virtio_blk virtio_net virtio_console virtio_rng fuse"

for tool in apt-get apt-cache dpkg-deb od depmod modprobe readelf; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (see scripts/install-deps.sh)"
done

# ---- which package: the one the metapackage's candidate version depends on
say "resolving $META through apt"
PKG=$(apt-cache show --no-all-versions "$META" 2>/dev/null |
      sed -n 's/^Depends: *//p' | tr ',' '\n' | sed 's/^ *//; s/ .*//' |
      grep -E "^linux-image-[0-9].*-$FLAVOUR\$" | head -n 1) || true
if [ -z "$PKG" ]; then
    # Without apt lists (cleaned image, no archive access) an existing kernel still boots.
    if [ -f "$OUT/kernel.version" ]; then
        say "warning: apt cannot resolve $META now; keeping the kernel already in $OUT"
        exit 0
    fi
    die "cannot resolve $META (is apt configured? try: apt-get update)"
fi
VERSION=$(apt-cache show --no-all-versions "$PKG" | sed -n 's/^Version: *//p' | head -n 1)
[ -n "$VERSION" ] || die "no candidate version for $PKG"
RELEASE=${PKG#linux-image-}
say "package $PKG version $VERSION (uname -r $RELEASE)"

if [ -f "$OUT/kernel.version" ] &&
   grep -qx "version=$VERSION" "$OUT/kernel.version" &&
   grep -qx "package=$PKG" "$OUT/kernel.version" &&
   [ -f "$OUT/modules/order" ] &&
   [ "$(cat "$OUT/modules/wanted" 2>/dev/null)" = "$WANTED" ] &&
   { [ -f "$OUT/vmlinux" ] || [ -f "$OUT/vmlinuz" ]; }; then
    say "up to date ($OUT/kernel.version), nothing to do"
    exit 0
fi

mkdir -p "$OUT/cache"
OUT=$(cd "$OUT" && pwd)
DEB="$OUT/cache/${PKG}_${VERSION}_amd64.deb"
if [ ! -f "$DEB" ]; then
    say "downloading $PKG=$VERSION"
    # apt downloads as the unprivileged _apt user when it can reach the directory (else
    # it warns and downloads as root): so a world-writable temporary directory, not OUT.
    WORKDL=$(mktemp -d "${TMPDIR:-/tmp}/space-kernel-dl.XXXXXX")
    chmod 1777 "$WORKDL"
    (cd "$WORKDL" && apt-get download -q "$PKG=$VERSION") || { rm -rf "$WORKDL"; die "apt-get download failed"; }
    mv "$WORKDL"/*.deb "$DEB.tmp"
    mv "$DEB.tmp" "$DEB"
    rm -rf "$WORKDL"
else
    say "using cached $DEB"
fi

WORK=$(mktemp -d "$OUT/cache/work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT INT TERM
say "extracting package"
dpkg-deb -x "$DEB" "$WORK/root"
BZ="$WORK/root/boot/vmlinuz-$RELEASE"
[ -f "$BZ" ] || die "package has no boot/vmlinuz-$RELEASE"
cp "$WORK/root/boot/config-$RELEASE" "$WORK/kernel.config"

# ---- vmlinux: the compressed payload inside the bzImage, located by the setup header
# (boot protocol 2.08+): setup_sects at 0x1f1, payload_offset at 0x248 and payload_length
# at 0x24c, the offset counted from the start of the protected-mode code.
u8()  { od -An -t u1 -j "$1" -N 1 "$BZ" | tr -d ' '; }
u32() { od -An -t u4 -j "$1" -N 4 "$BZ" | tr -d ' '; }
hex() { od -An -t x1 -j "$1" -N "$2" "$BZ" | tr -d ' \n'; }
BOOT=bzimage
if [ "$(hex $((0x202)) 4)" = "48647253" ]; then         # "HdrS"
    SETUP_SECTS=$(u8 $((0x1f1)))
    [ "$SETUP_SECTS" -eq 0 ] && SETUP_SECTS=4
    POFF=$(( (SETUP_SECTS + 1) * 512 + $(u32 $((0x248))) ))
    PLEN=$(u32 $((0x24c)))
    MAGIC=$(hex "$POFF" 6)
    case $MAGIC in
        1f8b*)         DECOMP="gzip -dc" ;;
        fd377a585a00)  DECOMP="xz -dc" ;;
        02214c18*)     DECOMP="lz4 -dc" ;;
        28b52ffd*)     DECOMP="zstd -dc" ;;
        425a68*)       DECOMP="bzip2 -dc" ;;
        5d00*)         DECOMP="xz -dc --format=lzma" ;;
        *)             DECOMP="" ;;
    esac
    if [ -n "$DECOMP" ] && command -v "${DECOMP%% *}" >/dev/null 2>&1; then
        say "decompressing payload ($PLEN bytes at $POFF) with ${DECOMP%% *}"
        # Decompressors stop at the end of their stream; the kernel appends the
        # uncompressed size after it, which some of them report as trailing garbage.
        tail -c +"$((POFF + 1))" "$BZ" | head -c "$PLEN" | $DECOMP > "$WORK/vmlinux" 2>"$WORK/decomp.err" || true
        # Xen ELF note type 18 = XEN_ELFNOTE_PHYS32_ENTRY, the PVH entry point.
        if [ "$(od -An -t x1 -N 4 "$WORK/vmlinux" | tr -d ' \n')" = "7f454c46" ] &&
           readelf -n "$WORK/vmlinux" 2>/dev/null | grep -E '^ *Xen ' | grep -q '(0x00000012)'; then
            BOOT=pvh
        else
            say "payload is not an ELF with a PVH note; falling back to the bzImage"
            cat "$WORK/decomp.err" >&2
        fi
    else
        say "unknown or unsupported payload compression (magic $MAGIC); falling back to the bzImage"
    fi
else
    say "no bzImage setup header; falling back to the file as shipped"
fi

# ---- modules: resolve with modprobe against a depmod'ed copy of the package tree
# (the list asked for is kept in modules/wanted: a changed list makes a re-run redo this)
# The cloud flavour builds ext4 in; others (amd64) have it as a module the root needs.
WANTED_BASE=$WANTED
grep -q '^CONFIG_EXT4_FS=m' "$WORK/kernel.config" && WANTED="$WANTED ext4"
say "resolving modules: $WANTED"
depmod -b "$WORK/root" "$RELEASE"
mkdir -p "$WORK/modules"
: > "$WORK/modules/order"
for mod in $WANTED; do
    modprobe -d "$WORK/root" -S "$RELEASE" --show-depends "$mod" > "$WORK/deps" ||
        die "module $mod not found in $PKG"
    while read -r kind path _; do
        [ "$kind" = insmod ] || continue          # "builtin NAME": nothing to load
        file=$(basename "$path")
        case $file in
            *.ko.xz)  name=${file%.xz};  xz -dc "$path"   > "$WORK/modules/$name.tmp" ;;
            *.ko.zst) name=${file%.zst}; zstd -qdc "$path" > "$WORK/modules/$name.tmp" ;;
            *.ko.gz)  name=${file%.gz};  gzip -dc "$path" > "$WORK/modules/$name.tmp" ;;
            *.ko)     name=$file;        cp "$path" "$WORK/modules/$name.tmp" ;;
            *)        die "unexpected module file $file" ;;
        esac
        mv "$WORK/modules/$name.tmp" "$WORK/modules/$name"
        grep -qx "$name" "$WORK/modules/order" || echo "$name" >> "$WORK/modules/order"
    done < "$WORK/deps"
done
echo "$WANTED_BASE" > "$WORK/modules/wanted"
say "module load order: $(tr '\n' ' ' < "$WORK/modules/order")"

# ---- install: replace the previous kernel's files only once everything is ready
rm -rf "$OUT/modules" "$OUT/vmlinux" "$OUT/vmlinuz"
mv "$WORK/modules" "$OUT/modules"
if [ "$BOOT" = pvh ]; then
    mv "$WORK/vmlinux" "$OUT/vmlinux"; KFILE=vmlinux
else
    cp "$BZ" "$OUT/vmlinuz"; KFILE=vmlinuz
fi
mv "$WORK/kernel.config" "$OUT/kernel.config"
cat > "$OUT/kernel.version.tmp" <<EOF
package=$PKG
version=$VERSION
release=$RELEASE
boot=$BOOT
kernel=$KFILE
EOF
mv "$OUT/kernel.version.tmp" "$OUT/kernel.version"
# Older downloads are useless once a newer kernel is installed.
for f in "$OUT"/cache/*.deb; do [ "$f" = "$DEB" ] || rm -f "$f"; done
say "done: $OUT/$KFILE (boot=$BOOT), $(wc -l < "$OUT/modules/order") modules"
