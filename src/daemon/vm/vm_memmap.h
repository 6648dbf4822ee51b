/* vm_memmap: turning a full migration stream into a mappable snapshot.
 *
 * A fork capture (vm_fork_capture) is a QEMU 7.2 migration stream holding every non-zero
 * page of the guest. Loading it costs a restore seconds under TCG (every page read and
 * decoded in QEMU's main loop), while a template clone maps its RAM file copy-on-write
 * and loads only device state. vm_memmap_split rewrites the stream into the template's
 * shape: the pages of the guest's RAM block "ram0" go into a flat RAM file (page at
 * offset o of the block at offset o of the file; zero pages stay holes), everything else
 * (the other, small RAM blocks such as ROMs, and the device state) stays in a stream
 * without those pages. A restore maps the RAM file private (share=off, the same
 * read-only treatment as a template's RAM file) and loads the small stream with
 * x-ignore-shared off, the capability the capture was taken with: the stream's RAM
 * section still lists ram0, and simply sends no page for it.
 *
 * The stream comes from a sandbox's QEMU and is parsed by root: every length, offset and
 * block name is checked, anything this parser does not know (other iterative sections,
 * compressed or XBZRLE pages, configuration subsections) is refused with a message, and
 * the caller then keeps the full stream (slower to restore, still correct). */
#ifndef SPACE_VM_MEMMAP_H
#define SPACE_VM_MEMMAP_H

#include <stddef.h>
#include <stdint.h>

/* Reads the stream from in_fd (from its current offset to EOF), writes ram0's pages into
 * mem_fd (an empty file; it is sized to mem_bytes, the size ram0 must have) and the rest
 * of the stream to out_fd. Returns 0, or -1 with a message in err (the outputs are then
 * partial: the caller removes them). */
int vm_memmap_split(int in_fd, int mem_fd, uint64_t mem_bytes, int out_fd, char *err,
                    size_t errlen);

/* Converts the capture in dir (state + snapshot.json of kind "suspend", from
 * vm_fork_capture) in place into a mapped one: dir/mem (root-owned 0444), dir/state
 * without ram0's pages, snapshot.json of kind "mapped". Returns 0, or -1 with err and
 * the capture left as it was (still restorable from its full stream). */
int vm_memmap_capture(const char *dir, unsigned mem_mib, char *err, size_t errlen);

#endif
