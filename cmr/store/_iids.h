/* Where each (process, iid) of a read sits: `gather`'s table of Starts and Ends, then the Index.
 *
 * A process numbers its invocations from one counter, so the iids one read meets in a process
 * lie close together: a run of a million calls spans about a million iids. Each process gets a
 * window, one slot per iid from the first one it met (`base`), grown upwards as higher iids come
 * while the window stays at least a quarter full: a Start or End finds its slot by a subtraction,
 * its neighbours' slots are its neighbours in memory, and growing is a `realloc`, not a rehash
 * (the hash table of before probed slots scattered by a mix, rehashed at each growth, and was
 * twice as big: most of `cmr show`'s page faults and a fifth of its read). An iid below a
 * window's base, or too far above it, goes to the hash table (`Table`, _msgpack.h); once one has
 * gone there from above, the window stops growing, so every key has one place: the window when
 * it lies in the window's range, else the table. */

#ifndef INVOSEQ_IIDS_H
#define INVOSEQ_IIDS_H

#include "_msgpack.h"

typedef struct {
    Entry *slots;  /* slot k: iid base + k (process -1: empty); the first `filled` initialised */
    int64_t base;
    size_t filled; /* slots in the range: [base, base + filled) */
    size_t cap;    /* slots allocated */
    size_t used;   /* entries in it */
    int state;     /* WINDOW_NONE (no iid met yet), WINDOW_OPEN, WINDOW_SHUT (grows no more) */
} Window;

enum { WINDOW_NONE, WINDOW_OPEN, WINDOW_SHUT };

/* A window may span four slots per entry, and this many more (a run's first calls). */
#define WINDOW_SLACK 65536

typedef struct {
    Window *windows; /* by process index; `processes` of them */
    size_t processes;
    Table table; /* the keys no window holds */
} Iids;

static inline int iids_init(Iids *m) {
    m->windows = NULL;
    m->processes = 0;
    return table_init(&m->table, 16);
}

static inline void iids_free(Iids *m) {
    for (size_t p = 0; p < m->processes; p++) PyMem_Free(m->windows[p].slots);
    PyMem_Free(m->windows);
    m->windows = NULL;
    m->processes = 0;
    PyMem_Free(m->table.slots);
    m->table.slots = NULL;
}

static inline size_t iids_used(const Iids *m) {
    size_t used = m->table.used;
    for (size_t p = 0; p < m->processes; p++) used += m->windows[p].used;
    return used;
}

static Entry *iids_find(const Iids *m, int32_t process, int64_t iid) {
    if (process >= 0 && (size_t)process < m->processes) {
        const Window *w = &m->windows[process];
        if (w->state != WINDOW_NONE && iid >= w->base) {
            uint64_t k = (uint64_t)iid - (uint64_t)w->base;
            if (k < w->filled) return w->slots[k].process < 0 ? NULL : &w->slots[k];
        }
    }
    return table_find((Table *)&m->table, process, iid);
}

/* Widens the window to hold slot `k` when it may (0), else shuts it (1); -1: no memory. */
static int window_reach(Window *w, uint64_t k) {
    if (w->state == WINDOW_SHUT) return 1;
    if (k >= 4 * (uint64_t)w->used + WINDOW_SLACK) {
        w->state = WINDOW_SHUT;
        return 1;
    }
    if (k >= w->cap) {
        size_t cap = w->cap ? w->cap : 4096;
        while (cap <= k) cap *= 2;
        Entry *slots = PyMem_Realloc(w->slots, cap * sizeof(Entry));
        if (!slots) {
            PyErr_NoMemory();
            return -1;
        }
        w->slots = slots;
        w->cap = cap;
    }
    for (size_t i = w->filled; i <= k; i++) w->slots[i].process = -1;
    w->filled = (size_t)k + 1;
    return 0;
}

/* The entry of (process, iid), made (no start, no end) when absent; NULL on no memory. */
static Entry *iids_get(Iids *m, int32_t process, int64_t iid) {
    if (process < 0) return table_get(&m->table, process, iid);
    if ((size_t)process >= m->processes) {
        size_t n = (size_t)process + 1;
        Window *windows = PyMem_Realloc(m->windows, n * sizeof(Window));
        if (!windows) {
            PyErr_NoMemory();
            return NULL;
        }
        memset(windows + m->processes, 0, (n - m->processes) * sizeof(Window));
        m->windows = windows;
        m->processes = n;
    }
    Window *w = &m->windows[process];
    if (w->state == WINDOW_NONE) {
        w->state = WINDOW_OPEN;
        w->base = iid;
    }
    if (iid >= w->base) {
        uint64_t k = (uint64_t)iid - (uint64_t)w->base;
        int reached = k < w->filled ? 0 : window_reach(w, k);
        if (reached < 0) return NULL;
        if (!reached) {
            Entry *e = &w->slots[k];
            if (e->process < 0) {
                entry_init(e, process, iid);
                w->used++;
            }
            return e;
        }
    }
    return table_get(&m->table, process, iid);
}

/* Every entry, windows first: `for (Entry *e = iids_next(m, &at); e; e = iids_next(m, &at))`
 * with `IidsAt at = {0, 0}`. */
typedef struct {
    size_t process, slot;
} IidsAt;

static Entry *iids_next(Iids *m, IidsAt *at) {
    for (; at->process < m->processes; at->process++, at->slot = 0) {
        Window *w = &m->windows[at->process];
        while (at->slot < w->filled) {
            Entry *e = &w->slots[at->slot++];
            if (e->process >= 0) return e;
        }
    }
    while (at->slot <= m->table.mask) {
        Entry *e = &m->table.slots[at->slot++];
        if (e->process >= 0) return e;
    }
    return NULL;
}

#endif
