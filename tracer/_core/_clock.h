/* The hot path's clock: CLOCK_MONOTONIC's nanoseconds, read from the CPU's time-stamp counter.
 *
 * clock_gettime(CLOCK_MONOTONIC) costs about 30 ns here (the vDSO orders its TSC read with a
 * fence and checks its sequence lock), and a traced call reads the clock twice. An unordered
 * RDTSC costs about 11 ns. Where the kernel itself keeps time with the TSC (its clocksource is
 * "tsc": constant, synchronised across CPUs), the counter is converted to CLOCK_MONOTONIC's scale
 * by a line fitted to pairs of readings of both:
 *
 *     ns = base_ns + (tsc - base_tsc) * mult / 2^32
 *
 * The clock takes a pair of readings every 50 ms while it is read; from the second pair 10 ms or
 * more after the first, the TSC is used. Each later pair starts a new segment where the
 * old line ends (so the clock never steps back) with a slope that meets CLOCK_MONOTONIC again
 * one interval later (so the clocks never drift apart: NTP's slewing, an error in the first
 * estimate). The slope differs from the measured rate by at most MAX_SLEW: durations stay
 * exact to 0.05 %. Everything here runs holding the GIL: no reader sees a segment half made.
 *
 * Elsewhere (another clocksource, another CPU, INVOSEQ_CLOCK=monotonic) the clock is
 * clock_gettime, as before. */

#ifndef INVOSEQ_CLOCK_H
#define INVOSEQ_CLOCK_H

#include <stdint.h>
#include <string.h>
#include <time.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <x86intrin.h>
#define TSC_AVAILABLE 1
#else
#define TSC_AVAILABLE 0
#endif

#define CAL_MIN_SPAN_NS 10000000LL     /* the first estimate: pairs 10 ms apart or more */
#define PAIR_TRIES 5                   /* a pair is the narrowest of five tries */
#define CAL_MAX_READ_NS 500            /* a pair wider than this (interrupted) is not taken */
#define CAL_MAX_READ_TICKS 2000        /* the same before the rate is known (0.5 us at 4 GHz) */
#define CAL_STEP_NS 1000000LL          /* further off than 1 ms (a suspend): start again */
#define CAL_EVERY_NS 50000000LL       /* a pair every 50 ms of reading the clock */
#define MAX_SLEW 0.0005                /* the slope: within 0.05 % of the measured rate */

typedef struct {
    int allowed;        /* the kernel keeps time with the TSC (use_tsc) */
    int enabled;        /* the segment below is in use */
    uint64_t base_tsc;  /* the segment */
    int64_t base_ns;
    uint64_t mult;      /* ns per tick, 32.32 fixed point: the rate, slewed to catch up */
    uint64_t rate_mult; /* the rate itself, past the segment's planned end */
    uint64_t every_ticks; /* CAL_EVERY_NS in ticks: the segment's planned length */
    double rate;        /* ns per tick, measured from the anchor */
    int anchored;       /* the first pair, from which the rate is measured */
    uint64_t anchor_tsc;
    int64_t anchor_ns;
    int64_t last_ns;    /* the previous pair's time: until the TSC is on, the next is taken
                           CAL_MIN_SPAN_NS after it (then every segment's end calls for one) */
} TscClock;

static TscClock g_tsc;

static inline int64_t
monotonic_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

#if TSC_AVAILABLE
static inline int64_t
tsc_to_ns(uint64_t tsc)
{
    int64_t ticks = (int64_t)(tsc - g_tsc.base_tsc); /* a CPU a few ticks behind: negative */
    return g_tsc.base_ns + (int64_t)(((__int128)ticks * (__int128)g_tsc.mult) >> 32);
}

/* The same, past the segment's planned end too: the catch-up slope applies to its planned length
 * only, the measured rate after it (after an idle second, the slope would have overshot). */
static int64_t
segment_value(uint64_t tsc)
{
    int64_t ticks = (int64_t)(tsc - g_tsc.base_tsc);
    int64_t planned = (int64_t)g_tsc.every_ticks;
    if (ticks <= planned) {
        return tsc_to_ns(tsc);
    }
    return g_tsc.base_ns + (int64_t)(((__int128)planned * (__int128)g_tsc.mult) >> 32)
           + (int64_t)(((__int128)(ticks - planned) * (__int128)g_tsc.rate_mult) >> 32);
}
#endif

static void clock_calibrate(void);

/* The clock, in ns on CLOCK_MONOTONIC's scale. It takes its own pairs: one every CAL_EVERY_NS
 * while it is read (after an idle hour, the first read takes a pair before it converts). */
