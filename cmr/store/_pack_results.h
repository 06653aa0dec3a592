/* cmr.store._columns' index pass (_pack.c), one of its parts: what a scan of a batch
 * returns (scan(): the sequences' parts, the open invocations, the entries, the late Ends).
 * Included once, in order, at the end of _pack.c (one translation unit: the parts share its
 * static helpers); see _pack.c for the whole. */

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
