/* What the repository's two C passes share: a bounds-checked msgpack reader, growable int64
 * columns, and an open-addressing hash table keyed by (process, iid). `_columns.c` reads stored
 * batches with them, `_pack.c` indexes a batch at ingest. Everything here is static inline: each
 * file gets its own copy, and the header has no state but the table's seed. */

#ifndef INVOSEQ_MSGPACK_H
#define INVOSEQ_MSGPACK_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* Set once when the module is created (from os.urandom): the table's slots cannot be predicted
 * from the ids a batch carries, so a hostile batch cannot make every iid collide. */
extern uint64_t table_seed;


/* ---------------------------------------------------------------- msgpack reading */

typedef struct {
    const uint8_t *p;
    const uint8_t *end;
} Reader;

static inline int damaged(const char *what) {
    PyErr_Format(PyExc_ValueError, "damaged batch: %s", what);
    return -1;
}

static inline int need(Reader *r, size_t n) {
    if ((size_t)(r->end - r->p) < n) return damaged("truncated");
    return 0;
}

static inline uint64_t be(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = 0; i < n; i++) v = (v << 8) | p[i];
    return v;
}

static inline int read_array(Reader *r, uint32_t *len) {
    if (need(r, 1) < 0) return -1;
    uint8_t b = *r->p++;
    if ((b & 0xf0) == 0x90) {
        *len = b & 0x0f;
        return 0;
    }
    int n = b == 0xdc ? 2 : b == 0xdd ? 4 : 0;
    if (!n) return damaged("array expected");
    if (need(r, n) < 0) return -1;
    *len = (uint32_t)be(r->p, n);
    r->p += n;
    return 0;
}

static inline int read_int(Reader *r, int64_t *out) {
    if (need(r, 1) < 0) return -1;
    uint8_t b = *r->p++;
    if (b <= 0x7f) {
        *out = b;
        return 0;
    }
    if (b >= 0xe0) {
        *out = (int8_t)b;
        return 0;
    }
    int n;
    int is_signed;
    switch (b) {
        case 0xcc: n = 1; is_signed = 0; break;
        case 0xcd: n = 2; is_signed = 0; break;
        case 0xce: n = 4; is_signed = 0; break;
        case 0xcf: n = 8; is_signed = 0; break;
        case 0xd0: n = 1; is_signed = 1; break;
        case 0xd1: n = 2; is_signed = 1; break;
        case 0xd2: n = 4; is_signed = 1; break;
        case 0xd3: n = 8; is_signed = 1; break;
        default: return damaged("integer expected");
    }
    if (need(r, n) < 0) return -1;
    uint64_t v = be(r->p, n);
    r->p += n;
    if (!is_signed) {
        if (v > (uint64_t)INT64_MAX) return damaged("integer out of range");
        *out = (int64_t)v;
    } else if (n == 8) {
        *out = (int64_t)v;
    } else {
        int shift = 64 - 8 * n; /* sign-extend */
        *out = (int64_t)(v << shift) >> shift;
    }
    return 0;
}

static inline int read_bytes(Reader *r, const uint8_t **data, uint32_t *len, int want_str) {
    if (need(r, 1) < 0) return -1;
    uint8_t b = *r->p++;
    int n = 0;
    if (want_str && (b & 0xe0) == 0xa0) {
        *len = b & 0x1f;
    } else {
        if (want_str)
            n = b == 0xd9 ? 1 : b == 0xda ? 2 : b == 0xdb ? 4 : 0;
        else
            n = b == 0xc4 ? 1 : b == 0xc5 ? 2 : b == 0xc6 ? 4 : 0;
        if (!n) return damaged(want_str ? "string expected" : "bytes expected");
        if (need(r, n) < 0) return -1;
        *len = (uint32_t)be(r->p, n);
        r->p += n;
    }
    if (need(r, *len) < 0) return -1;
    *data = r->p;
    r->p += *len;
    return 0;
}

/* Skips one value of any type (an Attrs event's map); nesting is bounded. */
static inline int skip(Reader *r, int depth) {
    if (depth > 8) return damaged("nested too deeply");
    if (need(r, 1) < 0) return -1;
    uint8_t b = *r->p;
    if (b <= 0x7f || b >= 0xe0 || b == 0xc0 || b == 0xc2 || b == 0xc3) {
        r->p++;
        return 0;
    }
    if ((b & 0xe0) == 0xa0 || b == 0xd9 || b == 0xda || b == 0xdb) {
        const uint8_t *d;
        uint32_t n;
        return read_bytes(r, &d, &n, 1);
    }
    if (b == 0xc4 || b == 0xc5 || b == 0xc6) {
        const uint8_t *d;
        uint32_t n;
        return read_bytes(r, &d, &n, 0);
    }
    if (b >= 0xcc && b <= 0xd3) {
        int64_t v;
        if (b == 0xcf) { /* a uint64 above INT64_MAX is still a value to skip */
            r->p++;
            if (need(r, 8) < 0) return -1;
            r->p += 8;
            return 0;
        }
        return read_int(r, &v);
    }
    if (b == 0xca || b == 0xcb) {
        r->p++;
        size_t n = b == 0xca ? 4 : 8;
        if (need(r, n) < 0) return -1;
        r->p += n;
        return 0;
    }
    uint32_t len;
    int map = 0;
    if ((b & 0xf0) == 0x80 || b == 0xde || b == 0xdf) {
        map = 1;
        r->p++;
        if ((b & 0xf0) == 0x80) {
            len = b & 0x0f;
        } else {
            int n = b == 0xde ? 2 : 4;
            if (need(r, n) < 0) return -1;
            len = (uint32_t)be(r->p, n);
            r->p += n;
        }
    } else if (read_array(r, &len) < 0) {
        return -1;
    }
    uint64_t items = map ? 2 * (uint64_t)len : len;
    for (uint64_t i = 0; i < items; i++)
        if (skip(r, depth + 1) < 0) return -1;
    return 0;
}

