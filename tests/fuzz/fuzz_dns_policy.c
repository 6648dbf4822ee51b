/* Fuzzes the policy matcher: the input is split into a policy (rules separated by
 * '\n') and a name to check. The first byte picks the mode: odd allowlist, else open
 * with the rules as allow rules (bit 1 clear) or as deny rules (bit 1 set). Properties:
 * parsing never crashes; a name that matches is normalised; forbidden addresses are never
 * allowed whatever the rules; deny rules only ever take away from `open`. */
#include <assert.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/policy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2 || size > 4096)
        return 0;
    const char *sep = memchr(data, '\t', size);
    if (!sep)
        return 0;
    size_t rules_len = (size_t)(sep - (const char *)data);
    json_t *allow = json_array();
    const char *p = (const char *)data;
    while (p < sep) {
        const char *nl = memchr(p, '\n', (size_t)(sep - p));
        size_t l = nl ? (size_t)(nl - p) : (size_t)(sep - p);
        json_array_append_new(allow, json_stringn(p, l));
        p += l + 1;
    }
    bool deny = !(data[0] & 1) && (data[0] & 2);
    json_t *j = json_pack("{s:s, s:o}", "mode", (data[0] & 1) ? "allowlist" : "open",
                          deny ? "deny" : "allow", allow);
    struct policy pol, open = {.mode = POLICY_OPEN};
    char err[128];
    if (j && policy_parse(j, &pol, err, sizeof err) == 0) {
        char name[POLICY_NAME_MAX + 1];
        const char *n = sep + 1;
        size_t nlen = size - rules_len - 1;
        if (policy_name_normalise(n, nlen, name) == 0) {
            bool may = policy_name_may_resolve(&pol, name);
            uint32_t a = nlen >= 4 ? (uint32_t)n[0] << 24 | (uint32_t)n[1] << 16 | (uint32_t)n[2] << 8 | (uint32_t)(uint8_t)n[3] : 0;
            bool ok = policy_addr_allowed(&pol, name, a, 443);
            assert(!(ok && policy_addr_forbidden(a)));
            assert(!ok || may);
            assert(!policy_addr_allowed(&pol, name, 0x7f000001, 80));
            assert(!policy_addr_allowed(&pol, name, 0xa9fea9fe, 80));
            assert(!deny || !may || policy_name_may_resolve(&open, name));
            assert(!deny || !ok || policy_addr_allowed(&open, name, a, 443));
        }
        policy_free(&pol);
    }
    json_decref(j);
    return 0;
}
