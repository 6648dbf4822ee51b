/* libFuzzer target: every validator of the sessions and files routes (sess_req.h) on
 * arbitrary bytes. The first byte picks the validator, the rest is the body or query
 * text. Whatever the input, a validator must either accept it and build an agent request
 * that serialises within the agent's limit, or reject it with a 4xx and a message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/session/sess_req.h"

static void check_err(const struct spaced_err *e)
{
    if (e->status < 400 || e->status > 499 || !e->code[0] || !e->message[0])
        abort();
}

static void check_request(json_t *r)
{
    char *s = json_dumps(r, JSON_COMPACT);
    if (!s || strlen(s) > SESS_EXEC_JSON_MAX + 64 || !json_is_string(json_object_get(r, "op")))
        abort();
    free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    char *text = malloc(len + 1); /* NUL-terminated copy for the query validators */
    if (!text)
        return 0;
    memcpy(text, body, len);
    text[len] = '\0';
    struct spaced_err e = {0};
    switch (data[0] % 9) {
    case 0: {
        struct sess_spec spec;
        if (sess_req_create(body, len, &spec, &e) == 0) {
            check_request(spec.exec);
            if (spec.timeout_s < 0 || spec.token_ttl_s < 1)
                abort();
            sess_spec_clear(&spec);
        } else {
            check_err(&e);
        }
        break;
    }
    case 1: {
        int sig = 0;
        if (sess_req_signal(body, len, &sig, &e) == 0 ? (sig < 1 || sig > 64) : (check_err(&e), 0))
            abort();
        break;
    }
    case 2: {
        unsigned r = 0, c = 0;
        if (sess_req_resize(body, len, &r, &c, &e) == 0
                ? (r < 1 || c < 1 || r > SESS_PTY_MAX || c > SESS_PTY_MAX)
                : (check_err(&e), 0))
            abort();
        break;
    }
    case 3:
    case 4: {
        json_t *r = data[0] % 9 == 3 ? sess_req_mkdir(body, len, &e) : sess_req_rename(body, len, &e);
        if (r)
            check_request(r);
        else
            check_err(&e);
        json_decref(r);
        break;
    }
    case 5:
        if (sess_req_path(text, "path", &e) < 0)
            check_err(&e);
        else if (strlen(text) == 0 || strlen(text) > SESS_PATH_MAX)
            abort();
        break;
    case 6: {
        int64_t v = -5;
        if (sess_req_uint(text, "depth", 1, SESS_LIST_DEPTH_MAX, &v, &e) < 0)
            check_err(&e);
        else if (v < 1 || v > SESS_LIST_DEPTH_MAX)
            abort();
        break;
    }
    case 7: {
        int mode = -1;
        bool b = false;
        if (sess_req_mode(text, &mode, &e) < 0)
            check_err(&e);
        else if (mode < 0 || mode > 07777)
            abort();
        if (sess_req_bool(text, "recursive", &b, &e) < 0)
            check_err(&e);
        break;
    }
    default:
        if (sess_req_user(text, &e) < 0)
            check_err(&e);
        break;
    }
    free(text);
    return 0;
}
