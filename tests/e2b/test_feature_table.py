"""docs/e2b.md's feature tables are kept true against the installed SDKs and tests/e2b.

Two checks, for the JS SDK (`e2b`, `@e2b/code-interpreter`: public methods read from
their type declarations) and the Python SDK (public methods of the sync classes, read
by importing the package in its venv):

1. **Every SDK call is in a table.** Each public method of the classes a user calls
   (Sandbox with its static API, Commands, CommandHandle, Pty, Filesystem, WatchHandle,
   the paginators, Git, Volume, Secret, Template, the code interpreter's Sandbox) is
   named in a row of docs/e2b.md (`name(` inside backticks, or `Class.*` for a whole
   class). A new SDK version that adds a call fails here until the table says what
   space does with it.
2. **"yes" and "partial" are tested.** Every call named in a row whose status begins
   with "yes" or "partial" is called by a script under tests/e2b (`.name(` in a JS
   script for the JS tables, `.snake_name(` in tests/e2b/py for the Python table).

No spaced, no VM: it reads files. Skips, saying why, when the SDKs are not installed
(tests/e2b/install.sh installs them).
"""
import glob
import json
import os
import re
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
DOC = os.path.join(HERE, "..", "..", "docs", "e2b.md")
NODE = os.path.join(HERE, "node_modules")
PY_VENV = os.path.join(HERE, ".venv-2.34.0", "bin", "python")

# (package, class) pairs whose public methods users call; Sandbox's static API is
# declared on SandboxApi, the code interpreter's Sandbox extends e2b's.
JS_CLASSES = [
    ("e2b", "Sandbox"), ("e2b", "SandboxApi"), ("e2b", "Commands"), ("e2b", "CommandHandle"),
    ("e2b", "Pty"), ("e2b", "Filesystem"), ("e2b", "WatchHandle"), ("e2b", "SandboxPaginator"),
    ("e2b", "SnapshotPaginator"), ("e2b", "Git"), ("e2b", "Volume"), ("e2b", "Secret"),
    ("e2b", "TemplateBase"), ("@e2b/code-interpreter", "Sandbox"),
]
# The Python table's classes: module, class, the name rows use for the class.
PY_CLASSES = [
    ("e2b", "Sandbox", "Sandbox"),
    ("e2b.sandbox_sync.commands.command", "Commands", "Commands"),
    ("e2b.sandbox_sync.commands.command_handle", "CommandHandle", "CommandHandle"),
    ("e2b.sandbox_sync.commands.pty", "Pty", "Pty"),
    ("e2b.sandbox_sync.filesystem.filesystem", "Filesystem", "Filesystem"),
    ("e2b", "Volume", "Volume"),
    ("e2b", "Template", "Template"),
]
# Whole classes a row may cover with `Class.*`, by the name the SDK exports.
CLASS_ALIASES = {"TemplateBase": "Template", "SandboxApi": "Sandbox"}
TESTED = re.compile(r"^(yes|partial)\b", re.I)


def dts_methods(package, cls):
    """Public method names of `declare class cls` in a package's index.d.ts (static ones
    too; constructors, getters, private and protected members left out)."""
    path = os.path.join(NODE, package, "dist", "index.d.ts")
    src = open(path, encoding="utf-8").read()
    m = re.search(r"^(?:export )?declare class %s\b[^\n]*\{\n" % re.escape(cls), src, re.M)
    assert m, "%s: no class %s (did the SDK rename it?)" % (path, cls)
    body = src[m.end():]
    body = body[:re.search(r"^\}", body, re.M).start()]
    names = set()
    for line in body.split("\n"):
        mm = re.match(r"^  (?:static )?(?:async )?([A-Za-z_]\w*)\s*(?:<[^(]*>)?\(", line)
        if mm and mm.group(1) != "constructor":
            names.add(mm.group(1))
    return names


def tables():
    """[(section, first cell, status cell)] for every row of every table in the doc."""
    rows, section = [], ""
    for line in open(DOC, encoding="utf-8"):
        if line.startswith("#"):
            section = line.strip("# \n")
            continue
        if not line.startswith("|") or re.match(r"^\|[-| ]+\|$", line.strip()):
            continue
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) >= 2 and cells[0].lower() not in ("sdk feature", "sdk call", "python call"):
            rows.append((section, cells[0], cells[-1]))
    return rows


