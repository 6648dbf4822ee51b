/* fuzz_memmap: vm_memmap_split on arbitrary migration streams (what a compromised QEMU
 * could write into a fork capture). The RAM file must never grow past the RAM's size,
 * and an accepted stream must leave a RAM file of exactly that size. */
#include <stddef.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/vm/vm_memmap.h"

#define RAM_BYTES (16 * 4096)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int in = memfd_create("in", MFD_CLOEXEC), mem = memfd_create("mem", MFD_CLOEXEC),
        out = memfd_create("out", MFD_CLOEXEC);
    if (in < 0 || mem < 0 || out < 0 || write(in, data, size) != (ssize_t)size ||
        lseek(in, 0, SEEK_SET) != 0)
        __builtin_trap();
    char err[200];
    int r = vm_memmap_split(in, mem, RAM_BYTES, out, err, sizeof err);
    struct stat st;
    if (fstat(mem, &st) < 0 || st.st_size > RAM_BYTES || (r == 0 && st.st_size != RAM_BYTES))
        __builtin_trap();
    close(in);
    close(mem);
    close(out);
    return 0;
}
