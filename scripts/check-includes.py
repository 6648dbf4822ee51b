#!/usr/bin/env python3
"""Folder-level include graph of src/, and a check that it has no cycle.

A folder depends on another when one of its files includes a header of the other
(`#include "daemon/vm/vm.h"`, or a bare `"log.h"` found beside the includer or in
src/common, the two -I directories the Makefile gives). Folders that include each other
through any chain form a cycle: none of them can be read, built or tested alone.

The graph has no cycle (issue "A one-way daemon core"; docs/architecture.md section 8
draws the layers), and the check keeps it so: it fails on any folder edge that is part
of a cycle and names it. A module that needs something from a folder above it gets it
registered by main.c (a callback or predicate) instead of including that folder.

Usage:
  scripts/check-includes.py            check (exit 1 on any cycle edge)
  scripts/check-includes.py --graph    print every folder edge with its include count
  scripts/check-includes.py --cycles   print the current cycle edges (the allow file format)
"""
import os
import re
import sys
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SRC = os.path.join(ROOT, "src")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def folder_of(path):
    """src-relative folder of a file: 'daemon/vm', 'daemon' (top-level files), 'common'.
    A program's main.c is a node of its own ('daemon/main.c'): it is the composition
    root that wires every module together, above all of them, and part of no cycle."""
    rel = os.path.relpath(path, SRC)
    return rel if os.path.basename(rel) == "main.c" else os.path.dirname(rel)


def resolve(includer, name):
    """The file a quoted include names, as the compiler finds it, or None (outside src/)."""
    for base in (os.path.dirname(includer), SRC, os.path.join(SRC, "common")):
        p = os.path.normpath(os.path.join(base, name))
        if os.path.isfile(p):
            return p
    return None


def edges():
    """{(from_folder, to_folder): count} over every .c and .h under src/."""
    out = defaultdict(int)
    for dirpath, _, files in os.walk(SRC):
        for f in files:
            if not f.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, f)
            with open(path, encoding="utf-8", errors="replace") as fh:
                text = fh.read()
            src = folder_of(path)
            for name in INCLUDE.findall(text):
                target = resolve(path, name)
                if target is None:
                    continue
                dst = folder_of(target)
                if dst != src:
                    out[(src, dst)] += 1
    return out


def sccs(nodes, adj):
    """Tarjan's strongly connected components (iterative)."""
    index, low, on, stack, comps, counter = {}, {}, set(), [], [], [0]
    for root in sorted(nodes):
        if root in index:
            continue
        work = [(root, iter(sorted(adj[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(adj[w]))))
                    advanced = True
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                comps.append(comp)
    return comps


def cycle_edges(e):
    adj = defaultdict(set)
    nodes = set()
    for (a, b) in e:
        adj[a].add(b)
        nodes.update((a, b))
    comp_of = {}
    for i, comp in enumerate(sccs(nodes, adj)):
        for n in comp:
            comp_of[n] = i if len(comp) > 1 else None
    return sorted((a, b) for (a, b) in e if comp_of[a] is not None and comp_of[a] == comp_of[b])


def main(argv):
    e = edges()
    if "--graph" in argv:
        for (a, b), n in sorted(e.items()):
            print(f"{a} -> {b}  ({n})")
        return 0
    cyc = cycle_edges(e)
    if "--cycles" in argv:
        for a, b in cyc:
            print(f"{a} -> {b}")
        return 0
    folders = sorted({n for x in cyc for n in x})
    print(f"check-includes: {len(e)} folder edges, {len(cyc)} in cycles"
          + (f" among {', '.join(folders)}" if folders else ""))
    for a, b in cyc:
        print(f"check-includes: include cycle edge {a} -> {b}: a file in src/{a} "
              f"includes src/{b}, which (through other folders) includes src/{a}")
    return 1 if cyc else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
