"""End-to-end tests of the web console (docs/console.md) in a real headless Chromium.

Covers: the files are served with the right Content-Type and security headers (a
Content-Security-Policy without inline script, nosniff, no framing) and without a key;
no path reaches outside the asset directory (.., encoded slashes, dot files, symlinks,
NUL); a missing asset directory is a clear 404; in the browser, sign-in (a bad key is
refused), every list page renders without a console error, a create from the page makes
a sandbox (seen through the API) and two clicks on delete remove it; with a real VM, the
terminal runs a command typed in the browser and shows its output and follows a window
resize (stty size in the guest), leaving the page ends its session, the file browser
lists, uploads and downloads, the network and metrics tabs render, and pause, resume,
fork, suspend and restore from the list work.

Screenshots go to build/test-artifacts/console/ (SPACE_CONSOLE_ARTIFACTS overrides);
with SPACE_CONSOLE_DOCS=1 they are also copied to docs/console/ for docs/console.md.
"""
import http.client
import json
import os
import re
import shutil
import tempfile

import pytest

from cdp import CHROMIUM, Browser
from spacedlib import ROOT, RUN_DIR, Spaced, make_fake_guest, poll

ASSETS = os.path.join(ROOT, "build", "console")
ART = os.environ.get("SPACE_CONSOLE_ARTIFACTS", os.path.join(ROOT, "build", "test-artifacts", "console"))
DOCS = os.path.join(ROOT, "docs", "console")


@pytest.fixture(scope="module", autouse=True)
def _need_assets():
    if not os.path.exists(os.path.join(ASSETS, "index.html")):
        pytest.fail("the console is not built (%s): run `make console`" % ASSETS)


@pytest.fixture(scope="module")
def browser():
    if not CHROMIUM:
        pytest.fail("chromium is not installed: run scripts/install-deps.sh")
    with Browser() as b:
        yield b


def shot(page, name):
    page.eval("document.getElementById('flash').hidden = true")  # a passing toast
    path = os.path.join(ART, name + ".png")
    page.screenshot(path)
    if os.environ.get("SPACE_CONSOLE_DOCS") == "1":
        os.makedirs(DOCS, exist_ok=True)
        shutil.copy(path, os.path.join(DOCS, name + ".png"))


def raw_get(sp, target, method="GET"):
    """A request with the target sent exactly as written (no client-side normalising)."""
    c = http.client.HTTPConnection("127.0.0.1", sp.port, timeout=30)
    try:
        c.putrequest(method, target, skip_accept_encoding=True)
        c.endheaders()
        r = c.getresponse()
        return r.status, {k.lower(): v for k, v in r.getheaders()}, r.read()
    finally:
        c.close()


# ---- serving -------------------------------------------------------------------------

TYPES = {
    "/console": "text/html; charset=utf-8",
    "/console/": "text/html; charset=utf-8",
    "/console/index.html": "text/html; charset=utf-8",
    "/console/app.js": "text/javascript; charset=utf-8",
    "/console/console.css": "text/css; charset=utf-8",
    "/console/favicon.svg": "image/svg+xml",
    "/console/vendor/xterm.mjs": "text/javascript; charset=utf-8",
    "/console/vendor/xterm.css": "text/css; charset=utf-8",
}


def test_served_with_types_and_security_headers(api_spaced):
    for path, ctype in TYPES.items():
        status, h, body = raw_get(api_spaced, path)  # no key: the files are public
        assert status == 200, (path, status, body[:200])
        assert h["content-type"] == ctype, path
        assert h["x-content-type-options"] == "nosniff", path
        assert h["x-frame-options"] == "DENY", path
        csp = dict(d.strip().split(" ", 1) for d in h["content-security-policy"].split(";"))
        assert csp["script-src"] == "'self'", csp
        assert csp["default-src"] == "'none'" and csp["frame-ancestors"] == "'none'", csp
        assert csp["connect-src"] == "'self'", csp
        assert int(h["content-length"]) == len(body) > 0
    status, h, body = raw_get(api_spaced, "/console/app.js", "HEAD")
    assert status == 200 and body == b"" and int(h["content-length"]) > 0
    # The API itself still needs a key.
    assert api_spaced.request("GET", "/v1/sandboxes", key=None).status == 401


def test_pages_have_no_inline_script():
    """The CSP would block inline code: none may be written, so none is relied on."""
    for name in os.listdir(ASSETS):
        if name.endswith(".html"):
            html = open(os.path.join(ASSETS, name)).read()
            for tag in re.findall(r"<script\b[^>]*>", html):
                assert "src=" in tag, (name, tag)
            assert not re.search(r"<script\b[^>]*>\s*(?!</script>)\S", html), name
            assert not re.search(r"\son[a-z]+\s*=", html), name
            assert "javascript:" not in html, name


