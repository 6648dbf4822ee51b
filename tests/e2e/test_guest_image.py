"""The guest image scripts: kernel extraction results, initramfs layout, template builder.

Images are inspected with debugfs (no mount). Tests that need the fetched kernel or a
built template skip with the command that makes them; builder tests need root (chroot,
file owners) and say so when they skip.
"""

import hashlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GUEST = Path(os.environ.get("SPACE_GUEST", REPO / "build" / "guest"))
BUILD_TEMPLATE = REPO / "guest" / "build-template.sh"
BUILD_INITRAMFS = REPO / "guest" / "build-initramfs.sh"

needs_root = pytest.mark.skipif(os.geteuid() != 0,
                                reason="template builds need root (chroot, file owners)")


def need(path, how):
    if not path.exists():
        pytest.skip(f"{path} is missing; build it with: {how}")


def debugfs(image, request):
    if shutil.which("debugfs") is None:
        pytest.skip("debugfs missing (apt-get install e2fsprogs)")
    out = subprocess.run(["debugfs", "-R", request, str(image)], capture_output=True,
                         text=True, check=True)
    return out.stdout


def image_file(image, path):
    return debugfs(image, f"cat {path}")


def image_stat(image, path):
    """(mode, uid, gid, type) of path in the image; type as debugfs names it."""
    out = debugfs(image, f"stat {path}")
    assert "Inode:" in out, f"{path} not in {image}"
    fields = out.split()
    kind = fields[fields.index("Type:") + 1]
    mode = int(fields[fields.index("Mode:") + 1], 8)
    uid = int(fields[fields.index("User:") + 1])
    gid = int(fields[fields.index("Group:") + 1])
    return mode, uid, gid, kind


# ---- kernel (guest/fetch-kernel.sh)

def test_kernel_outputs():
    need(GUEST / "kernel.version", "make kernel")
    info = dict(line.split("=", 1) for line in
                (GUEST / "kernel.version").read_text().splitlines() if "=" in line)
    assert set(info) >= {"package", "version", "release", "boot", "kernel"}
    assert info["package"] == "linux-image-" + info["release"]
    kernel = GUEST / info["kernel"]
    assert kernel.exists()
    if info["boot"] == "pvh":
        assert kernel.read_bytes()[:4] == b"\x7fELF"
        notes = subprocess.run(["readelf", "-n", str(kernel)], capture_output=True,
                               text=True, check=True).stdout
        assert "(0x00000012)" in notes, "no XEN_ELFNOTE_PHYS32_ENTRY note"
    order = (GUEST / "modules" / "order").read_text().split()
    for name in ("virtio_mmio.ko", "virtio_blk.ko", "virtio_console.ko"):
        assert name in order
    assert order.index("virtio_ring.ko") < order.index("virtio_mmio.ko")
    assert order.index("failover.ko") < order.index("net_failover.ko") < order.index("virtio_net.ko")
    for name in order:
        with open(GUEST / "modules" / name, "rb") as f:
            assert f.read(4) == b"\x7fELF", f"{name} is not a plain .ko"


