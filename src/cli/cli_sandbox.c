/* cli_sandbox.c: `space create`, `ls`, `rm` and the lifecycle verbs. */
#include "cli.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Parses a positive integer option value; -1 if invalid. */
static long long num_arg(const char *opt, const char *v)
{
    char *e;
    long long n = v ? strtoll(v, &e, 10) : -1;
    if (!v || !*v || *e || n < 0) {
        cli_err("%s needs a non-negative number", opt);
        return -1;
    }
    return n;
}

/* --json: the sandbox as the API shows it now ({"sandbox": {...}}). */
static int print_sandbox(struct cli_ctx *x, const char *sid)
{
    char eid[128], path[256];
    if (!cli_pct(sid, eid, sizeof eid))
        return 1;
    snprintf(path, sizeof path, "/v1/sandboxes/%s", eid);
    json_t *r = cli_call(x, "GET", path, NULL, NULL);
    int rc = r ? cli_print_json(r) : 1;
    json_decref(r);
    return rc;
}

/* `--volume NAME:/PATH` into {"name","path"} appended to vols. 0, or -1 after a message
 * (the API checks the name and path rules themselves). */
static int volume_arg(json_t *vols, const char *v)
{
    const char *colon = strchr(v, ':');
    if (!colon || colon == v || colon[1] != '/') {
        cli_err("create: --volume wants NAME:/PATH (e.g. data:/mnt/data), not \"%s\"", v);
        return -1;
    }
    json_array_append_new(vols, json_pack("{s:s#, s:s}", "name", v, (int)(colon - v), "path",
                                          colon + 1));
    return 0;
}

/* Options with a value: `--allow` and `--volume` may repeat (each adds an allowlist entry,
 * a mounted volume); with `--network` or `--allow` the body gets a network policy. */
int cli_cmd_create(struct cli_ctx *x, int argc, char **argv)
{
    static const struct {
        const char *opt, *field;
    } nums[] = {{"--cpus", "vcpus"}, {"--memory", "memory_mib"}, {"--timeout", "timeout"}};
    json_t *body = json_object();
    char **allow = calloc((size_t)argc + 1, sizeof *allow);
    const char *mode = NULL;
    int n_allow = 0, rc = 2;
    for (int i = 0; allow && i < argc; i += 2) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool done = false;
        for (size_t k = 0; k < sizeof nums / sizeof nums[0] && !done; k++) {
            if (strcmp(o, nums[k].opt) != 0)
                continue;
            long long n = num_arg(o, v);
            if (n < 0)
                goto out;
            json_object_set_new(body, nums[k].field, json_integer(n));
            done = true;
        }
        if (!done && strcmp(o, "--auto-resume") == 0) { /* a flag: no value to skip */
            json_object_set_new(body, "auto_resume", json_true());
            done = true;
            i--;
        } else if (!done && v && strcmp(o, "--template") == 0) {
            json_object_set_new(body, "template", json_string(v));
            done = true;
        } else if (!done && v && strcmp(o, "--network") == 0 &&
                   (strcmp(v, "none") == 0 || strcmp(v, "open") == 0)) {
            mode = v;
            done = true;
        } else if (!done && v && strcmp(o, "--allow") == 0) {
            allow[n_allow++] = argv[i + 1];
            done = true;
        } else if (!done && v && strcmp(o, "--volume") == 0) {
            json_t *vols = json_object_get(body, "volumes");
            if (!vols)
                json_object_set_new(body, "volumes", vols = json_array());
            if (volume_arg(vols, v) < 0)
                goto out;
            done = true;
        }
        if (!done) {
            cli_err("create: unknown or incomplete option %s", o);
            goto out;
        }
    }
    if (!allow) {
        cli_err("out of memory");
        rc = 1;
        goto out;
    }
    if (mode && n_allow) {
        cli_err("create: --allow makes an allowlist; it does not go with --network %s", mode);
        goto out;
    }
    if (mode || n_allow)
        json_object_set_new(body, "network", cli_policy(mode, allow, n_allow));
    /* People get the full Debian userland by default (the API's own default, `base`,
     * is the small busybox image tests and E2B's default template name use). */
    if (!json_object_get(body, "template"))
        json_object_set_new(body, "template", json_string(CLI_DEFAULT_TEMPLATE));
    json_t *r = cli_call(x, "POST", "/v1/sandboxes", body, NULL);
    rc = 1;
    if (r) {
        const char *sid = json_string_value(json_object_get(json_object_get(r, "sandbox"), "id"));
        const char *op = json_string_value(json_object_get(json_object_get(r, "operation"), "id"));
        char what[96];
        snprintf(what, sizeof what, "creating %s", sid ? sid : "sandbox");
        rc = sid ? cli_wait_op(x, op, what, NULL) : 1;
        if (rc == 0 && x->json)
            rc = print_sandbox(x, sid);
        else if (rc == 0)
            printf("%s\n", sid);
        json_decref(r);
    }
