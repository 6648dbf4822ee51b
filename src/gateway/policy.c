/* policy.c: policy parsing and matching, forbidden destinations; see policy.h. */
#include "policy.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool in_net(uint32_t a, uint32_t net, int bits)
{
    uint32_t mask = bits ? 0xffffffffu << (32 - bits) : 0;
    return (a & mask) == net;
}

bool policy_addr_forbidden(uint32_t a)
{
    static const struct { uint32_t net; int bits; } special[] = {
        {0x00000000, 8},  {0x0a000000, 8},  {0x64400000, 10}, {0x7f000000, 8},
        {0xa9fe0000, 16}, {0xac100000, 12}, {0xc0000000, 24}, {0xc0a80000, 16},
        {0xc6120000, 15}, {0xe0000000, 4},  {0xf0000000, 4},
        {0xa83f8110, 32}, /* 168.63.129.16: Azure's WireServer (DNS, DHCP, VM agent) */
    };
    for (size_t i = 0; i < sizeof special / sizeof special[0]; i++)
        if (in_net(a, special[i].net, special[i].bits))
            return true;
    return policy_host_addr_is_own(a);
}

int policy_name_normalise(const char *in, size_t len, char out[POLICY_NAME_MAX + 1])
{
    if (len > 0 && in[len - 1] == '.')
        len--;
    if (len == 0 || len > POLICY_NAME_MAX)
        return -1;
    size_t label = 0, last_label_start = 0;
    bool last_all_digits = true;
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)in[i];
        if (c == '.') {
            if (label == 0 || in[i - 1] == '-')
                return -1;
            label = 0;
            last_label_start = i + 1;
            last_all_digits = true;
            out[i] = '.';
            continue;
        }
        if (!(isalnum(c) || c == '-' || c == '_') || c > 0x7f)
            return -1;
        if (label == 0 && c == '-')
            return -1;
        if (++label > 63)
            return -1;
        if (!isdigit(c))
            last_all_digits = false;
        out[i] = (char)tolower(c);
    }
    if (label == 0 || in[len - 1] == '-')
        return -1;
    out[len] = '\0';
    struct in_addr ia;
    /* A numeric last label is never a real TLD and catches 127.1, 0x7f.1 and friends
     * that some resolvers and HTTP clients treat as addresses. */
    if (last_all_digits || inet_aton(out, &ia) || (len - last_label_start > 1 &&
                                                   out[last_label_start] == '0' &&
                                                   out[last_label_start + 1] == 'x'))
        return -1;
    return 0;
}

static bool name_matches(const struct policy_rule *r, const char *name)
{
    if (r->kind == RULE_EXACT)
        return strcmp(r->name, name) == 0;
    if (r->kind != RULE_WILDCARD)
        return false;
    size_t n = strlen(name), s = strlen(r->name);
    /* "*.example.com" needs at least one label before ".example.com". */
    return n > s + 1 && name[n - s - 1] == '.' && strcmp(name + n - s, r->name) == 0;
}

bool policy_name_internal(const char *name)
{
    /* Special-use and site-local zones (RFC 6761, 6762, 7686, 8375, 9476, and the
     * de-facto .internal, .lan, .corp, .home, .localdomain): the public DNS has no
     * answer for them, so a query can only leak data to whoever answers it. */
    static const char *const zones[] = {"internal", "local", "localhost", "localdomain",
                                        "home.arpa", "arpa", "lan", "corp", "home",
                                        "intranet", "private", "invalid", "onion", "alt"};
    if (!strchr(name, '.'))
        return true; /* "metadata", "wpad", "localhost": search-list names */
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof zones / sizeof zones[0]; i++) {
        size_t z = strlen(zones[i]);
        if (n > z && name[n - z - 1] == '.' && strcmp(name + n - z, zones[i]) == 0)
            return true;
    }
    return false;
}

/* Whether one of rules[0..n) matches: a name rule by name, a CIDR rule by addr (never
 * when names_only). Port: a rule with a port matches that port only; port 0 (a DNS
 * answer, any port) matches every rule when !strict (an allow rule: the name is reachable
 * on some port), and only port-less rules when strict (a deny rule: refuse the answer only
 * if every port is refused). */
static bool rules_match(const struct policy_rule *rules, size_t n, const char *name,
                        uint32_t addr, uint16_t port, bool strict, bool names_only)
{
    for (size_t i = 0; i < n; i++) {
        const struct policy_rule *r = &rules[i];
        if (r->port && r->port != port && (port || strict))
            continue;
        if (r->kind == RULE_CIDR ? !names_only && (addr & r->mask) == r->net
                                 : name_matches(r, name))
            return true;
    }
    return false;
}

bool policy_name_may_resolve(const struct policy *p, const char *name)
{
    if (policy_name_internal(name))
        return false;
    if (p->mode == POLICY_OPEN)
        return !rules_match(p->deny, p->ndeny, name, 0, 0, true, true) ||
               rules_match(p->rules, p->nrules, name, 0, 0, false, true);
    if (p->mode != POLICY_ALLOWLIST)
        return false;
    return rules_match(p->rules, p->nrules, name, 0, 0, false, true);
}