def test_kernel_fetch_is_idempotent():
    need(GUEST / "kernel.version", "make kernel")
    if shutil.which("apt-cache") is None:
        pytest.skip("apt-cache missing")
    before = (GUEST / "vmlinux").stat().st_mtime_ns if (GUEST / "vmlinux").exists() else None
    out = subprocess.run([str(REPO / "guest" / "fetch-kernel.sh"), str(GUEST)],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    if "up to date" not in out.stdout:
        pytest.skip("apt now offers a newer kernel than the one fetched; re-run make kernel")
    after = (GUEST / "vmlinux").stat().st_mtime_ns if (GUEST / "vmlinux").exists() else None
    assert before == after


# ---- initramfs (guest/build-initramfs.sh), with stand-in modules: no kernel needed

@pytest.fixture
def fake_outdir(tmp_path):
    out = tmp_path / "out"
    (out / "modules").mkdir(parents=True)
    for name in ("a.ko", "b.ko"):
        (out / "modules" / name).write_bytes(b"\x7fELF" + name.encode())
    (out / "modules" / "order").write_text("a.ko\nb.ko\n")
    init = tmp_path / "init"
    init.write_bytes(b"#!/bin/sh\n")
    return out, init


def cpio_list(archive):
    out = subprocess.run(["cpio", "-itv", "--quiet"], stdin=open(archive, "rb"),
                         capture_output=True, text=True, check=True).stdout
    return {line.split()[-1]: line.split()[0] for line in out.splitlines()}


def test_initramfs_layout(fake_outdir):
    out, init = fake_outdir
    subprocess.run([str(BUILD_INITRAMFS), str(out), str(init)], check=True,
                   stdout=subprocess.DEVNULL)
    entries = cpio_list(out / "initramfs.cpio")
    assert entries["init"].startswith("-rwx")
    for path in ("modules/a.ko", "modules/b.ko", "modules/order"):
        assert entries[path].startswith("-")
    for path in ("dev", "proc", "sys", "newroot", "tmp"):
        assert entries[path].startswith("d")
    assert entries["tmp"] == "drwxrwxrwt"
    if os.geteuid() == 0:
        assert entries["dev/console"].startswith("c")


def test_initramfs_rejects_path_in_module_order(fake_outdir):
    out, init = fake_outdir
    (out / "modules" / "order").write_text("a.ko\n../../etc/passwd\n")
    res = subprocess.run([str(BUILD_INITRAMFS), str(out), str(init)], capture_output=True,
                         text=True)
    assert res.returncode != 0
    assert "bad module name" in res.stderr
    assert not (out / "initramfs.cpio").exists()


# ---- built-in templates

def test_base_template_contents():
    image = GUEST / "templates" / "base" / "rootfs.ext4"
    need(image, "guest/build-template.sh build/guest base")
    meta = json.loads((GUEST / "templates" / "base" / "template.json").read_text())
    assert meta["name"] == "base"
    assert meta["image"]["size_bytes"] == image.stat().st_size == 256 << 20
    assert meta["defaults"] == {"env": {"LANG": "C.UTF-8"}, "workdir": "/home/user", "user": "user"}
    assert meta["spec"]["base"] == "scratch-busybox"
    passwd = image_file(image, "/etc/passwd")
    assert "root:x:0:0:root:/root:/bin/sh" in passwd
    assert "user:x:1000:1000:user:/home/user:/bin/sh" in passwd
    assert "user:x:1000:" in image_file(image, "/etc/group")
    assert "user:" in image_file(image, "/etc/shadow")
    assert image_file(image, "/etc/hostname").strip() == "space"
    assert image_stat(image, "/home/user")[1:3] == (1000, 1000)
    assert image_stat(image, "/tmp")[0] & 0o7777 == 0o1777
    assert image_stat(image, "/root")[1] == 0
    assert image_stat(image, "/bin/sh")[3] == "symlink"
    assert image_stat(image, "/bin/busybox")[3] == "regular"
    for mount_point in ("/dev", "/proc", "/sys", "/run"):
        assert image_stat(image, mount_point)[3] == "directory"


def test_python_template_contents():
    image = GUEST / "templates" / "python" / "rootfs.ext4"
    need(image, "guest/build-template.sh build/guest python")
    meta = json.loads((GUEST / "templates" / "python" / "template.json").read_text())
    assert meta["spec"]["base"] == "debootstrap:bookworm"
    assert "user:x:1000:1000::/home/user:/bin/bash" in image_file(image, "/etc/passwd")
    assert image_stat(image, "/home/user")[1:3] == (1000, 1000)
    assert image_stat(image, "/usr/bin/python3")[3] in ("symlink", "regular")
    assert "BEGIN CERTIFICATE" in image_file(image, "/etc/ssl/certs/ca-certificates.crt")


# ---- the builder on specs written by the test

def write_spec(tmp_path, spec, name="t"):
    spec.setdefault("name", name)
    path = tmp_path / "specs" / f"{name}.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(spec))
    return path


def build(tmp_path, spec_path, name="t", out=None):
    out = out or tmp_path / "out"
    env = dict(os.environ, SPACE_TEMPLATE_SPEC=str(spec_path))
    return subprocess.run([str(BUILD_TEMPLATE), str(out), name], capture_output=True,
                          text=True, env=env)


@needs_root
@pytest.mark.parametrize("spec, message", [
    ({"name": "other", "base": "scratch-busybox"}, "names itself"),
    ({"base": "scratch-busybox", "packages": ["python3"]}, "'packages' must be empty"),
    ({"base": "python"}, "build it through spaced"),
    ({"base": "scratch-busybox", "packages": ["bad name"]}, "not a valid template spec"),
    ({"base": "scratch-busybox", "steps": [{"env": {"1X": "v"}}]}, "not a valid template spec"),
    ({"base": "scratch-busybox", "steps": [{"run": "true", "user": "x"}]}, "not a valid template spec"),
    ({"base": "scratch-busybox", "steps": [{"workdir": "relative"}]}, "not a valid template spec"),
    ({"base": "scratch-busybox", "steps": [{"copy": {"src": "../x", "dst": "/x"}}]}, "without '..'"),
    ({"base": "scratch-busybox", "steps": [{"user": "nobody-here"}]}, "does not exist"),
    ({"base": "scratch-busybox", "steps": [{"run": "exit 3"}]}, "failed with status 3"),
    ({"base": "scratch-busybox", "size_mib": 8}, "not a valid template spec"),
])
def test_builder_rejects(tmp_path, spec, message):
    res = build(tmp_path, write_spec(tmp_path, spec))
    assert res.returncode != 0
    assert message in res.stderr, res.stdout + res.stderr
    assert not (tmp_path / "out" / "templates" / "t" / "rootfs.ext4").exists()


@needs_root
def test_builder_steps_ca_and_cache(tmp_path):
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "hello.txt").write_text("hello from the spec\n")
    spec = write_spec(tmp_path, {
        "base": "scratch-busybox", "size_mib": 64,
        "steps": [
            {"copy": {"src": "hello.txt", "dst": "/opt/hello.txt"}},
            {"env": {"GREETING": "hi there"}},
            {"workdir": "/home/user/work"},
            {"run": "chown 1000:1000 /home/user/work"},
            {"user": "user"},
            {"run": "id -u > uid; pwd > pwd; echo \"$GREETING\" > env; echo $HOME > home"},
        ],
        "start": "sleep 1000", "ready": "true"})
    out = tmp_path / "out"
    (out / "ca").mkdir(parents=True)
    ca = b"-----BEGIN CERTIFICATE-----\nc3BhY2UgdGVzdA==\n-----END CERTIFICATE-----\n"
    (out / "ca" / "space-ca.crt").write_bytes(ca)

    res = build(tmp_path, spec)
    assert res.returncode == 0, res.stdout + res.stderr
    image = out / "templates" / "t" / "rootfs.ext4"
    assert image_file(image, "/opt/hello.txt") == "hello from the spec\n"
    assert image_file(image, "/home/user/work/uid").strip() == "1000"
    assert image_file(image, "/home/user/work/pwd").strip() == "/home/user/work"
    assert image_file(image, "/home/user/work/env").strip() == "hi there"
    assert image_file(image, "/home/user/work/home").strip() == "/home/user"
    assert image_stat(image, "/home/user/work/uid")[1] == 1000
    assert "c3BhY2UgdGVzdA==" in image_file(image, "/etc/ssl/certs/ca-certificates.crt")
    meta = json.loads((out / "templates" / "t" / "template.json").read_text())
    assert meta["ca_sha256"] == hashlib.sha256(ca).hexdigest()
    assert meta["defaults"] == {"env": {"GREETING": "hi there"}, "workdir": "/home/user/work",
                                "user": "user"}
    assert meta["start"] == "sleep 1000" and meta["ready"] == "true"
    assert meta["image"]["size_bytes"] == 64 << 20
    assert meta["image"]["allocated_bytes"] < 32 << 20, "image is not sparse"

    again = build(tmp_path, spec)
    assert again.returncode == 0 and "up to date" in again.stdout
    # The key covers what copy steps copy: a changed file is a rebuild, not "up to date".
    (tmp_path / "specs" / "hello.txt").write_text("changed\n")
    changed = build(tmp_path, spec)
    assert changed.returncode == 0 and "up to date" not in changed.stdout, changed.stdout
    assert image_file(image, "/opt/hello.txt") == "changed\n"
    (out / "ca" / "space-ca.crt").unlink()
    rebuilt = build(tmp_path, spec)
    assert rebuilt.returncode == 0 and "up to date" not in rebuilt.stdout
    assert json.loads((out / "templates" / "t" / "template.json").read_text())["ca_sha256"] is None


