/* The repository's read path in C: a sequence's invocations as column arrays.
 *
 * `cmr show` of a million calls used to make a million InvocationRecord objects (and decode two
 * million event Structs to make them). `gather` reads the stored batches' msgpack blobs directly,
 * keeps the sequence's Starts as int64 columns, joins their Ends and Errors by (process, iid) in a
 * window of slots per process (`_iids.h`: one slot per iid, a hash table for the iids out of its
 * reach), and sorts the columns by (start, puid, iid): the records `cmr.store.stored_batches.unpack`
 * makes, with the same rules, and no object per call. The table it leaves behind (`Index`) answers
 * "where is (puid, iid)" for the views (parents, hand-off submitters), and `children` lays the
 * tree out as two arrays (CSR) instead of a list per call.
 *
 * The blobs were validated by typed decoding when their batches arrived; the parser still checks
 * every length and type, and a blob it cannot read raises ValueError (a damaged file), never reads
 * past its end.
 *
 * Rules (those of `unpack`, which is the reference; the tests compare both):
 * - the first Start of a (puid, iid) in batch order wins;
 * - the first End or Error of a (puid, iid) wins, except that within one chunk an End wins over an
 *   Error whatever their order;
 * - wall time = event time + the batch's clock offset (an overflow is a damaged batch);
 * - Attrs events are returned raw (msgpack of the whole event) with their process, in order.
 */

#include "_arrays.h"
#include "_iids.h"
#include "_msgpack.h"
#include "_pack.h"

uint64_t table_seed;

/* ---------------------------------------------------------------- gathering */

enum { C_PROCESS, C_IID, C_PARENT, C_HID, C_TID, C_METHOD, C_START, C_COUNT };

typedef struct {
    const uint8_t *seq;
    Column col[C_COUNT]; /* C_PROCESS holds the process's index in `puids` */
    Iids iids;
    PyObject *puids;  /* list of the processes' puids, in order of first batch */
    PyObject *errors; /* list of exception names, indexed by Entry.error */
    PyObject *attrs;  /* list of (puid, raw Attrs event) */
    uint32_t chunk;
} Gather;

static int add_time(int64_t t, int64_t offset, int64_t *out) {
    if (__builtin_add_overflow(t, offset, out)) return damaged("time out of range");
    return 0;
}

static int gather_event(Gather *g, Reader *r, int32_t process, int64_t tid, int64_t offset,
                        PyObject *puid) {
    const uint8_t *begin = r->p;
    uint32_t len;
    int64_t tag;
    if (read_array(r, &len) < 0) return -1;
    if (len < 1 || read_int(r, &tag) < 0) return len < 1 ? damaged("empty event") : -1;
    if (tag == 0) { /* Start: iid, parent, hid, method, t_ns, seq */
        int64_t iid, parent, hid, method, t;
        const uint8_t *seq;
        uint32_t seq_len;
        if (len != 7 || read_int(r, &iid) < 0 || read_int(r, &parent) < 0 ||
            read_int(r, &hid) < 0 || read_int(r, &method) < 0 || read_int(r, &t) < 0 ||
            read_bytes(r, &seq, &seq_len, 0) < 0)
            return PyErr_Occurred() ? -1 : damaged("bad Start");
        if (seq_len != 16 || memcmp(seq, g->seq, 16) != 0) return 0;
        Entry *e = iids_get(&g->iids, process, iid);
        if (!e) return -1;
        if (e->start >= 0) return 0; /* a repeated Start: the first wins */
        int64_t wall;
        if (add_time(t, offset, &wall) < 0) return -1;
        if (g->col[C_IID].len >= INT32_MAX) return damaged("too many invocations");
        e->start = (int32_t)g->col[C_IID].len;
        int64_t row[C_COUNT] = {process, iid, parent, hid, tid, method, wall};
        for (int c = 0; c < C_COUNT; c++)
            if (column_push(&g->col[c], row[c]) < 0) return -1;
        return 0;
    }
    if (tag == 1 || tag == 2) { /* End: iid, t_ns; Error: iid, t_ns, error */
        int64_t iid, t;
        const uint8_t *name = NULL;
        uint32_t name_len = 0;
        if (len != (tag == 1 ? 3u : 4u) || read_int(r, &iid) < 0 || read_int(r, &t) < 0 ||
            (tag == 2 && read_bytes(r, &name, &name_len, 1) < 0))
            return PyErr_Occurred() ? -1 : damaged("bad End");
        Entry *e = iids_get(&g->iids, process, iid);
        if (!e) return -1;
        int take = e->end == ENDLESS || (tag == 1 && FAILED(e) && e->chunk == g->chunk);
        if (!take) return 0;
        int64_t wall;
        if (add_time(t, offset, &wall) < 0) return -1;
        e->end_ns = wall;
        e->chunk = g->chunk;
        e->end = ENDED;
        if (tag == 2) {
            PyObject *text = PyUnicode_DecodeUTF8((const char *)name, name_len, "strict");
            if (!text) return -1;
            Py_ssize_t at = PyList_GET_SIZE(g->errors);
            int failed = PyList_Append(g->errors, text);
            Py_DECREF(text);
            if (failed < 0) return -1;
            e->end = (int32_t)at;
        }
        return 0;
    }
    for (uint32_t i = 1; i < len; i++) /* Handoff (stored apart) or Attrs (returned raw) */
        if (skip(r, 0) < 0) return -1;
    if (tag == 4) {
        PyObject *item = Py_BuildValue("(Oy#)", puid, begin, (Py_ssize_t)(r->p - begin));
        if (!item) return -1;
        int failed = PyList_Append(g->attrs, item);
        Py_DECREF(item);
        return failed;
    }
    return tag == 3 ? 0 : damaged("unknown event");
}

static int gather_blob(Gather *g, int32_t process, PyObject *puid, int64_t offset,
                       const uint8_t *blob, Py_ssize_t size) {
    Reader r = {blob, blob + size};
    uint32_t chunks;
    if (read_array(&r, &chunks) < 0) return -1;
    for (uint32_t c = 0; c < chunks; c++) {
        uint32_t fields, events;
        int64_t tid;
        if (read_array(&r, &fields) < 0) return -1;
        if (fields != 2) return damaged("bad chunk");
        if (read_int(&r, &tid) < 0 || read_array(&r, &events) < 0) return -1;
        g->chunk++;
        for (uint32_t i = 0; i < events; i++)
            if (gather_event(g, &r, process, tid, offset, puid) < 0) return -1;
    }
    if (r.p != r.end) return damaged("trailing bytes");
    return 0;
}

/* The index of `puid` in g->puids, appended when new. */
static int32_t process_index(Gather *g, PyObject *puid) {
    Py_ssize_t n = PyList_GET_SIZE(g->puids);
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        int equal = PyObject_RichCompareBool(PyList_GET_ITEM(g->puids, i), puid, Py_EQ);
        if (equal < 0) return -1;
        if (equal) return (int32_t)i;
    }
    if (n >= INT32_MAX || PyList_Append(g->puids, puid) < 0) return -1;
    return (int32_t)n;
}

/* ---------------------------------------------------------------- buffers of numbers */

/* `obj`'s buffer as values of `item` bytes: exactly `rows` of them (-1: any number). Returns how
 * many, or -1 with ValueError (the view is then released). */
static Py_ssize_t values_of(PyObject *obj, Py_buffer *view, size_t item, Py_ssize_t rows,
                            const char *what) {
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) return -1;
    Py_ssize_t count = view->len / (Py_ssize_t)item;
    if (view->len % (Py_ssize_t)item || (rows >= 0 && count != rows)) {
        PyBuffer_Release(view);
        if (rows >= 0)
            PyErr_Format(PyExc_ValueError, "%s: %zd values of %zu bytes expected", what, rows,
                         item);
        else
            PyErr_Format(PyExc_ValueError, "%s: values of %zu bytes expected", what, item);
        return -1;
    }
    return count;
}

/* ---------------------------------------------------------------- the Index type */

typedef struct {
    PyObject_HEAD
    Iids iids; /* (process, iid) -> row, in Entry.start; nothing else is kept */
    int64_t *puid_values; /* each process's puid, by its index in the table's keys */
    Py_ssize_t processes;
    Py_ssize_t rows;
} Index;

