#!/usr/bin/env python3
"""Runs the VM runtime benchmark (bench/bench_vm.c -> build/bench_vm).

Builds it with `make build/bench_vm` when missing, then runs it and passes its output
through. Extra arguments go to bench_vm (-n N cold boots/restores, -c claims, -j JSON).
"""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, "build", "bench_vm")


def main():
    if not os.path.exists(BIN):
        r = subprocess.run(["make", "-C", ROOT, "build/bench_vm"])
        if r.returncode != 0:
            print("bench_vm: could not build build/bench_vm (needs the Makefile rule)",
                  file=sys.stderr)
            return 1
    env = dict(os.environ)
    env.setdefault("SPACE_GUEST", os.path.join(ROOT, "build", "guest"))
    return subprocess.run([BIN] + sys.argv[1:], cwd=ROOT, env=env).returncode


if __name__ == "__main__":
    sys.exit(main())
