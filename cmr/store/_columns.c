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

/* The parts, in order (one translation unit). */
#include "_columns_gather.h"
#include "_columns_tree.h"
#include "_columns_sums.h"
#include "_columns_shapes.h"

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
