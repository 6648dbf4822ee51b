#!/bin/busybox sh
# /init of the boot-test initramfs (not the agent): checks what the agent will rely on,
# printing one "SPACE-TEST:" line per fact for tests/e2e/test_guest_boot.py, then reboots
# (reboot=t on the kernel command line and -no-reboot on QEMU's: a clean VM exit).
/bin/busybox mount -t devtmpfs devtmpfs /dev
# An archive built without root has no /dev/console, and then init starts with no output.
exec </dev/console >/dev/console 2>&1
echo "SPACE-TEST: init started"
/bin/busybox --install -s /bin
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
while read -r mod; do
    [ -n "$mod" ] || continue
    if insmod "/modules/$mod"; then echo "SPACE-TEST: module $mod loaded"; else echo "SPACE-TEST: module $mod FAILED"; fi
done < /modules/order
# Devices appear asynchronously after their driver binds; wait briefly for the disk.
i=0
while [ ! -b /dev/vda ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
# virtio-serial ports are announced by the host over the control queue after the
# driver binds, so they can appear a little after the module is loaded.
i=0
while [ -z "$(ls /sys/class/virtio-ports 2>/dev/null)" ] && [ $i -lt 50 ]; do sleep 0.1; i=$((i + 1)); done
for d in /sys/bus/virtio/devices/*; do
    echo "SPACE-TEST: virtio-device $(basename "$d") id=$(cat "$d/device") driver=$(basename "$(readlink "$d/driver" 2>/dev/null)")"
done
for p in /sys/class/virtio-ports/*; do
    [ -f "$p/name" ] && echo "SPACE-TEST: virtio-port $(basename "$p") name=$(cat "$p/name")"
done
[ -b /dev/vda ] && echo "SPACE-TEST: block /dev/vda present"
if mount -t ext4 -o ro /dev/vda /newroot; then
    echo "SPACE-TEST: rootfs mounted hostname=$(cat /newroot/etc/hostname 2>/dev/null)"
    umount /newroot
fi
echo "SPACE-TEST: uptime $(cut -d' ' -f1 /proc/uptime)"
echo "SPACE-TEST: done"
reboot -f
