/* clock.c: the monotonic clock in ns, us and ms; see clock.h. */
#include "clock.h"

#include <time.h>

int64_t clock_mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts); /* cannot fail: the clock id and &ts are valid */
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

int64_t clock_mono_us(void) { return clock_mono_ns() / 1000; }

int64_t clock_mono_ms(void) { return clock_mono_ns() / 1000000; }
