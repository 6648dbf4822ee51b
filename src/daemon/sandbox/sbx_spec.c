/* sbx_spec.c: parsing and validating a sandbox create request (untrusted API input).
 * Everything a client sends is checked here before it reaches the store or a VM:
 * types, ranges, sizes, name shapes, and unknown fields (rejected, so typos surface). */
#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "sbx.h"
#include "daemon/net/net.h"

void sbx_spec_clear(struct sbx_spec *s)
{
    free(s->env_json);
    free(s->metadata_json);
    free(s->network_json);
    free(s->volumes_json);
    memset(s, 0, sizeof *s);
}

bool sbx_id_valid(const char *id)
{
    if (!id || strlen(id) != SBX_ID_LEN || id[0] != 's' || id[1] != 'b')
        return false;
    for (const char *p = id + 2; *p; p++)
        if (!isdigit((unsigned char)*p) && !(*p >= 'a' && *p <= 'f'))
            return false;
    return true;
}

static bool env_name_ok(const char *k)
{
    if (!(isalpha((unsigned char)k[0]) || k[0] == '_'))
        return false;
    for (const char *p = k; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '_'))
            return false;
    return strlen(k) <= 256;
}

/* Checks an object of string values; returns a new compact JSON text or NULL + err. */
static char *string_map(json_t *v, const char *field, unsigned max_pairs, size_t key_max,
                        size_t val_max, bool env_names, struct spaced_err *err)
{
    if (!json_is_object(v)) {
        spaced_err_set(err, 400, "invalid_request", "%s must be an object of strings", field);
        return NULL;
    }
    if (json_object_size(v) > max_pairs) {
        spaced_err_set(err, 400, "invalid_request", "%s has more than %u entries", field, max_pairs);
        return NULL;
    }
    const char *k;
    json_t *x;
    json_object_foreach(v, k, x) {
        if (strlen(k) == 0 || strlen(k) > key_max || (env_names && !env_name_ok(k))) {
            spaced_err_set(err, 400, "invalid_request", "%s: invalid name \"%.64s\"", field, k);
            return NULL;
        }
        if (!json_is_string(x) || json_string_length(x) > val_max ||
            strlen(json_string_value(x)) != json_string_length(x)) {
            spaced_err_set(err, 400, "invalid_request",
                           "%s.%.64s must be a string without NUL of at most %zu bytes", field, k,
                           val_max);
            return NULL;
        }
    }
    char *s = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS);
    if (!s)
        spaced_err_set(err, 500, "internal", "out of memory");
    return s;
}

/* "ports": {"public": bool} (absent: public). Only that key, so a typo is not a
 * silently public sandbox. */
static int ports_option(json_t *v, bool *private_ports, struct spaced_err *err)
{
    *private_ports = false;
    if (!v)
        return 0;
    json_t *pub = json_is_object(v) ? json_object_get(v, "public") : NULL;
    if (!json_is_boolean(pub) || json_object_size(v) != 1)
        return spaced_err_set(err, 400, "invalid_request",
                              "ports must be {\"public\": true|false}");
    *private_ports = json_is_false(pub);
    return 0;
}

/* The policy checked and in canonical form by the network module (net_policy_check:
 * the same rules the live PUT accepts), as compact JSON. */
static char *network_policy(json_t *v, struct spaced_err *err)
{
    json_t *p = net_policy_check(v, err);
    if (!p)
        return NULL;
    char *s = json_dumps(p, JSON_COMPACT | JSON_SORT_KEYS);
    json_decref(p);
    if (!s)
        spaced_err_set(err, 500, "internal", "out of memory");
    return s;
}

static int int_field(json_t *body, const char *name, long long lo, long long hi,
                     long long *out, struct spaced_err *err)
{
    json_t *v = json_object_get(body, name);
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return spaced_err_set(err, 400, "invalid_request", "%s must be an integer in %lld..%lld",
                              name, lo, hi);
    *out = json_integer_value(v);
    return 0;
}

