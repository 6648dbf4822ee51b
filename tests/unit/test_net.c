/* Sandbox networking: rtnetlink request building (bytes, then applied in a namespace of
 * our own), the guest-side eth0 set-up (agent_net_configure), policy and credential
 * validation, and the namespace pool in real namespaces — claim, re-claim, `none`,
 * records and re-adoption by a new module, live policy rules, credentials kept out of
 * replies, release — plus gateway supervision (start, attach, restart after a kill,
 * re-attach). Namespace tests need root and say so when they skip; the gateway test
 * also needs build/space-gateway (or $SPACE_BUILD/space-gateway).
 *
 * Everything happens inside namespaces this test creates (prefix sptest<pid>-); the
 * gateway it starts gets an unreachable upstream (127.0.0.1:9) and no query to send. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <poll.h>
#include <pthread.h>
#include <linux/if_tun.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/net.h"
#include "daemon/net/net.h"
#include "daemon/net/net_internal.h"
#include "daemon/net/net_tenant.h"
#include "rtnl.h"

static char prefix[32];
static char datadir[64];
static int home_fd = -1;

#define NEED_ROOT()                                                                 \
    do {                                                                            \
        if (geteuid() != 0) {                                                       \
            fprintf(stderr, "SKIP: needs root (network namespaces, taps, mounts)\n"); \
            skip();                                                                 \
        }                                                                           \
    } while (0)

/* ---- rtnl bytes ------------------------------------------------------------------- */

static const struct rtattr *find_attr(const struct nlmsghdr *h, size_t hdrlen, int type)
{
    int left = (int)(h->nlmsg_len - NLMSG_LENGTH(hdrlen));
    for (const struct rtattr *a = (const struct rtattr *)((const char *)NLMSG_DATA(h) + NLMSG_ALIGN(hdrlen));
         RTA_OK(a, left); a = RTA_NEXT(a, left))
        if (a->rta_type == type)
            return a;
    return NULL;
}

static void test_rtnl_build(void **state)
{
    char buf[RTNL_MSG_MAX] __attribute__((aligned(4)));
    size_t len = rtnl_build_addr(buf, sizeof buf, 7, 3, 0x0a00020f, 24);
    const struct nlmsghdr *h = (const void *)buf;
    assert_true(len > 0 && len == h->nlmsg_len);
    assert_int_equal(h->nlmsg_type, RTM_NEWADDR);
    assert_int_equal(h->nlmsg_seq, 7);
    assert_true(h->nlmsg_flags & NLM_F_ACK);
    const struct ifaddrmsg *ifa = NLMSG_DATA(h);
    assert_int_equal(ifa->ifa_prefixlen, 24);
    assert_int_equal(ifa->ifa_index, 3);
    const struct rtattr *a = find_attr(h, sizeof *ifa, IFA_LOCAL);
    assert_non_null(a);
    assert_int_equal(RTA_PAYLOAD(a), 4);
    assert_memory_equal(RTA_DATA(a), "\x0a\x00\x02\x0f", 4);
    a = find_attr(h, sizeof *ifa, IFA_BROADCAST);
    assert_memory_equal(RTA_DATA(a), "\x0a\x00\x02\xff", 4);

    len = rtnl_build_route_default(buf, sizeof buf, 1, 5, 0x0a000202);
    assert_true(len > 0);
    const struct rtmsg *rt = NLMSG_DATA(h);
    assert_int_equal(rt->rtm_dst_len, 0);
    assert_memory_equal(RTA_DATA(find_attr(h, sizeof *rt, RTA_GATEWAY)), "\x0a\x00\x02\x02", 4);
    assert_int_equal(*(const uint32_t *)RTA_DATA(find_attr(h, sizeof *rt, RTA_OIF)), 5);

    len = rtnl_build_link_up(buf, sizeof buf, 2, 9);
    const struct ifinfomsg *ifi = NLMSG_DATA(h);
    assert_true(len == NLMSG_LENGTH(sizeof *ifi));
    assert_true(ifi->ifi_flags & IFF_UP && ifi->ifi_change & IFF_UP);

    /* Too small a buffer or a bad prefix builds nothing. */
    assert_int_equal(rtnl_build_addr(buf, 20, 1, 1, 1, 24), 0);
    assert_int_equal(rtnl_build_addr(buf, sizeof buf, 1, 1, 1, 33), 0);
    assert_int_equal(rtnl_build_route_default(buf, NLMSG_LENGTH(sizeof(struct rtmsg)) + 4, 1, 1, 1), 0);
}

/* ---- guest side in a namespace of our own ------------------------------------------ */

