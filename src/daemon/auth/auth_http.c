/* auth_http.c: authenticating an HTTP request (auth_require), on top of auth.c. */
#include <string.h>
#include <strings.h>

#include "auth.h"
#include "daemon/http/http.h"
#include "daemon/spaced.h"
#include "log.h"

const char *auth_request_key(struct http_req *req)
{
    const char *h = http_req_header(req, "Authorization");
    if (h) {
        if (strncasecmp(h, "Bearer ", 7) != 0)
            return "";
        h += 7;
        while (*h == ' ')
            h++;
        return h;
    }
    return http_req_header(req, "X-API-Key");
}

bool auth_require(struct spaced *sp, struct http_req *req, struct auth_principal *who)
{
    const char *key = auth_request_key(req);
    if (!key) {
        http_reply_error(req, 401, "unauthorized",
                         "missing API key: send 'Authorization: Bearer <key>' (the admin key "
                         "is in <data-dir>/admin.key)");
        return false;
    }
    char why[160];
    int rc = auth_check_key(sp->auth, key, who, why, sizeof why);
    if (rc == AUTH_E_STORE) {
        char q[200];
        log_error("auth.store", "msg=%s", log_quote(why, q, sizeof q));
        http_reply_add_header(req, "Retry-After", "1");
        http_reply_error(req, 503, "store_unavailable", "%s", why);
        return false;
    }
    if (rc < 0) {
        char peer[80], reason[200];
        log_info("auth.denied", "peer=%s reason=%s", log_quote(http_req_peer(req), peer, sizeof peer),
                 log_quote(why, reason, sizeof reason));
        http_reply_error(req, 401, "unauthorized", "%s", why);
        return false;
    }
    return true;
}

bool auth_require_admin(struct spaced *sp, struct http_req *req, struct auth_principal *who)
{
    if (!auth_require(sp, req, who))
        return false;
    if (!who->admin) {
        http_reply_error(req, 403, "forbidden", "this route needs an admin API key");
        return false;
    }
    return true;
}
