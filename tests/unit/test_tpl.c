/* Unit tests for the template registry without VMs: build-spec validation (every field
 * and hostile input), name ownership across tenants (free, taken, own failed build,
 * deleted, built-ins), tenant-scoped lookup and listing, the pin of a built-in image
 * surviving a rebuild by rename, and what the sandboxes use (tpl_set_users: a template in
 * use cannot be deleted, a layer in use is not swept). A real SQLite store and a fake
 * guest dir in a temporary directory; a fake sandbox module. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/event.h>
#include <jansson.h>

#include "b64.h"
#include "daemon/store/store.h"
#include "daemon/template/tpl.h"
#include "tpl_fixture.h"

static char root[64];
static char guest[128], data[128];
static struct spaced sp;

/* The fake sandbox module's sandboxes (tpl_set_users): a template and at most one layer. */
static struct {
    const char *tpl;
    char layer[320];
} users[2];
static unsigned nusers;

static void fake_users(struct spaced *s, tpl_use_fn use, void *arg)
{
    (void)s;
    for (unsigned i = 0; i < nusers; i++) {
        const char *layers[1] = {users[i].layer};
        use(users[i].tpl, layers, users[i].layer[0] ? 1 : 0, arg);
    }
}

static void write_file(const char *path, const char *text)
{
    assert_int_equal(tplf_write_file(path, text), 0);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/tpl-unit-XXXXXX");
    if (!mkdtemp(root))
        return -1;
    if (tplf_make_dirs(root, guest, sizeof guest, data, sizeof data, "image one",
                       "{\"name\":\"base\",\"build_key\":\"1111111111111111aaaa\","
                       "\"defaults\":{\"env\":{\"LANG\":\"C.UTF-8\"},\"workdir\":\"/home/user\","
                       "\"user\":\"user\"}}") != 0)
        return -1;
    memset(&sp, 0, sizeof sp);
    sp.opt.guest_dir = guest;
    sp.opt.data_dir = data;
    sp.base = event_base_new();
    char err[256], db[256];
    snprintf(db, sizeof db, "%s/space.db", data);
    sp.store = store_open(db, err, sizeof err);
    if (!sp.store || !sp.base)
        return -1;
    if (!(sp.tpl = tpl_registry_new(&sp)))
        return -1;
    tpl_set_users(&sp, fake_users); /* no sandbox until a test adds one */
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    tpl_registry_free(sp.tpl);
    store_close(sp.store);
    event_base_free(sp.base);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    return system(cmd) == 0 ? 0 : -1;
}

/* A built template of `tenant` in state `state` (with its image when ready). */
static void add_row(const char *name, const char *tenant, const char *state)
{
    struct store_tpl t = {.created_ms = 1, .updated_ms = 1};
    snprintf(t.name, sizeof t.name, "%s", name);
    snprintf(t.tenant, sizeof t.tenant, "%s", tenant);
    snprintf(t.state, sizeof t.state, "%s", state);
    snprintf(t.dir, sizeof t.dir, "%s/templates/%s", data, name);
    assert_int_equal(store_tpl_put(sp.store, &t), 0);
    if (strcmp(state, "ready") == 0) {
        char p[300];
        snprintf(p, sizeof p, "%s/templates", data);
        mkdir(p, 0700);
        snprintf(p, sizeof p, "%s/templates/%s", data, name);
        mkdir(p, 0700);
        snprintf(p, sizeof p, "%s/templates/%s/rootfs.ext4", data, name);
        write_file(p, "built");
    }
}

/* Checks `spec` (JSON text) for tenant "ta": the status (0 = accepted) and, for a
 * refusal, a word its message must contain. */
