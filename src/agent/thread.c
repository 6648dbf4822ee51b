/* thread.c: detached helper threads with every signal blocked; see thread.h. */
#include "agent/thread.h"

#include <errno.h>
#include <pthread.h>
#include <signal.h>

int agent_thread_start(void *(*fn)(void *), void *arg, size_t stack)
{
    pthread_attr_t attr;
    if ((errno = pthread_attr_init(&attr)) != 0)
        return -1;
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, stack);
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    int rc = pthread_create(&t, &attr, fn, arg);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
        errno = rc;
        return -1;
    }
    return 0;
}