static int spec_from_json(json_t *body, struct sbx_spec *out, struct spaced_err *err)
{
    static const char *const known[] = {"template", "vcpus", "memory_mib", "env", "metadata",
                                        "timeout", "on_timeout", "network", "ports", "auto_resume",
                                        "volumes", NULL};
    const char *k;
    json_t *v;
    json_object_foreach(body, k, v) {
        int i = 0;
        while (known[i] && strcmp(known[i], k) != 0)
            i++;
        if (!known[i])
            return spaced_err_set(err, 400, "unknown_field", "\"%.64s\" is not a known field", k);
    }
    v = json_object_get(body, "template");
    const char *tpl = v ? json_string_value(v) : "base";
    if (!tpl || strlen(tpl) == 0 || strlen(tpl) >= sizeof out->template_name)
        return spaced_err_set(err, 400, "invalid_request",
                              "template must be a non-empty string of at most %zu bytes",
                              sizeof out->template_name - 1);
    snprintf(out->template_name, sizeof out->template_name, "%s", tpl);

    long long vcpus = 0, mem = 0, timeout = SBX_TIMEOUT_DEFAULT_S; /* 0: the template's */
    if (int_field(body, "vcpus", 1, SBX_VCPUS_MAX, &vcpus, err) < 0 ||
        int_field(body, "memory_mib", SBX_MEM_MIN_MIB, SBX_MEM_MAX_MIB, &mem, err) < 0 ||
        int_field(body, "timeout", 0, SBX_TIMEOUT_MAX_S, &timeout, err) < 0)
        return -1;
    out->vcpus = (unsigned)vcpus;
    out->memory_mib = (unsigned)mem;
    out->timeout_s = timeout;

    v = json_object_get(body, "on_timeout");
    const char *ot = v ? json_string_value(v) : "suspend";
    if (!ot || (strcmp(ot, "suspend") != 0 && strcmp(ot, "delete") != 0))
        return spaced_err_set(err, 400, "invalid_request",
                              "on_timeout must be \"suspend\" or \"delete\"");
    snprintf(out->on_timeout, sizeof out->on_timeout, "%s", ot);
    if (ports_option(json_object_get(body, "ports"), &out->private_ports, err) < 0)
        return -1;
    v = json_object_get(body, "auto_resume");
    if (v && !json_is_boolean(v))
        return spaced_err_set(err, 400, "invalid_request", "auto_resume must be true or false");
    out->auto_resume = json_is_true(v);
    if (sbx_vol_spec(json_object_get(body, "volumes"), &out->volumes_json, err) < 0)
        return -1;

    json_t *empty = json_object();
    json_t *net_default = json_pack("{s:s}", "mode", "none");
    v = json_object_get(body, "env");
    out->env_json = string_map(v ? v : empty, "env", SBX_ENV_MAX, 256, SBX_ENV_VALUE_MAX, true, err);
    v = json_object_get(body, "metadata");
    if (out->env_json)
        out->metadata_json = string_map(v ? v : empty, "metadata", SBX_META_MAX, SBX_META_KEY_MAX,
                                        SBX_META_VALUE_MAX, false, err);
    v = json_object_get(body, "network");
    if (out->metadata_json)
        out->network_json = network_policy(v ? v : net_default, err);
    json_decref(empty);
    json_decref(net_default);
    return out->network_json ? 0 : -1;
}

static unsigned clamp(unsigned v, unsigned lo, unsigned hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

void sbx_spec_shape(const struct sbx_spec *spec, const struct tpl_info *t, unsigned *vcpus,
                    unsigned *memory_mib)
{
    *vcpus = spec->vcpus ? spec->vcpus
             : t && t->vcpus ? clamp(t->vcpus, 1, SBX_VCPUS_MAX) : SBX_VCPUS_DEFAULT;
    *memory_mib = spec->memory_mib ? spec->memory_mib
                  : t && t->memory_mib ? clamp(t->memory_mib, SBX_MEM_MIN_MIB, SBX_MEM_MAX_MIB)
                                       : SBX_MEM_DEFAULT_MIB;
}

int sbx_spec_parse(const char *body, size_t len, struct sbx_spec *out, struct spaced_err *err)
{
    memset(out, 0, sizeof *out);
    json_t *root = NULL;
    if (len == 0) {
        root = json_object(); /* no body = all defaults */
    } else {
        json_error_t jerr;
        root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!root)
            return spaced_err_set(err, 400, "invalid_json", "body is not valid JSON: %s (at byte %d)",
                                  jerr.text, jerr.position);
    }
    int rc = json_is_object(root)
                 ? spec_from_json(root, out, err)
                 : spaced_err_set(err, 400, "invalid_json", "body must be a JSON object");
    json_decref(root);
    if (rc < 0)
        sbx_spec_clear(out);
    return rc;
}