static void check(const char *spec, int status, const char *word)
{
    json_error_t je;
    json_t *o = json_loads(spec, JSON_ALLOW_NUL, &je);
    if (!o)
        fail_msg("bad test JSON %s: %s", spec, je.text);
    struct spaced_err err = {0};
    int rc = tpl_spec_check(&sp, "ta", o, &err);
    if (status == 0) {
        if (rc != 0)
            fail_msg("%s refused: %d %s", spec, err.status, err.message);
        assert_string_equal(json_string_value(json_object_get(o, "base")), "base");
        assert_null(json_object_get(o, "from"));
    } else {
        if (rc == 0)
            fail_msg("%s accepted", spec);
        assert_int_equal(err.status, status);
        if (word && !strstr(err.message, word))
            fail_msg("%s: message \"%s\" lacks \"%s\"", spec, err.message, word);
    }
    json_decref(o);
}

static void test_valid_specs(void **state)
{
    (void)state;
    check("{\"name\":\"ok1\",\"base\":\"base\"}", 0, NULL);
    check("{\"name\":\"ok2\",\"from\":\"base\",\"steps\":[]}", 0, NULL);
    check("{\"name\":\"ok3\",\"base\":\"base\",\"description\":\"d\",\"vcpus\":2,\"memory_mib\":512,"
          "\"packages\":[],\"start\":\"sleep 9\",\"ready\":null,\"steps\":["
          "{\"run\":\"echo hi\\nexit 0\"},"
          "{\"copy\":{\"dst\":\"/opt/a.bin\",\"content\":\"AAEC/w==\",\"mode\":493,\"owner\":\"user:users\"}},"
          "{\"copy\":{\"dst\":\"rel/b\",\"content\":\"\"}},"
          "{\"env\":{\"A_1\":\"x y\",\"_B\":\"\"}},{\"workdir\":\"/srv/app\"},{\"user\":\"svc.name\"}]}",
          0, NULL);
}

static void test_hostile_specs(void **state)
{
    (void)state;
    static const struct {
        const char *spec, *word;
    } bad[] = {
        {"{\"base\":\"base\"}", "name"},
        {"{\"name\":\"-x\",\"base\":\"base\"}", "name"},
        {"{\"name\":\"x\"}", "base"},
        {"{\"name\":\"x\",\"base\":\"base\",\"from\":\"other\"}", "not both"},
        {"{\"name\":\"x\",\"base\":\"scratch-busybox\"}", "build-template.sh"},
        {"{\"name\":\"x\",\"base\":\"base\",\"zzz\":1}", "zzz"},
        {"{\"name\":\"x\",\"base\":\"base\",\"size_mib\":64}", "size_mib"},
        {"{\"name\":\"x\",\"base\":\"base\",\"packages\":[\"jq\"]}", "packages"},
        {"{\"name\":\"x\",\"base\":\"base\",\"vcpus\":0}", "vcpus"},
        {"{\"name\":\"x\",\"base\":\"base\",\"memory_mib\":\"512\"}", "memory_mib"},
        {"{\"name\":\"x\",\"base\":\"base\",\"ready\":\"\"}", "ready"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":{}}", "steps"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{}]}", "exactly one"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[\"run\"]}", "exactly one"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"shell\":\"ls\"}]}", "unknown step"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"run\":\"a\\u0000b\"}]}", "NUL"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"run\":7}]}", "run"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"copy\":{\"dst\":\"/../x\",\"content\":\"\"}}]}", "'..'"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"copy\":{\"dst\":\"a/..\",\"content\":\"\"}}]}", "'..'"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"copy\":{\"dst\":\"\",\"content\":\"\"}}]}", "dst"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"copy\":{\"dst\":\"/a\\u0001\",\"content\":\"\"}}]}", "control"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"copy\":{\"dst\":\"/a\",\"content\":\"QQ\"}}]}", "base64"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"copy\":{\"dst\":\"/a\",\"content\":\"QQ==\\u0000\"}}]}", "base64"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"copy\":{\"dst\":\"/a\"}}]}", "content"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"copy\":{\"src\":\"f\",\"dst\":\"/a\"}}]}", "content"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"copy\":{\"dst\":\"/a\",\"content\":\"\",\"mode\":4096}}]}", "mode"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"copy\":{\"dst\":\"/a\",\"content\":\"\",\"mode\":1.5}}]}", "mode"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"copy\":{\"dst\":\"/a\",\"content\":\"\",\"owner\":\"a b\"}}]}", "owner"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"copy\":{\"dst\":\"/a\",\"content\":\"\",\"owner\":\"u:\"}}]}", "owner"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"copy\":{\"dst\":\"/a\",\"content\":\"\",\"owner\":"
         "\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}}]}", "owner"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"copy\":\"/a\"}]}", "copy"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"env\":{}}]}", "env"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"env\":{\"A=B\":\"c\"}}]}", "A=B"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"env\":{\"A\":\"c\\nd\"}}]}", "newline"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"env\":{\"A\":\"c\\u0000d\"}}]}", "NUL"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"workdir\":\"srv\"}]}", "absolute"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"workdir\":\"/srv/../..\"}]}", "'..'"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"user\":\"\"}]}", "user"},
        {"{\"name\":\"x\",\"base\":\"base\",\"steps\":[{\"user\":\"root\\n\"}]}", "user"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        check(bad[i].spec, 400, bad[i].word);
    /* too many steps */
    json_t *o = json_pack("{s:s, s:s, s:[]}", "name", "x", "base", "base", "steps");
    for (int i = 0; i < TPL_STEPS_MAX + 1; i++)
        json_array_append_new(json_object_get(o, "steps"), json_pack("{s:s}", "run", "true"));
    struct spaced_err err;
    assert_int_equal(tpl_spec_check(&sp, "ta", o, &err), -1);
    assert_int_equal(err.status, 400);
    json_decref(o);
}

