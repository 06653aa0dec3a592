/* Ingest's index pass over one batch, in C.
 *
 * `cmr.store.batch_index.pack` indexes every batch a repository stores (its sequences, their methods,
 * the listing lines' parts, the Ends whose Start is elsewhere). Done with comprehensions over the
 * decoded events it cost twice the typed decode itself; `scan` reads the same events from the
 * msgpack of the batch's thread chunks (the blob the store keeps) in one pass, with two hash tables,
 * and returns only what is small: the per-sequence parts of the index as the store takes them
 * (`sequence_parts`: made here, they cost a batch of requests more in Python than the pass), the
 * invocations left open, the entries, the late Ends, and where the rare events are (Errors,
 * Handoffs, Attrs: Python reads those from the decoded batch, as few as they are). At the end of
 * the file, a group's single rows bound for their insert (`bound_singles`).
 *
 * The events it reads may not have been through msgspec's typed decode (`cmr/store/raw_batch.py`):
 * it holds Starts and Ends to the protocol's types itself (lengths, 64-bit integers, ids not
 * negative, a 16-byte bin sequence id, at most MAX_EVENTS_PER_CHUNK a chunk), and refuses
 * (ValueError) what it cannot read, which Python then decodes typed.
 *
 * The rules are those of the Python pass (`packing._pack_events`, the reference; the tests compare
 * both on random batches):
 * - an iid belongs to the sequence of its last Start in the batch; a sequence counts its iids;
 * - an iid is ended by any End in the batch, wherever it comes; its end is the last End's time
 *   (Errors are Python's, and override);
 * - a sequence's root candidate is its Start of lowest rank (parent != 0, hid != 0, t_ns, iid),
 *   its first start the earliest t_ns;
 * - the per-sequence parts' times are wall clock (the batch's clock offset added; a Start or End
 *   that it takes past 64 bits is an OverflowError, which refuses the batch); the others are the
 *   events' own, and Python adds the offset and checks the range.
 */

#include "_msgpack.h"
#include "_pack.h"

enum { S_IID, S_PARENT, S_HID, S_METHOD, S_T, S_SEQ, S_COUNT };
/* wire.MAX_EVENTS_PER_CHUNK: a chunk's events are read here without msgspec's typed decode
 * (``cmr.store.raw_batch``), so the pass holds them to the protocol's bounds itself. */
enum { MAX_EVENTS_PER_CHUNK = 1000000 };

typedef struct {
    uint64_t id[2]; /* the sequence id's 16 bytes */
    PyObject *seq;  /* the same, as bytes */
    int64_t first_t;
    int64_t best;  /* the row of its lowest-rank Start */
    int64_t count; /* its iids */
    uint32_t last_chunk; /* the last chunk (counted from 1) it had a Start in */
    Column methods;      /* distinct, in order of first sight */
} Sequence;

typedef struct {
    Column start[S_COUNT]; /* every Start, in batch order */
    Column end_iid, end_t; /* every End, in batch order */
    Column thread_seq, thread_tid;
    Column rare_chunk, rare_event, rare_iid; /* rare_iid -1: the event has none (a Handoff) */
    Table iids;    /* (0, iid) -> `start`: the row of its last Start */
    Table methods; /* (sequence, method): seen */
    Sequence *seqs;
    size_t count, capacity;
    int32_t *slots; /* open addressing over `seqs`; -1: empty */
    size_t mask;
    int64_t events, t_min, t_max;
} Scan;

static inline uint64_t seq_hash(const uint64_t id[2]) {
    return mix(id[0] ^ table_seed) ^ mix(id[1] + table_seed);
}

static int slots_resize(Scan *s, size_t size) {
    int32_t *slots = PyMem_Malloc(size * sizeof(int32_t));
    if (!slots) {
        PyErr_NoMemory();
        return -1;
    }
    memset(slots, 0xff, size * sizeof(int32_t));
    for (size_t q = 0; q < s->count; q++) {
        size_t i = seq_hash(s->seqs[q].id) & (size - 1);
        while (slots[i] >= 0) i = (i + 1) & (size - 1);
        slots[i] = (int32_t)q;
    }
    PyMem_Free(s->slots);
    s->slots = slots;
    s->mask = size - 1;
    return 0;
}

