/* sbx_runtime.c: whether a saved VM state of a sandbox (its suspend image, a snapshot's
 * or fork's capture, a parts record of another node's) can be restored on this node,
 * checked before anything is started or fetched (vm/vm_sig.h: a state loads only into
 * the QEMU release, accelerator and CPU that saved it). A refusal is 409
 * snapshot_incompatible naming both runtimes; the sandbox or snapshot is left as it was,
 * so the same state restores on a node (or after a restart) with the right runtime.
 * vm_restore makes the same check again (VM_E_INCOMPATIBLE) for a state that reaches it. */
#include <stdio.h>

#include "sbx_internal.h"

int sbx_runtime_check(const struct spaced *sp, const char *saved, const char *what, struct spaced_err *err)
{
    if (vm_sig_compatible(saved, sp->runtime))
        return 0;
    char msg[sizeof err->message];
    vm_sig_refusal(what, saved, sp->runtime, msg, sizeof msg);
    return spaced_err_set(err, 409, "snapshot_incompatible", "%s", msg);
}

int sbx_runtime_check_dir(const struct spaced *sp, const char *dir, const char *what, struct spaced_err *err)
{
    char saved[VM_SIG_MAX];
    /* No readable runtime (no file yet, none recorded, a bad value): vm_restore decides. */
    if (vm_sig_of_snapshot(dir, saved, sizeof saved) < 0)
        return 0;
    return sbx_runtime_check(sp, saved, what, err);
}
