/* Ingest's index pass over one batch, in C.
 *
 * `cmr.store.batch_index.pack` indexes every batch a repository stores (its sequences, their methods,
 * the listing lines' parts, the Ends whose Start is elsewhere). Done with comprehensions over the
 * decoded events it cost twice the typed decode itself; `scan` reads the same events from the
 * msgpack of the batch's thread chunks (the blob the store keeps) in one pass, with two hash tables,
 * and returns only what is small: the per-sequence parts of the index as the store takes them
 * (`sequence_parts`: made here, they cost a batch of requests more in Python than the pass), the
 * invocations left open, the entries, the late Ends, and where the rare events are (Errors,
 * Handoffs, Attrs: Python reads those from the decoded batch, as few as they are). Its parts,
 * included at the end: what a scan returns (`_pack_results.h`) and a group's single rows bound for
 * their insert (`bound_singles`, `_pack_singles.h`).
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

/* The parts, in order (one translation unit). */
#include "_pack_results.h"
#include "_pack_singles.h"
