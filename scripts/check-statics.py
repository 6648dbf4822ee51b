#!/usr/bin/env python3
"""No hidden singletons in spaced: a check that src/daemon keeps no state in statics.

Every piece of daemon state hangs off `struct spaced` (src/daemon/spaced.h; issue "A
one-way daemon core", item 6): a module's state is an object main.c makes and frees, a
route context is freed through router_on_shutdown. A `static` variable that is not
`const` is process state nobody can see from spaced.h, so this fails on any such
variable in src/daemon, at file or function scope, unless it is listed in ALLOWED with
the reason it is not daemon state.

Usage: scripts/check-statics.py        (exit 1 naming each new static variable)
"""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DAEMON = os.path.join(ROOT, "src", "daemon")

# (file relative to src/daemon, variable name): why it is not daemon state
ALLOWED = {
    ("vm/vm_start.c", "probed"): "host fact: whether the accelerator was probed",
    ("vm/vm_start.c", "cached"): "host fact: the accelerator this host has",
    ("vm/vm_start.c", "tsc_khz"): "host fact: the TSC frequency",
    ("template/tpl_pin.c", "warned"): "log-once flag",
    ("vm/vm_jail.c", "none"): "constant (const object returned by address)",
    ("volume/vol_quota.c", "walk_sum"): "scratch of one nftw walk (its callback takes no argument), nothing kept between calls",
    ("main.c", "found"): "an option's value: the default --guest-dir, found once at start",
}

# `static` + type words + declarator, ending in ; = or [ (not a function: no '(' before)
STATIC = re.compile(r'^\s*static\s+(?!const\b)(?!inline\b)([^;(=]*?)\b([A-Za-z_]\w*)\s*(\[[^\]]*\]\s*)*(=|;|,)')


# an aggregate defined in place: `static struct { ... } name;` (the name after the body)
AGGREGATE = re.compile(r'^\s*static\s+(?:struct|union)\s*\w*\s*\{.*?^\s*\}\s*([A-Za-z_]\w*)\s*[;=\[]',
                       re.M | re.S)


def strip_comments(text):
    text = re.sub(r'/\*.*?\*/', lambda m: '\n' * m.group(0).count('\n'), text, flags=re.S)
    return re.sub(r'//[^\n]*', '', text)


def main():
    bad = []
    for dirpath, _, files in os.walk(DAEMON):
        for f in sorted(files):
            if not f.endswith(('.c', '.h')):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, DAEMON)
            with open(path, encoding="utf-8") as fh:
                text = strip_comments(fh.read())
            lines = text.split('\n')
            for m in AGGREGATE.finditer(text):
                if (rel, m.group(1)) not in ALLOWED:
                    no = text.count('\n', 0, m.start()) + 1
                    bad.append(f"src/daemon/{rel}:{no}: static variable `{m.group(1)}`")
            for no, line in enumerate(lines, 1):
                m = STATIC.match(line)
                if not m or 'const' in m.group(1).split():
                    continue
                if (rel, m.group(2)) not in ALLOWED:
                    bad.append(f"src/daemon/{rel}:{no}: static variable `{m.group(2)}`")
    for b in bad:
        print(f"check-statics: {b}: daemon state belongs in struct spaced (spaced.h) or in "
              "a context freed through router_on_shutdown; a host fact or constant goes in "
              "scripts/check-statics.py's ALLOWED with its reason", file=sys.stderr)
    print(f"check-statics: {len(bad)} hidden static variable(s) in src/daemon")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
