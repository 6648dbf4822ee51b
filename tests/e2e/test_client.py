"""End-to-end tests of the stdlib Python client (clients/python/space) and of
examples/first_sandbox.py against a real spaced and real VMs."""
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
import space  # noqa: E402

from spacedlib import GUEST  # noqa: E402


@pytest.fixture(scope="module")
def client(spaced):
    return space.Client(url=spaced.url, api_key=spaced.admin_key)


@pytest.fixture(scope="module")
def sbx(client):
    s = client.create(template="base", timeout=0)
    yield s
    s.delete()


def test_configuration_from_environment(spaced, monkeypatch):
    monkeypatch.setenv("SPACE_URL", spaced.url)
    monkeypatch.setenv("SPACE_API_KEY", spaced.admin_key)
    c = space.Client()
    assert c.url == spaced.url and c.api_key == spaced.admin_key
    # Without SPACE_API_KEY the admin key file of the data dir is used.
    monkeypatch.delenv("SPACE_API_KEY")
    monkeypatch.setenv("SPACE_DATA_DIR", spaced.data_dir)
    assert space.Client().api_key == spaced.admin_key
    monkeypatch.setenv("SPACE_DATA_DIR", "/nonexistent")
    with pytest.raises(space.SpaceError) as e:
        space.Client()
    assert e.value.code == "no_api_key" and "SPACE_API_KEY" in e.value.message
    with pytest.raises(space.SpaceError):
        space.Client(url="ftp://x", api_key="k")


def test_errors_are_space_errors(client, spaced):
    with pytest.raises(space.SpaceError) as e:
        client.get("sb" + "0" * 16)
    assert e.value.status == 404 and e.value.code == "not_found"
    bad = space.Client(url=spaced.url, api_key="space_" + "0" * 48)
    with pytest.raises(space.SpaceError) as e:
        bad.list()
    assert e.value.status == 401
    down = space.Client(url="http://127.0.0.1:1", api_key="k")
    with pytest.raises(space.SpaceError) as e:
        down.list()
    assert e.value.code == "unreachable"


def test_run_streams_output(sbx):
    seen = []
    r = sbx.run("printf 'h\\303'; sleep 0.2; printf '\\251llo\\n'; echo e >&2; exit 4",
                on_stdout=seen.append)
    assert r.exit_code == 4 and r.signal is None
    assert r.stdout == "h\u00e9llo\n" and r.stderr == "e\n"
    # The callback got text, with the UTF-8 character split across chunks joined.
    assert "".join(seen) == "h\u00e9llo\n"
    r = sbx.run(["sh", "-c", "cat | tr a-z A-Z"], stdin=b"hello stdin")
    assert r.stdout == "HELLO STDIN" and r.ok
    r = sbx.run("echo $X in $(pwd)", env={"X": "y"}, cwd="/tmp")
    assert r.stdout == "y in /tmp\n"
    r = sbx.run(["/no/such"])
    assert r.exit_code is None and r.error["code"] == "not_found"


def test_session_resume_after_reconnect(sbx):
    s = sbx.session("for i in 1 2 3 4 5 6; do echo $i; sleep 0.1; done")
    got = []
    for _id, name, data in s.events():
        if name == "stdout":
            got.append(data)
            if len(got) == 2:
                break  # drop the connection mid-stream
    assert s.last_event_id is not None
    # A new iteration resumes after the last event seen: nothing lost, nothing repeated.
    for _id, name, data in s.events():
        if name == "stdout":
            got.append(data)
    assert b"".join(got) == b"1\n2\n3\n4\n5\n6\n"
    assert s.status()["state"] == "exited"


def test_session_control(sbx):
    s = sbx.session("echo go; exec sleep 100")
    it = s.events()
    for _id, name, _data in it:
        if name == "stdout":
            break
    s.signal("INT")
    last = [ev for ev in it][-1]
    assert last[1] == "exit" and last[2]["signal"] == 2
    with pytest.raises(space.SpaceError) as e:
        s.resize(10, 10)
    assert e.value.code in ("no_pty", "session_finished")


