# base-debootstrap.sh: the "debootstrap:SUITE" template base, sourced by build-template.sh.
#
# base_debootstrap DIR SUITE CACHEDIR PACKAGE...: fill the empty directory DIR with a
# Debian SUITE (minbase variant plus PACKAGEs) made by debootstrap from the mirror the
# machine's apt already uses. The pristine tree is kept in CACHEDIR, keyed by suite, mirror
# and packages, so a rebuild copies it instead of downloading and installing again.
# debootstrap resolves Depends but not virtual packages: a spec lists their providers
# itself (code-interpreter-v1: python3-cffi-backend, libboost-regex1.74.0).

# apt_mirror SUITE: print the URI of the first apt source that carries SUITE itself (not
# SUITE-security or SUITE-updates), from deb822 *.sources files or one-line *.list files
# under SPACE_APT_ETC (default /etc/apt; tests point it elsewhere).
apt_mirror() {
    suite=$1
    etc=${SPACE_APT_ETC:-/etc/apt}
    for f in "$etc"/sources.list.d/*.sources; do
        [ -f "$f" ] || continue
        # deb822: stanzas separated by blank lines; take URIs of a "deb" stanza whose
        # Suites field lists SUITE exactly and which is not disabled.
        awk -v suite="$suite" '
            function flush() {
                if (types ~ /(^| )deb( |$)/ && enabled != "no" && (" " suites " ") ~ (" " suite " ") && uris != "") {
                    split(uris, u, " "); print u[1]; found = 1; exit
                }
                types = ""; suites = ""; uris = ""; enabled = ""
            }
            /^[ \t]*#/ { next }
            /^[ \t]*$/ { flush(); next }
            { key = tolower($1); sub(/:$/, "", key); $1 = ""; sub(/^ +/, "")
              if (key == "types") types = $0; else if (key == "suites") suites = $0
              else if (key == "uris") uris = $0; else if (key == "enabled") enabled = tolower($0) }
            END { if (!found) flush() }' "$f"
    done
    for f in "$etc"/sources.list "$etc"/sources.list.d/*.list; do
        [ -f "$f" ] || continue
        # one-line: deb [options] URI SUITE COMPONENT...
        sed -e 's/#.*//' -e 's/\[[^]]*\]//' "$f" |
            awk -v suite="$suite" '$1 == "deb" && $3 == suite { print $2 }'
    done
}

base_debootstrap() {
    dir=$1 suite=$2 cachedir=$3
    shift 3
    command -v debootstrap >/dev/null 2>&1 || die "debootstrap not found (apt-get install debootstrap)"
    mirror=$(apt_mirror "$suite" | head -n 1)
    [ -n "$mirror" ] || die "no apt source for suite $suite in ${SPACE_APT_ETC:-/etc/apt} (cannot pick a mirror)"
    include=$(echo "$@" | tr ' ' ',')
    key=$(printf '%s\n' "$suite" "$mirror" "$include" | sha256sum | cut -c1-16)
    tree="$cachedir/debootstrap-$suite-$key"
    if [ -f "$tree.done" ]; then
        say "using cached debootstrap tree $tree"
    else
        say "debootstrap $suite (minbase, include: ${include:-none}) from $mirror; takes minutes"
        rm -rf "$tree" "$tree.log"
        mkdir -p "$cachedir"
        started=$(date +%s)
        # debootstrap prints I:/W: progress lines on stdout; keep them visible and logged.
        # The .debs are kept in CACHEDIR/debs-SUITE for every template of the suite: a spec
        # whose package list changes downloads only what is new.
        mkdir -p "$cachedir/debs-$suite"
        if ! debootstrap --variant=minbase --cache-dir="$cachedir/debs-$suite" \
                ${include:+--include="$include"} \
                "$suite" "$tree" "$mirror" 2>&1 | tee "$tree.log" | sed -u 's/^/    /'; then
            die "debootstrap failed, see $tree.log"
        fi
        grep -q '^I: Base system installed successfully' "$tree.log" || die "debootstrap failed, see $tree.log"
        # Package caches are useless inside a sandbox and cost image space.
        rm -rf "$tree"/var/cache/apt/archives/*.deb "$tree"/var/lib/apt/lists/*_Packages \
               "$tree"/var/cache/apt/*.bin
        touch "$tree.done"
        say "debootstrap took $(( $(date +%s) - started )) s"
    fi
    say "copying tree"
    cp -a "$tree/." "$dir/"
}