static bool has_addr(const char *ifname, const char *ip)
{
    struct ifaddrs *ifs, *i;
    bool found = false;
    if (getifaddrs(&ifs) != 0)
        return false;
    for (i = ifs; i; i = i->ifa_next) {
        char txt[32];
        if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || strcmp(i->ifa_name, ifname))
            continue;
        inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, txt, sizeof txt);
        found |= strcmp(txt, ip) == 0;
    }
    freeifaddrs(ifs);
    return found;
}

static bool default_route_via(const char *ifname, uint32_t gw_be)
{
    FILE *f = fopen("/proc/net/route", "r");
    char line[256], dev[32];
    unsigned dst, gw, flags;
    bool found = false;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "%31s %x %x %x", dev, &dst, &gw, &flags) == 4 && dst == 0 &&
            gw == gw_be && strcmp(dev, ifname) == 0)
            found = true;
    if (f)
        fclose(f);
    return found;
}

static void test_agent_net_in_namespace(void **state)
{
    NEED_ROOT();
    char err[256], resolv[96];
    snprintf(resolv, sizeof resolv, "%s/resolv.conf", datadir);
    assert_int_equal(unshare(CLONE_NEWNET), 0);
    /* No eth0: nothing to do, nothing written. */
    assert_int_equal(agent_net_configure("eth0", resolv, err, sizeof err), 0);
    assert_int_not_equal(access(resolv, F_OK), 0);
    /* A tap named eth0 stands for the virtio NIC. */
    int tap = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    struct ifreq ifr = {.ifr_flags = IFF_TAP | IFF_NO_PI};
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "eth0");
    assert_int_equal(ioctl(tap, TUNSETIFF, &ifr), 0);
    int rc = agent_net_configure("eth0", resolv, err, sizeof err);
    if (rc != 1)
        fprintf(stderr, "agent_net_configure: %s\n", err);
    assert_int_equal(rc, 1);
    assert_true(has_addr("eth0", AGENT_NET_GUEST_IP));
    assert_true(default_route_via("eth0", inet_addr(AGENT_NET_GATEWAY_IP)));
    assert_true(if_nametoindex("lo") > 0 && has_addr("lo", "127.0.0.1"));
    char v[4] = {0};
    int v6 = open("/proc/sys/net/ipv6/conf/eth0/disable_ipv6", O_RDONLY);
    if (v6 >= 0) { /* a kernel without IPv6 has nothing to turn off */
        assert_true(read(v6, v, sizeof v - 1) > 0);
        assert_int_equal(v[0], '1');
        close(v6);
    }
    /* Idempotent: a second run (e.g. re-running init steps) succeeds unchanged. */
    assert_int_equal(agent_net_configure("eth0", resolv, err, sizeof err), 1);
    char text[256] = {0};
    FILE *f = fopen(resolv, "r");
    assert_non_null(f);
    assert_true(fread(text, 1, sizeof text - 1, f) > 0);
    fclose(f);
    assert_non_null(strstr(text, "nameserver 10.0.2.2\n"));
    unlink(resolv);
    close(tap);
    assert_int_equal(setns(home_fd, CLONE_NEWNET), 0);
}

/* ---- validation --------------------------------------------------------------------- */

static json_t *check(const char *text)
{
    struct spaced_err err;
    json_t *in = json_loads(text, JSON_ALLOW_NUL, NULL);
    assert_non_null(in);
    json_t *out = net_policy_check(in, &err);
    json_decref(in);
    if (!out)
        assert_int_equal(err.status, 400);
    return out;
}

