/* sys.c: refresh, health, shutdown, HELLO; see sys.h. */
#include "agent/sys.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/random.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "agent/loop.h"
#include "agent/ops.h"
#include "agent/proc.h"
#include "agent/req.h"
#include "b64.h"
#include "clock.h"

#define SYS_ENTROPY_MIN 32
#define SYS_ENTROPY_MAX 4096
#define SYS_TOKEN_MAX   1024

static bool sys_pid1;
static bool sys_shutdown;
static int64_t sys_started_ms;     /* clock_mono_ms() at agent_sys_init */
static char sys_boot_id[33];       /* hex of 16 random bytes */
static char *sys_token;            /* access token from refresh (owned), NULL if none */

static void sys_new_boot_id(void)
{
    uint8_t r[16] = {0};
    if (getrandom(r, sizeof r, GRND_NONBLOCK) != (ssize_t)sizeof r) {
        /* Early boot without entropy yet: the id need not be secret, only distinct. */
        struct timespec t;
        clock_gettime(CLOCK_REALTIME, &t);
        memcpy(r, &t, sizeof t < sizeof r ? sizeof t : sizeof r);
    }
    for (int i = 0; i < 16; i++)
        snprintf(sys_boot_id + 2 * i, 3, "%02x", r[i]);
}

void agent_sys_init(bool pid1)
{
    sys_pid1 = pid1;
    sys_shutdown = false;
    sys_started_ms = clock_mono_ms();
    sys_new_boot_id();
}

bool agent_sys_is_pid1(void)
{
    return sys_pid1;
}

bool agent_sys_shutdown_requested(void)
{
    return sys_shutdown;
}

json_t *agent_sys_hello(void)
{
    return json_pack("{s:i, s:i, s:s, s:[ssssssssssss], s:s, s:i}", "version", FRAME_VERSION,
                     "min_version", FRAME_MIN_VERSION, "software", AGENT_SOFTWARE, "features",
                     "exec", "pty", "attach", "ps", "files", "watch", "refresh", "shutdown",
                     "tcp", "metrics", "mount", "confirm", "boot_id", sys_boot_id, "pid", (int)getpid());
}

#ifndef RNDRESEEDCRNG
#define RNDRESEEDCRNG _IO('R', 0x07)
#endif

/* Credits `n` bytes into the kernel RNG (counts as entropy, unlike a plain write), then
 * forces the CRNG to reseed. Adding entropy alone leaves the already-initialised CRNG
 * state untouched until the kernel's next scheduled reseed, so clones restored from one
 * snapshot would keep producing the same /dev/urandom bytes for a while. */
static int sys_add_entropy(const uint8_t *p, size_t n)
{
    struct rand_pool_info *info = calloc(1, sizeof *info + n);
    if (!info)
        return -1;
    info->entropy_count = (int)(n * 8);
    info->buf_size = (int)n;
    memcpy(info->buf, p, n);
    int fd = open("/dev/urandom", O_WRONLY | O_CLOEXEC);
    int rc = fd < 0 ? -1 : ioctl(fd, RNDADDENTROPY, info);
    if (rc == 0)
        rc = ioctl(fd, RNDRESEEDCRNG);
    int e = errno;
    if (fd >= 0)
        close(fd);
    explicit_bzero(info, sizeof *info + n);
    free(info);
    errno = e;
    return rc;
}

static bool sys_hostname_ok(const char *h)
{
    size_t n = strlen(h);
    if (n == 0 || n > 63)
        return false;
    for (const char *c = h; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9') ||
              *c == '-' || *c == '.'))
            return false;
    return true;
}

/* Applies one system setting if we are PID 1, else records it as skipped. */
static int sys_apply(struct agent_chan *ch, json_t *applied, json_t *skipped, const char *what,
                     int rc_if_pid1)
{
    if (rc_if_pid1 < 0) {
        agent_chan_errno(ch, errno, what);
        return -1;
    }
    json_array_append_new(sys_pid1 ? applied : skipped, json_string(what));
    return 0;
}