static PyTypeObject IndexType;

static void index_dealloc(Index *self) {
    iids_free(&self->iids);
    PyMem_Free(self->puid_values);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* The index of process `puid`, -1 when it has no row here; `hint` is tried first (rows of one
 * process come together). */
static int32_t index_process(Index *self, int64_t puid, int32_t hint) {
    if (hint >= 0 && hint < self->processes && self->puid_values[hint] == puid) return hint;
    for (Py_ssize_t i = 0; i < self->processes; i++)
        if (self->puid_values[i] == puid) return (int32_t)i;
    return -1;
}

static PyObject *index_position(Index *self, PyObject *args) {
    PyObject *puid_obj;
    long long iid;
    int overflow;
    if (!PyArg_ParseTuple(args, "OL:position", &puid_obj, &iid)) return NULL;
    long long puid = PyLong_AsLongLongAndOverflow(puid_obj, &overflow);
    if (puid == -1 && PyErr_Occurred()) return NULL;
    int32_t process = overflow ? -1 : index_process(self, puid, -1);
    Entry *e = process < 0 ? NULL : iids_find(&self->iids, process, iid);
    return PyLong_FromLong(e ? e->start : -1);
}

/* parents(puids, parent_iids) -> array('q'): the row of each row's parent in its own
 * process, -1 when it has none here (iid 0, not gathered, or itself). */
static PyObject *index_parents(Index *self, PyObject *args) {
    PyObject *processes, *parents;
    if (!PyArg_ParseTuple(args, "OO:parents", &processes, &parents)) return NULL;
    Py_buffer pv, av;
    if (values_of(processes, &pv, sizeof(int64_t), self->rows, "puids") < 0) return NULL;
    if (values_of(parents, &av, sizeof(int64_t), self->rows, "parents") < 0) {
        PyBuffer_Release(&pv);
        return NULL;
    }
    int64_t *row;
    PyObject *out = array_of("q", self->rows, (void **)&row);
    if (out) {
        const int64_t *puid = pv.buf, *parent = av.buf;
        int32_t process = -1;
        for (Py_ssize_t i = 0; i < self->rows; i++) {
            process = index_process(self, puid[i], process);
            Entry *e = parent[i] && process >= 0 ? iids_find(&self->iids, process, parent[i])
                                                 : NULL;
            row[i] = e && e->start != i ? e->start : -1;
        }
    }
    PyBuffer_Release(&pv);
    PyBuffer_Release(&av);
    return out;
}

static PyMethodDef index_methods[] = {
    {"position", (PyCFunction)index_position, METH_VARARGS,
     "position(puid, iid) -> the row of that invocation, -1 when it is not here."},
    {"parents", (PyCFunction)index_parents, METH_VARARGS,
     "parents(processes, parent_iids) -> array('q'): each row's parent row in its process, -1 "
     "for none."},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject IndexType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "cmr.store._columns.Index",
    .tp_basicsize = sizeof(Index),
    .tp_dealloc = (destructor)index_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Where each gathered (puid, iid) sits in the columns.",
    .tp_methods = index_methods,
};

/* ---------------------------------------------------------------- gather() */

static const int64_t *sort_start, *sort_iid;
static const int64_t *sort_puid_of; /* puid value per process index */
static const int64_t *sort_process;

static int by_start(const void *a, const void *b) {
    int32_t i = *(const int32_t *)a, j = *(const int32_t *)b;
    if (sort_start[i] != sort_start[j]) return sort_start[i] < sort_start[j] ? -1 : 1;
    int64_t pi = sort_puid_of[sort_process[i]], pj = sort_puid_of[sort_process[j]];
    if (pi != pj) return pi < pj ? -1 : 1;
    return sort_iid[i] < sort_iid[j] ? -1 : sort_iid[i] > sort_iid[j];
}

/* An array('q') of the `n` values of `column`, which it takes (its buffer becomes the array's):
 * in `order` (NULL: as they are), the order applied in a new buffer. */
static PyObject *column_array(Column *column, const int32_t *order, size_t n) {
    int64_t *values = column->data;
    size_t allocated = column->cap;
    if (order) {
        values = PyMem_Malloc((n ? n : 1) * sizeof(int64_t));
        if (!values) return PyErr_NoMemory();
        for (size_t i = 0; i < n; i++) values[i] = column->data[order[i]];
        allocated = n ? n : 1;
        column_free(column);
    } else {
        column->data = NULL;
        column->len = column->cap = 0;
    }
    return array_adopt("q", values, (Py_ssize_t)n, (Py_ssize_t)allocated);
}

static void gather_free(Gather *g) {
    for (int c = 0; c < C_COUNT; c++) column_free(&g->col[c]);
    iids_free(&g->iids);
    Py_XDECREF(g->puids);
    Py_XDECREF(g->errors);
    Py_XDECREF(g->attrs);
}

/* Builds the result once every batch is read: rows in (start, puid, iid) order. The gathering
 * table becomes the index (its entries' `start` rewritten to the final rows; entries of Ends
 * whose Start is not here keep -1), so no second table of a million keys is built, unless most
 * of its entries are other sequences' Ends. */
static PyObject *gather_finish(Gather *g) {
    size_t n = g->col[C_IID].len;
    size_t rows = n ? n : 1;
    Py_ssize_t processes = PyList_GET_SIZE(g->puids);
    int64_t *puid_of = PyMem_Calloc((size_t)processes + 1, sizeof(int64_t));
    int32_t *order = NULL, *final = NULL;
    int64_t *ends = NULL;
    uint8_t *ended = NULL;
    PyObject *columns = NULL, *errors = NULL, *result = NULL;
    Index *index = NULL;
    if (!puid_of) return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < processes; i++) {
        puid_of[i] = PyLong_AsLongLong(PyList_GET_ITEM(g->puids, i));
        if (puid_of[i] == -1 && PyErr_Occurred()) goto done;
    }
    const int64_t *start = g->col[C_START].data;
    int sorted = 1;
    for (size_t i = 1; i < n && sorted; i++) sorted = start[i - 1] < start[i];
    if (!sorted) {
        order = PyMem_Malloc(rows * sizeof(int32_t));
        final = PyMem_Malloc(rows * sizeof(int32_t)); /* gathered row -> row */
        if (!order || !final) goto nomem;
        for (size_t i = 0; i < n; i++) order[i] = (int32_t)i;
        sort_start = start;
        sort_iid = g->col[C_IID].data;
        sort_process = g->col[C_PROCESS].data;
        sort_puid_of = puid_of;
        qsort(order, n, sizeof(int32_t), by_start);
        for (size_t i = 0; i < n; i++) final[order[i]] = (int32_t)i;
    }
    /* Each row's end and error, by its final row; the table's entries point at final rows. */
    ends = PyMem_Malloc(rows * sizeof(int64_t));
    ended = PyMem_Calloc(rows, 1);
    errors = PyDict_New();
    if (!errors) goto done;
    if (!ends || !ended) goto nomem;
    IidsAt at = {0, 0};
    for (Entry *e = iids_next(&g->iids, &at); e; e = iids_next(&g->iids, &at)) {
        if (e->start < 0) continue;
        int32_t row = final ? final[e->start] : e->start;
        e->start = row;
        ends[row] = e->end != ENDLESS ? e->end_ns : 0;
        ended[row] = e->end != ENDLESS;
        if (FAILED(e)) {
            PyObject *key = PyLong_FromLong(row);
            int failed = !key || PyDict_SetItem(errors, key, PyList_GET_ITEM(g->errors, e->end));
            Py_XDECREF(key);
            if (failed) goto done;
        }
    }
    index = PyObject_New(Index, &IndexType);
    if (!index) goto done;
    memset(&index->iids, 0, sizeof(index->iids));
    index->puid_values = puid_of;
    puid_of = NULL; /* the index owns the puids now */
    index->processes = processes;
    index->rows = (Py_ssize_t)n;
    if (iids_used(&g->iids) > 4 * n + 4096) { /* mostly other sequences' Ends: keep the rows */
        if (iids_init(&index->iids) < 0) goto done;
        at = (IidsAt){0, 0};
        for (Entry *e = iids_next(&g->iids, &at); e; e = iids_next(&g->iids, &at)) {
            if (e->start < 0) continue;
            Entry *kept = iids_get(&index->iids, e->process, e->iid);
            if (!kept) goto done;
            kept->start = e->start;
        }
    } else {
        index->iids = g->iids;
        memset(&g->iids, 0, sizeof(g->iids)); /* and the table */
    }
    /* The puid column holds puids, not process indexes. */
    for (size_t i = 0; i < n; i++)
        g->col[C_PROCESS].data[i] = index->puid_values[g->col[C_PROCESS].data[i]];
    columns = PyTuple_New(C_COUNT + 2);
    if (!columns) goto done;
    for (int c = 0; c < C_COUNT; c++) {
        PyObject *col = column_array(&g->col[c], order, n);
        if (!col) goto done;
        PyTuple_SET_ITEM(columns, c, col);
    }
    PyObject *end_col = array_adopt("q", ends, (Py_ssize_t)n, (Py_ssize_t)rows);
    ends = NULL; /* the array's now */
    if (!end_col) goto done;
    PyTuple_SET_ITEM(columns, C_COUNT, end_col);
    PyObject *ended_col = PyByteArray_FromStringAndSize((const char *)ended, (Py_ssize_t)n);
    if (!ended_col) goto done;
    PyTuple_SET_ITEM(columns, C_COUNT + 1, ended_col);
    result = Py_BuildValue("(OOOO)", columns, errors, g->attrs, (PyObject *)index);
    goto done;
nomem:
    PyErr_NoMemory();
done:
    PyMem_Free(puid_of);
    PyMem_Free(order);
    PyMem_Free(final);
    PyMem_Free(ends);
    PyMem_Free(ended);
    Py_XDECREF(columns);
    Py_XDECREF(errors);
    Py_XDECREF((PyObject *)index);
    return result;
}

