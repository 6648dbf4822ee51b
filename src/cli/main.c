/* space: command-line client for spaced (see `space help`). */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: space COMMAND [ARGS]\n"
    "\n"
    "  create [--template T] [--cpus N] [--memory MiB] [--timeout S] [--auto-resume]\n"
    "         [--network none|open] [--allow ENTRY...] [--volume NAME:/PATH...]\n"
    "                              create a sandbox (template python unless given);\n"
    "                              prints its id once running\n"
    "  ls                          list sandboxes (with their node, multi-node)\n"
    "  nodes                       list node daemons: liveness, capacity used (admin key)\n"
    "  node drain|undrain|rm NODE  stop/resume placing sandboxes on a node; forget a node\n"
    "                              that is down and empty (admin key)\n"
    "  rm ID...                    delete sandboxes\n"
    "  pause|resume|suspend|restore|stop|start|wake ID\n"
    "                              lifecycle verbs (waits until done)\n"
    "  exec [-i] [-t] [-u USER] [-w DIR] ID -- CMD [ARGS...]\n"
    "                              run a command; streams its output, exits with its\n"
    "                              status; -i forwards stdin, -t on a terminal\n"
    "  shell [-u USER] [-w DIR] ID a login shell on a terminal (Ctrl-] detaches)\n"
    "  attach ID [SESSION]         back into a running terminal session\n"
    "  logs ID [--tail BYTES]      the sandbox's console log\n"
    "  cp LOCAL ID:PATH            upload a file (LOCAL '-' = stdin)\n"
    "  cp ID:PATH LOCAL            download a file (LOCAL '-' = stdout)\n"
    "  network ID                  show the sandbox's egress policy\n"
    "  network ID none|open        change it on the live sandbox\n"
    "  network ID allow ENTRY...   allow only these names, *.wildcards, CIDRs\n"
    "  network ID log [--since N]  the gateway's decisions (JSON lines)\n"
    "  volume create|rm NAME...    make or delete named volumes (data kept across sandboxes)\n"
    "  volume ls                   list your volumes\n"
    "  volume put LOCAL NAME:PATH  upload into a volume ('-' = stdin)\n"
    "  volume get NAME:PATH LOCAL  download from a volume ('-' = stdout)\n"
    "  fork ID [-n N]              fork a running sandbox into N (default 1); prints\n"
    "                              the forks' ids once they run\n"
    "  snapshot create ID [--name NAME]\n"
    "                              snapshot a running sandbox (memory + disk); prints\n"
    "                              its id: `create --template ID|NAME` restores it\n"
    "  snapshot ls                 list snapshots\n"
    "  snapshot rm ID|NAME...      delete snapshots\n"
    "  template ls                 list templates\n"
    "  template build NAME -f FILE\n"
    "                              build a template from a Dockerfile-like file\n"
    "                              (FROM, RUN, ENV, WORKDIR, USER, COPY, START, READY)\n"
    "  template build NAME [--from BASE] --run CMD [--run CMD...]\n"
    "                              build a template from commands\n"
    "  completion bash             print a bash completion script\n"
    "\n"
    "--json (before --) prints the API's objects, one JSON document per line\n"
    "\n"
    "environment: SPACE_URL (default " CLI_DEFAULT_URL "), SPACE_API_KEY (default: the\n"
    "contents of " CLI_ADMIN_KEY_FILE ")\n";

/* Removes every --json before the first "--" (and, for exec, before its sandbox id, so
 * that a remote command's own --json stays its own); returns the new argc. */
static int take_json(struct cli_ctx *x, int argc, char **argv)
{
    int out = 1;
    bool stop = false;
    const char *cmd = NULL, *prev = "";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        stop |= strcmp(a, "--") == 0 ||
                (cmd && strcmp(cmd, "exec") == 0 && a[0] != '-' && strcmp(prev, "-u") != 0 &&
                 strcmp(prev, "-w") != 0);
        prev = a;
        if (!stop && strcmp(a, "--json") == 0) {
            x->json = true;
            continue;
        }
        if (!cmd)
            cmd = a;
        argv[out++] = argv[i];
    }
    argv[out] = NULL;
    return out;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2 || strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "-h") == 0) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    if (strcmp(argv[1], "completion") == 0)
        return cli_cmd_completion(argc - 2, argv + 2);
    struct cli_ctx x;
    if (cli_ctx_init(&x) < 0)
        return 1;
    argc = take_json(&x, argc, argv);
    if (argc < 2) {
        fputs(usage, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    int n = argc - 2;
    char **rest = argv + 2;
    static const char *const verbs[] = {"pause", "resume", "suspend", "restore",
                                        "stop",  "start",  "wake"};
    for (size_t i = 0; i < sizeof verbs / sizeof verbs[0]; i++)
        if (strcmp(cmd, verbs[i]) == 0)
            return cli_cmd_verb(&x, cmd, n, rest);
    if (strcmp(cmd, "create") == 0)
        return cli_cmd_create(&x, n, rest);
    if (strcmp(cmd, "ls") == 0)
        return cli_cmd_ls(&x, n, rest);
    if (strcmp(cmd, "nodes") == 0)
        return cli_cmd_nodes(&x, n, rest);
    if (strcmp(cmd, "node") == 0)
        return cli_cmd_node(&x, n, rest);
    if (strcmp(cmd, "rm") == 0)
        return cli_cmd_rm(&x, n, rest);
    if (strcmp(cmd, "exec") == 0)
        return cli_cmd_exec(&x, n, rest);
    if (strcmp(cmd, "shell") == 0)
        return cli_cmd_shell(&x, n, rest);
    if (strcmp(cmd, "attach") == 0)
        return cli_cmd_attach(&x, n, rest);
    if (strcmp(cmd, "logs") == 0)
        return cli_cmd_logs(&x, n, rest);
    if (strcmp(cmd, "cp") == 0)
        return cli_cmd_cp(&x, n, rest);
    if (strcmp(cmd, "template") == 0)
        return cli_cmd_template(&x, n, rest);
    if (strcmp(cmd, "network") == 0)
        return cli_cmd_network(&x, n, rest);
    if (strcmp(cmd, "volume") == 0)
        return cli_cmd_volume(&x, n, rest);
    if (strcmp(cmd, "fork") == 0)
        return cli_cmd_fork(&x, n, rest);
    if (strcmp(cmd, "snapshot") == 0)
        return cli_cmd_snapshot(&x, n, rest);
    fprintf(stderr, "space: unknown command %s\n\n%s", cmd, usage);
    return 2;
}
