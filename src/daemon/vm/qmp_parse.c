/* qmp_parse: turns one QMP monitor line into a checked struct qmp_msg.
 *
 * Kept free of I/O so the fuzzer (tests/fuzz/fuzz_qmp.c) drives exactly the code that
 * sees monitor bytes. Shape checks are strict: a line is accepted only if it is one of
 * the four message kinds QMP defines, with the member types QMP documents. */
#include "qmp.h"

#include <stdio.h>
#include <string.h>

static int fail(char *err, size_t errlen, const char *why)
{
    if (errlen)
        snprintf(err, errlen, "%s", why);
    return -1;
}

/* Replies carry the id we sent: always a JSON integer we chose, so anything else
 * (missing, negative, string) simply matches no pending command. */
static void parse_id(json_t *root, struct qmp_msg *m)
{
    json_t *id = json_object_get(root, "id");
    if (json_is_integer(id) && json_integer_value(id) >= 0) {
        m->has_id = 1;
        m->id = (uint64_t)json_integer_value(id);
    }
}

static int parse_shape(json_t *root, struct qmp_msg *m, char *err, size_t errlen)
{
    json_t *v;

    if ((v = json_object_get(root, "QMP")) != NULL) {
        if (!json_is_object(v))
            return fail(err, errlen, "greeting: QMP is not an object");
        m->kind = QMP_MSG_GREETING;
        return 0;
    }
    if ((v = json_object_get(root, "return")) != NULL) {
        m->kind = QMP_MSG_RETURN;
        m->ret = v;
        parse_id(root, m);
        return 0;
    }
    if ((v = json_object_get(root, "error")) != NULL) {
        json_t *cls = json_object_get(v, "class"), *desc = json_object_get(v, "desc");
        if (!json_is_object(v) || !json_is_string(cls) || !json_is_string(desc))
            return fail(err, errlen, "error reply without string class/desc");
        m->kind = QMP_MSG_ERROR;
        m->err_class = json_string_value(cls);
        m->err_desc = json_string_value(desc);
        parse_id(root, m);
        return 0;
    }
    if ((v = json_object_get(root, "event")) != NULL) {
        json_t *data = json_object_get(root, "data");
        if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > 64)
            return fail(err, errlen, "event name is not a short string");
        if (data && !json_is_object(data))
            return fail(err, errlen, "event data is not an object");
        m->kind = QMP_MSG_EVENT;
        m->event = json_string_value(v);
        m->data = data;
        return 0;
    }
    return fail(err, errlen, "unknown QMP message shape");
}

int qmp_parse(const char *line, size_t len, struct qmp_msg *m, char *err, size_t errlen)
{
    json_error_t jerr;

    memset(m, 0, sizeof(*m));
    if (len > QMP_LINE_MAX)
        return fail(err, errlen, "line too long");
    /* JSON_REJECT_DUPLICATES: a duplicated key could make two readers of one line
     * disagree about its meaning. */
    json_t *root = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_DISABLE_EOF_CHECK,
                              &jerr);
    if (!root)
        return fail(err, errlen, "not JSON");
    /* DISABLE_EOF_CHECK lets a trailing \r pass; anything else after the value is not
     * one message per line. */
    for (size_t i = jerr.position; i < len; i++) {
        if (line[i] != '\r' && line[i] != ' ' && line[i] != '\t') {
            json_decref(root);
            return fail(err, errlen, "trailing bytes after JSON value");
        }
    }
    if (!json_is_object(root)) {
        json_decref(root);
        return fail(err, errlen, "not a JSON object");
    }
    if (parse_shape(root, m, err, errlen) < 0) {
        json_decref(root);
        memset(m, 0, sizeof(*m));
        return -1;
    }
    m->root = root;
    return 0;
}

void qmp_msg_clear(struct qmp_msg *m)
{
    json_decref(m->root);
    memset(m, 0, sizeof(*m));
}
