/* net_ns.c: creating, mounting and opening sandbox network namespaces and their taps,
 * with syscalls only (see net.h for the wiring). The loop thread enters a namespace for
 * a few syscalls and always returns to spaced's own (home) namespace before going on. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_tun.h>
#include <linux/magic.h>
#include <net/if.h>
#include <net/if_arp.h>
#include <sys/socket.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "daemon/net/net_internal.h"
#include "log.h"
#include "rtnl.h"

#ifndef NSFS_MAGIC
#define NSFS_MAGIC 0x6e736673
#endif

/* The tap flags: QEMU probes IFF_VNET_HDR on a passed fd and then uses virtio-net
 * headers (checksum/segmentation offload); IFF_NO_PI because QEMU wants bare frames. */
#define TAP_FLAGS (IFF_TAP | IFF_NO_PI | IFF_VNET_HDR)

int net_ns_prepare_dir(const char *dir, char *err, size_t errlen)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        snprintf(err, errlen, "mkdir %s: %s", dir, strerror(errno));
        return -1;
    }
    if (mount("", dir, "none", MS_SHARED | MS_REC, NULL) == 0)
        return 0;
    /* EINVAL: not a mount point yet; make it one (a bind of itself), then shared. */
    if (errno != EINVAL || mount(dir, dir, "none", MS_BIND | MS_REC, NULL) != 0 ||
        mount("", dir, "none", MS_SHARED | MS_REC, NULL) != 0) {
        snprintf(err, errlen, "making %s a shared mount: %s", dir, strerror(errno));
        return -1;
    }
    return 0;
}

static int write_sysctl(const char *path, const char *value)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : -1; /* a kernel without IPv6 has nothing to turn off */
    ssize_t n = write(fd, value, strlen(value));
    close(fd);
    return n == (ssize_t)strlen(value) ? 0 : -1;
}

/* Creates the persistent tap in the current namespace (the fd used to create it is
 * closed: QEMU later gets its own through net_ns_tap_open). */
static int tap_create(char *err, size_t errlen)
{
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        snprintf(err, errlen, "/dev/net/tun: %s", strerror(errno));
        return -1;
    }
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", NET_TAP);
    ifr.ifr_flags = TAP_FLAGS;
    int rc = 0;
    if (ioctl(fd, TUNSETIFF, &ifr) != 0 || ioctl(fd, TUNSETPERSIST, 1) != 0) {
        snprintf(err, errlen, "creating tap %s: %s", NET_TAP, strerror(errno));
        rc = -1;
    }
    close(fd);
    return rc;
}

/* The tap's own MAC, the same in every namespace: a clone restored from a template
 * snapshot keeps the template's neighbour entry for the gateway address, which must
 * stay right in whichever namespace the clone lands. */
static int tap_set_mac(char *err, size_t errlen)
{
    struct ifreq ifr;
    memset(&ifr, 0, sizeof ifr);
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", NET_TAP);
    ifr.ifr_hwaddr.sa_family = ARPHRD_ETHER;
    unsigned m[6];
    sscanf(NET_GATEWAY_MAC, "%x:%x:%x:%x:%x:%x", &m[0], &m[1], &m[2], &m[3], &m[4], &m[5]);
    for (int i = 0; i < 6; i++)
        ifr.ifr_hwaddr.sa_data[i] = (char)m[i];
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    int rc = s >= 0 ? ioctl(s, SIOCSIFHWADDR, &ifr) : -1;
    if (rc != 0)
        snprintf(err, errlen, "setting the tap's MAC: %s", strerror(errno));
    if (s >= 0)
        close(s);
    return rc;
}

