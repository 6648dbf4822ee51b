/* Unit tests for auth: the first-start admin key (file mode, idempotent), key checks
 * (malformed, unknown, revoked, expired), hashing at rest, and scoped signed tokens. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cmocka.h>

#include "daemon/auth/auth.h"
#include "daemon/spaced.h"

static char dir[64];
static struct store *st;
static struct auth *au;

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/test_auth.XXXXXX");
    if (!mkdtemp(dir))
        return -1;
    char db[128], err[256];
    snprintf(db, sizeof db, "%s/space.db", dir);
    st = store_open(db, err, sizeof err);
    au = st ? auth_new(st, dir, err, sizeof err) : NULL;
    return au ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    auth_free(au);
    store_close(st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static void read_admin_key(char *out, size_t cap)
{
    char path[128];
    snprintf(path, sizeof path, "%s/admin.key", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(out, (int)cap, f));
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

static void test_admin_key_first_start(void **state)
{
    (void)state;
    char key[128];
    read_admin_key(key, sizeof key);
    assert_int_equal(strlen(key), AUTH_SECRET_LEN);
    char path[128];
    snprintf(path, sizeof path, "%s/admin.key", dir);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    struct auth_principal who;
    char why[160];
    assert_int_equal(auth_check_key(au, key, &who, why, sizeof why), 0);
    assert_true(who.admin);
    assert_string_equal(who.tenant, AUTH_ADMIN_TENANT);
    /* a second start keeps the same key */
    char err[256];
    struct auth *again = auth_new(st, dir, err, sizeof err);
    assert_non_null(again);
    char key2[128];
    read_admin_key(key2, sizeof key2);
    assert_string_equal(key, key2);
    auth_free(again);
    /* the store holds a hash, never the secret */
    struct store_key k;
    assert_int_equal(store_key_get(st, who.key_id, &k), 0);
    assert_null(strstr(k.hash, key + strlen(AUTH_SECRET_PREFIX)));
    char h[65];
    auth_hash_secret(key, h);
    assert_string_equal(h, k.hash);
}

static void test_key_checks(void **state)
{
    (void)state;
    struct store_key k;
    char secret[AUTH_SECRET_LEN + 1], err[256], why[160];
    struct auth_principal who;
    assert_int_equal(auth_key_create(au, "team", false, 0, &k, secret, err, sizeof err), 0);
    assert_int_equal(auth_check_key(au, secret, &who, why, sizeof why), 0);
    assert_false(who.admin);
    assert_string_not_equal(who.tenant, AUTH_ADMIN_TENANT);
    /* same tenant name -> same tenant id */
    struct store_key k2;
    char s2[AUTH_SECRET_LEN + 1];
    assert_int_equal(auth_key_create(au, "team", false, 0, &k2, s2, err, sizeof err), 0);
    assert_string_equal(k.tenant, k2.tenant);
    assert_string_not_equal(secret, s2);

    assert_int_equal(auth_check_key(au, "nope", &who, why, sizeof why), -1);
    assert_non_null(strstr(why, "malformed"));
    assert_int_equal(auth_check_key(au, NULL, &who, why, sizeof why), -1);
    char forged[AUTH_SECRET_LEN + 1];
    memcpy(forged, secret, sizeof forged);
    forged[10] = forged[10] == 'a' ? 'b' : 'a';
    assert_int_equal(auth_check_key(au, forged, &who, why, sizeof why), -1);
    assert_non_null(strstr(why, "unknown"));

    assert_int_equal(store_key_revoke(st, k.id, spaced_now_ms()), 0);
    assert_int_equal(auth_check_key(au, secret, &who, why, sizeof why), -1);
    assert_non_null(strstr(why, "revoked"));

    /* a ttl sets an expiry; a key whose expiry has passed is refused */
    struct store_key k3;
    char s3[AUTH_SECRET_LEN + 1];
    assert_int_equal(auth_key_create(au, "team", false, 3600, &k3, s3, err, sizeof err), 0);
    assert_int_equal(auth_check_key(au, s3, &who, why, sizeof why), 0);
    assert_true(k3.expires_ms > spaced_now_ms());
    const char *old = "space_0123456789abcdef0123456789abcdef0123456789abcdef";
    struct store_key k4 = {.id = "akexpired", .prefix = "space_0123", .created_ms = 1, .expires_ms = 2};
    snprintf(k4.tenant, sizeof k4.tenant, "%s", k.tenant);
    auth_hash_secret(old, k4.hash);
    assert_int_equal(store_key_put(st, &k4), 0);
    assert_int_equal(auth_check_key(au, old, &who, why, sizeof why), -1);
    assert_non_null(strstr(why, "expired"));
}

static void test_tokens(void **state)
{
    (void)state;
    char tok[AUTH_TOKEN_MAX];
    int64_t now = spaced_now_ms();
    assert_int_equal(auth_token_mint(au, "session:sb1:ss1", now + 60000, tok, sizeof tok), 0);
    assert_true(auth_token_verify(au, "session:sb1:ss1", tok, now));
    assert_false(auth_token_verify(au, "session:sb1:ss2", tok, now));   /* other session */
    assert_false(auth_token_verify(au, "session:sb2:ss1", tok, now));   /* other sandbox */
    assert_false(auth_token_verify(au, "session:sb1:ss1", tok, now + 60001)); /* expired */
    char bad[AUTH_TOKEN_MAX];
    snprintf(bad, sizeof bad, "%s", tok);
    bad[strlen(bad) - 1] ^= 1;
    assert_false(auth_token_verify(au, "session:sb1:ss1", bad, now));
    /* a longer expiry with the old MAC must fail */
    char *dot = strchr(tok, '.');
    char ext[AUTH_TOKEN_MAX];
    snprintf(ext, sizeof ext, "%lld%s", (long long)(now + 999999), dot);
    assert_false(auth_token_verify(au, "session:sb1:ss1", ext, now));
    assert_false(auth_token_verify(au, "session:sb1:ss1", "", now));
    assert_false(auth_token_verify(au, "session:sb1:ss1", "123", now));
    assert_false(auth_token_verify(au, "session:sb1:ss1", NULL, now));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_admin_key_first_start, setup, teardown),
        cmocka_unit_test_setup_teardown(test_key_checks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tokens, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