bool policy_addr_allowed(const struct policy *p, const char *name, uint32_t addr, uint16_t port)
{
    /* Only for a name that may resolve at all: never for an internal name (even under
     * `open`), and a CIDR rule narrows the addresses of names a name rule allows, it
     * allows no name by itself. */
    if (policy_addr_forbidden(addr) || !policy_name_may_resolve(p, name))
        return false;
    if (p->mode == POLICY_OPEN && !rules_match(p->deny, p->ndeny, name, addr, port, true, false))
        return true;
    if (p->mode != POLICY_ALLOWLIST && p->mode != POLICY_OPEN)
        return false;
    return rules_match(p->rules, p->nrules, name, addr, port, false, false);
}

static int parse_port(const char *s, uint16_t *port)
{
    char *end;
    long v = strtol(s, &end, 10);
    if (*s < '0' || *s > '9' || *end || v < 1 || v > 65535)
        return -1;
    *port = (uint16_t)v;
    return 0;
}

static int parse_rule(const char *s, struct policy_rule *r)
{
    char buf[POLICY_NAME_MAX + 16];
    if (strlen(s) >= sizeof buf)
        return -1;
    strcpy(buf, s);
    memset(r, 0, sizeof *r);
    char *colon = strchr(buf, ':');
    if (colon) {
        *colon = '\0';
        if (parse_port(colon + 1, &r->port) != 0)
            return -1;
    }
    char *slash = strchr(buf, '/');
    if (slash) {
        *slash = '\0';
        struct in_addr ia;
        uint16_t bits;
        if (inet_pton(AF_INET, buf, &ia) != 1 || (strcmp(slash + 1, "0") != 0 &&
                                                  (parse_port(slash + 1, &bits) || bits > 32)))
            return -1;
        int b = strcmp(slash + 1, "0") == 0 ? 0 : bits;
        r->kind = RULE_CIDR;
        r->mask = b ? 0xffffffffu << (32 - b) : 0;
        r->net = ntohl(ia.s_addr) & r->mask;
        return 0;
    }
    const char *name = buf;
    r->kind = RULE_EXACT;
    if (strncmp(buf, "*.", 2) == 0) {
        r->kind = RULE_WILDCARD;
        name += 2;
    }
    return policy_name_normalise(name, strlen(name), r->name);
}

/* Parses the array j[key] (absent: no rules) into a new rules array. */
static int parse_rules(const json_t *j, const char *key, struct policy_rule **rules, size_t *n,
                       char *err, size_t errlen)
{
    const json_t *arr = json_object_get(j, key);
    if (!arr)
        return 0;
    if (!json_is_array(arr) || json_array_size(arr) > POLICY_RULES_MAX) {
        snprintf(err, errlen, "\"%s\" must be an array of at most %d rules", key,
                 POLICY_RULES_MAX);
        return -1;
    }
    *rules = calloc(json_array_size(arr) + 1, sizeof **rules);
    if (!*rules) {
        snprintf(err, errlen, "out of memory");
        return -1;
    }
    size_t i;
    const json_t *v;
    json_array_foreach(arr, i, v) {
        const char *s = json_string_value(v);
        if (!s || parse_rule(s, &(*rules)[*n]) != 0) {
            snprintf(err, errlen, "bad %s rule #%zu", key, i);
            return -1;
        }
        (*n)++;
    }
    return 0;
}

int policy_parse(const json_t *j, struct policy *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    const char *mode = json_string_value(json_object_get(j, "mode"));
    if (!json_is_object(j) || !mode) {
        snprintf(err, errlen, "policy must be an object with a \"mode\"");
        return -1;
    }
    if (strcmp(mode, "none") == 0)
        out->mode = POLICY_NONE;
    else if (strcmp(mode, "open") == 0)
        out->mode = POLICY_OPEN;
    else if (strcmp(mode, "allowlist") == 0)
        out->mode = POLICY_ALLOWLIST;
    else {
        snprintf(err, errlen, "unknown policy mode");
        return -1;
    }
    if (json_object_get(j, "deny") && out->mode != POLICY_OPEN) {
        snprintf(err, errlen, "\"deny\" needs mode \"open\"");
        return -1;
    }
    if (parse_rules(j, "allow", &out->rules, &out->nrules, err, errlen) != 0 ||
        parse_rules(j, "deny", &out->deny, &out->ndeny, err, errlen) != 0) {
        policy_free(out);
        return -1;
    }
    return 0;
}

void policy_free(struct policy *p)
{
    free(p->rules);
    free(p->deny);
    p->rules = p->deny = NULL;
    p->nrules = p->ndeny = 0;
}

static json_t *rules_to_json(const struct policy_rule *rules, size_t n)
{
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        const struct policy_rule *r = &rules[i];
        char s[POLICY_NAME_MAX + 32], port[8] = "";
        if (r->port)
            snprintf(port, sizeof port, ":%u", r->port);
        if (r->kind == RULE_CIDR) {
            struct in_addr ia = {.s_addr = htonl(r->net)};
            int bits = __builtin_popcount(r->mask);
            snprintf(s, sizeof s, "%s/%d%s", inet_ntoa(ia), bits, port);
        } else {
            snprintf(s, sizeof s, "%s%s%s", r->kind == RULE_WILDCARD ? "*." : "", r->name, port);
        }
        json_array_append_new(arr, json_string(s));
    }
    return arr;
}

json_t *policy_to_json(const struct policy *p)
{
    static const char *const modes[] = {"none", "allowlist", "open"};
    json_t *j = json_pack("{s:s, s:o}", "mode", modes[p->mode], "allow",
                          rules_to_json(p->rules, p->nrules));
    if (j && p->ndeny)
        json_object_set_new(j, "deny", rules_to_json(p->deny, p->ndeny));
    return j;
}