static void test_copy_sizes(void **state)
{
    (void)state;
    size_t n = TPL_COPY_MAX + 1;
    char *b64 = malloc(B64_ENCODED_SIZE(n));
    assert_non_null(b64);
    /* "AAAA" decodes to 3 zero bytes: n+2 rounded up to whole groups is over the limit */
    size_t groups = (n + 2) / 3;
    for (size_t i = 0; i < groups * 4; i++)
        b64[i] = 'A';
    b64[groups * 4] = '\0';
    json_t *o = json_pack("{s:s, s:s, s:[{s:{s:s, s:s}}]}", "name", "x", "base", "base", "steps", "copy",
                          "dst", "/big", "content", b64);
    struct spaced_err err;
    assert_int_equal(tpl_spec_check(&sp, "ta", o, &err), -1);
    assert_string_equal(err.code, "too_large");
    json_decref(o);
    free(b64);
}

static void test_names_across_tenants(void **state)
{
    (void)state;
    add_row("theirs", "tb", "ready");
    add_row("mine", "ta", "ready");
    add_row("oops", "ta", "failed");
    add_row("gone", "tb", "deleted");
    add_row("busy", "ta", "building");
    check("{\"name\":\"base\",\"base\":\"base\"}", 409, "built in");
    check("{\"name\":\"theirs\",\"base\":\"base\"}", 409, "taken");
    check("{\"name\":\"mine\",\"base\":\"base\"}", 409, "taken");
    check("{\"name\":\"busy\",\"base\":\"base\"}", 409, "being built");
    check("{\"name\":\"oops\",\"base\":\"base\"}", 0, NULL);  /* own failed build: rebuilt */
    check("{\"name\":\"gone\",\"base\":\"base\"}", 0, NULL);  /* deleted: free again */
    /* another tenant's template is no base, and looks exactly like a missing one */
    check("{\"name\":\"x\",\"base\":\"theirs\"}", 400, "does not exist");
    check("{\"name\":\"x\",\"base\":\"nope\"}", 400, "does not exist");
    json_t *o = json_pack("{s:s, s:s}", "name", "y", "base", "mine");
    struct spaced_err err;
    assert_int_equal(tpl_spec_check(&sp, "ta", o, &err), 0);
    json_decref(o);

    struct tpl_info t;
    assert_int_equal(tpl_lookup(&sp, "ta", "mine", &t, &err), 0);
    assert_string_equal(t.tenant, "ta");
    assert_false(t.builtin);
    assert_int_equal(tpl_lookup(&sp, "tb", "mine", &t, &err), -1);
    assert_string_equal(err.code, "unknown_template");
    assert_int_equal(tpl_lookup(&sp, NULL, "mine", &t, &err), 0); /* internal: any tenant */
    assert_int_equal(tpl_lookup(&sp, "ta", "oops", &t, &err), -1); /* failed: no image */
    assert_int_equal(tpl_lookup(&sp, "ta", "../base", &t, &err), -1);

    json_t *list = tpl_list_json(&sp, "tb");
    size_t i;
    json_t *e;
    char names[256] = "";
    json_array_foreach(json_object_get(list, "templates"), i, e) {
        strcat(names, json_string_value(json_object_get(e, "name")));
        strcat(names, " ");
    }
    assert_string_equal(names, "base theirs "); /* not ta's, not the deleted one */
    json_decref(list);
    assert_null(tpl_get_json(&sp, "tb", "mine"));
    json_t *g = tpl_get_json(&sp, "ta", "mine");
    assert_non_null(g);
    assert_string_equal(json_string_value(json_object_get(json_object_get(g, "template"), "state")), "ready");
    json_decref(g);
    g = tpl_get_json(&sp, "ta", "base");
    json_t *d = json_object_get(json_object_get(g, "template"), "defaults");
    assert_string_equal(json_string_value(json_object_get(d, "user")), "user");
    json_decref(g);
}

