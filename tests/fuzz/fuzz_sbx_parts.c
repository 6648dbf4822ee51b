/* libFuzzer target: the parts record a node reads from a store row before it fetches a
 * snapshot's or a moved sandbox's files (sbx_parts_parse, sandbox/sbx_parts.c). Whatever
 * the bytes, a record is refused or every value in it is within the bounds a fetch relies
 * on: at most SBX_PARTS_MAX files, each a known name (it becomes a file name under the
 * data directory: no '/', no "..") with a size in 0..4 TiB and a 64-hex digest, a chain
 * of 1..VM_DISK_BACKING_MAX entries pointing at listed files, each qcow2 or raw, and a
 * holder node name that fits its field. An accepted record written back (sbx_parts_json)
 * reads back the same. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/sandbox/sbx_internal.h"

static void check(const struct sbx_parts *p)
{
    if (p->n > SBX_PARTS_MAX || p->nchain < 1 || p->nchain > VM_DISK_BACKING_MAX ||
        strlen(p->node) >= sizeof p->node)
        abort();
    for (unsigned i = 0; i < p->n; i++)
        if (!sbx_parts_name_ok(p->f[i].name) || strchr(p->f[i].name, '/') || strstr(p->f[i].name, "..") ||
            p->f[i].size < 0 || p->f[i].size > ((int64_t)1 << 42) || strlen(p->f[i].sha256) != 64)
            abort();
    for (unsigned i = 0; i < p->nchain; i++)
        if (p->chain[i] >= p->n || (strcmp(p->format[i], "qcow2") != 0 && strcmp(p->format[i], "raw") != 0))
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *s = malloc(size + 1);
    if (!s)
        return 0;
    memcpy(s, data, size);
    s[size] = '\0';
    struct sbx_parts p, q;
    if (sbx_parts_parse(s, &p) == 0) {
        check(&p);
        char *js = sbx_parts_json(&p);
        if (!js || sbx_parts_parse(js, &q) != 0 || q.n != p.n || q.nchain != p.nchain ||
            strcmp(q.node, p.node) != 0)
            abort();
        free(js);
    }
    free(s);
    return 0;
}
