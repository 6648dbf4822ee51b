/* test_console: the shape of asset paths the web console serves (console_path_ok): what
 * is accepted and its Content-Type, and every way out of the asset directory refused
 * (.., dot files, empty segments, separators other than '/', unknown extensions, length).
 * The HTTP side (decoding, symlinks, headers) is tests/e2e/test_console.py. */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <cmocka.h>

#include <string.h>

#include "daemon/console/console.h"

static void test_accepted(void **state)
{
    static const struct {
        const char *path, *type;
    } ok[] = {
        {"index.html", "text/html; charset=utf-8"},
        {"app.js", "text/javascript; charset=utf-8"},
        {"vendor/xterm.mjs", "text/javascript; charset=utf-8"},
        {"vendor/xterm.css", "text/css; charset=utf-8"},
        {"favicon.svg", "image/svg+xml"},
        {"console/shot-1.png", "image/png"},
        {"vendor/LICENSE-xterm.txt", "text/plain; charset=utf-8"},
        {"a.b.c_d-e.js", "text/javascript; charset=utf-8"},
    };
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) {
        const char *type = NULL;
        assert_true(console_path_ok(ok[i].path, &type));
        assert_string_equal(type, ok[i].type);
    }
}

static void test_refused(void **state)
{
    static const char *const bad[] = {
        "", "/", "/app.js", "../app.js", "..", "vendor/../app.js", "vendor/..", "./app.js",
        "vendor/./app.js", ".hidden.js", "vendor/.x.js", "a//b.js", "vendor/", "app.js/",
        "a\\b.js", "..\\app.js", "a b.js", "a%2fb.js", "app.js?x", "app.php", "app", "app.",
        "vendor", ".js", "app.JS", "app.js\n", "\xc3\xa9.js",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *type = NULL;
        if (console_path_ok(bad[i], &type))
            fail_msg("accepted: \"%s\"", bad[i]);
    }
}

static void test_length(void **state)
{
    char p[CONSOLE_PATH_MAX + 2];
    const char *type;
    memset(p, 'a', sizeof p);
    memcpy(p + CONSOLE_PATH_MAX - 3, ".js", 4); /* exactly CONSOLE_PATH_MAX bytes */
    assert_true(console_path_ok(p, &type));
    memset(p, 'a', sizeof p);
    memcpy(p + CONSOLE_PATH_MAX - 2, ".js", 4); /* one more */
    assert_false(console_path_ok(p, &type));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_accepted),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_length),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
