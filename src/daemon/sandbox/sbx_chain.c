/* sbx_chain.c: a sandbox's disk chain file (sandboxes/<id>/backing.json, sbx_internal.h;
 * a fork's capture keeps one of the same format, sbx_fork.c) and what it tells the
 * template module: which snapshot versions and images the sandboxes' disks still stand
 * on (sbx_template_users, sbx.h). Only this file reads or writes chain files. */
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sbx_internal.h"

int sbx_chain_write(const char *p, const struct sbx_chain *c)
{
    json_t *arr = json_array();
    for (unsigned i = 0; i < c->n; i++)
        json_array_append_new(arr, json_pack("{s:s, s:s}", "path", c->path[i], "format", c->format[i]));
    /* Whole or absent, never half: a chain file is read after a crash (temp + rename). */
    char tmp[SBX_PATH_MAX + 8];
    int rc = -1;
    if (snprintf(tmp, sizeof tmp, "%s.tmp", p) < (int)sizeof tmp &&
        json_dump_file(arr, tmp, JSON_COMPACT) == 0)
        rc = rename(tmp, p);
    if (rc < 0)
        unlink(tmp);
    json_decref(arr);
    return rc;
}

int sbx_chain_save(const struct sbx *s, const struct sbx_chain *c)
{
    char p[SBX_PATH_MAX];
    sbx_path(s, "backing.json", p, sizeof p);
    return sbx_chain_write(p, c);
}

int sbx_chain_load(const struct sbx *s, struct sbx_chain *c)
{
    char p[SBX_PATH_MAX];
    sbx_path(s, "backing.json", p, sizeof p);
    return sbx_chain_read(p, c);
}

int sbx_chain_read(const char *p, struct sbx_chain *c)
{
    json_t *arr = json_load_file(p, 0, NULL);
    memset(c, 0, sizeof *c);
    size_t i;
    json_t *l;
    json_array_foreach(arr, i, l) {
        const char *path = json_string_value(json_object_get(l, "path"));
        const char *fmt = json_string_value(json_object_get(l, "format"));
        if (i >= VM_DISK_BACKING_MAX || !path || !fmt)
            break;
        snprintf(c->path[i], sizeof c->path[i], "%s", path);
        snprintf(c->format[i], sizeof c->format[i], "%s", fmt);
        c->n = (unsigned)i + 1;
    }
    json_decref(arr);
    return c->n ? 0 : -1;
}

/* Every sandbox in the table that is not deleted, in any other state (a stopped or
 * failed sandbox restarts on the same chain; one adopted after a restart is in the table
 * since sbx_table_load), with the chain its backing.json names: a create that has not
 * written it yet reports its template with no layer. */
void sbx_template_users(struct spaced *sp, tpl_use_fn use, void *arg)
{
    for (struct sbx *s = sp->sbx->head; s; s = s->next) {
        if (s->state == SBX_DELETED)
            continue;
        struct sbx_chain c;
        const char *layers[VM_DISK_BACKING_MAX];
        sbx_chain_load(s, &c); /* none: c.n == 0 */
        for (unsigned i = 0; i < c.n; i++)
            layers[i] = c.path[i];
        use(s->rec.template_name, layers, c.n, arg);
    }
    sbx_capture_users(sp, use, arg); /* snapshots and forks' captures stand on layers too */
    sbx_move_users(sp, use, arg);    /* moved away, still served to the new node */
}