out:
    free(allow);
    json_decref(body);
    return rc;
}

static const char *str_or(const json_t *o, const char *k, const char *dflt)
{
    const char *s = json_string_value(json_object_get(o, k));
    return s ? s : dflt;
}

/* One row of `space ls`; the NODE column only when some sandbox has a node. */
static void ls_row(const json_t *s, bool nodes)
{
    printf("%-20s %-11s %-12s %5lld %7lld  %-*s", str_or(s, "id", "?"), str_or(s, "state", "?"),
           str_or(s, "template", "-"), (long long)json_integer_value(json_object_get(s, "vcpus")),
           (long long)json_integer_value(json_object_get(s, "memory_mib")), nodes ? 24 : 0,
           str_or(s, "created_at", "-"));
    if (nodes) {
        const char *ns = str_or(s, "node_state", "live");
        printf("  %s%s%s", str_or(s, "node", "-"), strcmp(ns, "live") ? " (" : "",
               strcmp(ns, "live") ? ns : "");
        if (strcmp(ns, "live"))
            putchar(')');
    }
    putchar('\n');
}

int cli_cmd_ls(struct cli_ctx *x, int argc, char **argv)
{
    if (argc) {
        cli_err("ls takes no arguments");
        return 2;
    }
    char path[256] = "/v1/sandboxes?limit=1000", cur[128];
    json_t *all = json_array();
    bool nodes = false;
    for (;;) {
        json_t *r = cli_call(x, "GET", path, NULL, NULL);
        if (!r) {
            json_decref(all);
            return 1;
        }
        size_t i;
        json_t *s;
        json_array_foreach(json_object_get(r, "sandboxes"), i, s)
        {
            nodes |= json_is_string(json_object_get(s, "node"));
            json_array_append(all, s);
        }
        const char *next = json_string_value(json_object_get(r, "next_cursor"));
        bool more = next && cli_pct(next, cur, sizeof cur);
        if (more)
            snprintf(path, sizeof path, "/v1/sandboxes?limit=1000&cursor=%s", cur);
        json_decref(r);
        if (!more)
            break;
    }
    if (x->json) {
        json_t *doc = json_pack("{s:o}", "sandboxes", all);
        int rc = cli_print_json(doc);
        json_decref(doc);
        return rc;
    }
    printf("%-20s %-11s %-12s %5s %7s  %-*s%s\n", "ID", "STATE", "TEMPLATE", "CPUS", "MEM_MIB",
           nodes ? 24 : 0, "CREATED", nodes ? "  NODE" : "");
    size_t i;
    json_t *s;
    json_array_foreach(all, i, s)
        ls_row(s, nodes);
    json_decref(all);
    return 0;
}