static PyObject *gather(PyObject *module, PyObject *args) {
    const uint8_t *seq;
    Py_ssize_t seq_len;
    PyObject *batches;
    if (!PyArg_ParseTuple(args, "y#O:gather", &seq, &seq_len, &batches)) return NULL;
    if (seq_len != 16) {
        PyErr_SetString(PyExc_ValueError, "a sequence id is 16 bytes");
        return NULL;
    }
    Gather g;
    memset(&g, 0, sizeof(g));
    g.seq = seq;
    g.puids = PyList_New(0);
    g.errors = PyList_New(0);
    g.attrs = PyList_New(0);
    PyObject *iterator = NULL, *result = NULL;
    if (!g.puids || !g.errors || !g.attrs || iids_init(&g.iids) < 0) goto done;
    iterator = PyObject_GetIter(batches);
    if (!iterator) goto done;
    PyObject *item;
    while ((item = PyIter_Next(iterator))) {
        PyObject *puid;
        long long batch_no, offset;
        Py_buffer blob;
        int failed = !PyArg_ParseTuple(item, "OLLy*:gather", &puid, &batch_no, &offset, &blob);
        if (!failed) {
            int32_t process = process_index(&g, puid);
            failed = process < 0 ||
                     gather_blob(&g, process, puid, offset, blob.buf, blob.len) < 0;
            PyBuffer_Release(&blob);
        }
        Py_DECREF(item);
        if (failed) goto done;
    }
    if (PyErr_Occurred()) goto done;
    result = gather_finish(&g);
done:
    Py_XDECREF(iterator);
    gather_free(&g);
    return result;
}

/* ---------------------------------------------------------------- children() */

/* children(held) -> (starts, rows): the tree as two int64 arrays. `held` gives each row's caller
 * (-1: none); the rows a row holds are rows[starts[row]:starts[row + 1]], in row order. */
static PyObject *children(PyObject *module, PyObject *arg) {
    Py_buffer hv;
    Py_ssize_t n = values_of(arg, &hv, sizeof(int64_t), -1, "children");
    if (n < 0) return NULL;
    const int64_t *held = hv.buf;
    int64_t *first = NULL, *out = NULL;
    PyObject *starts = array_of("q", n + 1, (void **)&first);
    PyObject *rows = starts ? array_of("q", n, (void **)&out) : NULL;
    int64_t *fill = PyMem_Calloc((size_t)n + 1, sizeof(int64_t));
    if (!starts || !rows || !fill) {
        Py_XDECREF(starts);
        Py_XDECREF(rows);
        PyMem_Free(fill);
        PyBuffer_Release(&hv);
        return starts && rows ? PyErr_NoMemory() : NULL;
    }
    memset(first, 0, (size_t)(n + 1) * sizeof(int64_t));
    Py_ssize_t held_rows = 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (held[i] >= n || held[i] < -1) {
            Py_DECREF(starts);
            Py_DECREF(rows);
            PyMem_Free(fill);
            PyBuffer_Release(&hv);
            PyErr_SetString(PyExc_ValueError, "children: a caller out of range");
            return NULL;
        }
        if (held[i] >= 0) first[held[i] + 1]++;
    }
    for (Py_ssize_t i = 0; i < n; i++) first[i + 1] += first[i];
    for (Py_ssize_t i = 0; i < n; i++) {
        if (held[i] < 0) continue;
        out[first[held[i]] + fill[held[i]]++] = i;
        held_rows++;
    }
    PyMem_Free(fill);
    PyBuffer_Release(&hv);
    if (held_rows < n && PySequence_DelSlice(rows, held_rows, n) < 0) {
        Py_DECREF(starts);
        Py_DECREF(rows);
        return NULL;
    }
    PyObject *result = PyTuple_Pack(2, starts, rows);
    Py_DECREF(starts);
    Py_DECREF(rows);
    return result;
}

/* subtree_sizes(held) -> array('q'): per row, the rows beneath it. Every caller must come
 * before the rows it holds (held[i] < i), as in a start-ordered tree. */
static PyObject *subtree_sizes(PyObject *module, PyObject *arg) {
    Py_buffer hv;
    Py_ssize_t n = values_of(arg, &hv, sizeof(int64_t), -1, "subtree_sizes");
    if (n < 0) return NULL;
    const int64_t *held = hv.buf;
    int64_t *size;
    PyObject *out = array_of("q", n, (void **)&size);
    if (!out) {
        PyBuffer_Release(&hv);
        return NULL;
    }
    memset(size, 0, (size_t)hv.len);
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        if (held[i] >= i) {
            Py_DECREF(out);
            PyBuffer_Release(&hv);
            PyErr_SetString(PyExc_ValueError, "subtree_sizes: a caller after its callee");
            return NULL;
        }
        if (held[i] >= 0) size[held[i]] += size[i] + 1;
    }
    PyBuffer_Release(&hv);
    return out;
}

/* How much of [node_start, end) the union of the windows of `rows` (in start order) covers,
 * each clipped to it, a row not ended counting until `end` (`calltree._covered`). */
static int64_t union_within(const int64_t *rows, Py_ssize_t count, const int64_t *starts,
                            const int64_t *ends, const uint8_t *is_ended, int64_t node_start,
                            int64_t end) {
    int64_t covered = 0, span_start = node_start, span_end = node_start;
    for (Py_ssize_t k = 0; k < count; k++) {
        int64_t row = rows[k];
        int64_t start = starts[row] < node_start ? node_start : starts[row];
        int64_t stop = !is_ended[row] || ends[row] > end ? end : ends[row];
        if (stop <= start) continue;
        if (start > span_end) {
            covered += span_end - span_start;
            span_start = start;
        }
        if (stop > span_end) span_end = stop;
    }
    return covered + span_end - span_start;
}

/* ---------------------------------------------------------------- profile_lines() */

/* A profile line is a path of names from the root: (its caller's line, its name). */
typedef struct {
    int64_t parent; /* -1: an empty slot */
    int64_t name;
    int64_t line;
} LineSlot;

/* The slot of (parent, name) in a table of mask + 1 slots: its own, or the empty one it would
 * take. */
static size_t line_slot(const LineSlot *table, size_t mask, int64_t parent, int64_t name) {
    size_t h = mix((uint64_t)parent * 0x9e3779b97f4a7c15ULL ^ (uint64_t)name) & mask;
    while (table[h].parent >= 0 && (table[h].parent != parent || table[h].name != name))
        h = (h + 1) & mask;
    return h;
}

static const int64_t *by_line_parent, *by_line_time, *by_line_rank;

