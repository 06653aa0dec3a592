/* cmr.store._columns, one of its parts: the tree laid out as arrays (children()) and a
 * profile's lines (profile_lines()).
 * Included once, in order, by _columns.c (one translation unit: the parts share its static
 * helpers); see _columns.c for the whole. */

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
