"""Boot path of the guest image, checked before and independently of the agent.

Boots build/guest/vmlinux with the boot-test initramfs (guest/test/test-init.sh: busybox
as /init) and a qcow2 overlay of the base template's rootfs under QEMU microvm, with the
command line documented in docs/guest.md, and checks what the agent relies on: the
modules in /modules/order load, /dev/vda exists and holds the template, and the
virtio-serial port named space.agent is visible. Skips, saying what to build, when the
kernel, the base template, QEMU or busybox-static are missing. A last test boots the real
agent initramfs (build/guest/initramfs.cpio) the same way, when it has been built.
"""

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
GUEST = Path(os.environ.get("SPACE_GUEST", REPO / "build" / "guest"))
# Generous: TCG on a loaded 2-core machine; tests never fail on timing.
BOOT_TIMEOUT = 180

MACHINE = "microvm,x-option-roms=off,isa-serial=on,rtc=on,pit=off,pic=off,acpi=on"
KERNEL_ARGS = ("console=ttyS0 quiet panic=-1 reboot=t tsc=reliable mitigations=off "
               "cryptomgr.notests 8250.nr_uarts=1 sysctl.vm.compaction_proactiveness=0 "
               "nowatchdog nmi_watchdog=0 rcu_nocbs=0 sysctl.vm.stat_interval=10 psi=0 "
               "cgroup_disable=memory sysctl.kernel.hung_task_timeout_secs=0")


def host_tsc_khz():
    """Under TCG the guest TSC runs at the host's rate; docs/guest.md explains why."""
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("cpu MHz"):
                return int(float(line.split(":")[1]) * 1000)
    return 2000000


def need(path, how):
    if not path.exists():
        pytest.skip(f"{path} is missing; build it with: {how}")


@pytest.fixture(scope="module")
def artifacts():
    for tool in ("qemu-system-x86_64", "qemu-img"):
        if shutil.which(tool) is None:
            pytest.skip(f"{tool} not installed (apt-get install qemu-system-x86 qemu-utils)")
    need(GUEST / "kernel.version", "make kernel (guest/fetch-kernel.sh build/guest)")
    kernel = GUEST / "vmlinux"
    need(kernel, "make kernel (this kernel has no PVH vmlinux: see kernel.version)")
    need(GUEST / "modules" / "order", "make kernel")
    rootfs = GUEST / "templates" / "base" / "rootfs.ext4"
    need(rootfs, "guest/build-template.sh build/guest base")
    if not os.access("/bin/busybox", os.X_OK):
        pytest.skip("/bin/busybox missing (apt-get install busybox-static)")
    # Always rebuilt (about a second), so the test checks the current scripts.
    subprocess.run([str(REPO / "guest/test/build-test-initramfs.sh"), str(GUEST)],
                   check=True, stdout=subprocess.DEVNULL)
    initrd = GUEST / "test" / "initramfs-test.cpio"
    order = (GUEST / "modules" / "order").read_text().split()
    return kernel, initrd, rootfs, order


def qemu_cmd(tmp_path, kernel, initrd, rootfs, extra_machine="", extra_args=()):
    """The docs/guest.md command line, booting a fresh qcow2 overlay of rootfs."""
    overlay = tmp_path / "disk.qcow2"
    subprocess.run(["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(rootfs),
                    "-F", "raw", str(overlay)], check=True)
    return ["qemu-system-x86_64",
           "-M", MACHINE + extra_machine, "-accel", "tcg", "-cpu", "max",
           "-m", "256", "-smp", "1",
           "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
           "-serial", "stdio",
           "-kernel", str(kernel), "-initrd", str(initrd),
           "-append", f"{KERNEL_ARGS} tsc_early_khz={host_tsc_khz()}",
           "-device", "virtio-blk-device,drive=root",
           "-drive", f"id=root,file={overlay},format=qcow2,if=none",
           "-device", "virtio-serial-device",
           "-chardev", f"socket,id=agent,path={tmp_path / 'agent.sock'},server=on,wait=off",
           "-device", "virtserialport,chardev=agent,name=space.agent",
           "-device", "virtio-rng-device", *extra_args]


