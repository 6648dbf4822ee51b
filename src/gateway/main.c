/* space-gateway: DNS, egress proxy and credential injection for every sandbox of this
 * host. spaced starts it and drives it through the control socket (gw_ctl.h).
 *
 *   space-gateway --data-dir DIR [--ctl PATH] [--upstream-dns IP[:PORT]]...
 *                 [--trust CAFILE] [--deny-addr IP]...
 *
 * --upstream-dns: resolvers the gateway itself uses (default: /etc/resolv.conf).
 * --trust: trust store for upstream certificates on the credential path (default: the
 *          system store). --deny-addr: extra addresses of this host never to dial (the
 *          addresses of the gateway's own namespace are always added, and followed live
 *          as they change). */
#include <getopt.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <arpa/inet.h>

#include "gw.h"
#include "gw_ctl.h"
#include "log.h"

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    log_info("gateway.stop", "signal=%d", (int)sig);
    event_base_loopbreak(arg);
}

static void usage(void)
{
    fprintf(stderr, "usage: space-gateway --data-dir DIR [--ctl PATH] [--upstream-dns IP[:PORT]]... "
                    "[--trust CAFILE] [--deny-addr IP]...\n");
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"data-dir", required_argument, 0, 'd'}, {"ctl", required_argument, 0, 'c'},
        {"upstream-dns", required_argument, 0, 'u'}, {"trust", required_argument, 0, 't'},
        {"deny-addr", required_argument, 0, 'x'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *data_dir = NULL, *ctl = NULL, *trust = NULL;
    const char *upstream[8];
    int nup = 0, o;
    struct gw gw = {0};
    log_init("space-gateway", LOG_INFO);
    while ((o = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        struct in_addr a;
        switch (o) {
        case 'd': data_dir = optarg; break;
        case 'c': ctl = optarg; break;
        case 't': trust = optarg; break;
        case 'u':
            if (nup < 8)
                upstream[nup++] = optarg;
            break;
        case 'x':
            if (inet_pton(AF_INET, optarg, &a) != 1) {
                usage();
                return 2;
            }
            policy_host_addrs_add(ntohl(a.s_addr));
            break;
        default: usage(); return 2;
        }
    }
    if (!data_dir) {
        usage();
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    /* Credential values live in this process's memory: no core dumps, no ptrace by
     * other processes of the same user. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    char err[512], path[4096], cadir[4096];
    snprintf(cadir, sizeof cadir, "%s/ca", data_dir);
    snprintf(path, sizeof path, "%s/gateway.sock", data_dir);
    mkdir(data_dir, 0755);
    if (netns_init() != 0) {
        log_error("gateway.start", "error=\"cannot open own network namespace\"");
        return 1;
    }
    /* The host's addresses are forbidden destinations: without following them live a
     * newly added one would be reachable, so this is fatal. */
    if (policy_host_addrs_watch() != 0) {
        log_error("gateway.start", "error=\"cannot follow the host's addresses (rtnetlink)\"");
        return 1;
    }
    if (tls_ca_open(cadir, trust, &gw.ca, err, sizeof err) != 0) {
        log_error("gateway.start", "error=\"%s\"", err);
        return 1;
    }
    gw.base = event_base_new();
    gw.dns = gw.base ? evdns_base_new(gw.base, nup ? 0 : EVDNS_BASE_INITIALIZE_NAMESERVERS) : NULL;
    if (!gw.dns) {
        log_error("gateway.start", "error=\"cannot create the event loop or resolver\"");
        return 1;
    }
    for (int i = 0; i < nup; i++)
        if (evdns_base_nameserver_ip_add(gw.dns, upstream[i]) != 0) {
            log_error("gateway.start", "error=\"bad --upstream-dns\"");
            return 1;
        }
    /* 0x20 case randomisation would change the names our allow rules were written
     * for in upstream logs; timeouts keep a dead upstream from piling up requests. */
    evdns_base_set_option(gw.dns, "randomize-case:", "0");
    evdns_base_set_option(gw.dns, "timeout:", "2");
    evdns_base_set_option(gw.dns, "attempts:", "2");
    evdns_base_search_clear(gw.dns);
    struct evconnlistener *l = gw_ctl_listen(&gw, ctl ? ctl : path, err, sizeof err);
    if (!l) {
        log_error("gateway.start", "error=\"%s\"", err);
        return 1;
    }
    struct event *sigint = evsignal_new(gw.base, SIGINT, on_signal, gw.base);
    struct event *sigterm = evsignal_new(gw.base, SIGTERM, on_signal, gw.base);
    event_add(sigint, NULL);
    event_add(sigterm, NULL);
    char q[4200];
    log_info("gateway.start", "ctl=%s ca=%s", log_quote(ctl ? ctl : path, q, sizeof q),
             tls_ca_cert_path(gw.ca));
    event_base_dispatch(gw.base);
    gw_shutdown(&gw);
    evconnlistener_free(l);
    event_free(sigint);
    event_free(sigterm);
    evdns_base_free(gw.dns, 1);
    tls_ca_free(gw.ca);
    event_base_free(gw.base);
    return 0;
}
