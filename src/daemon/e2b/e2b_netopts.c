/* e2b_netopts.c: E2B create's network options as spaced spec fields; see e2b_netopts.h. */
#include "e2b_netopts.h"

#include <arpa/inet.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "daemon/net/net.h"

/* Fills msg and returns NULL, for `return fail(...)`. */
__attribute__((format(printf, 3, 4)))
static json_t *fail(char *msg, size_t msglen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, msglen, fmt, ap);
    va_end(ap);
    return NULL;
}

static bool null_or(const json_t *v, bool (*is)(const json_t *))
{
    return !v || json_is_null(v) || is(v);
}

static bool is_bool(const json_t *v) { return json_is_boolean(v); }
static bool is_string(const json_t *v) { return json_is_string(v); }
static bool is_array(const json_t *v) { return json_is_array(v); }

/* network[key] (allowOut or denyOut) as spaced rules in *out (new array; empty when
 * absent); sets *deny_all when it holds "0.0.0.0/0". NULL with msg on a bad entry. */
static json_t *selector(const json_t *net, const char *key, bool *deny_all, char *msg,
                        size_t msglen)
{
    const json_t *arr = json_object_get(net, key);
    if (!null_or(arr, is_array) || json_array_size(arr) > NET_ALLOW_MAX)
        return fail(msg, msglen, "network.%s must be an array of at most %d entries", key,
                    NET_ALLOW_MAX);
    json_t *out = json_array();
    size_t i;
    const json_t *v;
    json_array_foreach(arr, i, v) {
        const char *s = json_string_value(v);
        char rule[300];
        struct in_addr a;
        if (s && strlen(s) == json_string_length(v) && strlen(s) < 280) {
            /* a bare address is a /32 (":port" after it is not an E2B form) */
            snprintf(rule, sizeof rule, inet_pton(AF_INET, s, &a) == 1 ? "%s/32" : "%s", s);
            if (strcmp(rule, "0.0.0.0/0") == 0 && deny_all)
                *deny_all = true;
            if (net_policy_rule_ok(rule)) {
                json_array_append_new(out, json_string(rule));
                continue;
            }
        }
        json_decref(out);
        return fail(msg, msglen,
                    "network.%s[%zu] (%.64s%s) is not an IPv4 address, CIDR, host name or "
                    "\"*.\" wildcard", key, i, s ? s : "not a string",
                    s && strlen(s) > 64 ? "..." : "");
    }
    return out;
}

/* The egress options spaced does not implement, refused when set: ignoring them would
 * leave the sandbox less confined, or its traffic on another path, than asked. */
static bool egress_unsupported_ok(const json_t *net, char *msg, size_t msglen)
{
    const json_t *proxy = json_object_get(net, "egressProxy");
    const json_t *rules = json_object_get(net, "rules");
    if (proxy && !json_is_null(proxy))
        return fail(msg, msglen, "network.egressProxy is not supported: spaced sends egress "
                    "through its own gateway only, never through a proxy of yours"), false;
    if (rules && !json_is_null(rules) && !(json_is_object(rules) && json_object_size(rules) == 0))
        return fail(msg, msglen, "network.rules (per-host request transforms) is not "
                    "supported; spaced injects credentials through its own credentials API"),
               false;
    return true;
}

/* create's other options: mcp refused when set; the harmless ones accepted after a shape
 * check (documented as not applied). */
static bool create_unsupported_ok(const json_t *body, const json_t *net, char *msg, size_t msglen)
{
    const json_t *mcp = json_object_get(body, "mcp");
    const json_t *ports = json_object_get(net, "httpsPorts");
    if (mcp && !json_is_null(mcp))
        return fail(msg, msglen, "mcp is not supported: spaced has no mcp-gateway template"),
               false;
    if (!null_or(json_object_get(body, "secure"), is_bool) ||
        !null_or(json_object_get(net, "maskRequestHost"), is_string) ||
        !null_or(ports, is_array))
        return fail(msg, msglen, "secure must be a boolean, network.maskRequestHost a string, "
                    "network.httpsPorts an array of ports"), false;
    size_t i;
    const json_t *p;
    json_array_foreach(ports, i, p)
        if (!json_is_integer(p) || json_integer_value(p) < 1 || json_integer_value(p) > 65535)
            return fail(msg, msglen, "network.httpsPorts[%zu] is not a port (1..65535)", i),
                   false;
    return true;
}

