/* net_policy.c: validation of what API clients send about networking — policies and
 * credential rules — before spaced records it or passes it to the gateway. The gateway
 * parses policies again (policy.h); checking here too means a bad rule is a 400 naming
 * the entry, even while the gateway is down, and never a record that cannot be applied. */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/net/net_internal.h"

/* LDH labels (plus '_', seen in real service names) of 1..63, total <= 253, not an
 * IPv4 literal. Upper case is accepted and lowered by the caller. */
static bool name_ok(const char *s, size_t len)
{
    if (len == 0 || len > 253)
        return false;
    size_t label = 0;
    bool all_digits = true;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '.') {
            if (label == 0)
                return false;
            label = 0;
            all_digits = true;
            continue;
        }
        if (!(isalnum(c) || c == '-' || c == '_') || ++label > 63)
            return false;
        if (!isdigit(c))
            all_digits = false;
    }
    return label > 0 && !all_digits; /* a numeric last label means an address */
}

static bool cidr_ok(const char *s, size_t len)
{
    char buf[32];
    const char *slash = memchr(s, '/', len);
    if (!slash || (size_t)(slash - s) >= sizeof buf)
        return false;
    memcpy(buf, s, (size_t)(slash - s));
    buf[slash - s] = 0;
    struct in_addr a;
    if (inet_pton(AF_INET, buf, &a) != 1)
        return false;
    size_t plen = len - (size_t)(slash - s) - 1;
    if (plen == 0 || plen > 2 || (plen == 2 && slash[1] == '0'))
        return false; /* "/00" is not a length the gateway takes */
    unsigned bits = 0;
    for (size_t i = 0; i < plen; i++) {
        if (!isdigit((unsigned char)slash[1 + i]))
            return false;
        bits = bits * 10 + (unsigned)(slash[1 + i] - '0');
    }
    return bits <= 32;
}

bool net_policy_rule_ok(const char *s)
{
    size_t len = strlen(s);
    const char *colon = strrchr(s, ':');
    if (colon) {
        const char *p = colon + 1;
        if (!*p || strlen(p) > 5)
            return false;
        long port = 0;
        for (; *p; p++) {
            if (!isdigit((unsigned char)*p))
                return false;
            port = port * 10 + (*p - '0');
        }
        if (port < 1 || port > 65535)
            return false;
        len = (size_t)(colon - s);
    }
    if (memchr(s, '/', len))
        return cidr_ok(s, len);
    if (len > 2 && s[0] == '*' && s[1] == '.')
        return name_ok(s + 2, len - 2);
    return name_ok(s, len);
}

/* Copies policy[key] (an array of rules; absent: nothing) into out[key], lower-cased.
 * Returns 0, or -1 with a 400 naming the entry in err. */
static int check_rules(const json_t *policy, const char *key, json_t *out, struct spaced_err *err)
{
    json_t *arr = json_object_get(policy, key);
    if (!arr)
        return 0;
    if (!json_is_array(arr) || json_array_size(arr) > NET_ALLOW_MAX)
        return spaced_err_set(err, 400, "invalid_request",
                              "network.%s must be an array of at most %d rules", key,
                              NET_ALLOW_MAX);
    json_t *rules = json_array();
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
        const char *s = json_string_value(v);
        if (!s || strlen(s) != json_string_length(v) || !net_policy_rule_ok(s)) {
            json_decref(rules);
            return spaced_err_set(err, 400, "invalid_request",
                                  "network.%s[%zu] is not a name, \"*.\" wildcard or IPv4 CIDR "
                                  "(each optionally with :port)", key, i);
        }
        char *low = strdup(s);
        for (char *p = low; p && *p; p++)
            *p = (char)tolower((unsigned char)*p);
        json_array_append_new(rules, json_string(low ? low : ""));
        free(low);
    }
    json_object_set_new(out, key, rules);
    return 0;
}

