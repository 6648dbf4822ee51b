/* gw_declog.c: per-sandbox decision log and token buckets; see gw.h. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "gw.h"
#include "log.h"

void gw_rate_init(struct gw_rate *r, double rate, double burst)
{
    memset(r, 0, sizeof *r);
    r->rate = rate;
    r->burst = burst;
    r->tokens = burst;
    r->last_ms = clock_mono_ms();
}

bool gw_rate_take(struct gw_rate *r, int64_t now_ms)
{
    if (now_ms > r->last_ms) {
        r->tokens += (double)(now_ms - r->last_ms) * r->rate / 1000.0;
        if (r->tokens > r->burst)
            r->tokens = r->burst;
        r->last_ms = now_ms;
    }
    if (r->tokens >= 1.0) {
        r->tokens -= 1.0;
        return true;
    }
    r->refused++;
    r->refused_total++;
    return false;
}

void gw_rate_log(struct gw_sandbox *sb, struct gw_rate *r, const char *what)
{
    int64_t now = clock_mono_ms();
    if (now - r->last_log_ms < 1000)
        return;
    char reason[40];
    snprintf(reason, sizeof reason, "rate_limited x%llu", (unsigned long long)r->refused);
    r->refused = 0;
    r->last_log_ms = now;
    gw_decide(sb, what, false, "", reason, 0, 0);
}

void gw_decide(struct gw_sandbox *sb, const char *kind, bool allowed, const char *name,
               const char *reason, uint32_t dst, uint16_t port)
{
    struct gw_decision *d = &sb->log[sb->log_seq % GW_LOG_RING];
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    d->seq = ++sb->log_seq;
    d->ts_ms = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
    d->kind = kind;
    d->allowed = allowed;
    snprintf(d->name, sizeof d->name, "%s", name ? name : "");
    snprintf(d->reason, sizeof d->reason, "%s", reason);
    d->dst = dst;
    d->port = port;
    char qs[80], qn[300], qr[2 * GW_REASON_MAX];
    log_event(allowed ? LOG_INFO : LOG_WARN, "egress", "sandbox=%s kind=%s verdict=%s name=%s reason=%s port=%u",
              log_quote(sb->id, qs, sizeof qs), kind, allowed ? "allow" : "deny",
              log_quote(d->name, qn, sizeof qn), log_quote(reason, qr, sizeof qr), port);
}

json_t *gw_declog_json(const struct gw_sandbox *sb, uint64_t since)
{
    json_t *arr = json_array();
    uint64_t first = sb->log_seq > GW_LOG_RING ? sb->log_seq - GW_LOG_RING + 1 : 1;
    if (since + 1 > first)
        first = since + 1;
    for (uint64_t s = first; s <= sb->log_seq; s++) {
        const struct gw_decision *d = &sb->log[(s - 1) % GW_LOG_RING];
        char dst[16] = "";
        if (d->dst) {
            struct in_addr a = {.s_addr = htonl(d->dst)};
            inet_ntop(AF_INET, &a, dst, sizeof dst);
        }
        json_array_append_new(arr, json_pack("{s:I, s:I, s:s, s:b, s:s, s:s, s:s, s:i}",
            "seq", (json_int_t)d->seq, "ts_ms", (json_int_t)d->ts_ms, "kind", d->kind,
            "allowed", d->allowed, "name", d->name, "reason", d->reason, "dst", dst,
            "port", d->port));
    }
    return arr;
}