/* The index of the sequence with these 16 bytes, added when new; -1 on error. */
static int32_t seq_index(Scan *s, const uint8_t *bytes) {
    uint64_t id[2];
    memcpy(id, bytes, 16);
    size_t i = seq_hash(id) & s->mask;
    for (int32_t at; (at = s->slots[i]) >= 0; i = (i + 1) & s->mask)
        if (s->seqs[at].id[0] == id[0] && s->seqs[at].id[1] == id[1]) return at;
    if ((s->count + 1) * 2 > s->mask + 1) {
        if (slots_resize(s, 2 * (s->mask + 1)) < 0) return -1;
        for (i = seq_hash(id) & s->mask; s->slots[i] >= 0; i = (i + 1) & s->mask) {}
    }
    if (s->count == s->capacity) {
        size_t capacity = 2 * s->capacity;
        Sequence *seqs = PyMem_Realloc(s->seqs, capacity * sizeof(Sequence));
        if (!seqs) {
            PyErr_NoMemory();
            return -1;
        }
        s->seqs = seqs;
        s->capacity = capacity;
    }
    Sequence *q = &s->seqs[s->count];
    memset(q, 0, sizeof(*q));
    memcpy(q->id, id, sizeof(id));
    q->seq = PyBytes_FromStringAndSize((const char *)bytes, 16);
    if (!q->seq) return -1;
    q->first_t = INT64_MAX;
    q->best = -1;
    s->slots[i] = (int32_t)s->count;
    return (int32_t)s->count++;
}

/* Whether Start row `a` ranks below row `b` as a root candidate. */
static inline int ranks_below(const Scan *s, int64_t a, int64_t b) {
    const int64_t *parent = s->start[S_PARENT].data, *hid = s->start[S_HID].data;
    const int64_t *t = s->start[S_T].data, *iid = s->start[S_IID].data;
    int pa = parent[a] != 0, pb = parent[b] != 0, ha = hid[a] != 0, hb = hid[b] != 0;
    if (pa != pb) return pa < pb;
    if (ha != hb) return ha < hb;
    if (t[a] != t[b]) return t[a] < t[b];
    return iid[a] < iid[b];
}

static inline void note_time(Scan *s, int64_t t) {
    if (t < s->t_min) s->t_min = t;
    if (t > s->t_max) s->t_max = t;
}

static int scan_start(Scan *s, Reader *r, uint32_t len, uint32_t chunk, int64_t tid) {
    int64_t v[5]; /* iid, parent, hid, method, t_ns */
    const uint8_t *seq;
    uint32_t seq_len;
    if (len != 7) return damaged("bad Start");
    for (int k = 0; k < 5; k++)
        if (read_int(r, &v[k]) < 0) return -1;
    /* iid, parent, hid and method are the protocol's Id63: not negative (wire.Start) */
    if ((v[0] | v[1] | v[2] | v[3]) < 0) return damaged("negative id");
    if (read_bytes(r, &seq, &seq_len, 0) < 0) return -1;
    if (seq_len != 16) return damaged("bad sequence id");
    if (s->start[S_IID].len >= INT32_MAX) return damaged("too many Starts");
    int32_t q = seq_index(s, seq);
    if (q < 0) return -1;
    int64_t row = (int64_t)s->start[S_IID].len;
    int64_t values[S_COUNT] = {v[0], v[1], v[2], v[3], v[4], q};
    for (int c = 0; c < S_COUNT; c++)
        if (column_push(&s->start[c], values[c]) < 0) return -1;
    note_time(s, v[4]);
    Sequence *sequence = &s->seqs[q];
    if (sequence->last_chunk != chunk) {
        sequence->last_chunk = chunk;
        if (column_push(&s->thread_seq, q) < 0 || column_push(&s->thread_tid, tid) < 0) return -1;
    }
    if (v[4] < sequence->first_t) sequence->first_t = v[4];
    if (sequence->best < 0 || ranks_below(s, row, sequence->best)) sequence->best = row;
    Entry *method = table_get(&s->methods, q, v[3]);
    if (!method) return -1;
    if (method->start < 0) {
        method->start = 0;
        if (column_push(&sequence->methods, v[3]) < 0) return -1;
    }
    Entry *e = table_get(&s->iids, 0, v[0]);
    if (!e) return -1;
    e->start = (int32_t)row;
    return 0;
}

