/* Tests of `space template build -f FILE`'s parser (cli_spacefile.c): every instruction
 * becomes the spec step spaced expects, COPY reads files and directories beside the
 * file (in name order, modes kept), and every refusal names its line. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/cli_spacefile.h"

static char root[64];

static void put(const char *rel, const char *text, mode_t mode)
{
    char p[256];
    snprintf(p, sizeof p, "%s/%s", root, rel);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    chmod(p, mode);
}

static int setup(void **state)
{
    (void)state;
    snprintf(root, sizeof root, "/tmp/spacefile-XXXXXX");
    if (!mkdtemp(root))
        return -1;
    char p[256];
    snprintf(p, sizeof p, "%s/app", root);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/app/sub", root);
    mkdir(p, 0755);
    put("run.sh", "#!/bin/sh\necho hi\n", 0755);
    put("app/b.txt", "bee", 0644);
    put("app/a.txt", "ay", 0600);
    put("app/sub/c.txt", "sea", 0644);
    snprintf(p, sizeof p, "%s/link", root);
    return symlink("/etc/passwd", p);
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    return system(cmd) == 0 ? 0 : -1;
}

/* Parses `text` written as <root>/Spacefile; NULL with err filled on a refusal. */
static json_t *parse(const char *text, char *err, size_t errlen)
{
    put("Spacefile", text, 0644);
    char p[256];
    snprintf(p, sizeof p, "%s/Spacefile", root);
    return cli_spacefile_parse(p, "mytpl", err, errlen);
}

static void test_every_instruction(void **state)
{
    (void)state;
    char err[512] = "";
    json_t *spec = parse("# a template\r\n"
                         "FROM python\r\n"
                         "\n"
                         "RUN apt-get -v && \\\n"
                         "    echo two lines\n"
                         "ENV A=1 B=\"two words\" C='x y'\n"
                         "ENV GREETING hello there\n"
                         "WORKDIR /srv\n"
                         "USER user\n"
                         "COPY run.sh /usr/local/bin/run\n"
                         "COPY --chmod=0700 --chown=user:user app/ /opt/app/\n"
                         "START /usr/local/bin/run\n"
                         "READY test -e /tmp/up\n",
                         err, sizeof err);
    if (!spec)
        fail_msg("refused: %s", err);
    char *got = json_dumps(spec, JSON_COMPACT | JSON_SORT_KEYS);
    const char *want =
        "{\"base\":\"python\",\"name\":\"mytpl\",\"ready\":\"test -e /tmp/up\","
        "\"start\":\"/usr/local/bin/run\",\"steps\":["
        "{\"run\":\"apt-get -v &&     echo two lines\"},"
        "{\"env\":{\"A\":\"1\",\"B\":\"two words\",\"C\":\"x y\"}},"
        "{\"env\":{\"GREETING\":\"hello there\"}},"
        "{\"workdir\":\"/srv\"},{\"user\":\"user\"},"
        "{\"copy\":{\"content\":\"IyEvYmluL3NoCmVjaG8gaGkK\",\"dst\":\"/usr/local/bin/run\",\"mode\":493}},"
        "{\"copy\":{\"content\":\"YXk=\",\"dst\":\"/opt/app/a.txt\",\"mode\":448,\"owner\":\"user:user\"}},"
        "{\"copy\":{\"content\":\"YmVl\",\"dst\":\"/opt/app/b.txt\",\"mode\":448,\"owner\":\"user:user\"}},"
        "{\"copy\":{\"content\":\"c2Vh\",\"dst\":\"/opt/app/sub/c.txt\",\"mode\":448,\"owner\":\"user:user\"}}]}";
    assert_string_equal(got, want);
    free(got);
    json_decref(spec);
    /* Without --chmod a file keeps its own mode; several sources into a directory. */
    spec = parse("FROM base\nCOPY app/a.txt app/b.txt /d/\n", err, sizeof err);
    assert_non_null(spec);
    json_t *steps = json_object_get(spec, "steps");
    assert_int_equal(json_array_size(steps), 2);
    json_t *c0 = json_object_get(json_array_get(steps, 0), "copy");
    assert_string_equal(json_string_value(json_object_get(c0, "dst")), "/d/a.txt");
    assert_int_equal(json_integer_value(json_object_get(c0, "mode")), 0600);
    json_decref(spec);
}

