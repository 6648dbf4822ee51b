/* cli_template.c: `space template ls` and
 * `space template build NAME -f FILE` (cli_spacefile.h) or
 * `space template build NAME [--from BASE] --run CMD [--run CMD...]`; the build's stages
 * and output are shown as it runs (cli_buildlog.c), except with --json. */
#include "cli.h"
#include "cli_spacefile.h"

#include <stdio.h>
#include <string.h>

static int template_ls(struct cli_ctx *x)
{
    int rc;
    json_t *r = cli_get_listing(x, "/v1/templates", &rc);
    if (!r)
        return rc;
    printf("%-20s %-9s %-8s %s\n", "NAME", "STATE", "BUILTIN", "DESCRIPTION");
    size_t i;
    json_t *t;
    json_array_foreach(json_object_get(r, "templates"), i, t)
    {
        const char *name = json_string_value(json_object_get(t, "name"));
        const char *state = json_string_value(json_object_get(t, "state"));
        const char *desc = json_string_value(json_object_get(t, "description"));
        const char *fail = json_string_value(json_object_get(t, "failure"));
        printf("%-20s %-9s %-8s %s\n", name ? name : "?", state ? state : "?",
               json_is_true(json_object_get(t, "builtin")) ? "yes" : "no",
               fail ? fail : desc ? desc : "");
    }
    json_decref(r);
    return 0;
}

/* The build request's body from -f FILE, or NULL after printing why. */
static json_t *body_from_file(const char *name, const char *file)
{
    char err[512];
    json_t *spec = cli_spacefile_parse(file, name, err, sizeof err);
    if (!spec)
        cli_err("template build: %s", err);
    return spec;
}

static int template_build(struct cli_ctx *x, int argc, char **argv)
{
    if (argc < 1 || argv[0][0] == '-') {
        cli_err("usage: space template build NAME -f FILE | [--from BASE] --run CMD [--run CMD...]");
        return 2;
    }
    json_t *steps = json_array();
    json_t *body = json_pack("{s:s,s:o}", "name", argv[0], "steps", steps);
    if (argc == 3 && strcmp(argv[1], "-f") == 0) {
        json_decref(body);
        if (!(body = body_from_file(argv[0], argv[2])))
            return 2;
        argc = 1; /* nothing else to read */
    }
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc || (strcmp(argv[i], "--from") != 0 && strcmp(argv[i], "--run") != 0)) {
            cli_err("template build: unknown or incomplete option %s", argv[i]);
            json_decref(body);
            return 2;
        }
        if (strcmp(argv[i], "--from") == 0)
            json_object_set_new(body, "from", json_string(argv[i + 1]));
        else
            json_array_append_new(steps, json_pack("{s:s}", "run", argv[i + 1]));
    }
    json_t *r = cli_call(x, "POST", "/v1/templates", body, NULL);
    json_decref(body);
    if (!r)
        return 1;
    char what[96];
    snprintf(what, sizeof what, "building template %s", argv[0]);
    json_t *op = NULL;
    const char *op_id = json_string_value(json_object_get(json_object_get(r, "operation"), "id"));
    /* The output as it comes; then the operation says how it ended (and waits for it
     * when the stream could not be followed). */
    if (!x->json)
        cli_follow_build(x, op_id);
    int rc = cli_wait_op(x, op_id, what, x->json ? &op : NULL);
    if (rc == 0 && op)
        rc = cli_print_op(op);
    else if (rc == 0)
        printf("%s\n", argv[0]);
    json_decref(r);
    return rc;
}

int cli_cmd_template(struct cli_ctx *x, int argc, char **argv)
{
    if (argc >= 1 && strcmp(argv[0], "ls") == 0 && argc == 1)
        return template_ls(x);
    if (argc >= 1 && strcmp(argv[0], "build") == 0)
        return template_build(x, argc - 1, argv + 1);
    cli_err("usage: space template ls | space template build NAME [--from BASE] --run CMD...");
    return 2;
}
