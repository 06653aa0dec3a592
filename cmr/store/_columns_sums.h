/* cmr.store._columns, one of its parts: sums and windows over columns (covered(),
 * distinct(), take(), total_at(), fold_sums(), spans(), nested(), windows()).
 * Included once, in order, by _columns.c (one translation unit: the parts share its static
 * helpers); see _columns.c for the whole. */

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
