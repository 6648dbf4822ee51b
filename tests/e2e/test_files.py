"""End-to-end tests of the files API against a real spaced and a real VM (base):
streamed upload/download (binary, 256 MiB with checksum), stat, list, mkdir, remove,
rename and their error paths."""
import hashlib
import http.client
import os
import urllib.parse

import pytest

F = "/v1/sandboxes/%s/files"


@pytest.fixture(scope="module")
def sbx(spaced):
    # 1 GiB of RAM so /tmp (tmpfs, half of RAM) holds the 256 MiB transfer test.
    r = spaced.create({"template": "base", "memory_mib": 1024, "timeout": 0})
    op = spaced.wait_op(r["operation"]["id"])
    assert op["state"] == "succeeded", op
    sid = r["sandbox"]["id"]
    yield sid
    spaced.request("DELETE", "/v1/sandboxes/" + sid)


def q(**kw):
    return "?" + urllib.parse.urlencode(kw)


def put(sp, sid, path, data, **query):
    return sp.request("PUT", F % sid + q(path=path, **query), raw=data,
                      headers={"Content-Type": "application/octet-stream"})


def test_upload_download_binary(spaced, sbx):
    data = bytes(range(256)) * 1000 + b"\x00tail"
    r = put(spaced, sbx, "/tmp/bin/a.bin", data, mode="0640")
    assert r.status == 200, r
    f = r.json["file"]
    assert f["type"] == "file" and f["size"] == len(data) and f["mode"] == 0o640
    r = spaced.request("GET", F % sbx + q(path="/tmp/bin/a.bin"))
    assert r.status == 200
    assert r.headers["content-length"] == str(len(data))
    assert r.headers["content-type"] == "application/octet-stream"
    assert r.body == data
    # Empty files work both ways.
    assert put(spaced, sbx, "/tmp/bin/empty", b"").status == 200
    r = spaced.request("GET", F % sbx + q(path="/tmp/bin/empty"))
    assert r.status == 200 and r.body == b"" and r.headers["content-length"] == "0"
    # Overwrite replaces the content.
    assert put(spaced, sbx, "/tmp/bin/a.bin", b"short").status == 200
    assert spaced.request("GET", F % sbx + q(path="/tmp/bin/a.bin")).body == b"short"


def test_upload_as_user(spaced, sbx):
    r = put(spaced, sbx, "/tmp/owned.txt", b"x", user="user")
    assert r.status == 200, r
    assert r.json["file"]["owner"] == "user"


def _pattern(i):
    return hashlib.sha256(b"block%d" % i).digest() * 2048  # 64 KiB


def test_256mib_streamed_with_checksum(spaced, sbx):
    total_blocks = 4096  # 4096 x 64 KiB = 256 MiB
    want = hashlib.sha256()

    def body():
        for i in range(total_blocks):
            blk = _pattern(i)
            want.update(blk)
            yield blk

    conn = http.client.HTTPConnection("127.0.0.1", spaced.port, timeout=900)
    conn.request("PUT", F % sbx + q(path="/tmp/big.bin"), body=body(), encode_chunked=True,
                 headers={"Authorization": "Bearer " + spaced.admin_key,
                          "Transfer-Encoding": "chunked"})
    r = conn.getresponse()
    reply = r.read()
    conn.close()
    assert r.status == 200, reply
    size = total_blocks * 65536
    r = spaced.request("GET", F % sbx + "/stat" + q(path="/tmp/big.bin"))
    assert r.json["file"]["size"] == size

    conn = http.client.HTTPConnection("127.0.0.1", spaced.port, timeout=900)
    conn.request("GET", F % sbx + q(path="/tmp/big.bin"),
                 headers={"Authorization": "Bearer " + spaced.admin_key})
    r = conn.getresponse()
    assert r.status == 200 and int(r.getheader("Content-Length")) == size
    got, n = hashlib.sha256(), 0
    while True:
        b = r.read(1 << 20)
        if not b:
            break
        got.update(b)
        n += len(b)
    conn.close()
    assert n == size
    assert got.hexdigest() == want.hexdigest()
    assert spaced.request("DELETE", F % sbx + q(path="/tmp/big.bin")).status == 204


def test_stat_list_mkdir_rename_remove(spaced, sbx):
    spaced.request("DELETE", F % sbx + q(path="/tmp/t", recursive="true"))  # a clean start
    r = spaced.request("POST", F % sbx + "/mkdir", {"path": "/tmp/t/a/b", "mode": 0o750})
    assert r.status == 201, r
    assert r.json["file"]["type"] == "dir" and r.json["file"]["mode"] == 0o750
    assert put(spaced, sbx, "/tmp/t/a/b/f1", b"1").status == 200
    assert put(spaced, sbx, "/tmp/t/top", b"22").status == 200

    r = spaced.request("GET", F % sbx + "/stat" + q(path="/tmp/t/top"))
    assert r.status == 200 and r.json["file"]["size"] == 2 and r.json["file"]["name"] == "top"

    r = spaced.request("GET", F % sbx + "/list" + q(path="/tmp/t"))
    assert r.status == 200
    assert sorted(e["name"] for e in r.json["entries"]) == ["a", "top"]
    assert r.json["count"] == 2 and r.json["truncated"] is False
    r = spaced.request("GET", F % sbx + "/list" + q(path="/tmp/t", depth=3))
    paths = sorted(e["path"] for e in r.json["entries"])
    assert paths == ["/tmp/t/a", "/tmp/t/a/b", "/tmp/t/a/b/f1", "/tmp/t/top"]

    r = spaced.request("POST", F % sbx + "/rename", {"from": "/tmp/t/top", "to": "/tmp/t/moved"})
    assert r.status == 200 and r.json["file"]["path"] == "/tmp/t/moved"
    assert spaced.request("GET", F % sbx + "/stat" + q(path="/tmp/t/top")).status == 404

    r = spaced.request("DELETE", F % sbx + q(path="/tmp/t/a"))
    assert r.status == 409 and r.error_code() == "not_empty", r
    r = spaced.request("DELETE", F % sbx + q(path="/tmp/t/a", recursive="true"))
    assert r.status == 204, r
    assert spaced.request("GET", F % sbx + "/stat" + q(path="/tmp/t/a")).status == 404