static inline int64_t
clock_now_ns(void)
{
#if TSC_AVAILABLE
    if (__builtin_expect(g_tsc.enabled, 1)) {
        uint64_t tsc = __rdtsc();
        if (__builtin_expect((int64_t)(tsc - g_tsc.base_tsc) > (int64_t)g_tsc.every_ticks, 0)) {
            clock_calibrate();
            if (!g_tsc.enabled) {
                return monotonic_ns();
            }
            return segment_value(__rdtsc()); /* past its end still if no pair could be taken */
        }
        return tsc_to_ns(tsc);
    }
    int64_t ns = monotonic_ns();
    if (__builtin_expect(g_tsc.allowed, 0)
        && (!g_tsc.anchored || ns - g_tsc.last_ns >= CAL_MIN_SPAN_NS)) {
        clock_calibrate();
    }
    return ns;
#else
    return monotonic_ns();
#endif
}

#if TSC_AVAILABLE
/* A pair of readings: CLOCK_MONOTONIC between two TSC reads, paired with their midpoint, the
 * narrowest of PAIR_TRIES (a try the scheduler interrupted is wide). Any read after the pair has
 * a later TSC, so a segment beginning at it begins no earlier than a clock_gettime read before.
 * 0, or -1 when every try was wider than CAL_MAX_READ_NS. */
static int
tsc_pair(uint64_t *tsc, int64_t *ns)
{
    uint64_t narrowest = UINT64_MAX;
    for (int attempt = 0; attempt < PAIR_TRIES; attempt++) {
        uint64_t before = __rdtsc();
        int64_t now = monotonic_ns();
        uint64_t after = __rdtsc();
        if (after - before < narrowest) {
            narrowest = after - before;
            *tsc = before + (after - before) / 2;
            *ns = now;
        }
    }
    if (g_tsc.mult == 0) {
        return narrowest <= CAL_MAX_READ_TICKS ? 0 : -1; /* the rate unknown yet */
    }
    return (int64_t)(((__int128)narrowest * g_tsc.mult) >> 32) <= CAL_MAX_READ_NS ? 0 : -1;
}

static inline uint64_t
fixed_32_32(double value)
{
    return (uint64_t)(value * 4294967296.0);
}

static inline void
anchor_at(uint64_t tsc, int64_t ns)
{
    g_tsc.anchored = 1;
    g_tsc.anchor_tsc = tsc;
    g_tsc.anchor_ns = ns;
}

/* Take a pair; begin a segment once the rate is known. */
static void
clock_calibrate(void)
{
    uint64_t tsc = 0;
    int64_t ns = 0;
    if (!g_tsc.allowed || tsc_pair(&tsc, &ns) < 0) {
        return;
    }
    g_tsc.last_ns = ns;
    if (!g_tsc.anchored || tsc <= g_tsc.anchor_tsc || ns <= g_tsc.anchor_ns) {
        /* the first pair; or the counter went back (it was reset): clock_gettime until the rate
         * is measured again */
        g_tsc.enabled = 0;
        anchor_at(tsc, ns);
        return;
    }
    if (ns - g_tsc.anchor_ns >= CAL_MIN_SPAN_NS) {
        g_tsc.rate = (double)(ns - g_tsc.anchor_ns) / (double)(tsc - g_tsc.anchor_tsc);
    }
    else if (!g_tsc.enabled || g_tsc.rate <= 0.0) {
        return; /* the rate measured from 10 ms on */
    }
    double rate = g_tsc.rate;
    int64_t here = ns;
    if (g_tsc.enabled) {
        here = segment_value(tsc); /* the new segment begins where this one is */
        int64_t behind = ns - here; /* > 0: this clock is behind CLOCK_MONOTONIC */
        if (behind > CAL_STEP_NS) { /* a suspend, a migration: forward at once */
            here = ns;
            anchor_at(tsc, ns);
        }
        else if (behind < -CAL_STEP_NS) { /* never back: slew */
            anchor_at(tsc, ns);
        }
    }
    /* catch up by the next segment's planned end */
    double slope = rate * (1.0 + (double)(ns - here) / (double)CAL_EVERY_NS);
    if (slope > rate * (1.0 + MAX_SLEW)) {
        slope = rate * (1.0 + MAX_SLEW);
    }
    else if (slope < rate * (1.0 - MAX_SLEW)) {
        slope = rate * (1.0 - MAX_SLEW);
    }
    g_tsc.base_tsc = tsc;
    g_tsc.base_ns = here;
    g_tsc.mult = fixed_32_32(slope);
    g_tsc.rate_mult = fixed_32_32(rate);
    g_tsc.every_ticks = (uint64_t)((double)CAL_EVERY_NS / rate);
    g_tsc.enabled = 1;
}
#else
static void
clock_calibrate(void)
{
}
#endif

/* Allow the TSC (or not: back to clock_gettime, and measure anew if allowed again). */
static void
clock_use_tsc(int allowed)
{
    memset(&g_tsc, 0, sizeof(g_tsc));
    g_tsc.allowed = allowed && TSC_AVAILABLE;
}

#endif /* INVOSEQ_CLOCK_H */
