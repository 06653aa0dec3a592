/* How _main_ticks.c and _gil_turn.c (beside this file) wait: on a condition variable timed on
 * CLOCK_MONOTONIC (a wall-clock step never stretches or cuts a wait), until a deadline some
 * nanoseconds from now, or until what the caller waits for is true. */
#ifndef INVOSEQ_WAITS_H
#define INVOSEQ_WAITS_H

#include <errno.h>
#include <pthread.h>
#include <time.h>

/* A mutex and a condition variable timed on CLOCK_MONOTONIC. */
static inline void
waits_init(pthread_mutex_t *mutex, pthread_cond_t *cond)
{
    pthread_condattr_t attributes;
    pthread_condattr_init(&attributes);
    pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC);
    pthread_cond_init(cond, &attributes);
    pthread_condattr_destroy(&attributes);
    pthread_mutex_init(mutex, NULL);
}

/* The CLOCK_MONOTONIC time ``ns`` nanoseconds from now. */
static inline struct timespec
deadline_in(long long ns)
{
    struct timespec at;
    clock_gettime(CLOCK_MONOTONIC, &at);
    at.tv_sec += (time_t)(ns / 1000000000LL);
    at.tv_nsec += (long)(ns % 1000000000LL);
    if (at.tv_nsec >= 1000000000L) {
        at.tv_sec += 1;
        at.tv_nsec -= 1000000000L;
    }
    return at;
}

/* Wait (``mutex`` held) until ``*flag`` is set or ``deadline`` passed; the flag's value. */
static inline int
wait_until(pthread_cond_t *cond, pthread_mutex_t *mutex, const int *flag,
           const struct timespec *deadline)
{
    int timed_out = 0;
    while (!*flag && !timed_out) {
        timed_out = pthread_cond_timedwait(cond, mutex, deadline) == ETIMEDOUT;
    }
    return *flag;
}

#endif /* INVOSEQ_WAITS_H */