static int scan_event(Scan *s, Reader *r, uint32_t chunk, uint32_t at, int64_t tid) {
    uint32_t len;
    int64_t tag, iid = -1, t;
    if (read_array(r, &len) < 0) return -1;
    if (len < 1) return damaged("empty event");
    if (read_int(r, &tag) < 0) return -1;
    s->events++;
    if (tag == 0) return scan_start(s, r, len, chunk, tid);
    if (tag == 1) { /* End: iid, t_ns */
        if (len != 3) return damaged("bad End");
        if (read_int(r, &iid) < 0 || read_int(r, &t) < 0) return -1;
        if (iid < 0) return damaged("negative id");
        note_time(s, t);
        return column_push(&s->end_iid, iid) < 0 || column_push(&s->end_t, t) < 0 ? -1 : 0;
    }
    if (tag < 2 || tag > 4) return damaged("unknown event");
    uint32_t first = 1;
    if (tag != 3) { /* Error and Attrs begin with their iid */
        if (len < 2 || read_int(r, &iid) < 0) return PyErr_Occurred() ? -1 : damaged("bad event");
        first = 2;
    }
    for (uint32_t i = first; i < len; i++)
        if (skip(r, 0) < 0) return -1;
    if (column_push(&s->rare_chunk, chunk - 1) < 0 || column_push(&s->rare_event, at) < 0 ||
        column_push(&s->rare_iid, iid) < 0)
        return -1;
    return 0;
}

