#!/bin/sh
# build-template.sh OUTDIR NAME: build a built-in template's root filesystem on the host.
#
# Reads guest/templates/NAME.json (format: docs/templates.md) and writes
#   OUTDIR/templates/NAME/rootfs.ext4     sparse raw ext4 image (mkfs.ext4 -d: no mount, no loop)
#   OUTDIR/templates/NAME/template.json   name, boot settings, kernel, image, built_at,
#                                         defaults (env, workdir, user), start, ready, spec
# Bases handled here: "scratch-busybox" and "debootstrap:SUITE". A spec built on another
# template is built by spaced inside a build VM, not by this script.
# "run" steps execute with chroot(8) in the tree, without /proc or /dev mounted; env, workdir
# and user steps apply to the run steps after them and become the template's defaults.
# If OUTDIR/ca/space-ca.crt exists it is added to the image's trust store.
# Re-running with an unchanged spec and CA does nothing (SPACE_TEMPLATE_REBUILD=1
# forces a build). Needs root (chroot, file ownership in the image).
set -eu

die() { echo "build-template: error: $*" >&2; exit 1; }
say() { echo "build-template: $*"; }
step() { STEP=$((STEP + 1)); say "[$STEP] $*"; }
STEP=0

[ $# -eq 2 ] || die "usage: $0 OUTDIR NAME"
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/lib/base-busybox.sh"
. "$HERE/lib/base-debootstrap.sh"

OUT=$1
NAME=$2
case $NAME in ''|*[!a-z0-9_-]*) die "template name must be [a-z0-9_-]+, got '$NAME'" ;; esac
SPEC=${SPACE_TEMPLATE_SPEC:-$HERE/templates/$NAME.json}
SPECDIR=$(cd "$(dirname "$SPEC")" && pwd)
[ -f "$SPEC" ] || die "no spec $SPEC"
[ "$(id -u)" -eq 0 ] || die "must run as root (chroot, and file owners inside the image)"
for tool in jq mkfs.ext4 chroot sha256sum truncate; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (see scripts/install-deps.sh)"
done