static int by_line(const void *a, const void *b) { /* caller, longest first, then name */
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    if (by_line_parent[i] != by_line_parent[j]) return by_line_parent[i] < by_line_parent[j] ? -1 : 1;
    if (by_line_time[i] != by_line_time[j]) return by_line_time[i] > by_line_time[j] ? -1 : 1;
    return by_line_rank[i] < by_line_rank[j] ? -1 : by_line_rank[i] > by_line_rank[j];
}

/* profile_lines(held, starts, ends, ended, names, ranks) -> (parent, name, calls, time, self,
 * order, line_of), one int64 bytes column each, a row per line in order of first appearance
 * (`line_of`: each row's line, a value per row); `order`
 * lists the lines but the root's by caller, then longest first, then by the rank of their name
 * (`ranks[name]`: names in text order), as `profile.sort_profile` orders a line's children. Row 0 is the root; every
 * caller comes before its callees (held[i] < i). A call's time is its duration, or for one not
 * ended what its callees account for; its self time is its duration less the union of its
 * callees' windows within it (`calltree._covered`). */
static PyObject *profile_lines(PyObject *module, PyObject *args) {
    PyObject *held_obj, *starts_obj, *ends_obj, *ended_obj, *names_obj, *ranks_obj;
    if (!PyArg_ParseTuple(args, "OOOOOO:profile_lines", &held_obj, &starts_obj, &ends_obj,
                          &ended_obj, &names_obj, &ranks_obj))
        return NULL;
    /* held, then starts, ends, ended and names (a value per row each), then ranks */
    PyObject *given[6] = {held_obj, starts_obj, ends_obj, ended_obj, names_obj, ranks_obj};
    static const char *const what[6] = {"held", "starts", "ends", "ended", "names", "ranks"};
    static const size_t item[6] = {8, 8, 8, 1, 8, 8};
    Py_buffer view[6];
    int got = 0;
    PyObject *result = NULL;
    int64_t *first = NULL, *kids = NULL, *fill = NULL, *time = NULL, *line_of = NULL;
    int64_t *out[6] = {NULL, NULL, NULL, NULL, NULL, NULL};
    LineSlot *table = NULL;
    Py_ssize_t n = values_of(held_obj, &view[0], item[0], -1, what[0]);
    if (n < 0) return NULL;
    for (got = 1; got < 6; got++)
        if (values_of(given[got], &view[got], item[got], got < 5 ? n : -1, what[got]) < 0)
            goto release;
    const int64_t *held = view[0].buf, *starts = view[1].buf, *ends = view[2].buf;
    const uint8_t *is_ended = view[3].buf;
    const int64_t *names = view[4].buf, *rank = view[5].buf;
    Py_ssize_t ranked = view[5].len / (Py_ssize_t)sizeof(int64_t);
    if (n == 0 || held[0] != -1) {
        PyErr_SetString(PyExc_ValueError, "profile_lines: row 0 must be the root");
        goto release;
    }
    for (Py_ssize_t i = 1; i < n; i++)
        if (held[i] < 0 || held[i] >= i) {
            PyErr_SetString(PyExc_ValueError, "profile_lines: a caller after its callee");
            goto release;
        }
    /* Callees of each row, in row order (compressed sparse rows). */
    first = PyMem_Calloc((size_t)n + 1, sizeof(int64_t));
    kids = PyMem_Malloc((size_t)n * sizeof(int64_t));
    fill = PyMem_Calloc((size_t)n + 1, sizeof(int64_t));
    time = PyMem_Malloc((size_t)n * sizeof(int64_t));
    line_of = PyMem_Malloc((size_t)n * sizeof(int64_t));
    /* The line columns but the first two are made once the lines are counted (few, usually) */
    for (int c = 0; c < 2; c++) out[c] = PyMem_Calloc((size_t)n, sizeof(int64_t));
    size_t size = 1024; /* doubled while the lines fill more than half of it */
    table = PyMem_Malloc(size * sizeof(LineSlot));
    if (!first || !kids || !fill || !time || !line_of || !out[0] || !out[1] || !table) {
        PyErr_NoMemory();
        goto release;
    }
    for (Py_ssize_t i = 1; i < n; i++) first[held[i] + 1]++;
    for (Py_ssize_t i = 0; i < n; i++) first[i + 1] += first[i];
    for (Py_ssize_t i = 1; i < n; i++) kids[first[held[i]] + fill[held[i]]++] = i;
    PyMem_Free(fill);
    fill = NULL;
    /* Times: a duration, or (deepest first) what the callees of a call not ended account for. */
    for (Py_ssize_t i = n - 1; i >= 0; i--) {
        if (is_ended[i]) {
            time[i] = ends[i] > starts[i] ? ends[i] - starts[i] : 0;
            continue;
        }
        int64_t sum = 0;
        for (int64_t k = first[i]; k < first[i + 1]; k++) sum += time[kids[k]];
        time[i] = sum;
    }
    /* Lines: (caller's line, name) -> line, interned in order of first appearance. */
    size_t mask = size - 1;
    for (size_t i = 0; i < size; i++) table[i].parent = -1;
    Py_ssize_t lines = 1;
    line_of[0] = 0;
    out[0][0] = -1;
    out[1][0] = names[0];
    for (Py_ssize_t i = 1; i < n; i++) {
        int64_t parent = line_of[held[i]], name = names[i];
        if (name < 0 || name >= ranked) {
            PyErr_SetString(PyExc_ValueError, "profile_lines: a name without a rank");
            goto release;
        }
        size_t h = line_slot(table, mask, parent, name);
        if (table[h].parent < 0) {
            table[h].parent = parent;
            table[h].name = name;
            table[h].line = lines;
            out[0][lines] = parent;
            out[1][lines] = name;
            lines++;
            if ((size_t)lines * 2 > size) { /* twice the slots, the lines but the root in them */
                LineSlot *grown = PyMem_Malloc(size * 2 * sizeof(LineSlot));
                if (!grown) {
                    PyErr_NoMemory();
                    goto release;
                }
                PyMem_Free(table);
                table = grown;
                size *= 2;
                mask = size - 1;
                for (size_t k = 0; k < size; k++) table[k].parent = -1;
                for (Py_ssize_t line = 1; line < lines; line++) {
                    size_t at = line_slot(table, mask, out[0][line], out[1][line]);
                    table[at].parent = out[0][line];
                    table[at].name = out[1][line];
                    table[at].line = line;
                }
                h = line_slot(table, mask, parent, name);
            }
        }
        line_of[i] = table[h].line;
    }
    PyMem_Free(table);
    table = NULL;
    for (int c = 2; c < 6; c++) out[c] = PyMem_Calloc((size_t)lines, sizeof(int64_t));
    if (!out[2] || !out[3] || !out[4] || !out[5]) {
        PyErr_NoMemory();
        goto release;
    }
    /* Per line: calls, time, self time. */
    for (Py_ssize_t i = 0; i < n; i++) {
        int64_t line = line_of[i];
        out[2][line] += 1;
        out[3][line] += time[i];
        if (!is_ended[i]) continue;
        int64_t own = time[i];
        if (first[i] < first[i + 1]) { /* less the union of the callees' windows within it */
            int64_t covered = union_within(kids + first[i], first[i + 1] - first[i], starts,
                                           ends, is_ended, starts[i], ends[i]);
            own = own > covered ? own - covered : 0;
        }
        out[4][line] += own;
    }
    /* The lines but the root's, in the order their callers list them. */
    int64_t *order = out[5], *line_rank = kids; /* kids is no longer needed: reuse it */
    for (Py_ssize_t line = 0; line < lines; line++) line_rank[line] = rank[out[1][line]];
    for (Py_ssize_t line = 1; line < lines; line++) order[line - 1] = line;
    by_line_parent = out[0];
    by_line_time = out[3];
    by_line_rank = line_rank;
    qsort(order, (size_t)(lines - 1), sizeof(int64_t), by_line);
    result = PyTuple_New(7);
    for (int c = 0; result && c < 7; c++) {
        Py_ssize_t rows = c == 6 ? n : c == 5 ? lines - 1 : lines;
        const int64_t *column = c == 6 ? line_of : out[c];
        PyObject *col =
            PyBytes_FromStringAndSize((const char *)column, rows * (Py_ssize_t)sizeof(int64_t));
        if (!col) {
            Py_CLEAR(result);
            break;
        }
        PyTuple_SET_ITEM(result, c, col);
    }
release:
    for (int k = 0; k < got; k++) PyBuffer_Release(&view[k]);
    PyMem_Free(first);
    PyMem_Free(kids);
    PyMem_Free(fill);
    PyMem_Free(time);
    PyMem_Free(line_of);
    for (int c = 0; c < 6; c++) PyMem_Free(out[c]);
    PyMem_Free(table);
    return result;
}

