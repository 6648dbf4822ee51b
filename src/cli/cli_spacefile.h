/* cli_spacefile: `space template build NAME -f FILE` reads a small Dockerfile-like file
 * and turns it into the template spec spaced builds (docs/templates.md, "Spec format";
 * docs/cli.md, "Templates from a file").
 *
 *   # a comment
 *   FROM python                      base template (required, first instruction, once)
 *   RUN apt-get ... && \             /bin/sh -c, continued over lines ending in `\`
 *       make install
 *   ENV KEY=VALUE [KEY2="two words"] or ENV KEY VALUE
 *   WORKDIR /srv/app
 *   USER user
 *   COPY [--chmod=0755] [--chown=U[:G]] SRC... DST
 *                                    SRC files or directories (recursively) relative to
 *                                    the file's own directory, never `..` or absolute;
 *                                    several SRCs or a directory need DST ending in `/`
 *   START CMD                        the template's start command (space's own)
 *   READY CMD                        the template's ready check (space's own)
 *
 * Everything else (CMD, ENTRYPOINT, EXPOSE, ARG, ...) is refused naming the line: a
 * template has no image entry point, and a silently ignored line would build something
 * other than what the file says. The file's contents are the client's own; the spec is
 * checked again by spaced (tpl_spec.c), which is the boundary. */
#ifndef SPACE_CLI_SPACEFILE_H
#define SPACE_CLI_SPACEFILE_H

#include <stddef.h>

#include <jansson.h>

#define SPACEFILE_MAX (256 * 1024)          /* the file itself */
#define SPACEFILE_COPY_MAX (8 * 1024 * 1024) /* one copied file (spaced's limit) */

/* The spec {"name", "base", "steps": [...], "start"?, "ready"?} for template `name` built
 * from `path`, or NULL with a message naming the line in err. */
json_t *cli_spacefile_parse(const char *path, const char *name, char *err, size_t errlen);

#endif