/* ---------------------------------------------------------------- growable int64 columns */

typedef struct {
    int64_t *data;
    size_t len, cap;
} Column;

static inline int column_push(Column *c, int64_t v) {
    if (c->len == c->cap) {
        size_t cap = c->cap ? 2 * c->cap : 4096;
        int64_t *data = PyMem_Realloc(c->data, cap * sizeof(int64_t));
        if (!data) {
            PyErr_NoMemory();
            return -1;
        }
        c->data = data;
        c->cap = cap;
    }
    c->data[c->len++] = v;
    return 0;
}

static inline void column_free(Column *c) {
    PyMem_Free(c->data);
    c->data = NULL;
    c->len = c->cap = 0;
}

/* ---------------------------------------------------------------- (process, iid) hash table */

static inline uint64_t mix(uint64_t x) { /* splitmix64's finaliser */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

/* A process numbers its invocations in order, so a sequence's iids come in runs: a run of 16
 * consecutive iids lands in consecutive slots (its Starts and Ends then touch a few cache lines,
 * not one each), and the runs are scattered by a strong mix. Runs are kept short: a run placed
 * over another's slots probes past them. */
#define RUN_BITS 4

static inline uint64_t key_hash(int32_t process, int64_t iid) {
    uint64_t run =
        mix(((uint64_t)iid >> RUN_BITS) ^ ((uint64_t)(uint32_t)process << 52) ^ table_seed);
    return (run << RUN_BITS) | ((uint64_t)iid & ((1u << RUN_BITS) - 1));
}

/* Entry.end: ENDLESS, ENDED, or (0 and up) the index of a FAILED end's exception name. */
enum { ENDLESS = -2, ENDED = -1 };
#define FAILED(e) ((e)->end >= 0)

typedef struct {
    int64_t iid;
    int64_t end_ns;
    int32_t process; /* -1: an empty slot */
    int32_t start;   /* the Start's row, -1: none (yet) */
    int32_t end;     /* ENDLESS, ENDED, or the index into the errors list of a FAILED end */
    uint32_t chunk;  /* the chunk its end came from */
} Entry;

typedef struct {
    Entry *slots;
    size_t mask, used;
} Table;

static inline int table_init(Table *t, size_t capacity) {
    size_t size = 1024;
    while (size < capacity * 2) size <<= 1;
    t->slots = PyMem_Malloc(size * sizeof(Entry));
    if (!t->slots) {
        PyErr_NoMemory();
        return -1;
    }
    for (size_t i = 0; i < size; i++) t->slots[i].process = -1;
    t->mask = size - 1;
    t->used = 0;
    return 0;
}

static Entry *table_find(Table *t, int32_t process, int64_t iid) {
    size_t i = key_hash(process, iid) & t->mask;
    for (;;) {
        Entry *e = &t->slots[i];
        if (e->process < 0) return NULL;
        if (e->iid == iid && e->process == process) return e;
        i = (i + 1) & t->mask;
    }
}

/* Four times the slots while the table is small (few rehashes), twice once it holds a million
 * (a sequence of 1.05 M calls then gets 4 M slots, 128 MB, not 8 M, 256 MB: `cmr show` stays
 * under its memory bound). */
#define TABLE_GROW_TWICE (1u << 21)

static inline int table_grow(Table *t) {
    Table bigger;
    size_t slots = t->mask + 1;
    if (table_init(&bigger, slots < TABLE_GROW_TWICE ? 2 * slots : slots) < 0) return -1;
    for (size_t i = 0; i <= t->mask; i++) {
        Entry *e = &t->slots[i];
        if (e->process < 0) continue;
        size_t j = key_hash(e->process, e->iid) & bigger.mask;
        while (bigger.slots[j].process >= 0) j = (j + 1) & bigger.mask;
        bigger.slots[j] = *e;
    }
    bigger.used = t->used;
    PyMem_Free(t->slots);
    *t = bigger;
    return 0;
}

/* A new entry of (process, iid): no start, no end. */
static inline void entry_init(Entry *e, int32_t process, int64_t iid) {
    e->process = process;
    e->iid = iid;
    e->start = -1;
    e->end = ENDLESS;
    e->end_ns = 0;
    e->chunk = 0;
}

/* The entry of (process, iid), made (no start, no end) when absent; NULL on no memory. */
static Entry *table_get(Table *t, int32_t process, int64_t iid) {
    if ((t->used + 1) * 2 > t->mask + 1 && table_grow(t) < 0) return NULL; /* at most half full */
    size_t i = key_hash(process, iid) & t->mask;
    for (;;) {
        Entry *e = &t->slots[i];
        if (e->process < 0) {
            entry_init(e, process, iid);
            t->used++;
            return e;
        }
        if (e->iid == iid && e->process == process) return e;
        i = (i + 1) & t->mask;
    }
}


#endif
