/* agent_req: reading fields of a request (OPEN/CTRL JSON) with clear errors. Each
 * getter returns 0, or -1 after sending ERROR invalid_argument (or not_found for an
 * unknown user) on the channel; on -1 the caller closes the channel and returns.
 *
 * Paths: absolute, or relative to the user's home; normalised lexically ("." and ".."
 * and repeated "/" removed); NUL bytes, empty paths, over-long paths and ".." above "/"
 * are refused. This gives clear errors; it is not a security boundary (the guest is
 * the user's own machine). */
#ifndef SPACE_AGENT_REQ_H
#define SPACE_AGENT_REQ_H

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>

#include "agent/conn.h"
#include "agent/users.h"

/* String field. Absent: *out = def (NULL allowed), error if required. Strings with NUL
 * bytes are refused. */
int agent_req_str(struct agent_chan *ch, json_t *req, const char *key, bool required,
                  const char *def, const char **out);
/* Integer field in [min, max], def when absent. */
int agent_req_int(struct agent_chan *ch, json_t *req, const char *key, long long min,
                  long long max, long long def, long long *out);
/* Boolean field, def when absent. */
int agent_req_bool(struct agent_chan *ch, json_t *req, const char *key, bool def, bool *out);
/* The "user" field (default "root") looked up in /etc/passwd. */
int agent_req_user(struct agent_chan *ch, json_t *req, struct agent_user *u);
/* A path field resolved (lexically) against u's home into out[PATH_MAX]. */
int agent_req_path_any(struct agent_chan *ch, json_t *req, const char *key,
                       const struct agent_user *u, char *out);
/* The same (into shown[PATH_MAX], unless NULL: the path as the request named it, for
 * replies), then resolved through the file system (agent_resolve: links followed, the
 * last one only if follow_last) into out[PATH_MAX], and refused when it leads into a
 * volume mount: for paths the agent itself opens on its loop, which would wait for FUSE
 * replies only that loop can relay (fuse_relay.c). out is made of real directories. */
int agent_req_path(struct agent_chan *ch, json_t *req, const char *key,
                   const struct agent_user *u, bool follow_last, char *shown, char *out);

/* Lexical resolution used by agent_req_path: 0, or -1 with *why set. */
int agent_path_resolve(const char *in, const char *home, char *out, size_t cap,
                       const char **why);

#endif