static void test_policy_check(void **state)
{
    static const char *const good[] = {
        "{\"mode\":\"none\"}", "{\"mode\":\"open\"}", "{\"mode\":\"allowlist\"}",
        "{\"mode\":\"allowlist\",\"allow\":[\"API.Example.com\",\"*.example.org\","
        "\"203.0.113.0/24\",\"api.test:443\",\"198.51.100.7/32:80\",\"_svc.x-y.test\"]}",
        "{\"mode\":\"open\",\"deny\":[\"Denied.test\",\"*.wild.test\",\"0.0.0.0/0\",\"a.test:25\"]}",
        "{\"mode\":\"open\",\"deny\":[\"0.0.0.0/0\"],\"allow\":[\"ok.test\",\"192.0.2.0/24:443\"]}",
        "{\"mode\":\"open\",\"deny\":[]}",
    };
    static const char *const bad[] = {
        "[]", "{}", "{\"mode\":\"all\"}", "{\"mode\":\"open\",\"allow\":[\"a.test\"]}",
        "{\"mode\":\"allowlist\",\"allow\":\"a.test\"}", "{\"mode\":\"allowlist\",\"extra\":1}",
        "{\"mode\":\"allowlist\",\"allow\":[1]}", "{\"mode\":\"allowlist\",\"allow\":[\"\"]}",
        "{\"mode\":\"allowlist\",\"allow\":[\"1.2.3.4\"]}", "{\"mode\":\"allowlist\",\"allow\":[\"*\"]}",
        "{\"mode\":\"allowlist\",\"allow\":[\"a..test\"]}", "{\"mode\":\"allowlist\",\"allow\":[\"a.test:0\"]}",
        "{\"mode\":\"allowlist\",\"allow\":[\"a.test:65536\"]}", "{\"mode\":\"allowlist\",\"allow\":[\"1.2.3.0/33\"]}",
        "{\"mode\":\"allowlist\",\"allow\":[\"a b.test\"]}", "{\"mode\":\"allowlist\",\"allow\":[\"x.*.test\"]}",
        "{\"mode\":\"allowlist\",\"allow\":[\"a.test\\u0000.evil\"]}", "{\"mode\":\"allowlist\",\"allow\":[\"a.test.\"]}",
        "{\"mode\":\"allowlist\",\"allow\":[\"a.test\"],\"deny\":[\"b.test\"]}",
        "{\"mode\":\"none\",\"deny\":[\"b.test\"]}", "{\"mode\":\"open\",\"deny\":\"b.test\"}",
        "{\"mode\":\"open\",\"deny\":[\"1.2.3.4\"]}", "{\"mode\":\"open\",\"deny\":[\"b.test:0\"]}",
        "{\"mode\":\"open\",\"deny\":[\"0.0.0.0/00\"]}",
    };
    for (size_t i = 0; i < sizeof good / sizeof *good; i++) {
        json_t *p = check(good[i]);
        if (!p)
            fail_msg("rejected: %s", good[i]);
        json_decref(p);
    }
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *p = check(bad[i]);
        if (p)
            fail_msg("accepted: %s", bad[i]);
    }
    json_t *p = check(good[3]);
    assert_string_equal(json_string_value(json_array_get(json_object_get(p, "allow"), 0)),
                        "api.example.com");
    json_decref(p);
    p = check(good[4]);
    assert_string_equal(json_string_value(json_array_get(json_object_get(p, "deny"), 0)),
                        "denied.test");
    json_decref(p);
    /* the 400 names the field */
    struct spaced_err derr;
    json_t *in = json_loads("{\"mode\":\"allowlist\",\"deny\":[\"b.test\"]}", 0, NULL);
    assert_null(net_policy_check(in, &derr));
    assert_int_equal(derr.status, 400);
    assert_non_null(strstr(derr.message, "network.deny needs mode \"open\""));
    json_decref(in);
    in = json_loads("{\"mode\":\"open\",\"deny\":[\"a.test\",\"1.2.3.4\"]}", 0, NULL);
    assert_null(net_policy_check(in, &derr));
    assert_non_null(strstr(derr.message, "network.deny[1]"));
    json_decref(in);
    /* More rules than the gateway takes. */
    json_t *many = json_pack("{s:s, s:[]}", "mode", "allowlist", "allow");
    for (int i = 0; i <= NET_ALLOW_MAX; i++)
        json_array_append_new(json_object_get(many, "allow"), json_string("a.test"));
    struct spaced_err err;
    assert_null(net_policy_check(many, &err));
    json_decref(many);
}

static void test_creds_check(void **state)
{
    struct spaced_err err;
    json_t *ok = json_loads("[{\"host\":\"API.test\",\"header\":\"Authorization\",\"secret\":\"Bearer x\"}]", 0, NULL);
    json_t *c = net_creds_check(ok, &err);
    assert_non_null(c);
    assert_string_equal(json_string_value(json_object_get(json_array_get(c, 0), "host")), "api.test");
    json_decref(c);
    json_decref(ok);
    static const char *const bad[] = {
        "{}", "[1]", "[{\"host\":\"a.test\",\"header\":\"X\"}]",
        "[{\"host\":\"a.test\",\"header\":\"X\",\"secret\":\"s\",\"more\":1}]",
        "[{\"host\":\"a.test\",\"header\":\"X Y\",\"secret\":\"s\"}]",
        "[{\"host\":\"a.test\",\"header\":\"X\",\"secret\":\"a\\r\\nEvil: 1\"}]",
        "[{\"host\":\"a.test\",\"header\":\"X\",\"secret\":\"\"}]",
        "[{\"host\":\"*.a.test\",\"header\":\"X\",\"secret\":\"s\"}]",
        "[{\"host\":\"10.0.0.1\",\"header\":\"X\",\"secret\":\"s\"}]",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        json_t *in = json_loads(bad[i], 0, NULL);
        assert_non_null(in);
        c = net_creds_check(in, &err);
        if (c)
            fail_msg("accepted: %s", bad[i]);
        assert_int_equal(err.status, 400);
        json_decref(in);
    }
}

