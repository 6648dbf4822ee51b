/* cli_volume.c: `space volume create NAME`, `ls`, `rm NAME...`, `put LOCAL NAME:PATH`,
 * `get NAME:PATH LOCAL` (the /v1/volumes API; put/get stream like `space cp`, PATH is
 * inside the volume: "a/b" and "/a/b" are the same file). */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static int volume_ls(struct cli_ctx *x)
{
    json_t *r = cli_call(x, "GET", "/v1/volumes", NULL, NULL);
    if (!r)
        return 1;
    printf("%-32s %s\n", "NAME", "CREATED");
    size_t i;
    json_t *v;
    json_array_foreach(json_object_get(r, "volumes"), i, v)
    {
        const char *name = json_string_value(json_object_get(v, "name"));
        const char *at = json_string_value(json_object_get(v, "created_at"));
        printf("%-32s %s\n", name ? name : "?", at ? at : "");
    }
    json_decref(r);
    return 0;
}

/* One call per name ("POST" creates, "DELETE" removes); 0 if every one succeeded. */
static int each_name(struct cli_ctx *x, const char *method, int argc, char **argv)
{
    int rc = 0;
    for (int i = 0; i < argc; i++) {
        char enc[256], path[320];
        if (!cli_pct(argv[i], enc, sizeof enc)) {
            cli_err("volume name too long: %s", argv[i]);
            rc = 1;
            continue;
        }
        json_t *body = NULL;
        if (strcmp(method, "POST") == 0) {
            snprintf(path, sizeof path, "/v1/volumes");
            body = json_pack("{s:s}", "name", argv[i]);
        } else {
            snprintf(path, sizeof path, "/v1/volumes/%s", enc);
        }
        json_t *r = cli_call(x, method, path, body, NULL);
        json_decref(body);
        if (!r)
            rc = 1;
        else if (strcmp(method, "POST") == 0)
            printf("%s\n", argv[i]);
        json_decref(r);
    }
    return rc;
}

/* put LOCAL NAME:PATH, get NAME:PATH LOCAL. */
static int transfer(struct cli_ctx *x, bool up, char **argv)
{
    char name[128], abs[4096];
    const char *path;
    if (!cli_split_remote(argv[up ? 1 : 0], name, sizeof name, &path)) {
        cli_err("volume %s needs NAME:PATH", up ? "put" : "get");
        return 2;
    }
    if (snprintf(abs, sizeof abs, "%s%s", path[0] == '/' ? "" : "/", path) >= (int)sizeof abs) {
        cli_err("path too long");
        return 2;
    }
    return up ? cli_upload(x, argv[0], "volumes", name, abs)
              : cli_download(x, "volumes", name, abs, argv[1]);
}

int cli_cmd_volume(struct cli_ctx *x, int argc, char **argv)
{
    const char *sub = argc > 0 ? argv[0] : "";
    if (strcmp(sub, "ls") == 0 && argc == 1)
        return volume_ls(x);
    if (strcmp(sub, "create") == 0 && argc >= 2)
        return each_name(x, "POST", argc - 1, argv + 1);
    if (strcmp(sub, "rm") == 0 && argc >= 2)
        return each_name(x, "DELETE", argc - 1, argv + 1);
    if ((strcmp(sub, "put") == 0 || strcmp(sub, "get") == 0) && argc == 3)
        return transfer(x, strcmp(sub, "put") == 0, argv + 1);
    cli_err("usage: space volume create NAME... | ls | rm NAME... | put LOCAL NAME:PATH | "
            "get NAME:PATH LOCAL");
    return 2;
}
