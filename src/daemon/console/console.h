/* console: serves the web console's static files (docs/console.md).
 *
 *   GET /console                the console page (index.html)
 *   GET /console/{path...}      a file of the console's asset directory
 *
 * The files are ours (console/ in the source tree) plus the vendored xterm.js, copied
 * into one directory by `make console` (build/console) and installed by `make install`
 * into PREFIX/share/space/console; spaced finds it beside its binary like the guest dir
 * (main.c), or from --console-dir. No authentication: the files are the same for
 * everyone and hold no data; the page asks for an API key and calls the JSON API with it.
 *
 * Only a strict path shape is served: segments of [A-Za-z0-9._-] not starting with a dot,
 * at most CONSOLE_PATH_MAX bytes, a known extension; anything else is 404, so nothing
 * outside the directory (.., dot files, encoded slashes) can be named; and the file is
 * opened beneath the directory through no symlink (openat2), so a link planted in it
 * leads nowhere either. Every answer
 * carries a Content-Security-Policy (scripts only from this origin, no inline script),
 * X-Content-Type-Options: nosniff, no framing and no referrer. */
#ifndef SPACE_CONSOLE_H
#define SPACE_CONSOLE_H

#include <stdbool.h>

#include "daemon/http/router.h"

struct spaced;

#define CONSOLE_PATH_MAX 200      /* longest asset path served */
#define CONSOLE_FILE_MAX (8 << 20) /* largest asset file served (xterm.js is ~300 KiB) */

/* Registers the routes, serving from sp->opt.console_dir (a missing directory makes
 * every console route answer 404 console_missing, naming `make console`). */
void console_register(struct router *r, struct spaced *sp);

/* Whether rel (a decoded path below the asset directory, no leading '/') has the shape
 * served; *type gets its Content-Type. Exposed for the unit test. */
bool console_path_ok(const char *rel, const char **type);

#endif
