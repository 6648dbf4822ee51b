/* fuzz_qmp: qmp_parse on arbitrary monitor lines (what a compromised QEMU could send).
 * Each input is split at newlines like the client does; every accepted message must
 * have the pointers its kind promises. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "daemon/vm/qmp.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t start = 0;
    for (size_t i = 0; i <= size; i++) {
        if (i < size && data[i] != '\n')
            continue;
        struct qmp_msg m;
        char err[128];
        if (qmp_parse((const char *)data + start, i - start, &m, err, sizeof(err)) == 0) {
            switch (m.kind) {
            case QMP_MSG_ERROR:
                if (!m.err_class || !m.err_desc)
                    __builtin_trap();
                break;
            case QMP_MSG_EVENT:
                if (!m.event || strlen(m.event) == 0)
                    __builtin_trap();
                break;
            case QMP_MSG_RETURN:
                if (!m.ret)
                    __builtin_trap();
                break;
            case QMP_MSG_GREETING:
                break;
            }
            qmp_msg_clear(&m);
        } else if (m.root) {
            __builtin_trap();
        }
        start = i + 1;
    }
    return 0;
}