def boot(tmp_path, kernel, initrd, rootfs, extra_machine="", extra_args=()):
    """Run one VM to completion; returns (exit status, console lines, seconds)."""
    cmd = qemu_cmd(tmp_path, kernel, initrd, rootfs, extra_machine, extra_args)
    started = time.monotonic()
    try:
        proc = subprocess.run(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=BOOT_TIMEOUT)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"").decode(errors="replace")
        pytest.fail(f"guest did not power off within {BOOT_TIMEOUT} s; console:\n{out[-4000:]}")
    lines = proc.stdout.decode(errors="replace").replace("\r", "").splitlines()
    return proc.returncode, lines, time.monotonic() - started


def check_boot(status, lines, order):
    console = "\n".join(lines[-80:])
    facts = [line.split("SPACE-TEST: ", 1)[1] for line in lines if "SPACE-TEST: " in line]
    assert status == 0, f"qemu exited {status}; console:\n{console}"
    assert "init started" in facts, f"/init never ran; console:\n{console}"
    for mod in order:
        assert f"module {mod} loaded" in facts, f"{mod} did not load; console:\n{console}"
    assert "block /dev/vda present" in facts, console
    assert any(f.startswith("virtio-port ") and f.endswith(" name=space.agent") for f in facts), \
        f"no virtio port named space.agent; console:\n{console}"
    assert "rootfs mounted hostname=space" in facts, f"base rootfs not mounted; console:\n{console}"
    assert "done" in facts, console


def test_boot_reaches_init_with_devices(artifacts, tmp_path):
    kernel, initrd, rootfs, order = artifacts
    status, lines, seconds = boot(tmp_path, kernel, initrd, rootfs)
    check_boot(status, lines, order)
    print(f"boot to power-off under TCG: {seconds:.2f} s")


def test_boot_with_shared_file_memory(artifacts, tmp_path):
    """Snapshots need guest RAM in a shared file (DESIGN 5.3); microvm must boot that way."""
    kernel, initrd, rootfs, order = artifacts
    mem = tmp_path / "mem"
    status, lines, _ = boot(
        tmp_path, kernel, initrd, rootfs, extra_machine=",memory-backend=mem",
        extra_args=("-object", f"memory-backend-file,id=mem,size=256M,mem-path={mem},share=on"))
    check_boot(status, lines, order)
    assert mem.stat().st_size == 256 << 20


def test_agent_initramfs_reaches_ready(artifacts, tmp_path):
    """The packaging works for the real agent: it loads the modules, switches to the base
    rootfs and finds its port (it logs event=init.ready then), within the timeout."""
    kernel, _, rootfs, _ = artifacts
    initrd = GUEST / "initramfs.cpio"
    need(initrd, "make guest (guest/build-initramfs.sh build/guest build/guest/space-agent)")
    proc = subprocess.Popen(qemu_cmd(tmp_path, kernel, initrd, rootfs), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = []
    deadline = time.monotonic() + BOOT_TIMEOUT
    try:
        os.set_blocking(proc.stdout.fileno(), False)
        pending = b""
        while time.monotonic() < deadline and proc.poll() is None:
            chunk = proc.stdout.read() or b""
            pending += chunk
            *done, pending = pending.split(b"\n")
            lines += [d.decode(errors="replace").rstrip("\r") for d in done]
            if any("event=init.ready" in line for line in lines):
                break
            time.sleep(0.05)
    finally:
        proc.kill()
        proc.wait()
    console = "\n".join(lines[-60:])
    assert any("event=init.ready" in line for line in lines), \
        f"agent never logged event=init.ready; console:\n{console}"
    assert any("port=/dev/vport" in line for line in lines if "init.ready" in line), console