def test_paths_stay_inside_the_asset_dir():
    guest = make_fake_guest()
    top = tempfile.mkdtemp(prefix="cdir", dir=RUN_DIR)
    assets = os.path.join(top, "assets")
    shutil.copytree(ASSETS, assets)
    with open(os.path.join(top, "secret.js"), "w") as f:
        f.write("SECRET-OUTSIDE")
    with open(os.path.join(assets, ".hidden.js"), "w") as f:
        f.write("SECRET-HIDDEN")
    os.symlink(os.path.join(top, "secret.js"), os.path.join(assets, "leak.js"))
    os.symlink("/etc", os.path.join(assets, "etc"))
    os.symlink(top, os.path.join(assets, "up"))  # a directory link to where secret.js is
    sp = Spaced(guest).start(extra=["--console-dir", assets])
    try:
        status, _, body = raw_get(sp, "/console/app.js")
        assert status == 200, "the copied directory is served"
        bad = [
            "/console/../secret.js", "/console/%2e%2e/secret.js", "/console/..%2fsecret.js",
            "/console/vendor/..%2f..%2fsecret.js", "/console/vendor/%2e%2e%2f%2e%2e%2fsecret.js",
            "/console/%2fetc%2fpasswd", "/console/%2Fetc%2Fhostname.js", "/console/.hidden.js",
            "/console/%2ehidden.js", "/console/leak.js", "/console/etc/hostname.js", "/console/up/secret.js",
            "/console/vendor", "/console/vendor/", "/console//app.js", "/console/./app.js",
            "/console/index.html%00.js", "/console/app.js%00", "/console/..%5csecret.js",
            "/console/app.php", "/console/" + "a" * 300 + ".js", "/console/vendor/../../secret.js",
        ]
        for target in bad:
            status, h, body = raw_get(sp, target)
            assert status in (400, 404), (target, status, body[:200])
            assert b"SECRET" not in body, target
            assert h["content-type"] == "application/json", target
    finally:
        sp.stop()
        shutil.rmtree(guest, ignore_errors=True)


def test_missing_asset_dir_says_how_to_build_it():
    guest = make_fake_guest()
    sp = Spaced(guest).start(extra=["--console-dir", os.path.join(RUN_DIR, "no-such-console")])
    try:
        status, _, body = raw_get(sp, "/console")
        err = json.loads(body)["error"]
        assert status == 404 and err["code"] == "console_missing", body
        assert "make console" in err["message"]
    finally:
        sp.stop()
        shutil.rmtree(guest, ignore_errors=True)


# ---- in the browser ------------------------------------------------------------------

def sign_in(page, sp, key):
    page.goto(sp.url + "/console")
    page.wait(lambda: page.eval("!document.getElementById('signin').hidden"), "the sign-in form")
    page.eval("document.getElementById('key').value = %s; document.getElementById('signin').requestSubmit(); 1"
              % json.dumps(key))


def signed_in(page, sp):
    sign_in(page, sp, sp.admin_key)
    page.wait(lambda: page.eval("document.getElementById('signin').hidden"), "signed in")


def show(page, hash_, ready_js, what):
    page.eval("location.hash = %s; 1" % json.dumps(hash_))
    page.wait(lambda: page.eval(ready_js), what)


LIST_READY = "!!document.querySelector('#page table, #page .empty')"


def click(page, selector):
    assert page.eval("(() => { const b = document.querySelector(%s); if (!b) return false; b.click(); return true; })()"
                     % json.dumps(selector)), "nothing matches " + selector


