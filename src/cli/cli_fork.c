/* cli_fork.c: `space fork ID [-n N]` and `space snapshot create|ls|rm` (forks and
 * snapshots of running sandboxes, docs/api.md). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* Sends body to path and waits for the returned operation; the reply (caller decrefs)
 * or NULL (message printed) through *out; returns the exit status. */
static int submit_and_wait(struct cli_ctx *x, const char *path, json_t *body, const char *what,
                           json_t **out)
{
    json_t *r = cli_call(x, "POST", path, body, NULL);
    json_decref(body);
    *out = r;
    if (!r)
        return 1;
    return cli_wait_op(x, json_string_value(json_object_get(json_object_get(r, "operation"), "id")),
                       what, NULL);
}

/* A string field of a server document, "-" when absent or not a string. */
static const char *str(const json_t *o, const char *k)
{
    const char *v = json_string_value(json_object_get(o, k));
    return v ? v : "-";
}

static int sandbox_path(const char *id, const char *leaf, char *out, size_t cap)
{
    char eid[128];
    if (!cli_pct(id, eid, sizeof eid)) {
        cli_err("sandbox id too long");
        return -1;
    }
    snprintf(out, cap, "/v1/sandboxes/%s/%s", eid, leaf);
    return 0;
}

int cli_cmd_fork(struct cli_ctx *x, int argc, char **argv)
{
    const char *id = NULL;
    long n = 1;
    for (int i = 0; i < argc; i++) {
        char *end = NULL;
        if (strcmp(argv[i], "-n") == 0 && i + 1 < argc) {
            n = strtol(argv[++i], &end, 10);
            if (!*argv[i] || *end || n < 1) {
                cli_err("-n wants a positive number, not %s", argv[i]);
                return 2;
            }
        } else if (!id && argv[i][0] != '-') {
            id = argv[i];
        } else {
            id = NULL;
            break;
        }
    }
    char path[256], what[160];
    if (!id) {
        cli_err("usage: space fork ID [-n N]");
        return 2;
    }
    if (sandbox_path(id, "fork", path, sizeof path) < 0)
        return 2;
    snprintf(what, sizeof what, "fork %s", id);
    json_t *r;
    int rc = submit_and_wait(x, path, json_pack("{s:I}", "count", (json_int_t)n), what, &r);
    size_t i;
    json_t *f;
    if (x->json && r)
        cli_print_json(r);
    else
        json_array_foreach(json_object_get(r, "sandboxes"), i, f)
            if (json_is_string(f)) /* the failed ones too: they can be deleted */
                printf("%s\n", json_string_value(f));
    json_decref(r);
    return rc;
}

static int snap_create(struct cli_ctx *x, int argc, char **argv)
{
    const char *id = NULL, *name = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--name") == 0 && i + 1 < argc)
            name = argv[++i];
        else if (!id && argv[i][0] != '-')
            id = argv[i];
        else
            id = "";
    }
    char path[256], what[160];
    if (!id || !id[0]) {
        cli_err("usage: space snapshot create ID [--name NAME]");
        return 2;
    }
    if (sandbox_path(id, "snapshots", path, sizeof path) < 0)
        return 2;
    snprintf(what, sizeof what, "snapshot %s", id);
    json_t *body = name ? json_pack("{s:s}", "name", name) : json_object();
    json_t *r;
    int rc = submit_and_wait(x, path, body, what, &r);
    if (rc == 0 && x->json)
        cli_print_json(r);
    else if (rc == 0)
        printf("%s\n", str(json_object_get(r, "snapshot"), "id"));
    json_decref(r);
    return rc;
}

static int snap_ls(struct cli_ctx *x)
{
    int rc;
    json_t *r = cli_get_listing(x, "/v1/snapshots", &rc);
    if (!r)
        return rc;
    printf("%-20s %-20s %-9s %-20s %-12s %12s  %s\n", "ID", "NAME", "STATE", "SOURCE", "TEMPLATE",
           "SIZE_MIB", "CREATED");
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(r, "snapshots"), i, s) {
        printf("%-20.64s %-20.64s %-9.16s %-20.64s %-12.64s %12lld  %.40s\n", str(s, "id"),
               str(s, "name"), str(s, "state"), str(s, "source_sandbox"), str(s, "template"),
               (long long)(json_integer_value(json_object_get(s, "size_bytes")) >> 20),
               str(s, "created_at"));
    }
    json_decref(r);
    return 0;
}

static int snap_rm(struct cli_ctx *x, int argc, char **argv)
{
    if (argc < 1) {
        cli_err("usage: space snapshot rm ID|NAME...");
        return 2;
    }
    int rc = 0;
    for (int i = 0; i < argc; i++) {
        char eid[128], path[256];
        if (!cli_pct(argv[i], eid, sizeof eid)) {
            cli_err("snapshot id too long");
            rc = 2;
            continue;
        }
        snprintf(path, sizeof path, "/v1/snapshots/%s", eid);
        json_t *r = cli_call(x, "DELETE", path, NULL, NULL);
        if (!r) {
            rc = 1;
            continue;
        }
        json_decref(r);
        printf("snapshot %s deleted\n", argv[i]);
    }
    return rc;
}

int cli_cmd_snapshot(struct cli_ctx *x, int argc, char **argv)
{
    if (argc >= 1 && strcmp(argv[0], "create") == 0)
        return snap_create(x, argc - 1, argv + 1);
    if (argc == 1 && strcmp(argv[0], "ls") == 0)
        return snap_ls(x);
    if (argc >= 1 && strcmp(argv[0], "rm") == 0)
        return snap_rm(x, argc - 1, argv + 1);
    cli_err("usage: space snapshot create ID [--name NAME] | ls | rm ID|NAME...");
    return 2;
}