static void test_builtin_pin_survives_rebuild(void **state)
{
    (void)state;
    struct tpl_info t;
    struct spaced_err err;
    assert_int_equal(tpl_lookup(&sp, "ta", "base", &t, &err), 0);
    char want[256];
    snprintf(want, sizeof want, "%s/images/base-1111111111111111.ext4", data);
    assert_string_equal(t.rootfs, want);
    /* a rebuild: new image renamed into place, new build key */
    char img[256], tmp[300], meta[256];
    snprintf(img, sizeof img, "%s/templates/base/rootfs.ext4", guest);
    snprintf(tmp, sizeof tmp, "%s.new", img);
    write_file(tmp, "image two");
    assert_int_equal(rename(tmp, img), 0);
    snprintf(meta, sizeof meta, "%s/templates/base/template.json", guest);
    write_file(meta, "{\"name\":\"base\",\"build_key\":\"2222222222222222bbbb\"}");
    struct tpl_info t2;
    assert_int_equal(tpl_lookup(&sp, "ta", "base", &t2, &err), 0);
    assert_string_not_equal(t2.rootfs, t.rootfs);
    char buf[32] = "";
    FILE *f = fopen(t.rootfs, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    assert_string_equal(buf, "image one"); /* the old pin still has the old contents */
    f = fopen(t2.rootfs, "r");
    assert_non_null(f);
    assert_non_null(fgets(buf, sizeof buf, f));
    fclose(f);
    assert_string_equal(buf, "image two");
}

/* The failed version of template base at shape 1x64 with a NIC: its "failures" count
 * and "retry_in_ms" (the version list operators see), once the loop has run the build to
 * its end; fails the test if no failed version shows within 20 s. */
static void failed_version(json_int_t *failures, json_int_t *retry_in_ms)
{
    for (int i = 0; i < 2000; i++) {
        event_base_loop(sp.base, EVLOOP_NONBLOCK);
        json_t *vs = tpl_get_json(&sp, "ta", "base");
        size_t k;
        json_t *v;
        json_array_foreach(json_object_get(json_object_get(vs, "template"), "versions"), k, v) {
            if (strcmp(json_string_value(json_object_get(v, "state")), "failed") == 0 &&
                strstr(json_string_value(json_object_get(v, "dir")), "1x64-net-")) {
                *failures = json_integer_value(json_object_get(v, "failures"));
                *retry_in_ms = json_integer_value(json_object_get(v, "retry_in_ms"));
                json_decref(vs);
                return;
            }
        }
        json_decref(vs);
        usleep(10000);
    }
    fail_msg("the snapshot build did not fail");
}

/* A snapshot build that failed is built again once its backoff has passed (not on every
 * create before it, and with a doubled wait after a second failure). The build fails
 * here for want of networking: a NIC is asked and this registry has no network. */
static void test_failed_snapshot_is_retried_after_backoff(void **state)
{
    (void)state;
    struct tpl_info t;
    struct spaced_err err;
    assert_int_equal(tpl_lookup(&sp, "ta", "base", &t, &err), 0);
    tpl_set_snapshot_retry(&sp, 300);
    char snap[512], ov[512];
    json_int_t failures = 0, retry = 0;
    assert_false(tpl_snapshot(&sp, &t, 1, 64, true, snap, sizeof snap, ov, sizeof ov));
    failed_version(&failures, &retry);
    assert_int_equal(failures, 1);
    assert_true(retry > 0 && retry <= 300);
    assert_false(tpl_snapshot(&sp, &t, 1, 64, true, snap, sizeof snap, ov, sizeof ov));
    failed_version(&failures, &retry);
    assert_int_equal(failures, 1); /* within the backoff: not built again */
    usleep(350 * 1000);
    assert_false(tpl_snapshot(&sp, &t, 1, 64, true, snap, sizeof snap, ov, sizeof ov));
    failed_version(&failures, &retry);
    assert_int_equal(failures, 2);
    assert_true(retry > 300 && retry <= 600);
    tpl_set_snapshot_retry(&sp, 30000);
}

/* The template module asks the sandbox module what its sandboxes use: a template one
 * names cannot be deleted, and the sweep keeps a pinned image a disk chain names until
 * the sandbox is gone (tpl_user_gone schedules it). */
static void test_sandbox_users(void **state)
{
    (void)state;
    add_row("used", "ta", "ready");
    users[0].tpl = "used";
    users[0].layer[0] = '\0'; /* a create that has not written its chain yet */
    nusers = 1;
    json_t *out = NULL;
    struct spaced_err err;
    assert_int_equal(tpl_delete(&sp, "ta", "used", &out, &err), -1);
    assert_string_equal(err.code, "template_in_use");
    assert_non_null(strstr(err.message, "1 sandbox"));
    assert_null(out);

    /* Old pins (not current, no version names them): one a chain names is kept, one
     * nothing names is swept. */
    char dir[256], old[300], unused[300];
    snprintf(dir, sizeof dir, "%s/images", data);
    mkdir(dir, 0700);
    snprintf(old, sizeof old, "%s/base-3333333333333333.ext4", dir);
    snprintf(unused, sizeof unused, "%s/base-4444444444444444.ext4", dir);
    write_file(old, "old image");
    write_file(unused, "older image");
    users[0].tpl = "base";
    snprintf(users[0].layer, sizeof users[0].layer, "%s", old);
    tpl_user_gone(&sp); /* some other sandbox went */
    event_base_loop(sp.base, EVLOOP_NONBLOCK); /* the sweep: a timer due now */
    assert_int_equal(access(unused, F_OK), -1);
    assert_int_equal(access(old, F_OK), 0);

    nusers = 0; /* its last user is deleted */
    tpl_user_gone(&sp);
    event_base_loop(sp.base, EVLOOP_NONBLOCK);
    assert_int_equal(access(old, F_OK), -1);
    struct tpl_info t;
    assert_int_equal(tpl_lookup(&sp, "ta", "base", &t, &err), 0);
    assert_int_equal(access(t.rootfs, F_OK), 0); /* the current pin stays */
    assert_int_equal(tpl_delete(&sp, "ta", "used", &out, &err), 0);
    json_decref(out);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid_specs),
        cmocka_unit_test(test_hostile_specs),
        cmocka_unit_test(test_copy_sizes),
        cmocka_unit_test(test_names_across_tenants),
        cmocka_unit_test(test_builtin_pin_survives_rebuild),
        cmocka_unit_test(test_sandbox_users),
        cmocka_unit_test(test_failed_snapshot_is_retried_after_backoff),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