def test_sign_in_lists_and_create(api_spaced, browser):
    page = browser.page()
    try:
        sign_in(page, api_spaced, "space_not-a-key")
        page.wait(lambda: page.eval("document.getElementById('signin-error').textContent"), "the refusal")
        assert "not valid" in page.eval("document.getElementById('signin-error').textContent")
        shot(page, "signin")
        # The refused key's 401 is expected; only what comes after must be clean.
        page.events.clear()
        signed_in(page, api_spaced)
        for name in ("sandboxes", "operations", "templates", "nodes"):
            show(page, "#/" + name, LIST_READY, "the %s page" % name)
        # The nodes page shows the host's measured load (GET /v1/nodes `host`).
        host = page.eval("document.getElementById('host-load').textContent")
        assert re.search(r"This host: load [\d.]+ [\d.]+ [\d.]+, CPU [\d.]+ % of \d+, .* free", host), host
        # and charts of it (CPU, memory) that gain a point at every poll
        points = "((document.querySelectorAll('.node-charts[data-host=host] polyline')[%d] || " \
                 "{getAttribute: () => ''}).getAttribute('points') || '').split(' ')" \
                 ".filter(Boolean).length"
        page.wait(lambda: page.eval(points % 0) >= 2 and page.eval(points % 1) >= 2,
                  "the host's CPU and memory charts with two samples")
        shot(page, "nodes")
        assert page.errors() == []

        # Create from the page: the API sees the sandbox.
        show(page, "#/sandboxes", "document.querySelectorAll('#create-template option').length > 0", "templates")
        page.eval("document.getElementById('create-template').value = 'fake'; "
                  "document.getElementById('create').requestSubmit(); 1")
        sbx = poll(lambda: api_spaced.request("GET", "/v1/sandboxes?template=fake").json["sandboxes"], timeout=300)
        assert len(sbx) == 1 and sbx[0]["template"] == "fake"
        sid = sbx[0]["id"]
        # The fake template cannot boot: the create fails, and the list shows it.
        page.wait(lambda: page.eval("document.querySelector('#sandbox-list').textContent.includes('failed')"),
                  "the failed state", timeout=300)
        # Delete takes two clicks; then the sandbox is gone.
        sel = "#sandbox-list tr:has(a[href='#/sandbox/%s']) button[data-verb=delete]" % sid
        click(page, sel)
        assert api_spaced.request("GET", "/v1/sandboxes/" + sid).status == 200, "one click does not delete"
        # Two clicks in one go: the arming of the first may have lapsed on a slow machine.
        page.eval("document.querySelector(%s).click(); document.querySelector(%s).click(); 1"
                  % (json.dumps(sel), json.dumps(sel)))
        poll(lambda: api_spaced.request("GET", "/v1/sandboxes/" + sid).status == 404, timeout=180)
        show(page, "#/operations", "document.querySelector('#page').textContent.includes('delete')", "the delete op")
        assert page.errors() == []
    finally:
        page.close()


