#!/usr/bin/env bash
# build-console.sh OUT: assembles the web console (docs/console.md) into OUT: our own
# files from console/ and the third-party ones it uses (xterm.js and its fit addon, ES
# modules and stylesheet), installed by `npm ci` from console/package.json and its lock
# file (exact versions and their sha512 integrity; no registry address: npm uses the
# machine's own configuration) into build/console-npm. npm runs only when those versions
# are not there yet, so a rebuild works offline.
set -euo pipefail
out=${1:?usage: build-console.sh OUT}
src=$(cd "$(dirname "$0")/../console" && pwd)
npmdir=$(dirname "$out")/console-npm

have() { # installed version of package $1
  node -e 'try{console.log(require(process.argv[1]+"/node_modules/"+process.argv[2]+"/package.json").version)}catch(e){}' "$npmdir" "$1"
}
want() { # version console/package.json pins for package $1
  node -e 'console.log(require(process.argv[1]).dependencies[process.argv[2]])' "$src/package.json" "$1"
}
mkdir -p "$npmdir"
if [ "$(have @xterm/xterm)" != "$(want @xterm/xterm)" ] || [ "$(have @xterm/addon-fit)" != "$(want @xterm/addon-fit)" ]; then
  command -v npm >/dev/null || { echo "build-console: npm is missing (scripts/install-deps.sh)" >&2; exit 1; }
  cp "$src/package.json" "$src/package-lock.json" "$npmdir/"
  (cd "$npmdir" && npm ci --no-audit --no-fund --omit=dev --loglevel=error)
fi

tmp="$out.tmp"
rm -rf "$tmp"
mkdir -p "$tmp/vendor"
for f in "$src"/*.html "$src"/*.css "$src"/*.js "$src"/*.svg; do
  install -m 0644 "$f" "$tmp/"
done
# Source map comments dropped: the maps are not shipped (2 MB, and a browser asking
# for a missing one logs an error).
strip_map() { sed '/^\/\/# sourceMappingURL=/d' "$1" > "$2"; }
strip_map "$npmdir/node_modules/@xterm/xterm/lib/xterm.mjs" "$tmp/vendor/xterm.mjs"
strip_map "$npmdir/node_modules/@xterm/addon-fit/lib/addon-fit.mjs" "$tmp/vendor/addon-fit.mjs"
install -m 0644 "$npmdir/node_modules/@xterm/xterm/css/xterm.css" "$tmp/vendor/xterm.css"
cat "$npmdir/node_modules/@xterm/xterm/LICENSE" > "$tmp/vendor/LICENSE-xterm.txt"
chmod 0644 "$tmp"/vendor/*
rm -rf "$out"
mv "$tmp" "$out"
echo "build-console: $out"
