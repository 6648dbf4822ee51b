/* vm_sig: the VM runtime signature of a node, and the check that a saved VM state (a
 * QEMU migration stream: a template's memory snapshot, a sandbox's suspend state, a
 * snapshot's or a fork's capture) can be loaded here.
 *
 * A migration stream loads only into a compatible QEMU: the same QEMU release (streams
 * are not guaranteed across versions, and `-M microvm` has no versioned machine types to
 * pin the format), the same accelerator (KVM and TCG save different CPU state), and under
 * KVM the same host CPU (guests run `-cpu host`: a guest saved with one CPU's features
 * may not run on another's). The signature names all three in one string:
 *
 *     QEMU <major>.<minor>/<accel>/<cpu>
 *
 *   <major>.<minor>  the release series of the QEMU binary spaced runs, from the first
 *                    line of `qemu-system-x86_64 -version` ("QEMU emulator version
 *                    7.2.22 (Debian 1:7.2+dfsg-7+deb12u18)" gives "7.2"). A stable
 *                    point release (7.2.21 -> 7.2.22, a distribution's security update)
 *                    is a bug-fix release of its series and keeps its migration format,
 *                    so it counts as the same runtime; a new series (7.2 -> 8.0) does not.
 *   <accel>          "kvm" or "tcg" (the resolved accelerator, accel.h)
 *   <cpu>            TCG: "max" (the emulated model spaced asks for, vm_cmdline.c: fixed
 *                    for a QEMU series). KVM: the host's /proc/cpuinfo "model name" of
 *                    its first processor and "flags:" + 16 hex digits of a 64-bit FNV-1a
 *                    hash of its "flags" line (a kernel that names more flags therefore
 *                    counts as another CPU: conservative).
 *
 * e.g. "QEMU 7.2/tcg/max", "QEMU 8.2/kvm/AMD EPYC 7B13 64-Core Processor flags:1f0c...".
 *
 * Computed once per process at spaced's start (main.c, vm_sig_probe) and handed to the
 * VM module through vm_config.runtime: a save records it in snapshot.json ("runtime"),
 * vm_restore refuses a state recorded with another one (VM_E_INCOMPATIBLE). A VM adopted
 * after a restart of spaced keeps the signature it was started with (vm.json): its QEMU
 * process still runs the binary it was started from, whatever is installed now.
 *
 * A state recorded before signatures existed has no "runtime": it is accepted as before
 * (vm_sig_compatible). So is any state when this node's own signature is unknown ("":
 * the probe failed), since nothing better than QEMU's own check is known then.
 *
 * Tests: two QEMU releases cannot be installed side by side on one test machine, so
 * main.c takes SPACE_TEST_VM_SIG (documented there as a test double) as this node's
 * signature instead of the computed one; nothing else may set it.
 *
 * Prefix vm_sig_. The pure functions (parsing, composing, comparing) are unit-tested
 * (tests/unit/test_vm_sig.c). */
#ifndef SPACE_VM_SIG_H
#define SPACE_VM_SIG_H

#include <stdbool.h>
#include <stddef.h>

#include "vm.h"

/* Bytes of a signature with its NUL: longer ones are refused (vm_sig_valid). */
#define VM_SIG_MAX 160

/* Whether s is a signature a record or the test override may hold: 1..VM_SIG_MAX-1
 * printable ASCII bytes (0x20..0x7e). */
bool vm_sig_valid(const char *s);

/* From the first line of `qemu -version`, the release series "MAJOR.MINOR" into
 * out[cap]. 0, or -1 when the line names no version. Pure. */
int vm_sig_qemu_series(const char *version_line, char *out, size_t cap);

/* From /proc/cpuinfo's text, "<model name> flags:<16 hex>" of its first processor into
 * out[cap] (bytes outside printable ASCII become '?'). 0, or -1 when either line is
 * missing. Pure. */
int vm_sig_host_cpu(const char *cpuinfo, char *out, size_t cap);

/* "QEMU <series>/<accel>/<cpu>" into out[cap], bytes outside printable ASCII replaced by
 * '?'. 0, or -1 when it does not fit VM_SIG_MAX or cap. Pure. */
int vm_sig_compose(const char *series, const char *accel, const char *cpu, char *out, size_t cap);

/* This host's signature for QEMU binary `qemu` (NULL: qemu-system-x86_64 from PATH)
 * under `accel` (resolved: VM_ACCEL_KVM or VM_ACCEL_TCG): runs `qemu -version` (blocks
 * until it answers, at most 10 s: call once, at start) and, under KVM, reads
 * /proc/cpuinfo. 0, or -1 with why[whylen] and out = "". */
int vm_sig_probe(const char *qemu, enum vm_accel accel, char *out, size_t cap, char *why, size_t whylen);

/* Whether a state saved by runtime `saved` loads into runtime `ours`: true when they are
 * equal, when `saved` is NULL or "" (recorded before signatures existed) and when `ours`
 * is NULL or "" (unknown here). Pure. */
bool vm_sig_compatible(const char *saved, const char *ours);

/* The refusal in words: "<what> was saved by <saved>; this node runs <ours>: it cannot
 * be restored here ..." into msg[cap]. */
void vm_sig_refusal(const char *what, const char *saved, const char *ours, char *msg, size_t cap);

/* The "runtime" recorded in dir/snapshot.json into out[cap]: 0 (out = "" when the file
 * has none: saved before signatures existed, or by a node whose own was unknown), -1
 * when the file is missing, unreadable or holds an invalid value (out = ""). */
int vm_sig_of_snapshot(const char *dir, char *out, size_t cap);

#endif
