#!/bin/sh
# Installs the e2b SDK versions the compatibility tests drive, and @e2b/code-interpreter
# on top of the current one (exact versions from package-lock.json), into
# tests/e2b/node_modules. Needs node >= 18 (the code interpreter SDK: >= 20.18.1) and npm
# with access to the npm registry. Safe to run repeatedly.
set -eu
cd "$(dirname "$0")"
command -v npm >/dev/null 2>&1 || { echo "install.sh: npm not found (install nodejs)" >&2; exit 1; }
npm ci --no-audit --no-fund --loglevel=error
node -e 'for (const m of ["e2b", "e2b-v2-7", "e2b-v2-5", "@e2b/code-interpreter"]) console.log(m, require(m + "/package.json").version)'
