/* vm_sig: the VM runtime signature (see vm_sig.h). */
#include "vm_sig.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "clock.h"

#define PROBE_TIMEOUT_MS 10000
#define DEFAULT_QEMU "qemu-system-x86_64"

extern char **environ;

bool vm_sig_valid(const char *s)
{
    if (!s || !*s)
        return false;
    size_t n = 0;
    for (; s[n]; n++)
        if ((unsigned char)s[n] < 0x20 || (unsigned char)s[n] > 0x7e || n + 1 >= VM_SIG_MAX)
            return false;
    return true;
}

/* Copies the n bytes of src into out[cap] with bytes outside printable ASCII replaced
 * by '?'. 0, or -1 when they do not fit. */
static int copy_printable(const char *src, size_t n, char *out, size_t cap)
{
    if (n >= cap)
        return -1;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)src[i];
        out[i] = c >= 0x20 && c <= 0x7e ? (char)c : '?';
    }
    out[n] = '\0';
    return 0;
}

int vm_sig_qemu_series(const char *line, char *out, size_t cap)
{
    static const char key[] = "version ";
    const char *v = line ? strstr(line, key) : NULL;
    unsigned major, minor;
    int used = 0;
    if (!v || !isdigit((unsigned char)v[strlen(key)]) ||
        sscanf(v + strlen(key), "%u.%u%n", &major, &minor, &used) != 2 || used == 0)
        return -1;
    int n = snprintf(out, cap, "%u.%u", major, minor);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

/* The value of the first line of text whose key (before ':', trailing blanks ignored) is
 * `key`: its start and length (surrounding blanks stripped), or NULL. */
static const char *cpuinfo_value(const char *text, const char *key, size_t *len)
{
    size_t kl = strlen(key);
    for (const char *l = text; l && *l;) {
        const char *end = strchr(l, '\n');
        size_t ll = end ? (size_t)(end - l) : strlen(l);
        const char *colon = memchr(l, ':', ll);
        if (colon && ll >= kl && strncmp(l, key, kl) == 0 && strspn(l + kl, " \t") == (size_t)(colon - l - kl)) {
            const char *v = colon + 1, *ve = l + ll;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t' || ve[-1] == '\r'))
                ve--;
            *len = (size_t)(ve - v);
            return v;
        }
        l = end ? end + 1 : NULL;
    }
    return NULL;
}

/* FNV-1a, 64 bits, over the flags as words: whitespace runs count as one space, so only
 * the flags themselves decide. A fingerprint, not a defence: nobody chooses its input. */
static uint64_t flags_hash(const char *v, size_t n)
{
    uint64_t h = 14695981039346656037ull;
    bool space = false;
    for (size_t i = 0; i < n; i++) {
        bool blank = v[i] == ' ' || v[i] == '\t';
        if (blank) {
            space = true;
            continue;
        }
        if (space) {
            h = (h ^ ' ') * 1099511628211ull;
            space = false;
        }
        h = (h ^ (unsigned char)v[i]) * 1099511628211ull;
    }
    return h;
}

int vm_sig_host_cpu(const char *cpuinfo, char *out, size_t cap)
{
    size_t ml = 0, fl = 0;
    const char *model = cpuinfo_value(cpuinfo, "model name", &ml);
    const char *flags = cpuinfo_value(cpuinfo, "flags", &fl);
    char m[96];
    if (!model || !flags || copy_printable(model, ml < sizeof m ? ml : sizeof m - 1, m, sizeof m) < 0)
        return -1;
    int n = snprintf(out, cap, "%s flags:%016llx", m, (unsigned long long)flags_hash(flags, fl));
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

int vm_sig_compose(const char *series, const char *accel, const char *cpu, char *out, size_t cap)
{
    char raw[VM_SIG_MAX + 1];
    int n = snprintf(raw, sizeof raw, "QEMU %s/%s/%s", series, accel, cpu);
    if (n <= 0 || (size_t)n >= VM_SIG_MAX || copy_printable(raw, (size_t)n, out, cap) < 0) {
        if (cap)
            out[0] = '\0';
        return -1;
    }
    return 0;
}

/* Runs `qemu -version` and keeps the first line of its output in line[cap]. 0, or -1
 * with why. */
static int run_version(const char *qemu, char *line, size_t cap, char *why, size_t whylen)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        snprintf(why, whylen, "pipe: %s", strerror(errno));
        return -1;
    }
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_adddup2(&fa, p[1], 1);
    posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
    char *argv[] = {(char *)qemu, (char *)"-version", NULL};
    pid_t pid;
    int rc = posix_spawnp(&pid, qemu, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    close(p[1]);
    if (rc != 0) {
        close(p[0]);
        snprintf(why, whylen, "cannot run %s -version: %s", qemu, strerror(rc));
        return -1;
    }
    size_t got = 0;
    int64_t t0 = clock_mono_ms();
    bool timed_out = false;
    for (;;) {
        int64_t left = PROBE_TIMEOUT_MS - (clock_mono_ms() - t0);
        struct pollfd pf = {p[0], POLLIN, 0};
        int ready = left > 0 ? poll(&pf, 1, (int)left) : 0;
        if (ready < 0 && errno == EINTR)
            continue;
        if (ready == 0) {
            timed_out = true;
            break;
        }
        ssize_t n = got + 1 < cap ? read(p[0], line + got, cap - 1 - got) : 0;
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    close(p[0]);
    line[got] = '\0';
    line[strcspn(line, "\n")] = '\0';
    if (timed_out)
        kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (timed_out || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        snprintf(why, whylen, "%s -version %s", qemu,
                 timed_out ? "did not answer within 10 s" : "failed");
        return -1;
    }
    return 0;
}

int vm_sig_probe(const char *qemu, enum vm_accel accel, char *out, size_t cap, char *why, size_t whylen)
{
    char line[512], series[32], cpu[128] = "max";
    const char *bin = qemu && *qemu ? qemu : DEFAULT_QEMU;
    out[0] = '\0';
    if (run_version(bin, line, sizeof line, why, whylen) < 0)
        return -1;
    if (vm_sig_qemu_series(line, series, sizeof series) < 0) {
        char q[80];
        copy_printable(line, strnlen(line, sizeof q - 1), q, sizeof q);
        snprintf(why, whylen, "%s -version names no version: \"%s\"", bin, q);
        return -1;
    }
    if (accel == VM_ACCEL_KVM) { /* -cpu host: the guest sees this CPU */
        char *text = NULL;
        size_t n = 0;
        FILE *f = fopen("/proc/cpuinfo", "re");
        if (f) {
            text = malloc(1 << 16);
            n = text ? fread(text, 1, (1 << 16) - 1, f) : 0;
            fclose(f);
        }
        if (text)
            text[n] = '\0';
        int r = text ? vm_sig_host_cpu(text, cpu, sizeof cpu) : -1;
        free(text);
        if (r < 0) {
            snprintf(why, whylen, "/proc/cpuinfo names no model or flags");
            return -1;
        }
    }
    if (vm_sig_compose(series, vm_accel_name(accel), cpu, out, cap) < 0) {
        snprintf(why, whylen, "the runtime signature does not fit %d bytes", VM_SIG_MAX);
        return -1;
    }
    return 0;
}

bool vm_sig_compatible(const char *saved, const char *ours)
{
    /* No "runtime" in a record: saved before signatures existed, accepted as before.
     * Ours unknown: nothing to compare (QEMU's own load is the check then). */
    if (!saved || !*saved || !ours || !*ours)
        return true;
    return strcmp(saved, ours) == 0;
}

void vm_sig_refusal(const char *what, const char *saved, const char *ours, char *msg, size_t cap)
{
    snprintf(msg, cap, "%s was saved by %s; this node runs %s: it cannot be restored here "
             "(a saved VM loads only into the same QEMU release, accelerator and CPU)", what, saved, ours);
}

int vm_sig_of_snapshot(const char *dir, char *out, size_t cap)
{
    char p[4096];
    out[0] = '\0';
    if (snprintf(p, sizeof p, "%s/snapshot.json", dir) >= (int)sizeof p)
        return -1;
    json_t *j = json_load_file(p, JSON_REJECT_DUPLICATES, NULL);
    json_t *v = json_object_get(j, "runtime");
    int r = !j ? -1 : !v ? 0 : json_is_string(v) && vm_sig_valid(json_string_value(v)) &&
                                 json_string_length(v) < cap ? 1 : -1;
    if (r == 1) {
        memcpy(out, json_string_value(v), json_string_length(v) + 1);
        r = 0;
    }
    json_decref(j);
    return r;
}
