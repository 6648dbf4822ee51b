/* sbx_traffic.c: private sandbox ports (create option "ports": {"public": false}, E2B's
 * network.allowPublicTraffic = false).
 *
 * A private sandbox's port requests (native /ports route, E2B Host or header routing,
 * the sandbox-port listener) must carry its traffic token in the
 * e2b-traffic-access-token header (HH_TRAFFIC_TOKEN_HEADER). The token is not stored:
 * it is an auth token (HMAC-SHA256 under <data-dir>/token.secret) for the scope
 * "traffic:<sandbox id>", so it is random-looking, differs per sandbox, survives
 * restarts, and only the daemon that runs the sandbox can mint or check it (a control
 * daemon forwards; the node answers). It is compared in constant time. Only the flag
 * (store_sbx.private_ports) is persisted. The proxies strip the header before anything
 * reaches the guest (http_hdr.h), and callers answer a missing or wrong token exactly
 * like a sandbox that does not exist, so the routes are no existence oracle. */
#include <stdio.h>

#include "daemon/auth/auth.h"
#include "daemon/spaced.h"
#include "sbx_internal.h"

#define TRAFFIC_EXPIRES_MS 4102444800000LL /* 2100-01-01: as long as the sandbox lives */

static void traffic_scope(const char *id, char *scope, size_t cap)
{
    snprintf(scope, cap, "traffic:%s", id);
}

int sbx_traffic_token(const struct sbx *s, char *out, size_t cap)
{
    if (!s->rec.private_ports)
        return 0;
    char scope[STORE_ID_MAX + 16];
    traffic_scope(s->rec.id, scope, sizeof scope);
    return auth_token_mint(s->sp->auth, scope, TRAFFIC_EXPIRES_MS, out, cap) < 0 ? -1 : 1;
}

bool sbx_traffic_allowed(const struct sbx *s, const char *presented)
{
    if (!s->rec.private_ports)
        return true;
    char scope[STORE_ID_MAX + 16];
    traffic_scope(s->rec.id, scope, sizeof scope);
    return presented && auth_token_verify(s->sp->auth, scope, presented, spaced_now_ms());
}