def test_agent_errors_map_to_statuses(spaced, sbx):
    assert put(spaced, sbx, "/tmp/e/file", b"x").status == 200
    cases = [
        ("GET", F % sbx + q(path="/tmp/nope"), None, 404, "not_found"),
        ("GET", F % sbx + q(path="/tmp/e"), None, 400, "is_dir"),
        ("GET", F % sbx + "/stat" + q(path="/tmp/nope"), None, 404, "not_found"),
        ("GET", F % sbx + "/list" + q(path="/tmp/nope"), None, 404, "not_found"),
        ("DELETE", F % sbx + q(path="/tmp/nope"), None, 404, "not_found"),
        ("POST", F % sbx + "/mkdir", {"path": "/tmp/e", "parents": False}, 409, "already_exists"),
        ("POST", F % sbx + "/mkdir", {"path": "/tmp/e/file/sub"}, 409, "exists_not_dir"),
        ("POST", F % sbx + "/rename", {"from": "/tmp/nope", "to": "/tmp/x"}, 404, "not_found"),
        ("GET", F % sbx + q(path="/root/x", user="nosuchuser"), None, 404, "not_found"),
    ]
    for method, path, body, want, code in cases:
        r = spaced.request(method, path, body)
        assert (r.status, r.error_code()) == (want, code), (method, path, r)


def test_bad_requests(spaced, sbx):
    long_path = "/" + "a" * 5000
    cases = [
        ("GET", F % sbx, None, 400, "invalid_request"),                       # no path
        ("GET", F % sbx + q(path=""), None, 400, "invalid_request"),
        ("GET", F % sbx + q(path=long_path), None, 400, "invalid_request"),
        ("GET", F % sbx + q(path="/a\nb"), None, 400, "invalid_request"),
        ("GET", F % sbx + q(path="/tmp", user="bad user"), None, 400, "invalid_request"),
        ("GET", F % sbx + "/list" + q(path="/", depth=0), None, 400, "invalid_request"),
        ("GET", F % sbx + "/list" + q(path="/", depth=17), None, 400, "invalid_request"),
        ("DELETE", F % sbx + q(path="/x", recursive="perhaps"), None, 400, "invalid_request"),
        ("PUT", F % sbx + q(path="/tmp/m", mode="999"), None, 400, "invalid_request"),
        ("POST", F % sbx + "/mkdir", {"path": "/x", "extra": 1}, 400, "unknown_field"),
        ("POST", F % sbx + "/mkdir", {"mode": 1}, 400, "invalid_request"),
        ("POST", F % sbx + "/rename", {"from": "/a"}, 400, "invalid_request"),
        ("GET", "/v1/sandboxes/bad/files/stat" + q(path="/"), None, 400, "invalid_id"),
        ("GET", "/v1/sandboxes/sb%s/files/stat" % ("0" * 16) + q(path="/"), None, 404, "not_found"),
    ]
    for method, path, body, want, code in cases:
        r = spaced.request(method, path, body)
        assert (r.status, r.error_code()) == (want, code), (method, path, r)
    r = spaced.request("POST", F % sbx + "/rename", raw=b"{nope")
    assert r.status == 400 and r.error_code() == "invalid_json"
    r = spaced.request("GET", F % sbx + "/stat" + q(path="/"), key=None)
    assert r.status == 401


def test_files_need_a_running_sandbox(spaced):
    r = spaced.create({"template": "base", "timeout": 0})
    sid = r["sandbox"]["id"]
    assert spaced.wait_op(r["operation"]["id"])["state"] == "succeeded"
    op = spaced.request("POST", "/v1/sandboxes/%s/pause" % sid).json["operation"]
    assert spaced.wait_op(op["id"])["state"] == "succeeded"
    r = spaced.request("GET", F % sid + "/stat" + q(path="/"))
    assert r.status == 409 and r.error_code() == "not_running"
    op = spaced.request("DELETE", "/v1/sandboxes/" + sid).json["operation"]
    assert spaced.wait_op(op["id"])["state"] == "succeeded"
    assert spaced.request("GET", F % sid + "/stat" + q(path="/")).status == 404


def test_broken_upload_leaves_no_file(spaced, sbx):
    import socket
    import time
    assert spaced.request("POST", F % sbx + "/mkdir", {"path": "/tmp/half"}).status in (201, 409)
    s = socket.create_connection(("127.0.0.1", spaced.port))
    s.sendall(("PUT %s HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
               "Content-Length: 1048576\r\n\r\n" % (F % sbx + q(path="/tmp/half/f.bin"),
                                                   spaced.admin_key)).encode())
    s.sendall(b"x" * 100000)
    time.sleep(0.5)  # let part of it reach the guest
    s.close()
    # The upload is cancelled: the target never appears and the temporary file goes.
    deadline = time.monotonic() + 30
    while True:
        entries = spaced.request("GET", F % sbx + "/list" + q(path="/tmp/half")).json["entries"]
        if not entries or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert entries == []
    assert spaced.request("GET", F % sbx + "/stat" + q(path="/tmp/half/f.bin")).status == 404