int cli_cmd_nodes(struct cli_ctx *x, int argc, char **argv)
{
    if (argc) {
        cli_err("nodes takes no arguments");
        return 2;
    }
    int rc;
    json_t *r = cli_get_listing(x, "/v1/nodes", &rc);
    if (!r)
        return rc;
    printf("%-16s %-13s %11s %17s  %-24s %s\n", "NODE", "STATE", "VCPUS", "MEM_MIB", "HEARTBEAT", "URL");
    size_t i;
    json_t *n;
    json_array_foreach(json_object_get(r, "nodes"), i, n)
    {
        json_t *cap = json_object_get(n, "capacity"), *used = json_object_get(n, "used");
        char v[32], m[40];
        snprintf(v, sizeof v, "%lld/%lld", (long long)json_integer_value(json_object_get(used, "vcpus")),
                 (long long)json_integer_value(json_object_get(cap, "vcpus")));
        snprintf(m, sizeof m, "%lld/%lld", (long long)json_integer_value(json_object_get(used, "memory_mib")),
                 (long long)json_integer_value(json_object_get(cap, "memory_mib")));
        char state[24];
        snprintf(state, sizeof state, "%s%s", json_is_true(json_object_get(n, "live")) ? "live" : "down",
                 json_is_true(json_object_get(n, "draining")) ? ",draining" : "");
        printf("%-16s %-13s %11s %17s  %-24s %s\n", str_or(n, "id", "?"), state, v, m,
               str_or(n, "heartbeat_at", "-"), str_or(n, "url", "-"));
    }
    if (!json_array_size(json_object_get(r, "nodes")))
        printf("(no node daemons: a single host)\n");
    json_decref(r);
    return 0;
}

int cli_cmd_node(struct cli_ctx *x, int argc, char **argv)
{
    static const struct {
        const char *verb, *method, *suffix, *done;
    } verbs[] = {{"drain", "POST", "/drain", "draining: no new sandbox goes there"},
                 {"undrain", "POST", "/undrain", "placing sandboxes again"},
                 {"rm", "DELETE", "", "removed"}};
    for (size_t i = 0; argc == 2 && i < sizeof verbs / sizeof verbs[0]; i++) {
        if (strcmp(argv[0], verbs[i].verb) != 0)
            continue;
        char eid[128], path[256];
        if (!cli_pct(argv[1], eid, sizeof eid)) {
            cli_err("node id too long");
            return 2;
        }
        snprintf(path, sizeof path, "/v1/nodes/%s%s", eid, verbs[i].suffix);
        json_t *r = cli_call(x, verbs[i].method, path, NULL, NULL);
        if (!r)
            return 1;
        int rc = 0;
        if (x->json)
            rc = cli_print_json(r);
        else
            printf("node %s: %s\n", argv[1], verbs[i].done);
        json_decref(r);
        return rc;
    }
    cli_err("usage: space node drain|undrain|rm NODE");
    return 2;
}

/* Sends a lifecycle request and waits for its operation. */
static int lifecycle(struct cli_ctx *x, const char *method, const char *id, const char *verb)
{
    char eid[128], path[256], what[160];
    if (!cli_pct(id, eid, sizeof eid)) {
        cli_err("sandbox id too long");
        return 2;
    }
    if (verb)
        snprintf(path, sizeof path, "/v1/sandboxes/%s/%s", eid, verb);
    else
        snprintf(path, sizeof path, "/v1/sandboxes/%s", eid);
    json_t *r = cli_call(x, method, path, NULL, NULL);
    if (!r)
        return 1;
    snprintf(what, sizeof what, "%s %s", verb ? verb : "delete", id);
    json_t *op = NULL;
    int rc = cli_wait_op(x, json_string_value(json_object_get(json_object_get(r, "operation"), "id")),
                         what, x->json ? &op : NULL);
    json_decref(r);
    return rc == 0 && op ? cli_print_op(op) : rc;
}

int cli_cmd_rm(struct cli_ctx *x, int argc, char **argv)
{
    if (argc < 1) {
        cli_err("usage: space rm ID...");
        return 2;
    }
    int rc = 0;
    for (int i = 0; i < argc; i++)
        rc |= lifecycle(x, "DELETE", argv[i], NULL);
    return rc;
}

int cli_cmd_verb(struct cli_ctx *x, const char *verb, int argc, char **argv)
{
    if (argc != 1) {
        cli_err("usage: space %s ID", verb);
        return 2;
    }
    return lifecycle(x, "POST", argv[0], verb);
}
