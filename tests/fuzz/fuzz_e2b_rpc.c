/* Fuzzes what a client sends to the envd RPC layer: a streaming request body (one
 * Connect envelope) whose JSON is run through every request parser of process.Process
 * and filesystem.Filesystem; the raw bytes also go through the metadata filter and the
 * path resolver. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/e2b/e2b_envelope.h"
#include "daemon/e2b/e2b_fsmsg.h"
#include "daemon/e2b/e2b_procmsg.h"
#include "daemon/e2b/e2b_util.h"

static void parse_all(json_t *req)
{
    struct e2b_err err = {0};
    struct e2b_proc_start st;
    struct e2b_proc_selector sel;
    struct e2b_proc_input in;
    int sig;
    bool pty;
    uint32_t cols, rows, depth;
    const char *a, *b;
    struct e2b_fs_watch w;
    e2b_proc_parse_start(req, &st, &err);
    e2b_proc_parse_selector(req, &sel, &err);
    if (e2b_proc_parse_input(req, &in, &err) == 0)
        free(in.data);
    e2b_proc_parse_signal(req, &sel, &sig, &err);
    e2b_proc_parse_update(req, &sel, &pty, &cols, &rows, &err);
    e2b_fs_parse_path(req, &a, &err);
    e2b_fs_parse_move(req, &a, &b, &err);
    e2b_fs_parse_list(req, &a, &depth, &err);
    e2b_fs_parse_watch(req, &w, &err);
    e2b_fs_parse_watcher_id(req, &a, &err);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct e2b_err err = {0};
    json_t *req = e2b_env_parse_single(data, size, &err);
    if (req) {
        parse_all(req);
        json_decref(req);
    }
    /* The same bytes as a unary JSON body. */
    req = json_loadb((const char *)data, size, 0, NULL);
    if (req) {
        parse_all(req);
        json_decref(req);
    }
    char *text = malloc(size + 1);
    if (!text)
        return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    json_decref(e2b_metadata_filter(text, &err));
    free(e2b_path_resolve(text, "/home/user", &err));
    free(text);
    return 0;
}
