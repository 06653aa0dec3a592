/* cmr.store._columns' index pass (_pack.c), one of its parts: a group's single rows bound
 * for their insert (bound_singles()).
 * Included once, in order, at the end of _pack.c (one translation unit: the parts share its
 * static helpers); see _pack.c for the whole. */

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