# ---- validate the spec: everything below may rely on these shapes
jq -e '
  type == "object"
  and (.name | type == "string")
  and (.base | type == "string")
  and ((.packages // []) | type == "array" and all(type == "string" and test("^[a-z0-9][a-z0-9+.-]*$")))
  and ((.steps // []) | type == "array" and all(
        type == "object" and length == 1 and (
          (.run | type == "string") or
          (.copy | type == "object" and (.src | type == "string") and (.dst | type == "string")) or
          (.env | type == "object" and all(to_entries[];
              (.key | test("^[A-Za-z_][A-Za-z0-9_]*$")) and (.value | type == "string" and (contains("\n") | not)))) or
          (.workdir | type == "string" and startswith("/")) or
          (.user | type == "string"))))
  and ((.start // null) | type == "string" or type == "null")
  and ((.ready // null) | type == "string" or type == "null")
  and ((.size_mib // 256) | type == "number" and . >= 16 and . <= 65536 and . == floor)
  and ((.description // "") | type == "string")
  and ((.vcpus // 1) | type == "number" and . >= 1 and . <= 64 and . == floor)
  and ((.memory_mib // 256) | type == "number" and . >= 64 and . <= 65536 and . == floor)
' "$SPEC" >/dev/null || die "$SPEC is not a valid template spec (see docs/templates.md)"
[ "$(jq -r .name "$SPEC")" = "$NAME" ] || die "$SPEC names itself '$(jq -r .name "$SPEC")', not '$NAME'"
BASE=$(jq -r .base "$SPEC")
SIZE_MIB=$(jq -r '.size_mib // 256' "$SPEC")
PACKAGES=$(jq -r '(.packages // [])[]' "$SPEC")

mkdir -p "$OUT/templates/$NAME" "$OUT/cache"
OUT=$(cd "$OUT" && pwd)
DEST="$OUT/templates/$NAME"
CA="$OUT/ca/space-ca.crt"

# ---- up to date? The key covers what decides the image's contents: the spec, the files
# its copy steps copy (names and bytes, directories recursively), the CA and this
# builder's base code. Not the kernel (the image holds none): a rebuild replaces the
# file sandbox overlays may be backed by, so it happens only when the contents change.
CA_SHA=null
[ -f "$CA" ] && CA_SHA=$(sha256sum < "$CA" | cut -c1-64)
copied_files() {
    jq -r '(.steps // [])[] | .copy.src // empty' "$SPEC" | while IFS= read -r src; do
        [ -e "$SPECDIR/$src" ] || continue   # the copy step itself fails with the reason
        (cd "$SPECDIR" && find "$src" -type f ! -name '*.pyc' | LC_ALL=C sort | xargs -r -d '\n' sha256sum)
    done
}
KEY=$( { jq -cS . "$SPEC"; echo "$CA_SHA"; copied_files; cat "$HERE/lib/base-busybox.sh" "$HERE/lib/base-debootstrap.sh"; } | sha256sum | cut -c1-64)
if [ "${SPACE_TEMPLATE_REBUILD:-0}" != 1 ] && [ -f "$DEST/rootfs.ext4" ] &&
   [ "$(jq -r '.build_key // ""' "$DEST/template.json" 2>/dev/null)" = "$KEY" ]; then
    say "$NAME is up to date ($DEST), nothing to do"
    exit 0
fi

STARTED=$(date +%s)
WORK=$(mktemp -d "$OUT/cache/template-$NAME.XXXXXX")
trap 'rm -rf "$WORK"' EXIT INT TERM
ROOT="$WORK/root"
mkdir -p "$ROOT"

# ---- base
case $BASE in
    scratch-busybox)
        [ -z "$PACKAGES" ] || die "base scratch-busybox has no package manager; 'packages' must be empty"
        step "base: busybox tree"
        base_busybox "$ROOT"
        ;;
    debootstrap:*)
        SUITE=${BASE#debootstrap:}
        case $SUITE in ''|*[!a-z]*) die "bad suite '$SUITE'" ;; esac
        step "base: debootstrap $SUITE"
        # shellcheck disable=SC2086 # package names are validated above: no spaces or globs
        base_debootstrap "$ROOT" "$SUITE" "$OUT/cache" $PACKAGES
        ;;
    *)
        die "base '$BASE' is another template: build it through spaced's template API, see docs/templates.md"
        ;;
esac

# ---- files every template has (the agent rewrites hostname and resolv.conf per sandbox)
step "system files"
echo space > "$ROOT/etc/hostname"
cat > "$ROOT/etc/hosts" <<'EOF'
127.0.0.1	localhost
127.0.1.1	space
::1		localhost ip6-localhost ip6-loopback
EOF
rm -f "$ROOT/etc/resolv.conf"
echo "# written by space-agent when the sandbox starts" > "$ROOT/etc/resolv.conf"
mkdir -p "$ROOT/dev" "$ROOT/proc" "$ROOT/sys" "$ROOT/run" "$ROOT/tmp"
chmod 1777 "$ROOT/tmp"

# ---- steps
# State carried from step to step, as the agent will carry it at run time.
ENV_JSON='{}'
WORKDIR=/
RUNAS=root
# lookup_id FILE NAME: the numeric id of NAME in the image's passwd or group file.
lookup_id() { awk -F: -v n="$2" '$1 == n { print $3; exit }' "$ROOT/etc/$1"; }
NSTEPS=$(jq '(.steps // []) | length' "$SPEC")
i=0
while [ $i -lt "$NSTEPS" ]; do
    s=$(jq -c ".steps[$i]" "$SPEC")
    i=$((i + 1))
    kind=$(echo "$s" | jq -r 'keys[0]')
    case $kind in
        run)
            cmd=$(echo "$s" | jq -r .run)
            step "run ($i/$NSTEPS) as $RUNAS in $WORKDIR: $cmd"
            uid=$(lookup_id passwd "$RUNAS"); [ -n "$uid" ] || die "user $RUNAS not in the image"
            gid=$(awk -F: -v n="$RUNAS" '$1 == n { print $4; exit }' "$ROOT/etc/passwd")
            home=$(awk -F: -v n="$RUNAS" '$1 == n { print $6; exit }' "$ROOT/etc/passwd")
            # A clean environment: PATH/HOME/USER, then the spec's env, nothing from the host.
            set -- PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
                   HOME="$home" USER="$RUNAS" LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive
            while IFS= read -r kv; do [ -z "$kv" ] || set -- "$@" "$kv"; done <<EOF
$(echo "$ENV_JSON" | jq -r 'to_entries[] | "\(.key)=\(.value)"')
EOF
            # The pipeline's status would be sed's, so chroot's goes through a file.
            # (set -e would end the group at a failing command, so the status is caught.)
            { rc=0
              env -i "$@" chroot --userspec="$uid:$gid" "$ROOT" /bin/sh -c 'cd "$1" && eval "$2"' sh "$WORKDIR" "$cmd" || rc=$?
              echo $rc > "$WORK/rc"; } 2>&1 | sed -u 's/^/    /'
            [ "$(cat "$WORK/rc")" = 0 ] || die "step $i failed with status $(cat "$WORK/rc"): $cmd"
            ;;
        copy)
            src=$(echo "$s" | jq -r .copy.src)
            dst=$(echo "$s" | jq -r .copy.dst)
            case $src in /*|../*|*/../*|*/..|..) die "copy src '$src' must be relative to the spec's directory, without '..'" ;; esac
            case $dst in /*) ;; *) dst="$WORKDIR/$dst" ;; esac
            case $dst in */../*|*/..) die "copy dst '$dst' must not contain '..'" ;; esac
            step "copy $src -> $dst"
            [ -e "$SPECDIR/$src" ] || die "copy source $SPECDIR/$src not found"
            mkdir -p "$ROOT$(dirname "$dst")"
            cp -a "$SPECDIR/$src" "$ROOT$dst"
            ;;
        env)
            ENV_JSON=$(jq -cn --argjson a "$ENV_JSON" --argjson b "$(echo "$s" | jq -c .env)" '$a + $b')
            step "env $(echo "$s" | jq -c .env)"
            ;;
        workdir)
            WORKDIR=$(echo "$s" | jq -r .workdir)
            step "workdir $WORKDIR"
            mkdir -p "$ROOT$WORKDIR"
            ;;
        user)
            RUNAS=$(echo "$s" | jq -r .user)
            step "user $RUNAS"
            [ -n "$(lookup_id passwd "$RUNAS")" ] || die "user $RUNAS does not exist in the image (add a run step creating it first)"
            ;;
    esac
done

# ---- the deployment's CA (written by the gateway work) joins the trust store
if [ -f "$CA" ]; then
    step "installing $CA into the trust store"
    mkdir -p "$ROOT/usr/local/share/ca-certificates" "$ROOT/etc/ssl/certs"
    cp "$CA" "$ROOT/usr/local/share/ca-certificates/space-ca.crt"
    if [ -x "$ROOT/usr/sbin/update-ca-certificates" ]; then
        chroot "$ROOT" /usr/sbin/update-ca-certificates 2>&1 | sed -u 's/^/    /'
    else
        cp "$CA" "$ROOT/etc/ssl/certs/space-ca.pem"
        cat "$CA" >> "$ROOT/etc/ssl/certs/ca-certificates.crt"
    fi
fi

# ---- image: a sparse file, then mkfs.ext4 -d copies the tree in (owners and modes kept)
USED_KIB=$(du -sk "$ROOT" | cut -f1)
[ $((USED_KIB / 1024 + 16)) -lt "$SIZE_MIB" ] ||
    die "tree is $((USED_KIB / 1024)) MiB, too big for size_mib $SIZE_MIB"
step "mkfs.ext4 -d ($((USED_KIB / 1024)) MiB of files into a $SIZE_MIB MiB image)"
IMG="$WORK/rootfs.ext4"
truncate -s "${SIZE_MIB}M" "$IMG"
# lazy_itable_init=0: otherwise the guest kernel zeroes inode tables after the first
# mount, writing into every sandbox's copy-on-write overlay. -m 0: no blocks reserved for
# root (one user per disk). The label lets the agent check it mounted the right disk.
mkfs.ext4 -q -F -L space-root -m 0 -E lazy_itable_init=0,lazy_journal_init=0,root_owner=0:0 \
    -d "$ROOT" "$IMG"
e2fsck -fn "$IMG" >/dev/null 2>&1 || die "e2fsck found errors in the new image"

step "template.json"
BUILD_SECONDS=$(( $(date +%s) - STARTED ))
KERNEL_JSON=null
if [ -f "$OUT/kernel.version" ]; then
    KERNEL_JSON=$(jq -Rn '[inputs | select(test("^[a-z]+=")) | capture("^(?<k>[a-z]+)=(?<v>.*)$")] | map({(.k): .v}) | add' \
        < "$OUT/kernel.version")
fi
jq -n --arg name "$NAME" --argjson kernel "$KERNEL_JSON" \
      --argjson size "$(stat -c %s "$IMG")" --argjson alloc "$(( $(stat -c %b "$IMG") * 512 ))" \
      --arg built_at "$(date -u +%Y-%m-%dT%H:%M:%SZ)" --argjson secs "$BUILD_SECONDS" \
      --argjson env "$ENV_JSON" --arg workdir "$WORKDIR" --arg user "$RUNAS" \
      --arg ca "$CA_SHA" --arg key "$KEY" --slurpfile spec "$SPEC" '
  { name: $name,
    description: ($spec[0].description // ""),
    vcpus: ($spec[0].vcpus // 1),
    memory_mib: ($spec[0].memory_mib // 256),
    kernel: $kernel,
    image: { file: "rootfs.ext4", format: "raw", fs: "ext4", size_bytes: $size, allocated_bytes: $alloc },
    built_at: $built_at,
    build_seconds: $secs,
    defaults: { env: $env, workdir: $workdir, user: $user },
    start: ($spec[0].start // null),
    ready: ($spec[0].ready // null),
    ca_sha256: (if $ca == "null" then null else $ca end),
    build_key: $key,
    spec: $spec[0] }' > "$WORK/template.json"

# Replace the previous build only now, image first: template.json names a complete image.
mv "$IMG" "$DEST/rootfs.ext4"
mv "$WORK/template.json" "$DEST/template.json"
say "done: $DEST/rootfs.ext4 ($SIZE_MIB MiB, $(( $(stat -c %b "$DEST/rootfs.ext4") / 2048 )) MiB allocated) in $BUILD_SECONDS s"
