/* space: command-line client for spaced (see `space help`). */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"

static const char usage[] =
    "usage: space COMMAND [ARGS]\n"
    "\n"
    "  create [--template T] [--cpus N] [--memory MiB] [--timeout S]\n"
    "         [--network none|open] [--allow ENTRY...]\n"
    "                              create a sandbox (template python unless given);\n"
    "                              prints its id once running\n"
    "  ls                          list sandboxes (with their node, multi-node)\n"
    "  nodes                       list node daemons: liveness, capacity used (admin key)\n"
    "  node drain|undrain|rm NODE  stop/resume placing sandboxes on a node; forget a node\n"
    "                              that is down and empty (admin key)\n"
    "  rm ID...                    delete sandboxes\n"
    "  pause|resume|suspend|restore|stop|start|wake ID\n"
    "                              lifecycle verbs (waits until done)\n"
    "  exec [-i] [-u USER] [-w DIR] ID -- CMD [ARGS...]\n"
    "                              run a command; streams its output, exits with its\n"
    "                              status; -i forwards stdin\n"
    "  cp LOCAL ID:PATH            upload a file (LOCAL '-' = stdin)\n"
    "  cp ID:PATH LOCAL            download a file (LOCAL '-' = stdout)\n"
    "  network ID                  show the sandbox's egress policy\n"
    "  network ID none|open        change it on the live sandbox\n"
    "  network ID allow ENTRY...   allow only these names, *.wildcards, CIDRs\n"
    "  network ID log [--since N]  the gateway's decisions (JSON lines)\n"
    "  fork ID [-n N]              fork a running sandbox into N (default 1); prints\n"
    "                              the forks' ids once they run\n"
    "  snapshot create ID [--name NAME]\n"
    "                              snapshot a running sandbox (memory + disk); prints\n"
    "                              its id: `create --template ID|NAME` restores it\n"
    "  snapshot ls                 list snapshots\n"
    "  snapshot rm ID|NAME...      delete snapshots\n"
    "  template ls                 list templates\n"
    "  template build NAME [--from BASE] --run CMD [--run CMD...]\n"
    "                              build a template\n"
    "\n"
    "environment: SPACE_URL (default " CLI_DEFAULT_URL "), SPACE_API_KEY (default: the\n"
    "contents of " CLI_ADMIN_KEY_FILE ")\n";

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc < 2 || strcmp(argv[1], "help") == 0 || strcmp(argv[1], "--help") == 0 ||
        strcmp(argv[1], "-h") == 0) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    struct cli_ctx x;
    if (cli_ctx_init(&x) < 0)
        return 1;
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
    if (strcmp(cmd, "cp") == 0)
        return cli_cmd_cp(&x, n, rest);
    if (strcmp(cmd, "template") == 0)
        return cli_cmd_template(&x, n, rest);
    if (strcmp(cmd, "network") == 0)
        return cli_cmd_network(&x, n, rest);
    if (strcmp(cmd, "fork") == 0)
        return cli_cmd_fork(&x, n, rest);
    if (strcmp(cmd, "snapshot") == 0)
        return cli_cmd_snapshot(&x, n, rest);
    fprintf(stderr, "space: unknown command %s\n\n%s", cmd, usage);
    return 2;
}