/* The buffers of `given[0..k)` as `item`-byte values, all of one length but the first `free`
 * (any length each). Returns how many views it holds: k, with the common length in `*n` (-1:
 * there were none), or fewer after an error (the caller releases those). */
static int views_of(PyObject *const *given, Py_buffer *view, const size_t *item,
                    const char *const *what, int k, int free, Py_ssize_t *n) {
    *n = -1;
    int got;
    for (got = 0; got < k; got++) {
        Py_ssize_t found = values_of(given[got], &view[got], item[got], got < free ? -1 : *n,
                                     what[got]);
        if (found < 0) break;
        if (got >= free) *n = found;
    }
    return got;
}

/* Where a row's window ends: max(end, start + 1), or never (INT64_MAX) when it has not ended
 * (`timeline.Call`'s window, `_samples.sample_windows`'s). */
static inline int64_t window_end(const int64_t *starts, const int64_t *ends,
                                 const uint8_t *is_ended, int64_t row) {
    if (!is_ended[row]) return INT64_MAX;
    return ends[row] > starts[row] + 1 ? ends[row] : starts[row] + 1;
}

/* ---------------------------------------------------------------- covered(), fold_sums() */

/* covered(rows, starts, ends, ended, start, end) -> int: how much of the window [start, end)
 * the union of the windows of `rows` (in start order) covers, each clipped to it, a row not
 * ended counting until `end` (`calltree._covered`). */
static PyObject *covered(PyObject *module, PyObject *args) {
    PyObject *given[4];
    long long node_start, end;
    if (!PyArg_ParseTuple(args, "OOOOLL:covered", &given[0], &given[1], &given[2], &given[3],
                          &node_start, &end))
        return NULL;
    static const char *const what[4] = {"rows", "starts", "ends", "ended"};
    static const size_t item[4] = {8, 8, 8, 1};
    Py_buffer view[4];
    Py_ssize_t n;
    int got = views_of(given, view, item, what, 4, 1, &n);
    Py_ssize_t count = got ? view[0].len / (Py_ssize_t)sizeof(int64_t) : 0;
    PyObject *result = NULL;
    if (got == 4) {
        const int64_t *rows = view[0].buf, *starts = view[1].buf, *ends = view[2].buf;
        const uint8_t *is_ended = view[3].buf;
        Py_ssize_t k = 0;
        while (k < count && rows[k] >= 0 && rows[k] < n) k++;
        if (k < count)
            PyErr_SetString(PyExc_ValueError, "covered: a row out of range");
        else
            result = PyLong_FromLongLong(
                union_within(rows, count, starts, ends, is_ended, node_start, end));
    }
    for (int k = 0; k < got; k++) PyBuffer_Release(&view[k]);
    return result;
}

/* distinct(values) -> set: the distinct int64 values of a column, each made a Python int once
 * (a set of a million boxed ints was 25 ms a column; a sequence's processes, threads and methods
 * are few). An open-addressing table of the values, seeded as the (process, iid) table is. */
static PyObject *distinct(PyObject *module, PyObject *arg) {
    Py_buffer view;
    Py_ssize_t n = values_of(arg, &view, sizeof(int64_t), -1, "values");
    if (n < 0) return NULL;
    const int64_t *values = view.buf;
    size_t size = 64, used = 0;
    int64_t *keys = PyMem_Malloc(size * sizeof(int64_t));
    uint8_t *full = PyMem_Calloc(size, 1);
    PyObject *found = NULL;
    if (!keys || !full) goto nomem;
    int64_t last = 0;
    int have_last = 0;
    for (Py_ssize_t k = 0; k < n; k++) {
        int64_t v = values[k];
        if (have_last && v == last) continue; /* runs of one value are the common case */
        last = v;
        have_last = 1;
        size_t i = mix((uint64_t)v ^ table_seed) & (size - 1);
        while (full[i] && keys[i] != v) i = (i + 1) & (size - 1);
        if (full[i]) continue;
        full[i] = 1;
        keys[i] = v;
        if (++used * 2 > size) { /* at most half full */
            size_t bigger = size * 4;
            int64_t *more_keys = PyMem_Malloc(bigger * sizeof(int64_t));
            uint8_t *more_full = PyMem_Calloc(bigger, 1);
            if (!more_keys || !more_full) {
                PyMem_Free(more_keys);
                PyMem_Free(more_full);
                goto nomem;
            }
            for (size_t j = 0; j < size; j++) {
                if (!full[j]) continue;
                size_t at = mix((uint64_t)keys[j] ^ table_seed) & (bigger - 1);
                while (more_full[at]) at = (at + 1) & (bigger - 1);
                more_full[at] = 1;
                more_keys[at] = keys[j];
            }
            PyMem_Free(keys);
            PyMem_Free(full);
            keys = more_keys;
            full = more_full;
            size = bigger;
        }
    }
    found = PySet_New(NULL);
    for (size_t i = 0; found && i < size; i++) {
        if (!full[i]) continue;
        PyObject *value = PyLong_FromLongLong(keys[i]);
        if (!value || PySet_Add(found, value) < 0) Py_CLEAR(found);
        Py_XDECREF(value);
    }
    goto done;
nomem:
    PyErr_NoMemory();
done:
    PyMem_Free(keys);
    PyMem_Free(full);
    PyBuffer_Release(&view);
    return found;
}

/* The (values, rows) arguments of `take` and `total_at` as int64 views: 0, or -1 with the
 * error set (nothing then to release). Any row out of [0, n) is the caller's to refuse. */
static int values_and_rows(PyObject *args, const char *format, Py_buffer *values,
                           Py_buffer *rows, Py_ssize_t *n, Py_ssize_t *count) {
    PyObject *given[2];
    if (!PyArg_ParseTuple(args, format, &given[0], &given[1])) return -1;
    if ((*n = values_of(given[0], values, sizeof(int64_t), -1, "values")) < 0) return -1;
    if ((*count = values_of(given[1], rows, sizeof(int64_t), -1, "rows")) < 0) {
        PyBuffer_Release(values);
        return -1;
    }
    return 0;
}

/* take(values, rows) -> array('q'): values[row] for each of the rows, in their order. */
static PyObject *take(PyObject *module, PyObject *args) {
    Py_buffer values, rows;
    Py_ssize_t n, count;
    if (values_and_rows(args, "OO:take", &values, &rows, &n, &count) < 0) return NULL;
    int64_t *dst;
    PyObject *out = array_of("q", count, (void **)&dst);
    if (out) {
        const int64_t *v = values.buf, *r = rows.buf;
        for (Py_ssize_t k = 0; k < count; k++) {
            if (r[k] < 0 || r[k] >= n) {
                PyErr_SetString(PyExc_ValueError, "take: a row out of range");
                Py_CLEAR(out);
                break;
            }
            dst[k] = v[r[k]];
        }
    }
    PyBuffer_Release(&values);
    PyBuffer_Release(&rows);
    return out;
}

/* total_at(values, rows) -> int: the sum of values[row] over the rows (int64 both). */
static PyObject *total_at(PyObject *module, PyObject *args) {
    Py_buffer values, rows;
    Py_ssize_t n, count;
    if (values_and_rows(args, "OO:total_at", &values, &rows, &n, &count) < 0) return NULL;
    const int64_t *v = values.buf, *r = rows.buf;
    int64_t total = 0;
    int bad = 0;
    for (Py_ssize_t k = 0; k < count && !bad; k++)
        bad = r[k] < 0 || r[k] >= n || __builtin_add_overflow(total, v[r[k]], &total);
    PyBuffer_Release(&values);
    PyBuffer_Release(&rows);
    if (bad) {
        PyErr_SetString(PyExc_ValueError, "total_at: a row out of range, or an overflow");
        return NULL;
    }
    return PyLong_FromLongLong(total);
}

