/* cmr.store._columns, one of its parts: a tree's shape and ranks over columns (shape_rows(),
 * hang(), ranked(), line_totals()).
 * Included once, in order, by _columns.c (one translation unit: the parts share its static
 * helpers); see _columns.c for the whole. */

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