/* The array of thread chunks at the reader's position. */
static int scan_chunks(Scan *s, Reader *r) {
    uint32_t chunks;
    if (read_array(r, &chunks) < 0) return -1;
    for (uint32_t c = 1; c <= chunks; c++) {
        uint32_t fields, events;
        int64_t tid;
        if (read_array(r, &fields) < 0) return -1;
        if (fields != 2) return damaged("bad chunk");
        if (read_int(r, &tid) < 0 || read_array(r, &events) < 0) return -1;
        if (events > MAX_EVENTS_PER_CHUNK) return damaged("too many events in a chunk");
        for (uint32_t i = 0; i < events; i++)
            if (scan_event(s, r, c, i, tid) < 0) return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- the results */

/* The End time of `iid` plus `offset`, or None when it has not ended in the batch. */
static PyObject *end_of(Scan *s, int64_t iid, int64_t offset) {
    Entry *e = table_find(&s->iids, 0, iid);
    if (e && e->end == ENDED) return PyLong_FromLongLong(e->end_ns + offset);
    Py_RETURN_NONE;
}

static int append_new(PyObject *list, PyObject *item) {
    if (!item) return -1;
    int failed = PyList_Append(list, item);
    Py_DECREF(item);
    return failed;
}

/* A tuple of `items`, whose references it takes (NULL, all of them released, when one is NULL or
 * the tuple cannot be made). Made directly: Py_BuildValue parses its format string for every
 * tuple, and a batch of short sequences makes a few tuples a sequence (issue 33). */
static PyObject *tuple_of(Py_ssize_t n, PyObject **items) {
    PyObject *tuple = NULL;
    Py_ssize_t k = 0;
    while (k < n && items[k]) k++;
    if (k == n) tuple = PyTuple_New(n);
    for (k = 0; k < n; k++) {
        if (tuple) PyTuple_SET_ITEM(tuple, k, items[k]);
        else Py_XDECREF(items[k]);
    }
    return tuple;
}

#define LONG_OF(v) PyLong_FromLongLong(v)

static int by_value(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* A sequence's methods in order: by insertion while few (a request's few methods; qsort's call
 * per comparison costs more there), else qsort. */
static void sort_values(int64_t *v, size_t n) {
    if (n > 16) {
        qsort(v, n, sizeof(int64_t), by_value);
        return;
    }
    for (size_t i = 1; i < n; i++) {
        int64_t x = v[i];
        size_t j = i;
        for (; j > 0 && v[j - 1] > x; j--) v[j] = v[j - 1];
        v[j] = x;
    }
}

/* What a scan is asked to build besides its own index: the batch's process, its clock offset (added
 * to every time it returns in these parts) and whether each sequence's methods are wanted as
 * msgpack too. */
typedef struct {
    PyObject *puid;
    int64_t offset;
    int encode;
} Parts;

/* A list of int64 as msgspec's msgpack encodes it (`stored_batches.encode_chunks`): an array of
 * each value in its shortest form. */
static PyObject *encoded_ints(const int64_t *v, size_t n) {
    if (n > UINT32_MAX) return PyErr_Format(PyExc_OverflowError, "too many methods");
    size_t size = 5 + 9 * n;
    uint8_t small[256];
    uint8_t *out = size <= sizeof(small) ? small : PyMem_Malloc(size), *p = out;
    if (!out) return PyErr_NoMemory();
    if (n < 16) {
        *p++ = (uint8_t)(0x90 | n);
    } else if (n <= 0xffff) {
        *p++ = 0xdc;
        *p++ = (uint8_t)(n >> 8);
        *p++ = (uint8_t)n;
    } else {
        *p++ = 0xdd;
        for (int k = 3; k >= 0; k--) *p++ = (uint8_t)(n >> (8 * k));
    }
    for (size_t i = 0; i < n; i++) {
        int64_t x = v[i];
        int bytes;
        if (x >= 0 && x < 128) {
            *p++ = (uint8_t)x;
            continue;
        }
        if (x < 0 && x >= -32) {
            *p++ = (uint8_t)(0xe0 | (x + 32));
            continue;
        }
        if (x > 0) {
            uint64_t u = (uint64_t)x;
            bytes = u <= 0xff ? 1 : u <= 0xffff ? 2 : u <= 0xffffffffu ? 4 : 8;
            *p++ = bytes == 1 ? 0xcc : bytes == 2 ? 0xcd : bytes == 4 ? 0xce : 0xcf;
        } else {
            bytes = x >= -128 ? 1 : x >= -32768 ? 2 : x >= INT32_MIN ? 4 : 8;
            *p++ = bytes == 1 ? 0xd0 : bytes == 2 ? 0xd1 : bytes == 4 ? 0xd2 : 0xd3;
        }
        for (int k = bytes - 1; k >= 0; k--) *p++ = (uint8_t)((uint64_t)x >> (8 * k));
    }
    PyObject *encoded = PyBytes_FromStringAndSize((const char *)out, p - out);
    if (out != small) PyMem_Free(out);
    return encoded;
}

static int set_new(PyObject *dict, PyObject *key, PyObject *value) {
    if (!value) return -1;
    int failed = PyDict_SetItem(dict, key, value);
    Py_DECREF(value);
    return failed;
}

/* One sequence's share of the parts (`sequence_parts`); -1 on error. */
static int add_sequence(Scan *s, const Parts *how, Sequence *sequence, PyObject **parts) {
    PyObject *seqs = parts[0], *roots = parts[1], *counts = parts[2], *first = parts[4];
    PyObject *methods = parts[5], *encoded = parts[6];
    PyObject *seq = sequence->seq;
    Column *m = &sequence->methods;
    sort_values(m->data, m->len);
    PyObject *list = PyList_New((Py_ssize_t)m->len);
    for (size_t k = 0; list && k < m->len; k++) {
        PyObject *value = LONG_OF(m->data[k]);
        if (!value) Py_CLEAR(list);
        else PyList_SET_ITEM(list, (Py_ssize_t)k, value);
    }
    if (set_new(methods, seq, list) < 0) return -1;
    if (how->encode && set_new(encoded, seq, encoded_ints(m->data, m->len)) < 0) return -1;
    if (PySet_Add(seqs, seq) < 0) return -1;
    if (sequence->count && set_new(counts, seq, LONG_OF(sequence->count)) < 0) return -1;
    if (set_new(first, seq, LONG_OF(sequence->first_t + how->offset)) < 0) return -1;
    const Column *col = s->start;
    int64_t b = sequence->best, iid = col[S_IID].data[b];
    PyObject *end = end_of(s, iid, how->offset);
    PyObject *root[] = {Py_NewRef(seq),
                        PyLong_FromLong(col[S_PARENT].data[b] != 0),
                        PyLong_FromLong(col[S_HID].data[b] != 0),
                        LONG_OF(col[S_T].data[b] + how->offset),
                        Py_NewRef(how->puid),
                        LONG_OF(iid),
                        LONG_OF(col[S_METHOD].data[b]),
                        end,
                        Py_NewRef(Py_None)};
    return append_new(roots, tuple_of(9, root));
}

/* The per-sequence parts `batch_index._pack_scanned` returns (wall-clock times: each plus the
 * offset, which the caller has checked cannot overflow): every sequence, its root candidate as
 * a root row (seq, untrue, handed, t_ns, puid, iid, method, end or None, None), its Start count
 * when it has any, its (seq, puid, tid) thread pairs, its earliest Start, its sorted methods
 * and, when asked, those as msgpack. A tuple of the seven, or NULL. */
static PyObject *sequence_parts(Scan *s, const Parts *how) {
    PyObject *parts[] = {PySet_New(NULL), PyList_New(0), PyDict_New(), PySet_New(NULL),
                         PyDict_New(), PyDict_New(), PyDict_New()};
    enum { N_PARTS = sizeof(parts) / sizeof(parts[0]) };
    int failed = 0;
    for (size_t k = 0; k < N_PARTS; k++) failed |= parts[k] == NULL;
    for (size_t q = 0; !failed && q < s->count; q++)
        failed = add_sequence(s, how, &s->seqs[q], parts) < 0;
    for (size_t k = 0; !failed && k < s->thread_seq.len; k++) {
        PyObject *pair[] = {Py_NewRef(s->seqs[s->thread_seq.data[k]].seq), Py_NewRef(how->puid),
                            LONG_OF(s->thread_tid.data[k])};
        PyObject *thread = tuple_of(3, pair);
        failed = !thread || PySet_Add(parts[3], thread) < 0;
        Py_XDECREF(thread);
    }
    if (failed) {
        for (size_t k = 0; k < N_PARTS; k++) Py_XDECREF(parts[k]);
        return NULL;
    }
    return tuple_of(N_PARTS, parts);
}

/* The Ends resolved against the Starts: ended iids marked, the others returned as late. */
static PyObject *late_ends(Scan *s) {
    PyObject *late = PyList_New(0);
    for (size_t k = 0; late && k < s->end_iid.len; k++) {
        int64_t iid = s->end_iid.data[k];
        Entry *e = table_find(&s->iids, 0, iid);
        if (e) {
            e->end = ENDED;
            e->end_ns = s->end_t.data[k];
        } else if (append_new(late, Py_BuildValue("(LL)", iid, s->end_t.data[k])) < 0) {
            Py_CLEAR(late);
        }
    }
    return late;
}

/* Every iid counted in its sequence; those without an End as (iid, seq). */
static PyObject *opened(Scan *s) {
    PyObject *open = PyList_New(0);
    for (size_t i = 0; open && i <= s->iids.mask; i++) {
        Entry *e = &s->iids.slots[i];
        if (e->process < 0) continue;
        Sequence *sequence = &s->seqs[s->start[S_SEQ].data[e->start]];
        sequence->count++;
        if (e->end != ENDLESS) continue;
        PyObject *pair[] = {LONG_OF(e->iid), Py_NewRef(sequence->seq)};
        if (append_new(open, tuple_of(2, pair)) < 0) Py_CLEAR(open);
    }
    return open;
}

/* The parentless Starts continuing a hand-off: (seq, iid, hid, end or None), in batch order. */
static PyObject *entries(Scan *s) {
    PyObject *found = PyList_New(0);
    const Column *col = s->start;
    for (size_t row = 0; found && row < col[S_IID].len; row++) {
        if (col[S_PARENT].data[row] != 0 || col[S_HID].data[row] == 0) continue;
        int64_t iid = col[S_IID].data[row];
        PyObject *seq = s->seqs[col[S_SEQ].data[row]].seq;
        if (append_new(found, Py_BuildValue("(OLLN)", seq, iid, col[S_HID].data[row],
                                            end_of(s, iid, 0))) < 0)
            Py_CLEAR(found);
    }
    return found;
}

/* (chunk, event, whether its iid has a Start in the batch) of every Error, Handoff and Attrs. */
static PyObject *rare(Scan *s) {
    PyObject *found = PyList_New(0);
    for (size_t k = 0; found && k < s->rare_iid.len; k++) {
        int64_t iid = s->rare_iid.data[k];
        PyObject *in_batch = iid >= 0 && table_find(&s->iids, 0, iid) ? Py_True : Py_False;
        if (append_new(found, Py_BuildValue("(LLO)", s->rare_chunk.data[k],
                                            s->rare_event.data[k], in_batch)) < 0)
            Py_CLEAR(found);
    }
    return found;
}

static void scan_free(Scan *s) {
    Column *columns[] = {&s->end_iid,    &s->end_t,      &s->thread_seq, &s->thread_tid,
                         &s->rare_chunk, &s->rare_event, &s->rare_iid};
    for (int c = 0; c < S_COUNT; c++) column_free(&s->start[c]);
    for (size_t c = 0; c < sizeof(columns) / sizeof(columns[0]); c++) column_free(columns[c]);
    for (size_t q = 0; q < s->count; q++) {
        Py_XDECREF(s->seqs[q].seq);
        column_free(&s->seqs[q].methods);
    }
    PyMem_Free(s->seqs);
    PyMem_Free(s->slots);
    PyMem_Free(s->iids.slots);
    PyMem_Free(s->methods.slots);
}

static int scan_init(Scan *s, Py_ssize_t bytes) {
    memset(s, 0, sizeof(*s));
    s->t_min = INT64_MAX;
    s->t_max = INT64_MIN;
    s->capacity = 64;
    s->seqs = PyMem_Malloc(s->capacity * sizeof(Sequence));
    if (!s->seqs) {
        PyErr_NoMemory();
        return -1;
    }
    /* A Start and its End take about 45 bytes of msgpack: a typical batch's table never grows,
     * and is not much bigger than it needs (it is cleared for every batch). */
    size_t starts = (size_t)bytes / 48 + 1;
    if (slots_resize(s, 128) < 0 || table_init(&s->iids, starts) < 0 ||
        table_init(&s->methods, 64) < 0)
        return -1;
    return 0;
}

/* (events, t_min, t_max, the seven parts of `sequence_parts`, opened, entries, late_ends, rare)
 * of a finished scan; OverflowError when a time plus the offset does not fit 64 bits. */
static PyObject *scan_results(Scan *s, const Parts *how) {
    int64_t sum;
    if (s->t_min <= s->t_max && (__builtin_add_overflow(s->t_min, how->offset, &sum) ||
                                 __builtin_add_overflow(s->t_max, how->offset, &sum)))
        return PyErr_Format(PyExc_OverflowError, "time out of range");
    PyObject *late = late_ends(s); /* first: it marks what ended */
    PyObject *open = late ? opened(s) : NULL; /* then: it counts each sequence's iids */
    PyObject *parts = open ? sequence_parts(s, how) : NULL;
    PyObject *entered = parts ? entries(s) : NULL;
    PyObject *others = entered ? rare(s) : NULL;
    PyObject *t_min = s->t_min <= s->t_max ? LONG_OF(s->t_min) : Py_NewRef(Py_None);
    PyObject *t_max = s->t_min <= s->t_max ? LONG_OF(s->t_max) : Py_NewRef(Py_None);
    if (others && t_min && t_max) {
        PyObject *items[3 + 7 + 4] = {LONG_OF(s->events), t_min, t_max};
        for (Py_ssize_t k = 0; k < 7; k++) items[3 + k] = Py_NewRef(PyTuple_GET_ITEM(parts, k));
        items[10] = open;
        items[11] = entered;
        items[12] = late;
        items[13] = others;
        Py_DECREF(parts);
        return tuple_of(14, items);
    }
    PyObject *made[] = {late, open, parts, entered, others, t_min, t_max};
    for (size_t k = 0; k < sizeof(made) / sizeof(made[0]); k++) Py_XDECREF(made[k]);
    return NULL;
}

/* The Parts of a scan's arguments (puid, offset, encode), 0; -1 on error. */
static int parts_of(Parts *how, PyObject *puid, long long offset, int encode) {
    if (!PyLong_Check(puid)) {
        PyErr_SetString(PyExc_TypeError, "puid must be an int");
        return -1;
    }
    how->puid = puid;
    how->offset = offset;
    how->encode = encode;
    return 0;
}

PyObject *pack_scan(PyObject *module, PyObject *args) {
    PyObject *blob, *puid;
    long long offset;
    int encode;
    Parts how;
    if (!PyArg_ParseTuple(args, "SOLp:scan", &blob, &puid, &offset, &encode) ||
        parts_of(&how, puid, offset, encode) < 0)
        return NULL;
    Scan s;
    PyObject *result = NULL;
    Reader r = {(const uint8_t *)PyBytes_AS_STRING(blob),
                (const uint8_t *)PyBytes_AS_STRING(blob) + PyBytes_GET_SIZE(blob)};
    if (scan_init(&s, PyBytes_GET_SIZE(blob)) == 0 && scan_chunks(&s, &r) == 0) {
        if (r.p != r.end)
            damaged("trailing bytes");
        else
            result = scan_results(&s, &how);
    }
    scan_free(&s);
    return result;
}

PyObject *pack_scan_batch(PyObject *module, PyObject *args) {
    const char *body;
    Py_ssize_t size;
    int field, encode;
    PyObject *puid;
    long long offset;
    Parts how;
    if (!PyArg_ParseTuple(args, "y#iOLp:scan_batch", &body, &size, &field, &puid, &offset,
                          &encode) ||
        parts_of(&how, puid, offset, encode) < 0)
        return NULL;
    Scan s;
    PyObject *result = NULL;
    Reader r = {(const uint8_t *)body, (const uint8_t *)body + size};
    uint32_t fields;
    if (scan_init(&s, size) < 0 || read_array(&r, &fields) < 0) goto done;
    if (field < 0 || (uint32_t)field >= fields) {
        damaged("no thread chunks");
        goto done;
    }
    for (int k = 0; k < field; k++)
        if (skip(&r, 0) < 0) goto done;
    const uint8_t *begin = r.p;
    if (scan_chunks(&s, &r) < 0) goto done;
    PyObject *found = scan_results(&s, &how);
    if (found) result = Py_BuildValue("(y#N)", begin, (Py_ssize_t)(r.p - begin), found);
done:
    scan_free(&s);
    return result;
}

/* ---------------------------------------------------------------- a group's single rows */

/* `cmr.store.sqlite.single._bound` (the reference: tests/cmr/store/test_write_plan.py holds the
 * two equal): INSERT_SINGLE's parameters for a group's single rows, each root named by a dict
 * keyed by (puid, method) (KeyError for a root it does not name), and the zones and batches of
 * the block they make, in one pass, without the Python objects a row cost there but its own.
 * TypeError or OverflowError for a row it cannot read as int64s: the caller then takes the
 * Python pass. */

enum { SINGLE_FIELDS = 13, MAX_KEPT_BATCHES = 64 };

typedef struct {
    PyObject *name; /* borrowed from the names dict (or None) */
    int64_t first, last, longest;
} Zone;

static int int64_at(PyObject *row, Py_ssize_t at, int64_t *out) {
    PyObject *value = PyTuple_GET_ITEM(row, at);
    if (!PyLong_Check(value)) {
        PyErr_SetString(PyExc_TypeError, "a single row's field is not an int");
        return -1;
    }
    long long v = PyLong_AsLongLong(value);
    if (v == -1 && PyErr_Occurred()) return -1;
    *out = v;
    return 0;
}

/* The zone of `name` among `zones` widened to a row's start and duration (made when new:
 * `*count` grows, `index` maps the name to it); 0, or -1 on error. */
static int zone_of(PyObject *index, Zone **zones, Py_ssize_t *count, Py_ssize_t *room,
                   PyObject *name, int64_t start, int64_t lasted) {
    PyObject *at = PyDict_GetItemWithError(index, name);
    if (at) {
        Zone *z = &(*zones)[PyLong_AsSsize_t(at)];
        if (start < z->first) z->first = start;
        else if (start > z->last) z->last = start;
        if (lasted > z->longest) z->longest = lasted;
        return 0;
    }
    if (PyErr_Occurred()) return -1;
    if (*count == *room) {
        Py_ssize_t bigger = 2 * *room + 8;
        Zone *grown = PyMem_Realloc(*zones, (size_t)bigger * sizeof(Zone));
        if (!grown) {
            PyErr_NoMemory();
            return -1;
        }
        *zones = grown;
        *room = bigger;
    }
    if (set_new(index, name, PyLong_FromSsize_t(*count)) < 0) return -1;
    (*zones)[(*count)++] = (Zone){name, start, start, lasted};
    return 0;
}

PyObject *pack_bound_singles(PyObject *module, PyObject *args) {
    PyObject *rows, *names;
    if (!PyArg_ParseTuple(args, "O!O!:bound_singles", &PyList_Type, &rows, &PyDict_Type, &names))
        return NULL;
    PyObject *params = PyList_New(PyList_GET_SIZE(rows)), *batches = PySet_New(NULL);
    PyObject *index = PyDict_New(), *zoned = NULL, *result = NULL;
    Zone *zones = NULL;
    Py_ssize_t count = 0, room = 0, kept = 0;
    int64_t kept_batches[MAX_KEPT_BATCHES][2];
    if (!params || !batches || !index) goto done;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(rows); i++) {
        PyObject *row = PyList_GET_ITEM(rows, i);
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != SINGLE_FIELDS) {
            PyErr_SetString(PyExc_TypeError, "a single row is a tuple of 13");
            goto done;
        }
        int64_t start, end, puid, batch_no, lasted;
        if (int64_at(row, 1, &start) < 0 || int64_at(row, 5, &end) < 0 ||
            int64_at(row, 7, &puid) < 0 || int64_at(row, 11, &batch_no) < 0)
            goto done;
        if (__builtin_sub_overflow(end, start, &lasted)) {
            PyErr_SetString(PyExc_OverflowError, "a duration beyond 64 bits");
            goto done;
        }
        PyObject *key = PyTuple_Pack(2, PyTuple_GET_ITEM(row, 3), PyTuple_GET_ITEM(row, 4));
        PyObject *name = key ? PyDict_GetItemWithError(names, key) : NULL;
        if (!name && key && !PyErr_Occurred()) PyErr_SetObject(PyExc_KeyError, key);
        Py_XDECREF(key);
        if (!name) goto done;
        PyObject *error = PyTuple_GET_ITEM(row, 6);
        PyObject *param[] = {PyByteArray_FromObject(PyTuple_GET_ITEM(row, 0)),
                             Py_NewRef(PyTuple_GET_ITEM(row, 1)),
                             Py_NewRef(PyTuple_GET_ITEM(row, 2)),
                             Py_NewRef(name),
                             Py_NewRef(PyTuple_GET_ITEM(row, 5)),
                             error == Py_None ? PyLong_FromLong(0) : Py_NewRef(error),
                             Py_NewRef(PyTuple_GET_ITEM(row, 7)),
                             Py_NewRef(PyTuple_GET_ITEM(row, 8)),
                             Py_NewRef(PyTuple_GET_ITEM(row, 9)),
                             Py_NewRef(PyTuple_GET_ITEM(row, 10)),
                             Py_NewRef(PyTuple_GET_ITEM(row, 11)),
                             PyByteArray_FromObject(PyTuple_GET_ITEM(row, 12))};
        PyObject *bound = tuple_of(12, param);
        if (!bound) goto done;
        PyList_SET_ITEM(params, i, bound);
        Py_ssize_t k = 0;
        while (k < kept && (kept_batches[k][0] != puid || kept_batches[k][1] != batch_no)) k++;
        if (k == kept) { /* a batch not seen yet (a group holds a few) */
            PyObject *pair[] = {Py_NewRef(PyTuple_GET_ITEM(row, 7)),
                                Py_NewRef(PyTuple_GET_ITEM(row, 11))};
            PyObject *batch = tuple_of(2, pair);
            int failed = !batch || PySet_Add(batches, batch) < 0;
            Py_XDECREF(batch);
            if (failed) goto done;
            if (kept < MAX_KEPT_BATCHES) {
                kept_batches[kept][0] = puid;
                kept_batches[kept][1] = batch_no;
                kept++;
            }
        }
        if (zone_of(index, &zones, &count, &room, name, start, lasted) < 0) goto done;
    }
    zoned = PyList_New(count);
    for (Py_ssize_t z = 0; zoned && z < count; z++) {
        PyObject *zone[] = {Py_NewRef(zones[z].name), LONG_OF(zones[z].first),
                            LONG_OF(zones[z].last), LONG_OF(zones[z].longest)};
        PyObject *item = tuple_of(4, zone);
        if (!item) Py_CLEAR(zoned);
        else PyList_SET_ITEM(zoned, z, item);
    }
    if (zoned) {
        PyObject *both[] = {Py_NewRef(zoned), Py_NewRef(batches)};
        PyObject *made[] = {Py_NewRef(params), tuple_of(2, both)};
        result = tuple_of(2, made);
    }
done:
    Py_XDECREF(params);
    Py_XDECREF(batches);
    Py_XDECREF(index);
    Py_XDECREF(zoned);
    PyMem_Free(zones);
    return result;
}