/* fold_sums(rows, names, starts, ends, ended) -> ({name: (calls, time)}, running, total): what
 * a fold line says of the rows a budget left out (`budget.make_fold`): per name id the calls and
 * the time of the ended ones, how many have not ended, and the ended ones' time in all. A
 * duration is the end less the start, at least 0. */
static PyObject *fold_sums(PyObject *module, PyObject *args) {
    PyObject *given[5];
    if (!PyArg_ParseTuple(args, "OOOOO:fold_sums", &given[0], &given[1], &given[2], &given[3],
                          &given[4]))
        return NULL;
    static const char *const what[5] = {"rows", "names", "starts", "ends", "ended"};
    static const size_t item[5] = {8, 8, 8, 8, 1};
    Py_buffer view[5];
    Py_ssize_t n;
    int got = views_of(given, view, item, what, 5, 1, &n);
    Py_ssize_t count = got ? view[0].len / (Py_ssize_t)sizeof(int64_t) : 0;
    PyObject *result = NULL, *by_name = NULL;
    int64_t *calls = NULL, *spent = NULL, *seen = NULL;
    if (got < 5) goto release;
    const int64_t *rows = view[0].buf, *names = view[1].buf, *starts = view[2].buf;
    const int64_t *ends = view[3].buf;
    const uint8_t *is_ended = view[4].buf;
    /* Name ids are small (a sequence's distinct names): sums indexed by them. */
    int64_t top = -1;
    for (Py_ssize_t k = 0; k < count; k++) {
        if (rows[k] < 0 || rows[k] >= n || names[rows[k]] < 0 || names[rows[k]] > INT32_MAX) {
            PyErr_SetString(PyExc_ValueError, "fold_sums: a row or a name out of range");
            goto release;
        }
        if (names[rows[k]] > top) top = names[rows[k]];
    }
    calls = PyMem_Calloc((size_t)top + 1, sizeof(int64_t));
    spent = PyMem_Calloc((size_t)top + 1, sizeof(int64_t));
    seen = PyMem_Malloc(((size_t)top + 1) * sizeof(int64_t));
    if (!calls || !spent || !seen) {
        PyErr_NoMemory();
        goto release;
    }
    int64_t running = 0, total = 0, distinct = 0;
    for (Py_ssize_t k = 0; k < count; k++) {
        int64_t row = rows[k], name = names[row];
        if (!calls[name]++) seen[distinct++] = name;
        if (!is_ended[row]) {
            running++;
            continue;
        }
        int64_t duration = ends[row] > starts[row] ? ends[row] - starts[row] : 0;
        spent[name] += duration;
        total += duration;
    }
    by_name = PyDict_New();
    for (int64_t d = 0; by_name && d < distinct; d++) {
        int64_t name = seen[d];
        PyObject *key = PyLong_FromLongLong(name);
        PyObject *value = Py_BuildValue("(LL)", (long long)calls[name], (long long)spent[name]);
        int failed = !key || !value || PyDict_SetItem(by_name, key, value) < 0;
        Py_XDECREF(key);
        Py_XDECREF(value);
        if (failed) Py_CLEAR(by_name);
    }
    if (by_name) result = Py_BuildValue("(OLL)", by_name, (long long)running, (long long)total);
release:
    Py_XDECREF(by_name);
    PyMem_Free(calls);
    PyMem_Free(spent);
    PyMem_Free(seen);
    for (int k = 0; k < got; k++) PyBuffer_Release(&view[k]);
    return result;
}

/* spans(starts, ends, ended) -> array('Q'): each row's duration (its end less its start,
 * at least 0), or 2**63 for a row not ended: the line budget's priority (`budget.priority_of`). */
static PyObject *spans(PyObject *module, PyObject *args) {
    PyObject *given[3];
    if (!PyArg_ParseTuple(args, "OOO:spans", &given[0], &given[1], &given[2])) return NULL;
    static const char *const what[3] = {"starts", "ends", "ended"};
    static const size_t item[3] = {8, 8, 1};
    Py_buffer view[3];
    Py_ssize_t n;
    int got = views_of(given, view, item, what, 3, 0, &n);
    PyObject *out = NULL;
    uint64_t *span;
    if (got == 3) out = array_of("Q", n, (void **)&span);
    if (out) {
        const int64_t *starts = view[0].buf, *ends = view[1].buf;
        const uint8_t *is_ended = view[2].buf;
        for (Py_ssize_t i = 0; i < n; i++)
            span[i] = !is_ended[i]          ? (uint64_t)1 << 63
                      : ends[i] > starts[i] ? (uint64_t)(ends[i] - starts[i])
                                            : 0;
    }
    for (int k = 0; k < got; k++) PyBuffer_Release(&view[k]);
    return out;
}

/* nested(held, starts, ends, ended) -> bool: whether every row's window lies within its
 * caller's and starts at or after the end of the caller's row before it (the calls open at any
 * instant are then one chain, callers above callees). A window is [start, max(end, start + 1)),
 * one not ended has no end. Every caller comes before the rows it holds (held[i] < i). */
static PyObject *nested(PyObject *module, PyObject *args) {
    PyObject *given[4];
    if (!PyArg_ParseTuple(args, "OOOO:nested", &given[0], &given[1], &given[2], &given[3]))
        return NULL;
    static const char *const what[4] = {"held", "starts", "ends", "ended"};
    static const size_t item[4] = {8, 8, 8, 1};
    Py_buffer view[4];
    Py_ssize_t n;
    int got = views_of(given, view, item, what, 4, 0, &n);
    PyObject *result = NULL;
    int64_t *last = NULL; /* per row: where its latest callee's window ends (its start: none) */
    if (got == 4 && !(last = PyMem_Malloc(((size_t)n + 1) * sizeof(int64_t)))) PyErr_NoMemory();
    if (last) {
        const int64_t *held = view[0].buf, *starts = view[1].buf, *ends = view[2].buf;
        const uint8_t *is_ended = view[3].buf;
        int ok = 1;
        for (Py_ssize_t i = 0; ok && i < n; i++) {
            int64_t end = window_end(starts, ends, is_ended, i);
            int64_t caller = held[i];
            last[i] = starts[i];
            if (caller < 0) continue;
            if (caller >= i) {
                PyErr_SetString(PyExc_ValueError, "nested: a caller after its callee");
                ok = -1;
                break;
            }
            int64_t caller_end = window_end(starts, ends, is_ended, caller);
            ok = starts[i] >= last[caller] && end <= caller_end;
            last[caller] = end;
        }
        if (ok >= 0) result = PyBool_FromLong(ok);
    }
    PyMem_Free(last);
    for (int k = 0; k < got; k++) PyBuffer_Release(&view[k]);
    return result;
}

/* windows(rows, starts, ends, ended) -> [(start, end), ...]: the union of the windows of `rows`
 * (None: every row), in start order, as sorted disjoint windows (touching ones joined). A row's
 * window is [start, max(end, start + 1)), or [start, 2**63 - 1) when it has not ended
 * (`_samples.sample_windows`'s). */
static PyObject *windows(PyObject *module, PyObject *args) {
    PyObject *given[4];
    if (!PyArg_ParseTuple(args, "OOOO:windows", &given[0], &given[1], &given[2], &given[3]))
        return NULL;
    static const char *const what[4] = {"rows", "starts", "ends", "ended"};
    static const size_t item[4] = {8, 8, 8, 1};
    Py_buffer view[4];
    int all = given[0] == Py_None;
    Py_ssize_t n;
    int got = all ? 1 + views_of(given + 1, view + 1, item + 1, what + 1, 3, 0, &n)
                  : views_of(given, view, item, what, 4, 1, &n);
    PyObject *result = NULL;
    if (got == 4) result = PyList_New(0);
    if (result) {
        const int64_t *rows = all ? NULL : view[0].buf, *starts = view[1].buf, *ends = view[2].buf;
        const uint8_t *is_ended = view[3].buf;
        Py_ssize_t count = all ? n : view[0].len / (Py_ssize_t)sizeof(int64_t);
        int64_t low = 0, high = 0;
        int open = 0;
        for (Py_ssize_t k = 0; k <= count && result; k++) {
            int64_t row = k < count ? (all ? k : rows[k]) : 0;
            if (k < count && (row < 0 || row >= n)) {
                PyErr_SetString(PyExc_ValueError, "windows: a row out of range");
                Py_CLEAR(result);
                break;
            }
            int64_t start = k < count ? starts[row] : 0;
            if (k < count && open && start <= high) {
                int64_t end = window_end(starts, ends, is_ended, row);
                if (end > high) high = end;
                continue;
            }
            if (open) {
                PyObject *window = Py_BuildValue("(LL)", (long long)low, (long long)high);
                if (!window || PyList_Append(result, window) < 0) Py_CLEAR(result);
                Py_XDECREF(window);
            }
            if (k < count) {
                low = start;
                high = window_end(starts, ends, is_ended, row);
                open = 1;
            }
        }
    }
    for (int k = all ? 1 : 0; k < got; k++) PyBuffer_Release(&view[k]);
    return result;
}

