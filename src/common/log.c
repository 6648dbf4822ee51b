/* log.c: logfmt lines on stderr; see log.h. */
#include "log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

static const char *log_prog = "space";
static enum log_level log_min = LOG_INFO;
static const char *const log_names[] = {"debug", "info", "warn", "error"};

void log_init(const char *prog, enum log_level min)
{
    log_prog = prog;
    log_min = min;
    const char *env = getenv("SPACE_LOG_LEVEL");
    for (int i = 0; env && i < 4; i++)
        if (strcasecmp(env, log_names[i]) == 0)
            log_min = (enum log_level)i;
}

const char *log_quote(const char *s, char *out, size_t cap)
{
    size_t o = 0;
    if (cap < 8) {
        if (cap)
            out[0] = '\0';
        return out;
    }
    out[o++] = '"';
    for (; s && *s; s++) {
        unsigned char c = (unsigned char)*s;
        /* Reserve room for the worst-case escape, "..." and the closing quote. */
        if (o + 4 + 4 + 2 > cap) {
            memcpy(out + o, "...", 3);
            o += 3;
            break;
        }
        if (c == '"' || c == '\\') {
            out[o++] = '\\';
            out[o++] = (char)c;
        } else if (c < 0x20 || c == 0x7f) {
            o += (size_t)snprintf(out + o, cap - o, "\\x%02x", c);
        } else {
            out[o++] = (char)c;
        }
    }
    out[o++] = '"';
    out[o] = '\0';
    return out;
}

void log_event(enum log_level lvl, const char *event, const char *fmt, ...)
{
    if (lvl < log_min)
        return;
    char line[4096];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int n = snprintf(line, sizeof line, "ts=%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ level=%s prog=%s event=%s",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec / 1000000, log_names[lvl], log_prog, event);
    if (n < 0)
        return;
    size_t len = (size_t)n < sizeof line ? (size_t)n : sizeof line - 1;
    if (fmt && len + 2 < sizeof line) {
        line[len++] = ' ';
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(line + len, sizeof line - len, fmt, ap);
        va_end(ap);
        if (m > 0)
            len += (size_t)m < sizeof line - len ? (size_t)m : sizeof line - len - 1;
    }
    /* Newlines inside the tail would split the record: flatten them. */
    for (size_t i = 0; i < len; i++)
        if (line[i] == '\n' || line[i] == '\r')
            line[i] = ' ';
    if (len >= sizeof line - 1)
        len = sizeof line - 2;
    line[len++] = '\n';
    ssize_t w = write(STDERR_FILENO, line, len);
    (void)w;
}
