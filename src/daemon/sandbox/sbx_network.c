/* sbx_network.c: a sandbox's egress policy, changed live (sbx.h sbx_network_set): the
 * body of PUT /v1/sandboxes/{id}/network (api/routes_network.c) and of E2B's network
 * update (e2b/e2b_api.c), one code path below both; and its credential rules (PUT
 * .../credentials, and a node a sandbox moved to installing those that came with it). */
#include <stdlib.h>
#include <string.h>

#include "daemon/net/net.h"
#include "sbx_internal.h"

/* The sandbox's policy as given at create, for a sandbox whose network was never set
 * up (new reference; {"mode":"none"} if the record holds nothing usable). */
json_t *sbx_network_created(const struct sbx *s)
{
    const char *text = sbx_record(s)->network_json;
    json_t *p = text ? json_loads(text, 0, NULL) : NULL;
    return p ? p : json_pack("{s:s}", "mode", "none");
}

/* Makes sure the net module has a record (from the create request's policy). */
int sbx_network_record(struct net *net, const struct sbx *s, struct spaced_err *err)
{
    json_t *p = net_policy_get(net, sbx_id(s), err);
    if (p) {
        json_decref(p);
        return 0;
    }
    json_t *given = sbx_network_created(s);
    int rc = net_set_policy(net, sbx_id(s), sbx_tenant(s), given, err);
    json_decref(given);
    return rc;
}

int sbx_network_creds(struct net *net, const struct sbx *s, const json_t *rules, struct spaced_err *err)
{
    int rc = sbx_network_record(net, s, err);
    return rc == 0 ? net_set_creds(net, sbx_id(s), rules, err) : rc;
}

int sbx_network_creds_put(struct net *net, struct sbx *s, const json_t *rules, struct spaced_err *err)
{
    if (sbx_move_unrecord(s, err) != 0)
        return -1;
    int rc = sbx_network_creds(net, s, rules, err);
    if (!sbx_busy(s)) /* a verb in progress records when it ends */
        sbx_move_record(s);
    return rc;
}

int sbx_network_set(struct spaced *sp, struct sbx *s, const json_t *policy,
                    struct spaced_err *err)
{
    struct net *net = net_get(sp);
    if (!net)
        return spaced_err_set(err, 503, "network_unavailable",
                              "sandbox networking is not available on this host (see spaced's log)");
    /* net's record first (from the create request's policy), so a sandbox created with
     * `none` is known to have no NIC. Then the sandbox's store record (what GET
     * /v1/sandboxes/{id} shows and its next start uses), then net; a refusal by net puts
     * the store record back. */
    json_t *p = NULL;
    char *before = NULL;
    int rc = sbx_network_record(net, s, err);
    if (rc == 0 && !(p = net_policy_check(policy, err)))
        rc = -1;
    if (rc == 0 && sbx_record(s)->network_json && !(before = strdup(sbx_record(s)->network_json)))
        rc = spaced_err_set(err, 500, "internal", "out of memory");
    if (rc == 0)
        rc = sbx_set_network(s, p, err);
    if (rc == 0 && (rc = net_set_policy(net, sbx_id(s), sbx_tenant(s), p, err)) != 0) {
        json_t *back = before ? json_loads(before, 0, NULL) : NULL;
        struct spaced_err ignored;
        if (back || !before)
            sbx_set_network(s, back, &ignored);
        json_decref(back);
    }
    free(before);
    json_decref(p);
    return rc;
}