def test_files_roundtrip(sbx, tmp_path):
    data = os.urandom(3 * 1024 * 1024 + 17)
    st = sbx.write_file("/tmp/c/data.bin", data, mode=0o600)
    assert st["size"] == len(data) and st["mode"] == 0o600
    assert sbx.read_file("/tmp/c/data.bin") == data
    src = tmp_path / "src.bin"
    src.write_bytes(data[:100000])
    with open(src, "rb") as f:
        sbx.write_file("/tmp/c/from_file.bin", f)
    out = tmp_path / "out.bin"
    with open(out, "wb") as f:
        assert sbx.read_file_to("/tmp/c/from_file.bin", f) == 100000
    assert out.read_bytes() == data[:100000]
    sbx.write_file("/tmp/c/text.txt", "h\u00e9\n")
    assert sbx.read_file("/tmp/c/text.txt") == "h\u00e9\n".encode()

    sbx.mkdir("/tmp/c/d/e")
    names = sorted(e["name"] for e in sbx.list("/tmp/c"))
    assert names == ["d", "data.bin", "from_file.bin", "text.txt"]
    assert sbx.stat("/tmp/c/d")["type"] == "dir"
    sbx.rename("/tmp/c/text.txt", "/tmp/c/d/t.txt")
    assert sbx.exists("/tmp/c/d/t.txt") and not sbx.exists("/tmp/c/text.txt")
    with pytest.raises(space.SpaceError) as e:
        sbx.remove("/tmp/c/d")
    assert e.value.status == 409
    sbx.remove("/tmp/c", recursive=True)
    assert not sbx.exists("/tmp/c")


def test_lifecycle_verbs(client):
    s = client.create(template="base", timeout=0)
    try:
        assert s.state == "running"
        s.pause()
        assert s.state == "paused"
        s.resume()
        assert s.state == "running"
        assert s.run("echo alive").stdout == "alive\n"
        assert s.id in [x.id for x in client.list()]
    finally:
        s.delete()
    with pytest.raises(space.SpaceError) as e:
        client.get(s.id)
    assert e.value.status == 404


def test_fork_and_snapshot(client):
    s = client.create(template="base", timeout=0)
    made = []
    try:
        s.run("echo from-parent > ~/f")
        made = s.fork(2)
        assert [f.state for f in made] == ["running", "running"]
        for f in made:
            assert f.run("cat ~/f").stdout == "from-parent\n"
        snap = s.create_snapshot(name="client-snap")
        assert snap["state"] == "ready" and snap["name"] == "client-snap"
        assert snap["id"] in [x["id"] for x in client.snapshots()]
        made.append(client.create(template="client-snap", timeout=0))
        assert made[-1].run("cat ~/f").stdout == "from-parent\n"
        client.delete_snapshot(snap["id"])
        with pytest.raises(space.SpaceError) as e:
            client.snapshot(snap["id"])
        assert e.value.status == 404
        with pytest.raises(space.SpaceError) as e:
            s.fork(0)
        assert e.value.status == 400 and "count" in str(e.value)
    finally:
        for x in [s] + made:
            x.delete()


def test_first_sandbox_example(spaced):
    """examples/first_sandbox.py as a newcomer runs it (python template)."""
    if not os.path.exists(os.path.join(GUEST, "templates", "python", "rootfs.ext4")):
        pytest.skip("the python template is not built (make templates builds it)")
    env = dict(os.environ, SPACE_URL=spaced.url, SPACE_API_KEY=spaced.admin_key)
    p = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "first_sandbox.py")],
                       env=env, capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "hello from sb" in p.stdout
    assert "read back 15 bytes: 'hello, sandbox\\n'" in p.stdout
    assert "deleted" in p.stdout