static void refused(const char *text, const char *word)
{
    char err[512] = "";
    json_t *spec = parse(text, err, sizeof err);
    if (spec)
        fail_msg("accepted: %s", text);
    if (!strstr(err, word))
        fail_msg("%s: message \"%s\" lacks \"%s\"", text, err, word);
}

static void test_refusals_name_the_line(void **state)
{
    (void)state;
    refused("RUN true\n", "line 1: the first instruction must be FROM");
    refused("# only a comment\n", "no FROM");
    refused("FROM base\nFROM python\n", "line 2: FROM comes once");
    refused("FROM a b\n", "FROM wants one template name");
    refused("FROM base\n\nCMD [\"sh\"]\n", "line 3: CMD is not supported");
    refused("FROM base\nENTRYPOINT x\n", "ENTRYPOINT is not supported");
    refused("FROM base\nADD http://x/y /y\n", "ADD is not supported");
    refused("FROM base\nEXPOSE 80\n", "line 2: unknown instruction EXPOSE");
    refused("FROM base\nRUN [\"true\"]\n", "exec form");
    refused("FROM base\nRUN\n", "RUN wants an argument");
    refused("FROM base\nENV 1A=x\n", "is not KEY=VALUE");
    refused("FROM base\nENV A=\"open\n", "quote is not closed");
    refused("FROM base\nENV A\n", "ENV wants");
    refused("FROM base\nCOPY ../etc/passwd /x\n", "without ..");
    refused("FROM base\nCOPY app/../run.sh /x\n", "without ..");
    refused("FROM base\nCOPY /etc/passwd /x\n", "relative to the file's directory");
    refused("FROM base\nCOPY link /x\n", "only regular files and directories");
    refused("FROM base\nCOPY missing /x\n", "No such file");
    refused("FROM base\nCOPY app /opt/app\n", "DST must end in /");
    refused("FROM base\nCOPY run.sh app/a.txt /d\n", "DST must end in /");
    refused("FROM base\nCOPY --chmod=999 run.sh /x\n", "octal mode");
    refused("FROM base\nCOPY --mode=1 run.sh /x\n", "unknown option");
    refused("FROM base\nCOPY run.sh\n", "COPY wants SRC... DST");
    refused("FROM base\nSTART a\nSTART b\n", "line 3: START comes once");
    /* A continued instruction is reported at its first line. */
    refused("FROM base\nBOGUS a \\\n b\n", "line 2: unknown instruction BOGUS");
}

static void test_bad_files(void **state)
{
    (void)state;
    char err[512] = "";
    char p[256];
    assert_null(cli_spacefile_parse("/nonexistent/Spacefile", "t", err, sizeof err));
    assert_non_null(strstr(err, "No such file"));
    snprintf(p, sizeof p, "%s/app", root);
    assert_null(cli_spacefile_parse(p, "t", err, sizeof err));
    assert_non_null(strstr(err, "not a regular file"));
    snprintf(p, sizeof p, "%s/nul", root);
    FILE *f = fopen(p, "w");
    assert_non_null(f);
    fwrite("FROM base\n\0RUN x\n", 1, 17, f);
    fclose(f);
    assert_null(cli_spacefile_parse(p, "t", err, sizeof err));
    assert_non_null(strstr(err, "NUL"));
    snprintf(p, sizeof p, "%s/big", root);
    f = fopen(p, "w");
    assert_non_null(f);
    for (int i = 0; i < SPACEFILE_MAX / 8 + 1; i++)
        fputs("# pad  \n", f);
    fclose(f);
    assert_null(cli_spacefile_parse(p, "t", err, sizeof err));
    assert_non_null(strstr(err, "too large"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_instruction),
        cmocka_unit_test(test_refusals_name_the_line),
        cmocka_unit_test(test_bad_files),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