void agent_op_refresh(struct agent_chan *ch, json_t *req)
{
    long long time_ns;
    const char *entropy, *hostname, *token, *user, *workdir;
    json_t *env = json_object_get(req, "env");
    uint8_t rnd[SYS_ENTROPY_MAX];
    long nrnd = 0;
    /* Validate everything first: a bad field changes nothing. */
    if (agent_req_int(ch, req, "time_ns", 0, INT64_MAX, -1, &time_ns) < 0 ||
        agent_req_str(ch, req, "entropy", false, NULL, &entropy) < 0 ||
        agent_req_str(ch, req, "hostname", false, NULL, &hostname) < 0 ||
        agent_req_str(ch, req, "token", false, NULL, &token) < 0 ||
        agent_req_str(ch, req, "user", false, NULL, &user) < 0 ||
        agent_req_str(ch, req, "workdir", false, NULL, &workdir) < 0)
        return agent_chan_close(ch);
    /* The default user must exist now: a template whose user is missing would otherwise
     * fail every later request with a confusing "unknown user". */
    struct agent_user du;
    if (user && strlen(user) >= sizeof du.name)
        return agent_chan_fail(ch, FRAME_E_INVALID_ARGUMENT, "default user over %zu bytes",
                               sizeof du.name - 1);
    if (user && agent_user_lookup(user, &du) < 0)
        return agent_chan_fail(ch, FRAME_E_NOT_FOUND, "default user \"%.64s\" is not in /etc/passwd",
                               user);
    if (workdir && (workdir[0] != '/' || strlen(workdir) >= PATH_MAX))
        return agent_chan_fail(ch, FRAME_E_INVALID_ARGUMENT,
                               "workdir must be an absolute path under %d bytes", PATH_MAX);
    if (entropy && ((nrnd = b64_decode(entropy, rnd, sizeof rnd)) < SYS_ENTROPY_MIN))
        return agent_chan_fail(ch, FRAME_E_INVALID_ARGUMENT,
                               "entropy must be base64 of %d..%d bytes", SYS_ENTROPY_MIN,
                               SYS_ENTROPY_MAX);
    if (hostname && !sys_hostname_ok(hostname))
        return agent_chan_fail(ch, FRAME_E_INVALID_ARGUMENT, "bad hostname \"%.64s\"", hostname);
    if (token && strlen(token) > SYS_TOKEN_MAX)
        return agent_chan_fail(ch, FRAME_E_INVALID_ARGUMENT, "token over %d bytes", SYS_TOKEN_MAX);
    if (env) {
        const char *k;
        json_t *v;
        if (!json_is_object(env))
            return agent_chan_fail(ch, FRAME_E_INVALID_ARGUMENT, "env must be an object");
        json_object_foreach(env, k, v) {
            if (!json_is_string(v) || !k[0] || strchr(k, '=') ||
                strlen(json_string_value(v)) != json_string_length(v))
                return agent_chan_fail(ch, FRAME_E_INVALID_ARGUMENT,
                                       "env \"%.64s\": names are non-empty without '=', values strings", k);
        }
    }

    json_t *applied = json_array(), *skipped = json_array();
    int rc = 0;
    if (time_ns >= 0) {
        /* time_ns is the host's clock when it sent the request; the host may send it
         * right behind its HELLO (a pooled clone's claim), so the HELLO's answer and this
         * request's checks ran since its bytes arrived: that time is added. */
        int64_t age = agent_conn_input_age_ns(ch->conn);
        if (time_ns <= INT64_MAX - age)
            time_ns += age;
        struct timespec t = {.tv_sec = time_ns / 1000000000, .tv_nsec = time_ns % 1000000000};
        rc = sys_apply(ch, applied, skipped, "time", sys_pid1 ? clock_settime(CLOCK_REALTIME, &t) : 0);
    }
    if (rc == 0 && nrnd > 0)
        rc = sys_apply(ch, applied, skipped, "entropy",
                       sys_pid1 ? sys_add_entropy(rnd, (size_t)nrnd) : 0);
    explicit_bzero(rnd, sizeof rnd);
    if (rc == 0 && hostname)
        rc = sys_apply(ch, applied, skipped, "hostname",
                       sys_pid1 ? sethostname(hostname, strlen(hostname)) : 0);
    if (rc < 0) {
        json_decref(applied);
        json_decref(skipped);
        return agent_chan_close(ch);
    }
    if (env) {
        agent_proc_set_env(json_deep_copy(env));
        json_array_append_new(applied, json_string("env"));
    }
    if (user || workdir) {
        agent_user_set_default(user ? user : agent_user_default(), workdir);
        json_array_append_new(applied, json_string("user"));
    }
    if (token) {
        free(sys_token);
        sys_token = strdup(token);
        json_array_append_new(applied, json_string("token"));
    }
    /* A restored clone is a new machine: give it a new identity, and CPU use counted
     * from now (not the template VM's time before its snapshot). */
    sys_new_boot_id();
    struct agent_conn *conn = ch->conn; /* ch may be gone once closed */
    agent_op_result(ch, json_pack("{s:o, s:o, s:s}", "applied", applied, "skipped", skipped,
                                  "boot_id", sys_boot_id));
    /* The result goes out first: the baseline reads /proc/stat, which costs a restored
     * clone 5-15 ms under TCG (code it runs for the first time since the restore), and
     * a create waits for this result. Nothing the host can ask next needs the baseline
     * (metrics requests queue behind this handler). */
    agent_conn_flush(conn);
    agent_metrics_start();
}

void agent_op_health(struct agent_chan *ch, json_t *req)
{
    long long up = (long long)(clock_mono_ms() - sys_started_ms);
    agent_op_result(ch, json_pack("{s:s, s:I, s:i, s:i, s:I, s:I, s:s, s:b}", "status", "ok",
                                  "uptime_ms", (json_int_t)up, "processes",
                                  (int)agent_proc_count(), "channels",
                                  (int)agent_conn_channels(ch->conn), "buffered",
                                  (json_int_t)agent_buf_total(), "buffered_peak",
                                  (json_int_t)agent_buf_peak(), "boot_id", sys_boot_id,
                                  "token_set", sys_token != NULL));
}

void agent_op_shutdown(struct agent_chan *ch, json_t *req)
{
    sys_shutdown = true;
    agent_op_result(ch, NULL);
    agent_loop_stop();
}
