/* init.c: PID 1 boot and power-off; see init.h. */
#include "agent/init.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/reboot.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/net.h"
#include "log.h"

#define INIT_NEWROOT "/newroot"
#define INIT_ROOTDEV "/dev/vda"
#define INIT_WAIT_MS 10000

static void init_sleep_ms(long ms)
{
    struct timespec t = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000};
    nanosleep(&t, NULL);
}

static void init_mount(const char *src, const char *dst, const char *type, unsigned long flags,
                       const char *data)
{
    mkdir(dst, 0755);
    if (mount(src, dst, type, flags, data) < 0 && errno != EBUSY)
        log_warn("init.mount", "target=%s errno=%d", dst, errno);
}

/* Console as stdio, so logs reach the serial console the host captures. */
static void init_console(void)
{
    int fd = open("/dev/console", O_RDWR | O_NOCTTY);
    if (fd < 0)
        return;
    dup2(fd, 0);
    dup2(fd, 1);
    dup2(fd, 2);
    if (fd > 2)
        close(fd);
}

static void init_modules(void)
{
    FILE *f = fopen("/modules/order", "re");
    if (!f) {
        log_warn("init.modules", "msg=\"no /modules/order\"");
        return;
    }
    char line[256];
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0] || line[0] == '#')
            continue;
        char path[300];
        const char *base = strrchr(line, '/') ? strrchr(line, '/') + 1 : line;
        size_t n = strlen(base);
        snprintf(path, sizeof path, "/modules/%s%s", base,
                 n > 3 && strcmp(base + n - 3, ".ko") == 0 ? "" : ".ko");
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0 || (syscall(SYS_finit_module, fd, "", 0) < 0 && errno != EEXIST))
            log_warn("init.module", "path=%s errno=%d", path, errno);
        if (fd >= 0)
            close(fd);
    }
    fclose(f);
}

static int init_wait_for(const char *path)
{
    for (int waited = 0; waited < INIT_WAIT_MS; waited += 10) {
        if (access(path, F_OK) == 0)
            return 0;
        init_sleep_ms(10);
    }
    return -1;
}

/* Mounts the disk and makes it /. Returns 0, or -1 (we keep running from initramfs). */
static int init_switch_root(void)
{
    if (init_wait_for(INIT_ROOTDEV) < 0) {
        log_error("init.root", "msg=\"no root disk\" dev=%s", INIT_ROOTDEV);
        return -1;
    }
    mkdir(INIT_NEWROOT, 0755);
    if (mount(INIT_ROOTDEV, INIT_NEWROOT, "ext4", 0, NULL) < 0) {
        log_error("init.root", "msg=\"mount failed\" errno=%d", errno);
        return -1;
    }
    static const char *const moved[] = {"/dev", "/proc", "/sys"};
    for (size_t i = 0; i < 3; i++) {
        char dst[64];
        snprintf(dst, sizeof dst, INIT_NEWROOT "%s", moved[i]);
        mkdir(dst, 0755);
        if (mount(moved[i], dst, NULL, MS_MOVE, NULL) < 0)
            log_warn("init.move", "src=%s errno=%d", moved[i], errno);
    }
    if (chdir(INIT_NEWROOT) < 0 || mount(".", "/", NULL, MS_MOVE, NULL) < 0 || chroot(".") < 0 ||
        chdir("/") < 0) {
        log_error("init.switch_root", "errno=%d", errno);
        return -1;
    }
    return 0;
}

static void init_loopback(void)
{
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq ifr = {0};
    strcpy(ifr.ifr_name, "lo");
    if (s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0) {
        ifr.ifr_flags |= IFF_UP;
        if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
            log_warn("init.lo", "errno=%d", errno);
    }
    if (s >= 0)
        close(s);
}

/* Finds /dev/<vportNpM> whose sysfs name is space.agent. */
static int init_find_port(char *port, size_t cap)
{
    for (int waited = 0; waited < INIT_WAIT_MS; waited += 20) {
        DIR *d = opendir("/sys/class/virtio-ports");
        struct dirent *de;
        while (d && (de = readdir(d))) {
            if (de->d_name[0] == '.')
                continue;
            char path[300], name[64] = "";
            snprintf(path, sizeof path, "/sys/class/virtio-ports/%s/name", de->d_name);
            FILE *f = fopen(path, "re");
            if (f) {
                if (!fgets(name, sizeof name, f))
                    name[0] = '\0';
                fclose(f);
            }
            name[strcspn(name, "\n")] = '\0';
            if (strcmp(name, AGENT_PORT_NAME) == 0) {
                snprintf(port, cap, "/dev/%s", de->d_name);
                closedir(d);
                return init_wait_for(port);
            }
        }
        if (d)
            closedir(d);
        init_sleep_ms(20);
    }
    return -1;
}

int agent_init_boot(char *port, size_t cap)
{
    init_mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755");
    init_console();
    init_mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    init_mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
    init_modules();
    init_switch_root();
    init_mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "mode=0620,ptmxmode=0666,gid=5");
    init_mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
    init_mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
    init_mount("tmpfs", "/run", "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755");
    if (symlink("/proc/self/fd", "/dev/fd") < 0 && errno != EEXIST)
        log_warn("init.symlink", "errno=%d", errno);
    init_loopback(); /* also without a NIC: programs use localhost */
    char err[256], qerr[300];
    if (agent_net_up(err, sizeof err) < 0)
        log_warn("init.net", "msg=%s", log_quote(err, qerr, sizeof qerr));
    if (sethostname("space", 5) < 0)
        log_warn("init.hostname", "errno=%d", errno);
    setenv("PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", 1);
    if (init_find_port(port, cap) < 0) {
        log_error("init.port", "msg=\"virtio-serial port space.agent not found\"");
        return -1;
    }
    log_info("init.ready", "port=%s", port);
    return 0;
}

void agent_init_poweroff(void)
{
    log_info("init.poweroff", NULL);
    kill(-1, SIGTERM);
    for (int waited = 0; waited < 2000; waited += 20) {
        while (waitpid(-1, NULL, WNOHANG) > 0) {
        }
        if (waitpid(-1, NULL, WNOHANG) < 0 && errno == ECHILD)
            break;
        init_sleep_ms(20);
    }
    kill(-1, SIGKILL);
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
    sync();
    if (mount(NULL, "/", NULL, MS_REMOUNT | MS_RDONLY, NULL) < 0)
        log_warn("init.remount_ro", "errno=%d", errno);
    sync();
    reboot(RB_POWER_OFF);
    for (;;)
        pause();
}