def named(cell):
    """Calls and `Class.*` wildcards named in a table cell's code spans."""
    calls, classes = set(), set()
    for span in re.findall(r"`([^`]+)`", cell):
        calls.update(re.findall(r"([A-Za-z_]\w*)\s*\(", span))
        classes.update(re.findall(r"\b([A-Z]\w*)\.\*", span))
    return calls, classes


def sources(pattern):
    text = ""
    for path in glob.glob(os.path.join(HERE, pattern)):
        text += open(path, encoding="utf-8").read()
    return text


def check(rows, surface, tests_src, spell):
    """Messages for SDK calls missing from rows, and for tested rows whose calls no
    test script makes. surface: {class: {method}}; spell: a table name as a test calls it."""
    problems = []
    covered, wild = set(), set()
    for _, first, _ in rows:
        calls, classes = named(first)
        covered |= calls
        wild |= classes
    for cls, names in sorted(surface.items()):
        if cls in wild or CLASS_ALIASES.get(cls) in wild:
            continue
        for n in sorted(names - covered):
            problems.append("%s.%s is in no table row" % (cls, n))
    for section, first, status in rows:
        if not TESTED.match(status):
            continue
        for n in sorted(named(first)[0]):
            if not re.search(r"\.%s\s*\(" % re.escape(spell(n)), tests_src):
                problems.append("[%s] %s says %r but no test calls .%s("
                                % (section, first[:60], status.split()[0], spell(n)))
    return problems


def js_rows():
    return [r for r in tables() if not r[0].startswith("Python SDK")]


def py_rows():
    return [r for r in tables() if r[0].startswith("Python SDK")]


def test_js_calls_are_in_the_table_and_tested():
    missing = [p for p, _ in JS_CLASSES if not os.path.exists(os.path.join(NODE, p, "dist", "index.d.ts"))]
    if missing:
        pytest.skip("SDK %s not installed: run tests/e2b/install.sh" % ", ".join(missing))
    surface = {}
    for package, cls in JS_CLASSES:
        key = cls if package == "e2b" else "CodeInterpreter" + cls
        surface.setdefault(key, set()).update(dts_methods(package, cls))
    problems = check(js_rows(), surface, sources("*.mjs"), lambda n: n)
    assert not problems, "docs/e2b.md is out of step with the JS SDK:\n  " + "\n  ".join(problems)


PY_LISTER = r"""
import importlib, inspect, json, sys
out = {}
for mod, cls, key in json.loads(sys.argv[1]):
    c = getattr(importlib.import_module(mod), cls)
    out[key] = sorted(n for n, v in inspect.getmembers(c)
                      if not n.startswith("_") and callable(v) and not inspect.isclass(v))
print(json.dumps(out))
"""


def test_python_calls_are_in_the_table_and_tested():
    if not os.path.exists(PY_VENV):
        pytest.skip("no Python SDK venv at %s: run tests/e2b/install.sh (needs the wheelhouse)" % PY_VENV)
    r = subprocess.run([PY_VENV, "-c", PY_LISTER, json.dumps(PY_CLASSES)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    surface = {k: set(v) for k, v in json.loads(r.stdout).items()}
    rows = py_rows()
    assert rows, "docs/e2b.md has no 'Python SDK' table"
    problems = check(rows, surface, sources("py/*.py"), lambda n: n)
    assert not problems, "docs/e2b.md is out of step with the Python SDK:\n  " + "\n  ".join(problems)


def test_checker_sees_a_missing_row_and_an_untested_yes():
    """The checks can fail: a method no row names, and a 'yes' row no test calls."""
    rows = [("S", "`sbx.kill()`", "yes"), ("S", "`sbx.neverCalled()`", "yes"),
            ("S", "`Git.*`", "not yet")]
    surface = {"Sandbox": {"kill", "pause"}, "Git": {"clone"}}
    problems = check(rows, surface, "await sbx.kill()", lambda n: n)
    assert problems == ["Sandbox.pause is in no table row",
                        "[S] `sbx.neverCalled()` says 'yes' but no test calls .neverCalled("]