/* shape_rows(parents, parent, hid, starts) -> (handed, roots, ordered): the rows that continue
 * a hand-off (hid != 0) and the rows with neither a parent nor a hand-off, as int64 bytes, and
 * whether the starts increase strictly (`views/tree/shape.py`'s common case). `parents` only sets
 * the number of rows. */
static PyObject *shape_rows(PyObject *module, PyObject *args) {
    PyObject *given[4];
    if (!PyArg_ParseTuple(args, "OOOO:shape_rows", &given[0], &given[1], &given[2], &given[3]))
        return NULL;
    static const char *const what[4] = {"parents", "parent", "hid", "starts"};
    static const size_t item[4] = {8, 8, 8, 8};
    Py_buffer view[4];
    Py_ssize_t n;
    int got = views_of(given, view, item, what, 4, 0, &n);
    PyObject *result = NULL;
    int64_t *handed = NULL, *roots = NULL;
    if (got == 4) {
        handed = PyMem_Malloc(((size_t)n + 1) * sizeof(int64_t));
        roots = PyMem_Malloc(((size_t)n + 1) * sizeof(int64_t));
        if (!handed || !roots) PyErr_NoMemory();
    }
    if (handed && roots) {
        const int64_t *parent = view[1].buf, *hid = view[2].buf, *starts = view[3].buf;
        Py_ssize_t handed_n = 0, roots_n = 0;
        int ordered = 1;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (hid[i]) handed[handed_n++] = i;
            else if (!parent[i]) roots[roots_n++] = i;
            if (i && starts[i - 1] >= starts[i]) ordered = 0;
        }
        result = Py_BuildValue("(y#y#O)", (const char *)handed,
                               handed_n * (Py_ssize_t)sizeof(int64_t), (const char *)roots,
                               roots_n * (Py_ssize_t)sizeof(int64_t),
                               ordered ? Py_True : Py_False);
    }
    PyMem_Free(handed);
    PyMem_Free(roots);
    for (int k = 0; k < got; k++) PyBuffer_Release(&view[k]);
    return result;
}

/* hang(parents, root) -> array('q') or None: each row's caller as the tree hangs it (a row
 * without a parent here under `root`, the root under none: -1), or None when a parent comes
 * after its row (no common case: `views/tree/shape.py`). */
static PyObject *hang(PyObject *module, PyObject *args) {
    PyObject *parents_obj;
    Py_ssize_t root;
    if (!PyArg_ParseTuple(args, "On:hang", &parents_obj, &root)) return NULL;
    Py_buffer view;
    Py_ssize_t n = values_of(parents_obj, &view, sizeof(int64_t), -1, "parents");
    if (n < 0) return NULL;
    PyObject *out = NULL;
    int64_t *held = NULL;
    if (root < 0 || root >= n)
        PyErr_SetString(PyExc_ValueError, "hang: the root out of range");
    else
        out = array_of("q", n, (void **)&held);
    if (out) {
        const int64_t *parents = view.buf;
        for (Py_ssize_t i = 0; i < n; i++) {
            if (parents[i] >= i) {
                Py_CLEAR(out);
                out = Py_NewRef(Py_None);
                break;
            }
            held[i] = i == root ? -1 : parents[i] < 0 ? root : parents[i];
        }
    }
    PyBuffer_Release(&view);
    return out;
}

/* ranked(rows, priorities, limit) -> int64 bytes: the positions in `rows` of the (at most
 * `limit`) highest `priorities[row]` (uint64), highest first, ties by position (`budget.rank`). */
static const uint64_t *rank_of;
static const int64_t *rank_rows;

static int by_priority(const void *a, const void *b) {
    int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
    uint64_t p = rank_of[rank_rows[i]], q = rank_of[rank_rows[j]];
    if (p != q) return p > q ? -1 : 1;
    return i < j ? -1 : i > j;
}

static PyObject *ranked(PyObject *module, PyObject *args) {
    PyObject *given[2];
    Py_ssize_t limit;
    if (!PyArg_ParseTuple(args, "OOn:ranked", &given[0], &given[1], &limit)) return NULL;
    static const char *const what[2] = {"rows", "priorities"};
    static const size_t item[2] = {8, 8};
    Py_buffer view[2];
    Py_ssize_t n;
    int got = views_of(given, view, item, what, 2, 1, &n);
    PyObject *out = NULL;
    int64_t *order = NULL;
    Py_ssize_t count = got ? view[0].len / (Py_ssize_t)sizeof(int64_t) : 0;
    if (got == 2 && !(order = PyMem_Malloc(((size_t)count + 1) * sizeof(int64_t))))
        PyErr_NoMemory();
    if (order) {
        const int64_t *rows = view[0].buf;
        Py_ssize_t k = 0;
        while (k < count && rows[k] >= 0 && rows[k] < n) k++;
        if (k < count)
            PyErr_SetString(PyExc_ValueError, "ranked: a row out of range");
        else if (limit == 1 && count) { /* the longest alone: one pass, the first of ties */
            const uint64_t *priority = view[1].buf;
            order[0] = 0;
            for (k = 1; k < count; k++)
                if (priority[rows[k]] > priority[rows[order[0]]]) order[0] = k;
            out = PyBytes_FromStringAndSize((const char *)order, (Py_ssize_t)sizeof(int64_t));
        } else {
            for (k = 0; k < count; k++) order[k] = k;
            rank_of = view[1].buf;
            rank_rows = rows;
            qsort(order, (size_t)count, sizeof(int64_t), by_priority);
            Py_ssize_t kept = limit < 0 ? 0 : limit < count ? limit : count;
            out = PyBytes_FromStringAndSize((const char *)order, kept * (Py_ssize_t)sizeof(int64_t));
        }
    }
    PyMem_Free(order);
    for (int k = 0; k < got; k++) PyBuffer_Release(&view[k]);
    return out;
}

/* line_totals(held, line_of, rows, weights, cpus, lines) -> (samples, cpu, sampled): sample
 * weights and CPU times summed up the callers as `merge._total` sums them, then per line. `rows`
 * hold `weights[k]` and `cpus[k]` themselves; a row's total weight is its own and its callees',
 * its CPU time its own and that of its callees whose total weight is not 0. Per line (of
 * `lines`): the rows' total weights, the CPU times of those whose total weight is not 0, and
 * whether there was one (uint8). Every caller comes before the rows it holds. */
