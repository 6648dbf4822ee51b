/* req.c: request field getters and path normalisation; see req.h. */
#include "agent/req.h"
#include "agent/resolve.h"

#include <errno.h>
#include <string.h>

int agent_req_str(struct agent_chan *ch, json_t *req, const char *key, bool required,
                  const char *def, const char **out)
{
    json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v)) {
        if (required) {
            agent_chan_error(ch, FRAME_E_INVALID_ARGUMENT, "missing field \"%s\"", key);
            return -1;
        }
        *out = def;
        return 0;
    }
    if (!json_is_string(v)) {
        agent_chan_error(ch, FRAME_E_INVALID_ARGUMENT, "field \"%s\" must be a string", key);
        return -1;
    }
    if (strlen(json_string_value(v)) != json_string_length(v)) {
        agent_chan_error(ch, FRAME_E_INVALID_ARGUMENT, "field \"%s\" contains a NUL byte", key);
        return -1;
    }
    *out = json_string_value(v);
    return 0;
}

int agent_req_int(struct agent_chan *ch, json_t *req, const char *key, long long min,
                  long long max, long long def, long long *out)
{
    json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
        agent_chan_error(ch, FRAME_E_INVALID_ARGUMENT, "field \"%s\" must be an integer in %lld..%lld",
                         key, min, max);
        return -1;
    }
    *out = json_integer_value(v);
    return 0;
}

int agent_req_bool(struct agent_chan *ch, json_t *req, const char *key, bool def, bool *out)
{
    json_t *v = json_object_get(req, key);
    if (!v || json_is_null(v)) {
        *out = def;
        return 0;
    }
    if (!json_is_boolean(v)) {
        agent_chan_error(ch, FRAME_E_INVALID_ARGUMENT, "field \"%s\" must be a boolean", key);
        return -1;
    }
    *out = json_is_true(v);
    return 0;
}

int agent_req_user(struct agent_chan *ch, json_t *req, struct agent_user *u)
{
    const char *name;
    if (agent_req_str(ch, req, "user", false, agent_user_default(), &name) < 0)
        return -1;
    if (agent_user_lookup(name, u) < 0) {
        if (errno == ENOENT)
            agent_chan_error(ch, FRAME_E_NOT_FOUND, "unknown user \"%.64s\"", name);
        else
            agent_chan_errno(ch, errno, "reading /etc/passwd");
        return -1;
    }
    return 0;
}

int agent_path_resolve(const char *in, const char *home, char *out, size_t cap,
                       const char **why)
{
    if (!in[0]) {
        *why = "empty path";
        return -1;
    }
    size_t o = 0;
    /* Build "home/in" or "in" then walk components, keeping a stack in `out`. */
    const char *parts[2] = {in[0] == '/' ? NULL : home, in};
    out[o++] = '/';
    for (int k = 0; k < 2; k++) {
        const char *p = parts[k];
        while (p && *p) {
            while (*p == '/')
                p++;
            size_t len = strcspn(p, "/");
            if (len == 0)
                break;
            if (len == 1 && p[0] == '.') {
                /* nothing */
            } else if (len == 2 && p[0] == '.' && p[1] == '.') {
                if (o == 1) {
                    *why = "path goes above /";
                    return -1;
                }
                o--;
                while (o > 1 && out[o - 1] != '/')
                    o--;
                if (o > 1)
                    o--;
            } else {
                if (o + (o > 1) + len + 1 > cap) {
                    *why = "path too long";
                    return -1;
                }
                if (o > 1)
                    out[o++] = '/';
                memcpy(out + o, p, len);
                o += len;
            }
            p += len;
        }
    }
    out[o] = '\0';
    return 0;
}

int agent_req_path_any(struct agent_chan *ch, json_t *req, const char *key,
                       const struct agent_user *u, char *out)
{
    const char *in, *why;
    if (agent_req_str(ch, req, key, true, NULL, &in) < 0)
        return -1;
    if (strlen(in) >= PATH_MAX || agent_path_resolve(in, u->home, out, PATH_MAX, &why) < 0) {
        agent_chan_error(ch, FRAME_E_INVALID_ARGUMENT, "%s \"%.200s\": %s", key, in,
                         strlen(in) >= PATH_MAX ? "path too long" : why);
        return -1;
    }
    return 0;
}

int agent_req_path(struct agent_chan *ch, json_t *req, const char *key,
                   const struct agent_user *u, bool follow_last, char *shown, char *out)
{
    char buf[PATH_MAX], *lexical = shown ? shown : buf;
    if (agent_req_path_any(ch, req, key, u, lexical) < 0)
        return -1;
    if (agent_resolve(lexical, follow_last, out) == 0)
        return 0;
    if (errno == EXDEV)
        agent_chan_error(ch, FRAME_E_INVALID_ARGUMENT, "%s \"%.200s\": inside a volume mount, or "
                         "leads into one (use the volume files API, or a command in the sandbox)",
                         key, lexical);
    else
        agent_chan_errno(ch, errno, lexical);
    return -1;
}
