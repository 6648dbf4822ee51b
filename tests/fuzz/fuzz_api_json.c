/* libFuzzer target over the control plane's JSON request validation: the sandbox create
 * body (sbx_spec_parse), and the transition check driven by bytes of the input. Any
 * crash, leak or sanitizer report is a bug; accepted specs must be canonical JSON that
 * re-parses to the same spec. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "daemon/sandbox/sbx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct sbx_spec spec;
    struct spaced_err err;
    if (sbx_spec_parse((const char *)data, size, &spec, &err) == 0) {
        /* Invariants of an accepted spec: a size is absent (0: the template's) or in
         * range, and the size a sandbox gets is in range either way. */
        unsigned v, m;
        sbx_spec_shape(&spec, NULL, &v, &m);
        if ((spec.vcpus && spec.vcpus > SBX_VCPUS_MAX) ||
            (spec.memory_mib && (spec.memory_mib < SBX_MEM_MIN_MIB ||
                                 spec.memory_mib > SBX_MEM_MAX_MIB)) ||
            v < 1 || v > SBX_VCPUS_MAX || m < SBX_MEM_MIN_MIB || m > SBX_MEM_MAX_MIB ||
            spec.timeout_s < 0 || !spec.env_json || !spec.metadata_json || !spec.network_json)
            abort();
        json_t *env = json_loads(spec.env_json, 0, NULL);
        json_t *net = json_loads(spec.network_json, 0, NULL);
        if (!json_is_object(env) || !json_is_string(json_object_get(net, "mode")))
            abort();
        json_decref(env);
        json_decref(net);
        sbx_spec_clear(&spec);
    } else if (err.status != 400 || !err.code[0] || !err.message[0]) {
        abort();
    }
    if (size >= 3) {
        enum sbx_state target;
        sbx_transition((enum sbx_state)(data[0] % (SBX_STATE_COUNT + 1)),
                       (enum sbx_state)(data[1] % (SBX_STATE_COUNT + 1)),
                       (enum op_kind)(data[2] % (OP_KIND_COUNT + 1)), &target, &err);
    }
    return 0;
}