static PyObject *line_totals(PyObject *module, PyObject *args) {
    PyObject *given[5];
    Py_ssize_t lines;
    if (!PyArg_ParseTuple(args, "OOOOOn:line_totals", &given[0], &given[1], &given[2],
                          &given[3], &given[4], &lines))
        return NULL;
    static const char *const what[5] = {"rows", "weights", "cpus", "held", "line_of"};
    static const size_t item[5] = {8, 8, 8, 8, 8};
    PyObject *ordered[5] = {given[2], given[3], given[4], given[0], given[1]};
    Py_buffer view[5];
    Py_ssize_t n, count = 0;
    int got = views_of(ordered, view, item, what, 3, 0, &count);
    if (got == 3) got += views_of(ordered + 3, view + 3, item + 3, what + 3, 2, 0, &n);
    PyObject *result = NULL;
    int64_t *total = NULL, *cpu = NULL, *out_samples = NULL, *out_cpu = NULL;
    uint8_t *sampled = NULL;
    if (got == 5) {
        total = PyMem_Calloc((size_t)n + 1, sizeof(int64_t));
        cpu = PyMem_Calloc((size_t)n + 1, sizeof(int64_t));
        out_samples = PyMem_Calloc((size_t)lines + 1, sizeof(int64_t));
        out_cpu = PyMem_Calloc((size_t)lines + 1, sizeof(int64_t));
        sampled = PyMem_Calloc((size_t)lines + 1, 1);
        if (!total || !cpu || !out_samples || !out_cpu || !sampled) PyErr_NoMemory();
    }
    if (sampled) {
        const int64_t *rows = view[0].buf, *weights = view[1].buf, *cpus = view[2].buf;
        const int64_t *held = view[3].buf, *line_of = view[4].buf;
        int ok = 1;
        for (Py_ssize_t k = 0; ok && k < count; k++) {
            if (rows[k] < 0 || rows[k] >= n) ok = 0;
            else {
                total[rows[k]] += weights[k];
                cpu[rows[k]] += cpus[k];
            }
        }
        for (Py_ssize_t i = n - 1; ok && i >= 0; i--) {
            if (held[i] >= i || line_of[i] < 0 || line_of[i] >= lines) {
                ok = 0;
                break;
            }
            if (!total[i]) continue;
            if (held[i] >= 0) {
                total[held[i]] += total[i];
                cpu[held[i]] += cpu[i];
            }
            out_samples[line_of[i]] += total[i];
            out_cpu[line_of[i]] += cpu[i];
            sampled[line_of[i]] = 1;
        }
        if (!ok)
            PyErr_SetString(PyExc_ValueError, "line_totals: a row, caller or line out of range");
        else
            result = Py_BuildValue("(y#y#y#)", (const char *)out_samples,
                                   lines * (Py_ssize_t)sizeof(int64_t), (const char *)out_cpu,
                                   lines * (Py_ssize_t)sizeof(int64_t), (const char *)sampled,
                                   lines);
    }
    PyMem_Free(total);
    PyMem_Free(cpu);
    PyMem_Free(out_samples);
    PyMem_Free(out_cpu);
    PyMem_Free(sampled);
    for (int k = 0; k < got; k++) PyBuffer_Release(&view[k]);
    return result;
}

/* adopting(copy=None) -> bool: whether C columns become arrays without a copy (`_arrays.h`);
 * `adopting(False)` makes them copied from then on (as on an unknown array layout), for tests. */
static PyObject *adopting(PyObject *module, PyObject *args) {
    int wanted = -1;
    if (!PyArg_ParseTuple(args, "|p:adopting", &wanted)) return NULL;
    int was = array_adoptable;
    if (wanted == 0) array_adoptable = 0;
    if (wanted == 1 && !array_adoptable && arrays_init() < 0) return NULL;
    return PyBool_FromLong(was);
}

static PyMethodDef module_methods[] = {
    {"profile_lines", profile_lines, METH_VARARGS,
     "profile_lines(held, starts, ends, ended, names, ranks) -> (parent, name, calls, time, "
     "self, order, line_of): a start-ordered tree's profile lines as int64 columns."},
    {"covered", covered, METH_VARARGS,
     "covered(rows, starts, ends, ended, start, end) -> int: how much of [start, end) the union "
     "of the rows' windows covers (rows in start order)."},
    {"shape_rows", shape_rows, METH_VARARGS,
     "shape_rows(parents, parent, hid, starts) -> (handed, roots, ordered): the rows continuing a "
     "hand-off, the rows with neither parent nor hand-off, whether the starts increase."},
    {"hang", hang, METH_VARARGS,
     "hang(parents, root) -> array('q') or None: each row's caller as the tree hangs it; None "
     "when a parent comes after its row."},
    {"windows", windows, METH_VARARGS,
     "windows(rows, starts, ends, ended) -> [(start, end)]: the union of the rows' windows (None: "
     "every row), sorted and disjoint; the rows in start order."},
    {"nested", nested, METH_VARARGS,
     "nested(held, starts, ends, ended) -> bool: whether the calls open at any instant are one "
     "chain (each window within its caller's, after its previous sibling's)."},
    {"line_totals", line_totals, METH_VARARGS,
     "line_totals(held, line_of, rows, weights, cpus, lines) -> (samples, cpu, sampled): sample "
     "weights and CPU times summed up the callers, then per line."},
    {"ranked", ranked, METH_VARARGS,
     "ranked(rows, priorities, limit) -> int64 bytes: the positions of the highest priorities, "
     "highest first, ties in order, at most limit of them."},
    {"spans", spans, METH_VARARGS,
     "spans(starts, ends, ended) -> array('Q'): each row's duration (at least 0), 2**63 for "
     "one not ended."},
    {"fold_sums", fold_sums, METH_VARARGS,
     "fold_sums(rows, names, starts, ends, ended) -> (by_name, running, total): the calls and "
     "time of the given rows per name id, how many have not ended, the ended ones' time."},
    {"distinct", distinct, METH_O,
     "distinct(values) -> set: the distinct values of an int64 column."},
    {"adopting", adopting, METH_VARARGS,
     "adopting([on]) -> bool: whether columns are handed over without a copy (before the "
     "change, when `on` is given: False copies them, True checks the array layout again)."},
    {"take", take, METH_VARARGS,
     "take(values, rows) -> array('q'): the int64 values at the given rows, in their order."},
    {"total_at", total_at, METH_VARARGS,
     "total_at(values, rows) -> int: the sum of the int64 values at the given rows."},
    {"subtree_sizes", subtree_sizes, METH_O,
     "subtree_sizes(held) -> array('q'): per row, the rows beneath it (callers first)."},
    {"gather", gather, METH_VARARGS,
     "gather(seq, batches) -> (columns, errors, attrs, index): a sequence's invocations from its "
     "stored batches, (puid, batch_no, clock_offset_ns, blob) in ascending (puid, batch_no)."},
    {"scan", pack_scan, METH_VARARGS,
     "scan(blob, puid, offset, encode) -> (events, t_min, t_max, seqs, roots, counts, threads, "
     "first_start, methods, seq_methods, opened, entries, late_ends, rare): ingest's index of "
     "one batch's encoded thread chunks (see _pack.c); OverflowError for a time that the "
     "offset takes past 64 bits."},
    {"scan_batch", pack_scan_batch, METH_VARARGS,
     "scan_batch(body, field, puid, offset, encode) -> (chunks, scan's result): the same for the "
     "thread chunks of an encoded Batch, its field number `field`, returned as they are."},
    {"bound_singles", pack_bound_singles, METH_VARARGS,
     "bound_singles(rows, names) -> (params, (zones, batches)): a group's single rows bound for "
     "their insert, and their block's zones and batches (cmr.store.sqlite.single._bound's)."},
    {"children", children, METH_O,
     "children(held) -> (starts, rows): each row's callees as compressed sparse rows."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "cmr.store._columns",
    .m_doc = "A sequence's invocations as column arrays, read straight from stored batches.",
    .m_size = -1,
    .m_methods = module_methods,
};

/* The hash tables' seed, from os.urandom (see _msgpack.h). */
static int seed_tables(void) {
    PyObject *os = PyImport_ImportModule("os");
    if (!os) return -1;
    PyObject *random = PyObject_CallMethod(os, "urandom", "i", (int)sizeof(table_seed));
    Py_DECREF(os);
    if (!random) return -1;
    if (!PyBytes_Check(random) || PyBytes_GET_SIZE(random) != (Py_ssize_t)sizeof(table_seed)) {
        Py_DECREF(random);
        PyErr_SetString(PyExc_RuntimeError, "os.urandom gave no seed");
        return -1;
    }
    memcpy(&table_seed, PyBytes_AS_STRING(random), sizeof(table_seed));
    Py_DECREF(random);
    return 0;
}

PyMODINIT_FUNC PyInit__columns(void) {
    if (PyType_Ready(&IndexType) < 0 || seed_tables() < 0 || arrays_init() < 0) return NULL;
    PyObject *module = PyModule_Create(&module_def);
    if (!module) return NULL;
    Py_INCREF(&IndexType);
    if (PyModule_AddObject(module, "Index", (PyObject *)&IndexType) < 0) {
        Py_DECREF(&IndexType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
