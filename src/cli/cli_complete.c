/* cli_complete.c: `space completion bash` prints a bash completion script:
 *
 *   source <(space completion bash)        # or save it under bash-completion's dir
 *
 * It completes the commands, their subcommands and options, and sandbox ids (from
 * `space ls`, asked only when an id is due, so a completion never blocks longer than
 * one listing). */
#include "cli.h"

#include <stdio.h>
#include <string.h>

static const char bash_script[] =
    "# bash completion for space (space completion bash)\n"
    "_space_ids() {\n"
    "    space ls 2>/dev/null | awk 'NR > 1 && $1 ~ /^sb/ { print $1 }'\n"
    "}\n"
    "_space() {\n"
    "    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}\n"
    "    local cmds='create ls nodes node rm pause resume suspend restore stop start wake\n"
    "        exec shell attach logs cp network template completion help'\n"
    "    local i cmd='' pos=0\n"
    "    for ((i = 1; i < COMP_CWORD; i++)); do\n"
    "        case ${COMP_WORDS[i]} in\n"
    "        --json) ;;\n"
    "        -*) [ -n \"$cmd\" ] || true ;;\n"
    "        *) if [ -z \"$cmd\" ]; then cmd=${COMP_WORDS[i]}; else pos=$((pos + 1)); fi ;;\n"
    "        esac\n"
    "    done\n"
    "    if [ -z \"$cmd\" ]; then\n"
    "        COMPREPLY=($(compgen -W \"$cmds --json\" -- \"$cur\"))\n"
    "        return\n"
    "    fi\n"
    "    case $cmd in\n"
    "    create)\n"
    "        case $prev in\n"
    "        --template) COMPREPLY=($(compgen -W \"$(space template ls 2>/dev/null | awk 'NR > 1 { print $1 }')\" -- \"$cur\")) ;;\n"
    "        --network) COMPREPLY=($(compgen -W 'none open' -- \"$cur\")) ;;\n"
    "        --cpus|--memory|--timeout|--allow|--volume) ;;\n"
    "        *) COMPREPLY=($(compgen -W '--template --cpus --memory --timeout --network --allow --volume --auto-resume --json' -- \"$cur\")) ;;\n"
    "        esac ;;\n"
    "    rm|pause|resume|suspend|restore|stop|start|wake|shell|attach|logs)\n"
    "        if [[ $cur == -* ]]; then\n"
    "            case $cmd in\n"
    "            shell) COMPREPLY=($(compgen -W '-u -w' -- \"$cur\")) ;;\n"
    "            logs) COMPREPLY=($(compgen -W '--tail --json' -- \"$cur\")) ;;\n"
    "            *) COMPREPLY=($(compgen -W '--json' -- \"$cur\")) ;;\n"
    "            esac\n"
    "        elif [ $pos -eq 0 ] || [ $cmd = rm ]; then\n"
    "            COMPREPLY=($(compgen -W \"$(_space_ids)\" -- \"$cur\"))\n"
    "        fi ;;\n"
    "    exec)\n"
    "        if [[ $cur == -* ]]; then\n"
    "            COMPREPLY=($(compgen -W '-i -t -u -w --json --' -- \"$cur\"))\n"
    "        elif [ $pos -eq 0 ] && [ \"$prev\" != -u ] && [ \"$prev\" != -w ]; then\n"
    "            COMPREPLY=($(compgen -W \"$(_space_ids)\" -- \"$cur\"))\n"
    "        fi ;;\n"
    "    cp)\n"
    "        COMPREPLY=($(compgen -f -- \"$cur\")) ;;\n"
    "    network)\n"
    "        if [ $pos -eq 0 ]; then\n"
    "            COMPREPLY=($(compgen -W \"$(_space_ids)\" -- \"$cur\"))\n"
    "        elif [ $pos -eq 1 ]; then\n"
    "            COMPREPLY=($(compgen -W 'none open allow log' -- \"$cur\"))\n"
    "        fi ;;\n"
    "    template)\n"
    "        if [ $pos -eq 0 ]; then\n"
    "            COMPREPLY=($(compgen -W 'ls build' -- \"$cur\"))\n"
    "        elif [[ $cur == -* ]]; then\n"
    "            COMPREPLY=($(compgen -W '-f --from --run' -- \"$cur\"))\n"
    "        fi ;;\n"
    "    node)\n"
    "        [ $pos -eq 0 ] && COMPREPLY=($(compgen -W 'drain undrain rm' -- \"$cur\")) ;;\n"
    "    completion)\n"
    "        [ $pos -eq 0 ] && COMPREPLY=($(compgen -W 'bash' -- \"$cur\")) ;;\n"
    "    esac\n"
    "}\n"
    "complete -F _space space\n";

int cli_cmd_completion(int argc, char **argv)
{
    if (argc != 1 || strcmp(argv[0], "bash") != 0) {
        cli_err("usage: space completion bash");
        return 2;
    }
    fputs(bash_script, stdout);
    return 0;
}