# ---- mirror discovery for debootstrap (guest/lib/base-debootstrap.sh)

def apt_mirror(etc, suite):
    script = f". {REPO / 'guest/lib/base-debootstrap.sh'}; apt_mirror {suite}"
    res = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True,
                         env=dict(os.environ, SPACE_APT_ETC=str(etc)))
    return res.stdout.split()


def test_apt_mirror_deb822_and_one_line(tmp_path):
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "a.sources").write_text(
        "# comment\n"
        "Types: deb\nURIs: http://disabled.invalid/debian\nSuites: bookworm\n"
        "Components: main\nEnabled: no\n\n"
        "Types: deb-src\nURIs: http://src.invalid/debian\nSuites: bookworm\nComponents: main\n\n"
        "Types: deb\n# a comment inside\nURIs: http://mirror.invalid/debian http://second.invalid/d\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n"
        "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n"
        "Types: deb\nURIs: http://security.invalid/debian-security\n"
        "Suites: bookworm-security\nComponents: main\n")
    (tmp_path / "sources.list").write_text(
        "deb [arch=amd64] http://oneline.invalid/debian trixie main\n"
        "# deb http://commented.invalid/debian sid main\n")
    assert apt_mirror(tmp_path, "bookworm") == ["http://mirror.invalid/debian"]
    assert apt_mirror(tmp_path, "bookworm-security") == ["http://security.invalid/debian-security"]
    assert apt_mirror(tmp_path, "trixie") == ["http://oneline.invalid/debian"]
    assert apt_mirror(tmp_path, "sid") == []