/* Whether every key of obj is in known[0..n); else msg names it. */
static bool keys_known(const json_t *obj, const char *prefix, const char *const *known, size_t n,
                       char *msg, size_t msglen)
{
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)obj, k, v) {
        size_t i = 0;
        while (i < n && strcmp(k, known[i]) != 0)
            i++;
        if (i == n)
            return fail(msg, msglen, "%s%.64s is not a known field", prefix, k), false;
    }
    return true;
}

/* The policy for allowOut/denyOut/allow_internet_access (new reference), or NULL when
 * nothing was asked (the daemon's default applies). */
static json_t *policy(json_t *allow, json_t *deny, bool deny_all, const json_t *inet)
{
    if (deny_all || json_is_false(inet)) {
        if (json_array_size(allow) == 0)
            return json_pack("{s:s}", "mode", "none");
        return json_pack("{s:s, s:O}", "mode", "allowlist", "allow", allow);
    }
    if (json_array_size(deny) > 0) {
        json_t *p = json_pack("{s:s, s:O}", "mode", "open", "deny", deny);
        if (p && json_array_size(allow) > 0)
            json_object_set(p, "allow", allow);
        return p;
    }
    if (json_is_true(inet) || json_array_size(allow) > 0)
        return json_pack("{s:s}", "mode", "open");
    return NULL;
}

/* The egress policy asked by net's allowOut/denyOut/egressProxy/rules and inet: 0 with
 * *out (NULL when nothing was asked), or -1 with msg. */
static int egress(const json_t *net, const json_t *inet, json_t **out, char *msg, size_t msglen)
{
    *out = NULL;
    if (!null_or(inet, is_bool))
        return fail(msg, msglen, "allow_internet_access must be a boolean"), -1;
    if (!egress_unsupported_ok(net, msg, msglen))
        return -1;
    bool deny_all = false;
    json_t *allow = selector(net, "allowOut", NULL, msg, msglen);
    json_t *deny = allow ? selector(net, "denyOut", &deny_all, msg, msglen) : NULL;
    if (deny)
        *out = policy(allow, deny, deny_all, inet);
    json_decref(allow);
    json_decref(deny);
    return deny ? 0 : -1;
}

json_t *e2b_netopts_spec(const json_t *body, char *msg, size_t msglen)
{
    static const char *const known[] = {"allowOut", "denyOut", "allowPublicTraffic",
                                        "maskRequestHost", "httpsPorts", "rules",
                                        "egressProxy"};
    const json_t *net = json_object_get(body, "network");
    const json_t *pub = json_object_get(net, "allowPublicTraffic");
    if (net && !json_is_null(net) && !json_is_object(net))
        return fail(msg, msglen, "network must be an object");
    if (!null_or(pub, is_bool))
        return fail(msg, msglen, "network.allowPublicTraffic must be a boolean");
    if (!keys_known(net, "network.", known, sizeof known / sizeof *known, msg, msglen) ||
        !create_unsupported_ok(body, net, msg, msglen))
        return NULL;
    json_t *p;
    if (egress(net, json_object_get(body, "allow_internet_access"), &p, msg, msglen) != 0)
        return NULL;
    json_t *out = json_object();
    if (p)
        json_object_set_new(out, "network", p);
    /* Private ports: requests need the trafficAccessToken (sbx_traffic.c). */
    if (json_is_false(pub))
        json_object_set_new(out, "ports", json_pack("{s:b}", "public", 0));
    return out;
}

json_t *e2b_netopts_update(const json_t *body, char *msg, size_t msglen)
{
    static const char *const known[] = {"allowOut", "denyOut", "rules", "egressProxy",
                                        "allow_internet_access"};
    if (!json_is_object(body))
        return fail(msg, msglen, "the body must be an object");
    if (!keys_known(body, "", known, sizeof known / sizeof *known, msg, msglen))
        return NULL;
    json_t *p;
    if (egress(body, json_object_get(body, "allow_internet_access"), &p, msg, msglen) != 0)
        return NULL;
    /* An update replaces the whole egress configuration: nothing left is E2B's default,
     * the internet (through the gateway, private ranges blocked). */
    return p ? p : json_pack("{s:s}", "mode", "open");
}