/* ---- the pool in real namespaces ---------------------------------------------------- */

static struct net *make_net(struct event_base *base, unsigned pool, const char *gw_bin)
{
    char err[512], ctl[128];
    snprintf(ctl, sizeof ctl, "%s/gateway/gateway.sock", datadir);
    const char *args[] = {"--upstream-dns", "127.0.0.1:9", NULL};
    struct net_opts o = {.data_dir = datadir, .ns_prefix = prefix, .pool = pool,
                         .gateway_bin = gw_bin, .gateway_ctl = gw_bin ? NULL : ctl,
                         .gateway_args = args};
    struct net *n = net_new(base, &o, err, sizeof err);
    if (!n)
        fail_msg("net_new: %s", err);
    return n;
}

/* Runs fn inside the namespace at path and returns to ours. */
static void in_ns(const char *path, void (*fn)(void))
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(setns(fd, CLONE_NEWNET), 0);
    close(fd);
    fn();
    assert_int_equal(setns(home_fd, CLONE_NEWNET), 0);
}

static void expect_wired(void)
{
    assert_true(has_addr(NET_TAP, NET_GATEWAY_IP));
    /* (sysfs still shows the host's interfaces after setns: ask the kernel.) */
    struct ifreq ifr = {0};
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, NET_TAP);
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    assert_int_equal(ioctl(s, SIOCGIFHWADDR, &ifr), 0);
    close(s);
    assert_memory_equal(ifr.ifr_hwaddr.sa_data, "\x02\x5b\x00\x00\x00\x02", 6);
    assert_true(has_addr("lo", "127.0.0.1"));
    char v[8] = {0};
    int fd = open("/proc/sys/net/ipv6/conf/all/disable_ipv6", O_RDONLY);
    if (fd >= 0) {
        assert_true(read(fd, v, sizeof v - 1) > 0);
        close(fd);
        assert_int_equal(v[0], '1');
    }
    /* No route anywhere but the tap's own subnet. */
    assert_false(default_route_via(NET_TAP, inet_addr(NET_GATEWAY_IP)));
}

/* ---- the gateway's binary and state ------------------------------------------------ */

static const char *gateway_bin(void)
{
    static char path[512];
    const char *b = getenv("SPACE_BUILD");
    snprintf(path, sizeof path, "%s/space-gateway", b ? b : "build/san");
    if (access(path, X_OK) != 0)
        snprintf(path, sizeof path, "build/space-gateway");
    return access(path, X_OK) == 0 ? path : NULL;
}

/* The gateway answers and the resync that follows (net_resync.c, on the loop) is done. */
static void wait_up(struct event_base *base, struct net *n)
{
    for (int i = 0; i < 400 && (!net_gateway_up(n) || net_resync_running(n->resync)); i++)
        event_base_loop(base, EVLOOP_ONCE);
    assert_true(net_gateway_up(n));
    assert_false(net_resync_running(n->resync));
}

static pid_t gateway_pid(void)
{
    char path[128];
    snprintf(path, sizeof path, "%s/gateway/gateway.pid", datadir);
    FILE *f = fopen(path, "r");
    int pid = 0;
    if (f) {
        if (fscanf(f, "%d", &pid) != 1)
            pid = 0;
        fclose(f);
    }
    return pid;
}

static ino_t ino_of(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? st.st_ino : 0;
}

static bool only_sbtest1_2_4(const char *id, void *arg)
{
    return !strcmp(id, "sbtest1") || !strcmp(id, "sbtest2") || !strcmp(id, "sbtest4");
}

