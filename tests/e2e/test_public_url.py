"""SPACE_PUBLIC_URL: the address clients reach spaced at when a proxy terminates TLS in
front of it. Links spaced hands out (the E2B template builder's upload link) are built
on it; unset, on plain HTTP and the request's Host. A value that is not
scheme://host[:port] stops spaced at start with a clear message. No VM needed."""
import shutil
import subprocess
import urllib.parse

from spacedlib import SPACED, SPACED_ENV, Spaced, make_fake_guest

HASH = "ab" * 32


def upload_link(s):
    r = s.request("GET", "/templates/mytpl/files/" + HASH, key=None, headers={"X-API-Key": s.admin_key})
    assert r.status == 200, r
    assert r.json["present"] is False, r
    return urllib.parse.urlsplit(r.json["url"])


def test_links_follow_the_public_url():
    guest = make_fake_guest()
    s = Spaced(guest)
    try:
        s.start()
        u = upload_link(s)
        assert (u.scheme, u.netloc) == ("http", "127.0.0.1:%d" % s.port), u
        assert u.path == "/templates/mytpl/files/" + HASH
        s.stop(cleanup=False)

        s.start(env={"SPACE_PUBLIC_URL": "https://space.example.test:8443"})
        u = upload_link(s)
        assert (u.scheme, u.netloc) == ("https", "space.example.test:8443"), u
        assert u.path == "/templates/mytpl/files/" + HASH
        q = urllib.parse.parse_qs(u.query)
        assert set(q) == {"tenant", "token"}, q
    finally:
        s.stop()
        shutil.rmtree(guest, ignore_errors=True)


def test_a_bad_public_url_stops_spaced_at_start():
    guest = make_fake_guest()
    try:
        for bad in ("space.example.test", "https://space.example.test/", "ftp://x", "https://a b",
                    "https://x/path?q=1"):
            r = subprocess.run([SPACED, "--listen", "127.0.0.1:0", "--data-dir", guest + "/data",
                                "--guest-dir", guest], capture_output=True, text=True, timeout=60,
                               env=dict(SPACED_ENV, SPACE_PUBLIC_URL=bad))
            assert r.returncode != 0, (bad, r)
            assert "SPACE_PUBLIC_URL must be" in r.stderr, (bad, r.stderr)
    finally:
        shutil.rmtree(guest, ignore_errors=True)
