/* cmr.store._columns, one of its parts: a sequence's Starts, Ends and Errors gathered from
 * its batches' blobs into columns (gather()), and the Index they leave.
 * Included once, in order, by _columns.c (one translation unit: the parts share its static
 * helpers); see _columns.c for the whole. */

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