static void test_pool_claim_release(void **state)
{
    NEED_ROOT();
    const char *bin = gateway_bin();
    if (!bin) {
        fprintf(stderr, "SKIP: no space-gateway built (make SAN=1 programs): a claim attaches it\n");
        skip();
    }
    struct event_base *base = event_base_new();
    struct net *n = make_net(base, 1, bin);
    wait_up(base, n);
    event_base_loop(base, EVLOOP_NONBLOCK); /* fills the pool */
    struct net_lease l;
    struct spaced_err err;
    const char *allow = "{\"mode\":\"allowlist\",\"allow\":[\"allowed.test\"]}";
    assert_int_equal(net_claim(n, "sbtest1", "tn1", allow, &l, &err), 0);
    assert_true(l.tap_fd >= 0);
    assert_string_equal(l.mac, NET_GUEST_MAC);
    char path[128];
    snprintf(path, sizeof path, "/run/netns/%ssbtest1", prefix);
    assert_string_equal(l.netns, path);
    in_ns(path, expect_wired);
    ino_t ino = ino_of(path);
    /* The tap accepts only one user at a time, like QEMU's: a second open while the
     * first is held fails cleanly; after the VM's fd is closed, a re-claim (restart,
     * restore) gets the same namespace and a new fd. */
    struct net_lease l2;
    assert_int_equal(net_claim(n, "sbtest1", "tn1", NULL, &l2, &err), -1);
    close(l.tap_fd);
    assert_int_equal(net_claim(n, "sbtest1", "tn1", NULL, &l2, &err), 0);
    assert_int_equal(ino_of(path), ino);
    close(l2.tap_fd);
    /* Policy none: no NIC, no namespace. */
    assert_int_equal(net_claim(n, "sbtest2", "tn1", "{\"mode\":\"none\"}", &l2, &err), 0);
    assert_int_equal(l2.tap_fd, -1);
    snprintf(path, sizeof path, "/run/netns/%ssbtest2", prefix);
    assert_int_not_equal(access(path, F_OK), 0);
    /* A template VM's NIC: a namespace wired the same way, no record, released by id. */
    assert_int_equal(net_claim_template(n, "t-base-1x256", &l2, &err), 0);
    assert_true(l2.tap_fd >= 0);
    in_ns(l2.netns, expect_wired);
    close(l2.tap_fd);
    assert_null(net_policy_get(n, "t-base-1x256", &err));
    char tpath[sizeof l2.netns];
    snprintf(tpath, sizeof tpath, "%s", l2.netns);
    net_release(n, "t-base-1x256");
    assert_int_not_equal(access(tpath, F_OK), 0);
    /* Bad input never claims. */
    assert_int_equal(net_claim(n, "../x", "tn1", allow, &l2, &err), -1);
    assert_int_equal(net_claim(n, "sbtest3", "tn1", "{\"mode\":\"wide\"}", &l2, &err), -1);
    assert_int_equal(err.status, 400);

    /* Live rules: none -> open needs a NIC (409), the rest just works. */
    json_t *open_p = json_pack("{s:s}", "mode", "open");
    assert_int_equal(net_set_policy(n, "sbtest2", "tn1", open_p, &err), -1);
    assert_int_equal(err.status, 409);
    assert_int_equal(net_set_policy(n, "sbtest1", "tn1", open_p, &err), 0);
    json_t *got = net_policy_get(n, "sbtest1", &err);
    assert_string_equal(json_string_value(json_object_get(got, "mode")), "open");
    assert_true(json_is_true(json_object_get(got, "nic")));
    json_decref(got);
    assert_null(net_policy_get(n, "sbnope", &err));
    assert_int_equal(err.status, 404);

    /* Credentials: stored (0600 record), never in what is read back. */
    json_t *creds = json_loads("[{\"host\":\"api.test\",\"header\":\"Authorization\",\"secret\":\"tok-XYZZY\"}]", 0, NULL);
    assert_int_equal(net_set_creds(n, "sbtest1", creds, &err), 0);
    json_t *back = net_creds_get(n, "sbtest1", &err);
    char *text = json_dumps(back, 0);
    assert_null(strstr(text, "XYZZY"));
    assert_non_null(strstr(text, "api.test"));
    free(text);
    json_decref(back);
    json_decref(creds);
    char rec[128];
    snprintf(rec, sizeof rec, "%s/net/sbtest1.json", datadir);
    struct stat st;
    assert_int_equal(stat(rec, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);

    /* A new module (spaced restarted) finds the records and the namespace again (and
     * the gateway the first one left running, at its control socket). */
    net_free(n);
    n = make_net(base, 0, NULL);
    got = net_policy_get(n, "sbtest1", &err);
    assert_non_null(got);
    assert_string_equal(json_string_value(json_object_get(got, "mode")), "open");
    json_decref(got);
    snprintf(path, sizeof path, "/run/netns/%ssbtest1", prefix);
    assert_int_equal(net_claim(n, "sbtest1", "tn1", NULL, &l, &err), 0);
    assert_int_equal(ino_of(path), ino);
    close(l.tap_fd);
    /* A sandbox whose policy was set before its first claim gets that policy's NIC. */
    assert_int_equal(net_set_policy(n, "sbtest4", "tn1", open_p, &err), 0);
    assert_int_equal(net_claim(n, "sbtest4", "tn1", "{\"mode\":\"none\"}", &l, &err), 0);
    assert_true(l.tap_fd >= 0);
    close(l.tap_fd);
    /* Traffic -> none keeps the NIC (the gateway refuses everything). */
    json_t *none_p = json_pack("{s:s}", "mode", "none");
    assert_int_equal(net_set_policy(n, "sbtest4", "tn1", none_p, &err), 0);
    got = net_policy_get(n, "sbtest4", &err);
    assert_true(json_is_true(json_object_get(got, "nic")));
    json_decref(got);
    json_decref(none_p);
    json_decref(open_p);

    /* The start-up sweep releases what the sandbox table does not know. */
    assert_int_equal(net_claim(n, "sbtest5", "tn1", allow, &l, &err), 0);
    close(l.tap_fd);
    net_sweep(n, only_sbtest1_2_4, NULL);
    assert_null(net_policy_get(n, "sbtest5", &err));
    char p5[128];
    snprintf(p5, sizeof p5, "/run/netns/%ssbtest5", prefix);
    assert_int_not_equal(access(p5, F_OK), 0);
    assert_non_null(got = net_policy_get(n, "sbtest4", &err));
    json_decref(got);

    /* Release: namespace and record gone; releasing twice is fine. */
    net_release(n, "sbtest1");
    net_release(n, "sbtest1");
    net_release(n, "sbtest2");
    net_release(n, "sbtest4");
    assert_int_not_equal(access(path, F_OK), 0);
    assert_int_not_equal(access(rec, F_OK), 0);
    assert_null(net_policy_get(n, "sbtest1", &err));
    net_free(n);
    event_base_free(base);
    pid_t gw = gateway_pid(); /* our child, forked through the first module */
    assert_true(gw > 1);
    kill(gw, SIGKILL);
    assert_int_equal(waitpid(gw, NULL, 0), gw);
    char pidfile[128];
    snprintf(pidfile, sizeof pidfile, "%s/gateway/gateway.pid", datadir);
    unlink(pidfile);
}

static void test_gateway_supervision(void **state)
{
    NEED_ROOT();
    const char *bin = gateway_bin();
    if (!bin) {
        fprintf(stderr, "SKIP: no space-gateway built (make SAN=1 programs)\n");
        skip();
    }
    struct event_base *base = event_base_new();
    struct net *n = make_net(base, 0, bin);
    wait_up(base, n);
    struct net_lease l;
    struct spaced_err err;
    assert_int_equal(net_claim(n, "sbgw1", "tn1", "{\"mode\":\"allowlist\",\"allow\":[\"a.test\"]}",
                               &l, &err), 0);
    close(l.tap_fd);
    json_t *log = net_log(n, "sbgw1", 0, &err);
    if (!log)
        fail_msg("log: %s", err.message);
    json_decref(log);
    /* Kill it: spaced notices, starts another, and attaches the sandbox again (the
     * decision log of an unknown sandbox would be an error). */
    pid_t first = gateway_pid();
    assert_true(first > 1);
    kill(first, SIGKILL);
    /* Down from its exit on, before the loop handles the exit event: a VM start asking
     * now waits for the restart instead of starting with nothing attached. */
    for (int i = 0; i < 200 && net_gateway_up(n); i++)
        usleep(5000);
    assert_false(net_gateway_up(n));
    /* A claim meanwhile fails: nothing would answer in its namespace (sbx_gwwait.c
     * waits for the restart and claims again). */
    assert_int_equal(net_claim(n, "sbgw2", "tn1", "{\"mode\":\"open\"}", &l, &err), -1);
    assert_int_equal(err.status, 503);
    assert_string_equal(err.code, "gateway_unavailable");
    wait_up(base, n);
    /* The restarted gateway got the first claim's record; the second claims now. */
    assert_int_equal(net_claim(n, "sbgw2", "tn1", NULL, &l, &err), 0);
    close(l.tap_fd);
    net_release(n, "sbgw2");
    assert_int_not_equal(gateway_pid(), first);
    log = net_log(n, "sbgw1", 0, &err);
    if (!log)
        fail_msg("log after restart: %s", err.message);
    json_decref(log);
    /* A new spaced adopts the running gateway instead of starting a second one. */
    pid_t second = gateway_pid();
    net_free(n);
    n = make_net(base, 0, bin);
    assert_true(net_gateway_up(n));
    assert_int_equal(gateway_pid(), second);
    /* At exit, a gateway no sandbox needs is stopped (here it is our own child: the
     * test process forked it through the first module, so we reap it). */
    net_release(n, "sbgw1");
    net_exit(n);
    assert_int_equal(gateway_pid(), 0);
    assert_int_equal(waitpid(second, NULL, 0), second);
    net_free(n);
    event_base_free(base);
}

/* ---- tenant credential rules ------------------------------------------------------- */

/* A stand-in gateway: answers `count` control requests {"ok":true}, keeping the last. */
struct fake_gw {
    int lfd;
    int count;
    char last[4096];
};

static void *fake_gw_run(void *arg)
{
    struct fake_gw *g = arg;
    for (int i = 0; i < g->count; i++) {
        int c = accept(g->lfd, NULL, NULL);
        ssize_t n = c >= 0 ? read(c, g->last, sizeof g->last - 1) : -1;
        g->last[n > 0 ? n : 0] = 0;
        if (c >= 0 && write(c, "{\"ok\":true}\n", 12) != 12)
            perror("fake gateway");
        if (c >= 0)
            close(c);
    }
    return NULL;
}

static void test_tenant_creds(void **state)
{
    char dir[80], ctl[100], file[200];
    snprintf(dir, sizeof dir, "%s/tenants-test", datadir);
    snprintf(ctl, sizeof ctl, "%s/fake-gw.sock", datadir);
    snprintf(file, sizeof file, "%s/net/tenants/tn1.json", dir);
    mkdir(dir, 0700);
    struct fake_gw g = {.count = 3};
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", ctl);
    g.lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(bind(g.lfd, (struct sockaddr *)&sa, sizeof sa), 0);
    assert_int_equal(listen(g.lfd, 4), 0);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, fake_gw_run, &g), 0);

    char err[256];
    struct spaced_err e;
    struct net_tenants *t = net_tenants_new(dir, ctl, err, sizeof err);
    assert_non_null(t);
    json_t *rules = json_loads("[{\"host\":\"API.test\",\"header\":\"Authorization\","
                               "\"secret\":\"Bearer tenant-secret-1\"}]", 0, NULL);
    assert_int_equal(net_tenant_creds_set(t, "tn1", rules, &e), 0);             /* request 1 */
    /* The gateway got the secret as "value", scoped to the tenant. */
    assert_non_null(strstr(g.last, "\"tenant\":\"tn1\""));
    assert_non_null(strstr(g.last, "\"value\":\"Bearer tenant-secret-1\""));
    /* Reads never show it. */
    json_t *got = net_tenant_creds_get(t, "tn1");
    char *text = json_dumps(got, JSON_COMPACT);
    assert_string_equal(text, "[{\"host\":\"api.test\",\"header\":\"Authorization\"}]");
    free(text);
    json_decref(got);
    got = net_tenant_creds_get(t, "tn2");
    assert_int_equal(json_array_size(got), 0);
    json_decref(got);
    /* Stored 0600; bad input and bad tenant ids are 400 and change nothing. */
    struct stat st;
    assert_int_equal(stat(file, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    json_t *bad = json_loads("[{\"host\":\"*.test\",\"header\":\"X\",\"secret\":\"s\"}]", 0, NULL);
    assert_int_equal(net_tenant_creds_set(t, "tn1", bad, &e), -1);
    assert_int_equal(e.status, 400);
    assert_int_equal(net_tenant_creds_set(t, "../x", rules, &e), -1);
    assert_int_equal(e.status, 400);
    json_decref(bad);
    net_tenants_free(t);
    /* A new module (spaced restarted) loads them and sends them again. */
    t = net_tenants_new(dir, ctl, err, sizeof err);                             /* request 2 */
    assert_non_null(strstr(g.last, "tenant-secret-1"));
    got = net_tenant_creds_get(t, "tn1");
    assert_int_equal(json_array_size(got), 1);
    json_decref(got);
    /* Delete: the file goes, the gateway gets an empty set. */
    assert_int_equal(net_tenant_creds_delete(t, "tn1", &e), 0);                /* request 3 */
    assert_null(strstr(g.last, "tenant-secret-1"));
    assert_non_null(strstr(g.last, "\"rules\":[]"));
    assert_int_not_equal(stat(file, &st), 0);
    assert_int_equal(net_tenant_creds_delete(t, "tn1", &e), 0); /* idempotent, no request */
    got = net_tenant_creds_get(t, "tn1");
    assert_int_equal(json_array_size(got), 0);
    json_decref(got);
    net_tenants_free(t);
    json_decref(rules);
    pthread_join(th, NULL);
    close(g.lfd);
}

/* ---- fixture mode for tests/e2e/test_network.py ------------------------------------- */

/* Plays the VM for the end-to-end test: claims a namespace through net.c exactly as
 * the sandbox start path does (gateway at CTL attached with POLICY), makes a tap "eth0"
 * with the guest MAC in the test's namespace GUEST_NS and configures it with the guest
 * agent's own code, then copies frames between the two taps (as QEMU's virtio-net
 * would) until stdin closes. Lines on stdin: "policy JSON" -> net_set_policy; the
 * answer is one line "ok" or "error MESSAGE". Prints "ready NETNS_PATH" first. */
static int fixture_guest(int argc, char **argv)
{
    if (argc != 8) {
        fprintf(stderr, "usage: test_net guest DATA_DIR PREFIX SANDBOX CTL GUEST_NS POLICY_JSON\n");
        return 2;
    }
    const char *data = argv[2], *pfx = argv[3], *sid = argv[4], *ctl = argv[5], *gns = argv[6];
    char err[512];
    struct event_base *base = event_base_new();
    struct net_opts o = {.data_dir = data, .ns_prefix = pfx, .gateway_ctl = ctl};
    struct net *n = net_new(base, &o, err, sizeof err);
    struct net_lease l;
    struct spaced_err e;
    if (!n || net_claim(n, sid, "tenant-e2e", argv[7], &l, &e) != 0 || l.tap_fd < 0) {
        fprintf(stderr, "claim failed: %s\n", n ? e.message : err);
        return 1;
    }
    char path[300];
    snprintf(path, sizeof path, "/run/netns/%s", gns);
    int gfd = open(path, O_RDONLY | O_CLOEXEC), guest = -1;
    if (gfd < 0 || setns(gfd, CLONE_NEWNET) != 0) {
        perror(path);
        return 1;
    }
    guest = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    struct ifreq ifr = {.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR};
    snprintf(ifr.ifr_name, sizeof ifr.ifr_name, "eth0");
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct ifreq mac = {0};
    snprintf(mac.ifr_name, sizeof mac.ifr_name, "eth0");
    mac.ifr_hwaddr.sa_family = 1; /* ARPHRD_ETHER */
    memcpy(mac.ifr_hwaddr.sa_data, "\x02\x5b\x00\x00\x00\x01", 6);
    if (guest < 0 || ioctl(guest, TUNSETIFF, &ifr) != 0 || ioctl(s, SIOCSIFHWADDR, &mac) != 0 ||
        agent_net_configure("eth0", NULL, err, sizeof err) != 1) {
        fprintf(stderr, "guest side: %s (%s)\n", err, strerror(errno));
        return 1;
    }
    close(s);
    close(gfd);
    if (setns(home_fd, CLONE_NEWNET) != 0)
        return 1;
    printf("ready %s\n", l.netns);
    fflush(stdout);
    static char buf[65536 + 64];
    char line[65536];
    size_t used = 0;
    for (;;) {
        struct pollfd p[3] = {{l.tap_fd, POLLIN, 0}, {guest, POLLIN, 0}, {0, POLLIN, 0}};
        if (poll(p, 3, -1) < 0 && errno != EINTR)
            break;
        for (int i = 0; i < 2; i++)
            if (p[i].revents & POLLIN) {
                ssize_t r = read(p[i].fd, buf, sizeof buf);
                if (r > 0 && write(p[1 - i].fd, buf, (size_t)r) < 0)
                    perror("relay");
            }
        if (!(p[2].revents & (POLLIN | POLLHUP)))
            continue;
        ssize_t r = read(0, line + used, sizeof line - used - 1);
        if (r <= 0)
            break;
        used += (size_t)r;
        char *nl;
        while ((nl = memchr(line, '\n', used))) {
            *nl = 0;
            json_t *pol = strncmp(line, "policy ", 7) == 0 ? json_loads(line + 7, 0, NULL) : NULL;
            if (pol && net_set_policy(n, sid, "tenant-e2e", pol, &e) == 0)
                printf("ok\n");
            else
                printf("error %s\n", pol ? e.message : "bad command");
            fflush(stdout);
            json_decref(pol);
            used -= (size_t)(nl + 1 - line);
            memmove(line, nl + 1, used);
        }
    }
    net_release(n, sid);
    net_free(n);
    event_base_free(base);
    return 0;
}

int main(int argc, char **argv)
{
    home_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (argc > 1 && strcmp(argv[1], "guest") == 0)
        return fixture_guest(argc, argv);
    snprintf(prefix, sizeof prefix, "sptest%d-", (int)getpid());
    snprintf(datadir, sizeof datadir, "/tmp/space-test-net-%d", (int)getpid());
    mkdir(datadir, 0700);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rtnl_build),
        cmocka_unit_test(test_agent_net_in_namespace),
        cmocka_unit_test(test_policy_check),
        cmocka_unit_test(test_creds_check),
        cmocka_unit_test(test_tenant_creds),
        cmocka_unit_test(test_pool_claim_release),
        cmocka_unit_test(test_gateway_supervision),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", datadir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", datadir);
    return rc;
}
