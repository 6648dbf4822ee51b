/* tpl_fixture.h: a fake guest dir with one built-in template, `base` (an image file and a
 * template.json), and an empty data dir, both under a temporary root; shared by the
 * template unit test and the template build-spec fuzz target.
 *
 * Header-only (static functions) because each unit test and each fuzz target is a
 * separate program with no shared object of their own. */
#ifndef SPACE_TPL_FIXTURE_H
#define SPACE_TPL_FIXTURE_H

#include <stdio.h>
#include <sys/stat.h>

/* Writes `text` to `path` (created or truncated). 0, or -1 if it cannot be opened. */
static inline int tplf_write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f)
        return -1;
    fputs(text, f);
    fclose(f);
    return 0;
}

/* Makes <root>/guest with templates/base/{rootfs.ext4 holding `image`, template.json
 * holding `meta`} and an empty <root>/data; their paths go to guest and data (caller's
 * buffers of gcap and dcap bytes). 0, or -1 if a file cannot be written. */
static inline int tplf_make_dirs(const char *root, char *guest, size_t gcap, char *data,
                                 size_t dcap, const char *image, const char *meta)
{
    char p[512];
    snprintf(guest, gcap, "%s/guest", root);
    snprintf(data, dcap, "%s/data", root);
    mkdir(guest, 0700);
    mkdir(data, 0700);
    snprintf(p, sizeof p, "%s/templates", guest);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/templates/base", guest);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/templates/base/rootfs.ext4", guest);
    if (tplf_write_file(p, image) != 0)
        return -1;
    snprintf(p, sizeof p, "%s/templates/base/template.json", guest);
    return tplf_write_file(p, meta);
}

#endif
