/* libFuzzer target: the template build-spec validator (tpl_spec_check) on arbitrary
 * request bodies, parsed as the route parses them. Whatever the input, the validator
 * either refuses it with a 4xx, a code and a message, or accepts a spec the build can
 * run without further checks: a "base" string and no "from", at most TPL_STEPS_MAX
 * steps of one known kind each, copy contents that decode within TPL_COPY_MAX, and
 * guest paths without NUL or `..` components. A fake guest dir with a `base` template
 * and a store holding another tenant's template live in a temporary directory. */
#include <event2/event.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "b64.h"
#include "daemon/spaced.h"
#include "daemon/store/store.h"
#include "daemon/template/tpl.h"
#include "daemon/template/tpl_internal.h"
/* not on the fuzz targets' include path: shared with the template unit test */
#include "../unit/tpl_fixture.h"

static struct spaced sp;
static char root[64];

static void remove_root(void) { spaced_rm_rf(root); }

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    static char guest[128], data[128];
    char p[300], err[256];
    snprintf(root, sizeof root, "/tmp/fuzz-tpl-XXXXXX");
    if (!mkdtemp(root))
        abort();
    atexit(remove_root);
    if (tplf_make_dirs(root, guest, sizeof guest, data, sizeof data, "image",
                       "{\"name\":\"base\"}") != 0)
        abort();
    sp.opt.guest_dir = guest;
    sp.opt.data_dir = data;
    sp.base = event_base_new();
    snprintf(p, sizeof p, "%s/space.db", data);
    if (!sp.base || !(sp.store = store_open(p, err, sizeof err)))
        abort();
    struct store_tpl t = {.created_ms = 1, .updated_ms = 1};
    snprintf(t.name, sizeof t.name, "taken");
    snprintf(t.tenant, sizeof t.tenant, "other-tenant");
    snprintf(t.state, sizeof t.state, "ready");
    if (store_tpl_put(sp.store, &t) != 0)
        abort();
    return 0;
}

static bool path_clean(const char *p)
{
    if (strstr(p, "/../") || strncmp(p, "../", 3) == 0 || strcmp(p, "..") == 0)
        return false;
    size_t n = strlen(p);
    return !(n >= 3 && strcmp(p + n - 3, "/..") == 0);
}

static void check_accepted(json_t *o)
{
    if (!json_is_string(json_object_get(o, "base")) || json_object_get(o, "from"))
        abort();
    json_t *steps = json_object_get(o, "steps");
    if (json_array_size(steps) > TPL_STEPS_MAX)
        abort();
    size_t i;
    json_t *s;
    json_array_foreach(steps, i, s) {
        if (json_object_size(s) != 1)
            abort();
        json_t *c = json_object_get(s, "copy");
        json_t *dir = json_object_get(s, "workdir");
        if (dir && (!json_is_string(dir) || json_string_value(dir)[0] != '/' ||
                    !path_clean(json_string_value(dir))))
            abort();
        if (!c)
            continue;
        const char *dst = json_string_value(json_object_get(c, "dst"));
        const char *b = json_string_value(json_object_get(c, "content"));
        if (!dst || !b || strlen(dst) != json_string_length(json_object_get(c, "dst")) || !path_clean(dst))
            abort();
        size_t cap = strlen(b) / 4 * 3 + 3;
        uint8_t *buf = malloc(cap);
        long n = buf ? b64_decode(b, buf, cap) : -1;
        free(buf);
        if (n < 0 || (size_t)n > TPL_COPY_MAX)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    json_error_t je;
    json_t *o = json_loadb((const char *)data, size, JSON_REJECT_DUPLICATES, &je);
    if (!json_is_object(o)) {
        json_decref(o);
        return 0;
    }
    struct spaced_err e = {0};
    if (tpl_spec_check(&sp, "fuzz-tenant", o, &e) == 0)
        check_accepted(o);
    else if (e.status < 400 || e.status > 499 || !e.code[0] || !e.message[0])
        abort();
    json_decref(o);
    return 0;
}