/* Everything done inside the new namespace. */
static int wire(char *err, size_t errlen)
{
    if (write_sysctl("/proc/sys/net/ipv6/conf/all/disable_ipv6", "1") != 0 ||
        write_sysctl("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1") != 0) {
        snprintf(err, errlen, "disabling IPv6: %s", strerror(errno));
        return -1;
    }
    if (tap_create(err, errlen) != 0 || tap_set_mac(err, errlen) != 0)
        return -1;
    int lo = (int)if_nametoindex("lo"), tap = (int)if_nametoindex(NET_TAP);
    if (lo == 0 || tap == 0) {
        snprintf(err, errlen, "interfaces missing in the new namespace");
        return -1;
    }
    struct in_addr gw;
    inet_pton(AF_INET, NET_GATEWAY_IP, &gw);
    struct rtnl r;
    if (rtnl_open(&r, err, errlen) != 0)
        return -1;
    int rc = 0;
    if (rtnl_link_up(&r, lo, err, errlen) != 0 ||
        rtnl_addr_add(&r, tap, ntohl(gw.s_addr), NET_PREFIX_LEN, err, errlen) != 0 ||
        rtnl_link_up(&r, tap, err, errlen) != 0)
        rc = -1;
    rtnl_close(&r);
    return rc;
}

/* Returns the thread to spaced's namespace. Failing here would leave the loop thread
 * inside a sandbox's namespace, where later sockets would be created: refuse to go on. */
static void go_home(int home_fd)
{
    if (setns(home_fd, CLONE_NEWNET) != 0) {
        log_error("net.setns_home", "errno=%d msg=\"cannot return to the host namespace\"", errno);
        abort();
    }
}

int net_ns_create(int home_fd, char *err, size_t errlen)
{
    if (unshare(CLONE_NEWNET) != 0) {
        snprintf(err, errlen, "unshare(CLONE_NEWNET): %s", strerror(errno));
        return -1;
    }
    int nsfd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (nsfd < 0)
        snprintf(err, errlen, "opening the new namespace: %s", strerror(errno));
    else if (wire(err, errlen) != 0) {
        close(nsfd);
        nsfd = -1;
    }
    go_home(home_fd);
    return nsfd;
}

int net_ns_mount(int nsfd, const char *path, char *err, size_t errlen)
{
    int fd = open(path, O_RDONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0444);
    if (fd < 0) {
        snprintf(err, errlen, "creating %s: %s", path, strerror(errno));
        return -1;
    }
    close(fd);
    char src[64];
    snprintf(src, sizeof src, "/proc/self/fd/%d", nsfd);
    if (mount(src, path, "none", MS_BIND, NULL) != 0) {
        snprintf(err, errlen, "mounting the namespace at %s: %s", path, strerror(errno));
        unlink(path);
        return -1;
    }
    return 0;
}

int net_ns_open(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return -1;
    struct statfs sf;
    if (fstatfs(fd, &sf) != 0 || sf.f_type != NSFS_MAGIC) {
        close(fd);
        errno = EINVAL;
        return -1;
    }
    return fd;
}

void net_ns_unmount(const char *path)
{
    if (umount2(path, MNT_DETACH) != 0 && errno != EINVAL && errno != ENOENT)
        log_warn("net.umount", "path=%s errno=%d", path, errno);
    if (unlink(path) != 0 && errno != ENOENT)
        log_warn("net.unlink", "path=%s errno=%d", path, errno);
}

int net_ns_tap_open(int home_fd, int nsfd, char *err, size_t errlen)
{
    /* The tun fd resolves the device name in the namespace current at TUNSETIFF. */
    if (setns(nsfd, CLONE_NEWNET) != 0) {
        snprintf(err, errlen, "entering the namespace: %s", strerror(errno));
        return -1;
    }
    int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd < 0)
        snprintf(err, errlen, "/dev/net/tun: %s", strerror(errno));
    else {
        struct ifreq ifr;
        memset(&ifr, 0, sizeof ifr);
        snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "%s", NET_TAP);
        ifr.ifr_flags = TAP_FLAGS;
        if (ioctl(fd, TUNSETIFF, &ifr) != 0) {
            snprintf(err, errlen, "opening tap %s: %s", NET_TAP, strerror(errno));
            close(fd);
            fd = -1;
        }
    }
    go_home(home_fd);
    return fd;
}
