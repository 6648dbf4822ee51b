/* clock: the monotonic clock (CLOCK_MONOTONIC) read as one integer count of ns, us or
 * ms, for spaced, the gateway, the CLI and the guest agent alike.
 *
 * Deadlines, timeouts, rate-limit buckets, hang detection and the durations put in the
 * log are measured on it, never on the wall clock: CLOCK_REALTIME jumps when the time is
 * set (NTP, an administrator, the agent setting a restored guest's clock), and a bound or
 * a duration taken across such a jump would fire early, late or never, or come out
 * negative. The values count from an unspecified start (the boot) and mean something
 * only when compared with others read in the same boot of the same machine; a timestamp
 * that is stored or sent elsewhere is wall-clock time instead (spaced_now_ms). They are
 * never 0 in practice, so callers may use 0 for "not yet". */
#ifndef SPACE_CLOCK_H
#define SPACE_CLOCK_H

#include <stdint.h>

int64_t clock_mono_ns(void);
int64_t clock_mono_us(void);
int64_t clock_mono_ms(void);

#endif
