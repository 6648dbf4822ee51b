# base-busybox.sh: the "scratch-busybox" template base, sourced by build-template.sh.
#
# base_busybox DIR: fill the empty directory DIR with a minimal root filesystem made of
# Debian's static busybox (every applet as a symlink), the two accounts every template
# has (root, and "user" uid/gid 1000 with home /home/user) and the mount points the agent
# uses after switching root. Nothing here runs inside the tree, so it needs no chroot.

base_busybox() {
    dir=$1
    bb=${SPACE_BUSYBOX:-/bin/busybox}
    [ -x "$bb" ] || die "$bb not found (apt-get install busybox-static)"
    ldd "$bb" 2>&1 | grep -q -E 'not a dynamic executable|statically linked' || die "$bb is not static (need busybox-static)"

    mkdir -p "$dir/bin" "$dir/sbin" "$dir/usr/bin" "$dir/usr/sbin" "$dir/usr/local/bin" \
             "$dir/etc/ssl/certs" "$dir/dev" "$dir/proc" "$dir/sys" "$dir/run" "$dir/mnt" \
             "$dir/var/log" "$dir/root" "$dir/home/user" "$dir/tmp" "$dir/var/tmp"
    cp "$bb" "$dir/bin/busybox"
    chmod 0755 "$dir/bin/busybox"
    # --list-full prints each applet's conventional path (bin/sh, usr/bin/awk...). One
    # perl process makes all the links: a fork per link costs seconds on a busy host.
    n=$("$dir/bin/busybox" --list-full | perl -e '
        my ($root, $n) = (shift, 0);
        while (<STDIN>) {
            chomp; next if $_ eq "bin/busybox" or $_ eq "";
            die "bad applet path $_\n" if m{(^/|\.\.)};
            unlink "$root/$_"; symlink("/bin/busybox", "$root/$_") or die "$_: $!\n";
            $n++;
        }
        print $n' "$dir") || die "cannot make busybox links"
    say "busybox with $n applet links"

    cat > "$dir/etc/passwd" <<'PASSWD'
root:x:0:0:root:/root:/bin/sh
user:x:1000:1000:user:/home/user:/bin/sh
nobody:x:65534:65534:nobody:/nonexistent:/bin/false
PASSWD
    cat > "$dir/etc/group" <<'GROUP'
root:x:0:
tty:x:5:
user:x:1000:
nogroup:x:65534:
GROUP
    # Locked passwords: nobody logs in; the agent starts processes as these users.
    cat > "$dir/etc/shadow" <<'SHADOW'
root:*:19000:0:99999:7:::
user:*:19000:0:99999:7:::
nobody:*:19000:0:99999:7:::
SHADOW
    chmod 0640 "$dir/etc/shadow"
    cat > "$dir/etc/profile" <<'PROFILE'
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PS1='\u@\h:\w\$ '
PROFILE
    cat > "$dir/etc/os-release" <<'OSREL'
NAME="space base"
ID=space-base
PRETTY_NAME="space base (busybox)"
OSREL
    chmod 0700 "$dir/root"
    chown 1000:1000 "$dir/home/user"
    chmod 0755 "$dir/home/user"
    chmod 1777 "$dir/tmp" "$dir/var/tmp"
}