json_t *net_policy_check(const json_t *policy, struct spaced_err *err)
{
    if (!json_is_object(policy)) {
        spaced_err_set(err, 400, "invalid_request", "network policy must be an object");
        return NULL;
    }
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)policy, k, v) {
        if (strcmp(k, "mode") != 0 && strcmp(k, "allow") != 0 && strcmp(k, "deny") != 0) {
            spaced_err_set(err, 400, "unknown_field", "network.%.64s is not a known field", k);
            return NULL;
        }
    }
    const char *mode = json_string_value(json_object_get(policy, "mode"));
    if (!mode || (strcmp(mode, "none") && strcmp(mode, "allowlist") && strcmp(mode, "open"))) {
        spaced_err_set(err, 400, "invalid_request",
                       "network.mode must be \"none\", \"allowlist\" or \"open\"");
        return NULL;
    }
    bool open = strcmp(mode, "open") == 0, deny = json_object_get(policy, "deny") != NULL;
    if (deny && !open) {
        spaced_err_set(err, 400, "invalid_request", "network.deny needs mode \"open\"");
        return NULL;
    }
    /* In `open` mode the allow rules are the exceptions to the deny rules: alone they
     * would read as a restriction that is not there. */
    if (json_object_get(policy, "allow") && strcmp(mode, "allowlist") != 0 && !deny) {
        spaced_err_set(err, 400, "invalid_request",
                       "network.allow needs mode \"allowlist\" (or, in mode \"open\", "
                       "network.deny: allow rules are then its exceptions)");
        return NULL;
    }
    json_t *out = json_pack("{s:s}", "mode", mode);
    if (!out) {
        spaced_err_set(err, 500, "internal", "out of memory");
        return NULL;
    }
    if (strcmp(mode, "none") != 0 &&
        (check_rules(policy, "allow", out, err) != 0 || check_rules(policy, "deny", out, err) != 0)) {
        json_decref(out);
        return NULL;
    }
    if (strcmp(mode, "allowlist") == 0 && !json_object_get(out, "allow"))
        json_object_set_new(out, "allow", json_array());
    return out;
}

/* HTTP field-name token characters (RFC 9110), 1..128 of them. */
static bool header_ok(const char *s)
{
    size_t n = strlen(s);
    if (n == 0 || n > 128)
        return false;
    for (; *s; s++)
        if (!(isalnum((unsigned char)*s) || strchr("!#$%&'*+-.^_`|~", *s)))
            return false;
    return true;
}

/* Printable bytes and tabs only: a CR or LF would let the secret split a header. */
static bool secret_ok(const json_t *v)
{
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (!s || n == 0 || n > NET_SECRET_MAX || strlen(s) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (((unsigned char)s[i] < 0x20 && s[i] != '\t') || s[i] == 0x7f)
            return false;
    return true;
}

json_t *net_creds_check(const json_t *rules, struct spaced_err *err)
{
    if (!json_is_array(rules) || json_array_size(rules) > NET_CREDS_MAX) {
        spaced_err_set(err, 400, "invalid_request",
                       "credentials must be an array of at most %d rules", NET_CREDS_MAX);
        return NULL;
    }
    json_t *out = json_array();
    size_t i;
    json_t *r;
    json_array_foreach(rules, i, r) {
        const char *k;
        json_t *v;
        bool known = json_is_object(r);
        json_object_foreach(r, k, v)
            if (strcmp(k, "host") && strcmp(k, "header") && strcmp(k, "secret"))
                known = false;
        json_t *host = json_object_get(r, "host"), *hdr = json_object_get(r, "header"),
               *sec = json_object_get(r, "secret");
        const char *h = json_string_value(host), *n = json_string_value(hdr);
        if (!known || !h || strlen(h) != json_string_length(host) || !name_ok(h, strlen(h)) ||
            !n || !header_ok(n) || !secret_ok(sec)) {
            spaced_err_set(err, 400, "invalid_request",
                           "credentials[%zu] must be {\"host\": exact host name, \"header\": "
                           "HTTP header name, \"secret\": printable string of 1..%d bytes}",
                           i, NET_SECRET_MAX);
            json_decref(out);
            return NULL;
        }
        char *low = strdup(h);
        for (char *p = low; p && *p; p++)
            *p = (char)tolower((unsigned char)*p);
        json_array_append_new(out, json_pack("{s:s, s:s, s:O}", "host", low ? low : "",
                                             "header", n, "secret", sec));
        free(low);
    }
    return out;
}

json_t *net_creds_view(const json_t *creds, bool for_gateway)
{
    json_t *out = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(creds, i, c) {
        json_t *r = json_pack("{s:O, s:O}", "host", json_object_get(c, "host"), "header",
                              json_object_get(c, "header"));
        if (for_gateway)
            json_object_set(r, "value", json_object_get(c, "secret"));
        json_array_append_new(out, r);
    }
    return out;
}
