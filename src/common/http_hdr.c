/* http_hdr: hop-by-hop and credential header fields, Host values (see http_hdr.h). */
#include "http_hdr.h"

#include <string.h>
#include <strings.h>

static bool in_list(const char *name, const char *const *list, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strcasecmp(name, list[i]) == 0)
            return true;
    return false;
}

/* Whether the comma-separated token list `list` holds `name` (OWS around tokens). */
static bool listed(const char *name, const char *list)
{
    size_t nl = strlen(name);
    for (const char *p = list; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        const char *e = p;
        while (*e && *e != ',')
            e++;
        size_t tl = (size_t)(e - p);
        while (tl && (p[tl - 1] == ' ' || p[tl - 1] == '\t'))
            tl--;
        if (tl && tl == nl && strncasecmp(p, name, nl) == 0)
            return true;
        p = e;
    }
    return false;
}

bool hh_hop_by_hop(const char *name, const char *connection)
{
    static const char *const fixed[] = {"Connection", "Keep-Alive", "Proxy-Connection", "TE",
                                        "Trailer", "Transfer-Encoding", "Upgrade"};
    return in_list(name, fixed, sizeof fixed / sizeof *fixed) ||
           (connection && listed(name, connection));
}

bool hh_credential(const char *name)
{
    static const char *const creds[] = {"Authorization", "Proxy-Authorization", "X-API-Key",
                                        HH_NODE_TOKEN_HEADER, "X-Access-Token",
                                        HH_TRAFFIC_TOKEN_HEADER};
    return in_list(name, creds, sizeof creds / sizeof *creds);
}

bool hh_host_ok(const char *h)
{
    size_t n = h ? strlen(h) : 0;
    if (n == 0 || n > 255)
        return false;
    return strspn(h, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") == n;
}

bool hh_public_url_ok(const char *u)
{
    const char *h = !u                                 ? NULL
                    : strncmp(u, "https://", 8) == 0 ? u + 8
                    : strncmp(u, "http://", 7) == 0  ? u + 7
                                                     : NULL;
    return h && hh_host_ok(h);
}
