#!/bin/sh
# Installs the e2b SDK versions the compatibility tests drive: the JS ones and
# @e2b/code-interpreter on top of the current one (exact versions from
# package-lock.json) into tests/e2b/node_modules (needs node >= 18, the code interpreter
# SDK >= 20.18.1, and npm with access to the npm registry), and the Python ones into one
# venv per version, tests/e2b/.venv-<version>, over Debian's packages
# (scripts/install-deps.sh): PyPI is not reachable where space is developed, so the
# SDK's wheels come from a wheelhouse, $SPACE_E2B_PY_WHEELS or ../shared/e2b-py beside
# the checkout (its README says what it holds). Without one the Python SDK tests skip,
# saying so. Safe to run repeatedly.
set -eu
cd "$(dirname "$0")"
command -v npm >/dev/null 2>&1 || { echo "install.sh: npm not found (install nodejs)" >&2; exit 1; }
npm ci --no-audit --no-fund --loglevel=error
node -e 'for (const m of ["e2b", "e2b-v2-7", "e2b-v2-5", "@e2b/code-interpreter"]) console.log(m, require(m + "/package.json").version)'

wheels=${SPACE_E2B_PY_WHEELS:-../../../shared/e2b-py}
if [ ! -d "$wheels" ]; then
  echo "install.sh: no E2B Python SDK wheelhouse at $wheels: the Python SDK tests will skip"
  exit 0
fi
for v in 2.34.0 2.7.0; do
  venv=.venv-$v
  if [ ! -x "$venv/bin/python" ]; then
    /usr/bin/python3 -m venv --system-site-packages "$venv"
  fi
  "$venv/bin/pip" install -q --no-index --find-links "$wheels" "e2b==$v" httpx==0.28.1 \
    httpcore==1.0.9 h11==0.16.0 dockerfile-parse==2.0.1
  "$venv/bin/python" -c 'import e2b, importlib.metadata as m; print("python e2b", m.version("e2b"))'
done