def test_terminal_files_and_actions(spaced, need_vm, browser):
    sp = spaced
    r = sp.create({"template": "base"})
    sid = r["sandbox"]["id"]
    assert sp.wait_op(r["operation"]["id"])["state"] == "succeeded"
    page = browser.page()
    try:
        signed_in(page, sp)
        page.wait(lambda: page.eval("document.querySelector('#sandbox-list').textContent.includes('running')"),
                  "the running sandbox")
        shot(page, "sandboxes")

        # The terminal: a command typed in the browser, its output on the screen.
        show(page, "#/sandbox/%s/terminal" % sid,
             "(document.getElementById('term-status') || {}).textContent?.startsWith('shell running')",
             "the shell")
        # Type at the prompt (typed earlier, the tty would echo it above the banner).
        page.wait(lambda: "$ " in page.eval("document.querySelector('.xterm-rows').innerText"), "the prompt",
                  timeout=300)
        page.call("Input.insertText", text="echo console-$((6*7)) && uname -s")
        page.call("Input.dispatchKeyEvent", type="keyDown", key="Enter", code="Enter",
                  windowsVirtualKeyCode=13, text="\r")
        page.call("Input.dispatchKeyEvent", type="keyUp", key="Enter", code="Enter", windowsVirtualKeyCode=13)
        # Both lines (they may arrive in separate output events).
        page.wait(lambda: re.search(r"console-42\s*\nLinux", page.eval("document.querySelector('.xterm-rows').innerText")),
                  "the command's output", timeout=300)
        shot(page, "terminal")
        # A smaller window: the terminal refits and the pty follows (POST .../resize).
        page.call("Emulation.setDeviceMetricsOverride", width=900, height=600, deviceScaleFactor=1, mobile=False)
        page.wait(lambda: page.eval("document.querySelector('.xterm-rows').children.length") < 30, "the refit")
        page.pump(1)  # the resize request goes out before the next keystrokes
        page.call("Input.insertText", text="stty size")
        page.call("Input.dispatchKeyEvent", type="keyDown", key="Enter", code="Enter",
                  windowsVirtualKeyCode=13, text="\r")
        rows = page.eval("document.querySelector('.xterm-rows').children.length")
        size = page.wait(lambda: re.search(r"\n(\d+) (\d+)\n", page.eval("document.querySelector('.xterm-rows').innerText")),
                         "stty's answer", timeout=300)
        assert int(size.group(1)) == rows, (size.group(0), rows)
        page.call("Emulation.clearDeviceMetricsOverride")
        sessions = sp.request("GET", "/v1/sandboxes/%s/sessions" % sid).json["sessions"]
        assert [s["state"] for s in sessions] == ["running"] and sessions[0]["pty"]

        # Leaving the page ends the session (its shell is killed, nothing left behind).
        show(page, "#/sandbox/%s/overview" % sid, "!!document.querySelector('dl.kv')", "the overview")
        poll(lambda: sp.request("GET", "/v1/sandboxes/%s/sessions" % sid).json["sessions"] == [], timeout=180)
        shot(page, "overview")

        # Files: upload from the page (a real file input), list, the API sees the bytes.
        local = os.path.join(RUN_DIR, "hello-console.txt")
        with open(local, "wb") as f:
            f.write(b"uploaded from the browser\n")
        sp.request("POST", "/v1/sandboxes/%s/files/mkdir" % sid, {"path": "/home/user/projects"})
        show(page, "#/sandbox/%s/files" % sid, "document.querySelector('#files-list').textContent.includes('projects')",
             "the listing")
        doc = page.call("DOM.getDocument")["root"]["nodeId"]
        node = page.call("DOM.querySelector", nodeId=doc, selector="#files-upload")["nodeId"]
        page.call("DOM.setFileInputFiles", nodeId=node, files=[local])
        page.wait(lambda: page.eval("document.querySelector('#files-list').textContent.includes('hello-console.txt')"),
                  "the uploaded file in the listing", timeout=180)
        got = sp.request("GET", "/v1/sandboxes/%s/files?path=/home/user/hello-console.txt" % sid)
        assert got.status == 200 and got.body == b"uploaded from the browser\n"
        shot(page, "files")
        # Download: a click on the file saves it.
        dl = tempfile.mkdtemp(prefix="dl", dir=RUN_DIR)
        page.call("Browser.setDownloadBehavior", behavior="allow", downloadPath=dl)
        click(page, "#files-list a.file")
        saved = os.path.join(dl, "hello-console.txt")
        poll(lambda: os.path.exists(saved) and open(saved, "rb").read() == b"uploaded from the browser\n", timeout=300)

        # The gateway log and the CPU/memory charts render (one sample per poll).
        show(page, "#/sandbox/%s/network" % sid, "!!document.querySelector('#netlog table, #netlog .empty')", "the log")
        show(page, "#/sandbox/%s/metrics" % sid, "document.querySelectorAll('svg.spark polyline').length == 2",
             "the charts")
        page.wait(lambda: page.eval("document.querySelectorAll('svg.spark polyline')[0].points.length >= 6"),
                  "six samples", timeout=300)
        shot(page, "metrics")

        # Pause and resume from the list.
        show(page, "#/sandboxes", "!!document.querySelector('#sandbox-list button[data-verb=pause]')", "the list")
        click(page, "#sandbox-list button[data-verb=pause]")
        poll(lambda: sp.request("GET", "/v1/sandboxes/" + sid).json["sandbox"]["state"] == "paused", timeout=300)
        page.wait(lambda: page.eval("!!document.querySelector('#sandbox-list button[data-verb=resume]')"), "resume")
        click(page, "#sandbox-list button[data-verb=resume]")
        poll(lambda: sp.request("GET", "/v1/sandboxes/" + sid).json["sandbox"]["state"] == "running", timeout=300)
        page.pump(2.5)
        shot(page, "sandboxes-running")

        # Fork, then suspend and restore, from the list.
        page.wait(lambda: page.eval("!!document.querySelector('#sandbox-list button[data-verb=fork]')"), "fork")
        click(page, "#sandbox-list button[data-verb=fork]")
        forks = poll(lambda: [x["id"] for x in sp.request("GET", "/v1/sandboxes").json["sandboxes"] if x["id"] != sid],
                     timeout=180)
        poll(lambda: sp.request("GET", "/v1/sandboxes/" + forks[0]).json["sandbox"]["state"] == "running", timeout=300)
        sp.wait_op(sp.request("DELETE", "/v1/sandboxes/" + forks[0]).json["operation"]["id"])
        click(page, "#sandbox-list tr:has(a[href='#/sandbox/%s']) button[data-verb=suspend]" % sid)
        poll(lambda: sp.request("GET", "/v1/sandboxes/" + sid).json["sandbox"]["state"] == "suspended", timeout=300)
        page.wait(lambda: page.eval("!!document.querySelector('#sandbox-list button[data-verb=restore]')"), "restore")
        click(page, "#sandbox-list button[data-verb=restore]")
        poll(lambda: sp.request("GET", "/v1/sandboxes/" + sid).json["sandbox"]["state"] == "running", timeout=300)
        for name in ("operations", "templates", "nodes"):
            show(page, "#/" + name, LIST_READY, "the %s page" % name)
            page.pump(0.5)
            shot(page, name)
        assert page.errors() == []
    finally:
        page.close()
        sp.request("DELETE", "/v1/sandboxes/" + sid)
