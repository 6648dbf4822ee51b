/* cli_network.c: a sandbox's egress policy from the command line.
 *
 *   space network ID                      show the policy (mode, NIC, allow list)
 *   space network ID none|open            change it on the live sandbox
 *   space network ID allow ENTRY...       allowlist (names, *.wildcards, CIDRs); replaces
 *   space network ID log [--since SEQ]    the gateway's decisions, one JSON line each
 *
 * A change is one PUT /v1/sandboxes/{id}/network; the gateway closes the connections the
 * new policy forbids. spaced answers with the policy now in force, which is printed. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

json_t *cli_policy(const char *mode, char *const *allow, int n_allow)
{
    json_t *p = json_pack("{s:s}", "mode", n_allow ? "allowlist" : mode);
    if (p && n_allow) {
        json_t *list = json_array();
        for (int i = 0; i < n_allow; i++)
            json_array_append_new(list, json_string(allow[i]));
        json_object_set_new(p, "allow", list);
    }
    return p;
}

static void print_policy(const json_t *p)
{
    const char *mode = json_string_value(json_object_get(p, "mode"));
    printf("mode: %s\n", mode ? mode : "?");
    const json_t *nic = json_object_get(p, "nic");
    if (nic)
        printf("nic: %s\n", json_is_true(nic) ? "yes" : "no");
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(p, "allow"), i, e)
    {
        printf("allow: %s\n", json_string_value(e) ? json_string_value(e) : "?");
    }
}

static int show_log(struct cli_ctx *x, const char *base, int argc, char **argv)
{
    char path[384];
    if (argc == 0) {
        snprintf(path, sizeof path, "%s/log", base);
    } else {
        char *end = "";
        long long since = argc == 2 && strcmp(argv[0], "--since") == 0 ? strtoll(argv[1], &end, 10) : -1;
        if (since < 0 || *end) {
            cli_err("usage: space network ID log [--since SEQ]");
            return 2;
        }
        snprintf(path, sizeof path, "%s/log?since=%lld", base, since);
    }
    int rc;
    json_t *r = cli_get_listing(x, path, &rc);
    if (!r)
        return rc;
    size_t i;
    json_t *e;
    json_array_foreach(json_object_get(r, "entries"), i, e)
    {
        char *line = json_dumps(e, JSON_COMPACT);
        if (line)
            printf("%s\n", line);
        free(line);
    }
    json_decref(r);
    return 0;
}

int cli_cmd_network(struct cli_ctx *x, int argc, char **argv)
{
    static const char usage[] = "usage: space network ID [none | open | allow ENTRY... | log [--since SEQ]]";
    char eid[128], base[256];
    if (argc < 1 || argv[0][0] == '-') {
        cli_err("%s", usage);
        return 2;
    }
    if (!cli_pct(argv[0], eid, sizeof eid)) {
        cli_err("sandbox id too long");
        return 2;
    }
    snprintf(base, sizeof base, "/v1/sandboxes/%s/network", eid);
    const char *what = argc > 1 ? argv[1] : NULL;
    if (what && strcmp(what, "log") == 0)
        return show_log(x, base, argc - 2, argv + 2);
    json_t *body = NULL;
    if (what && (strcmp(what, "none") == 0 || strcmp(what, "open") == 0) && argc == 2)
        body = cli_policy(what, NULL, 0);
    else if (what && strcmp(what, "allow") == 0 && argc > 2)
        body = cli_policy("allowlist", argv + 2, argc - 2);
    else if (what) {
        cli_err("%s", usage);
        return 2;
    }
    json_t *r = cli_call(x, body ? "PUT" : "GET", base, body, NULL);
    json_decref(body);
    if (!r)
        return 1;
    int rc = 0;
    if (x->json)
        rc = cli_print_json(r);
    else
        print_policy(r);
    json_decref(r);
    return rc;
}
