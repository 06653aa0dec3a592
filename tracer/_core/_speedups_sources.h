/* tracer._core._speedups, one of its parts: the hot path's sources
 * (buffer, clock, iid, sequence id) and RootValue.
 * Included once, in order, by _speedups.c (one translation unit: the parts share its static
 * state and helpers); see _speedups.c for the whole. */

/* ---------------------------------------------------------------------------------------------
 * The hot path's sources: buffer, clock, iid, sequence id.
 */

/* This thread's buffer, a new reference. */
static PyObject *
current_buffer(void)
{
    uint64_t tstate_id = PyThreadState_GetID(PyThreadState_Get());
    if (t_cache.buffer != NULL && t_cache.tstate_id == tstate_id
        && t_cache.generation == g_generation) {
        return Py_NewRef(t_cache.buffer);
    }
    PyObject *buffer = PyObject_CallNoArgs(g_thread_events);
    if (buffer == NULL) {
        return NULL;
    }
    if (!Py_IS_TYPE(buffer, &EventBufferType)) {
        PyErr_Format(PyExc_TypeError, "thread_events() returned %.100s, not an EventBuffer",
                     Py_TYPE(buffer)->tp_name);
        Py_DECREF(buffer);
        return NULL;
    }
    t_cache.tstate_id = tstate_id;
    t_cache.generation = g_generation;
    t_cache.buffer = buffer;
    return buffer;
}

static inline int
read_clock(int64_t *t_ns)
{
    if (__builtin_expect(g_clock == NULL, 1)) {
        *t_ns = clock_now_ns();
        return 0;
    }
    PyObject *value = PyObject_CallNoArgs(g_clock);
    if (value == NULL) {
        return -1;
    }
    *t_ns = PyLong_AsLongLong(value);
    Py_DECREF(value);
    return *t_ns == -1 && PyErr_Occurred() ? -1 : 0;
}

static int
take_iid(uint64_t *iid)
{
    if (g_next_iid == NULL) {
        *iid = ++g_last_iid;
        return 0;
    }
    PyObject *value = PyObject_CallNoArgs(g_next_iid);
    if (value == NULL) {
        return -1;
    }
    *iid = PyLong_AsUnsignedLongLong(value);
    Py_DECREF(value);
    return *iid == (uint64_t)-1 && PyErr_Occurred() ? -1 : 0;
}

static inline uint64_t
rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t
rng_next(void)
{
    uint64_t result = rotl(g_rng[1] * 5, 7) * 9;
    uint64_t t = g_rng[1] << 17;
    g_rng[2] ^= g_rng[0];
    g_rng[3] ^= g_rng[1];
    g_rng[1] ^= g_rng[2];
    g_rng[0] ^= g_rng[3];
    g_rng[2] ^= t;
    g_rng[3] = rotl(g_rng[3], 45);
    return result;
}

static void
rng_seed(void)
{
    uint64_t seed[4] = {0, 0, 0, 0};
    if (getrandom(seed, sizeof(seed), 0) != (ssize_t)sizeof(seed)) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        seed[0] = (uint64_t)now.tv_nsec ^ ((uint64_t)now.tv_sec << 30);
        seed[1] = (uint64_t)getpid() * 0x9E3779B97F4A7C15ULL;
        seed[2] = (uint64_t)(uintptr_t)&seed;
    }
    /* splitmix64 spreads whatever the seed holds over the whole state (never all zero) */
    uint64_t z = seed[0] ^ seed[1] ^ seed[2] ^ seed[3];
    for (int i = 0; i < 4; i++) {
        z += 0x9E3779B97F4A7C15ULL;
        uint64_t x = z ^ seed[i];
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
        g_rng[i] = x ^ (x >> 31);
    }
}

/* A 128-bit sequence id that is never zero (a valid W3C trace id), as ids.new_seq: its first
 * two bytes the wall clock's second modulo 65,536 (ids.SECOND_BITS: a repository's index by id
 * is appended to), the rest random; the lowest bit of the 9th byte set, so the right-most 7
 * bytes stay uniformly random (the W3C "random" trace-flag, Level 2 §3.2.2.5.2). The coarse
 * clock is read from the vDSO, without a system call. */
static void
draw_seq_bytes(uint8_t *bytes)
{
    struct timespec now;
    clock_gettime(CLOCK_REALTIME_COARSE, &now);
    uint64_t high = rng_next(), low = rng_next();
    for (int i = 0; i < 8; i++) {
        bytes[i] = (uint8_t)(high >> (56 - 8 * i));
        bytes[8 + i] = (uint8_t)(low >> (56 - 8 * i));
    }
    bytes[0] = (uint8_t)((uint64_t)now.tv_sec >> 8);
    bytes[1] = (uint8_t)now.tv_sec;
    bytes[8] |= 1; /* ids.NONZERO_BIT */
}

static PyObject *
draw_seq(void)
{
    if (g_new_seq != NULL) {
        return PyObject_CallNoArgs(g_new_seq);
    }
    PyObject *seq = PyBytes_FromStringAndSize(NULL, 16);
    if (seq == NULL) {
        return NULL;
    }
    draw_seq_bytes((uint8_t *)PyBytes_AS_STRING(seq));
    return seq;
}

/* ---------------------------------------------------------------------------------------------
 * RootValue: what a synchronous root puts in the ContextVar, (seq, iid, 0, ORIGIN_SYNC_ROOT) as
 * a sequence of four, in one allocation with no references (so no GC tracking). Python code
 * reads it as it reads the tuples strands use.
 *
 * Setting and resetting the ContextVar is most of what a root costs (two new HAMTs, nodes and a
 * token: about 135 ns here). So a root that ends while its value can be reached through its own
 * context alone (no copy of the context, no other mapping holds it: held_only_here) does not
 * reset the ContextVar: it marks the value closed, which every reader takes for None, and the
 * next root in that context opens the same value again, with no ContextVar write at all. A value
 * anything else may hold is never reopened: that copy keeps seeing the root it was made in.
 */

typedef struct {
    PyObject_HEAD
    uint64_t iid;
    uint8_t seq[16];
    char closed; /* its root ended: no sequence (it may be opened again: see above) */
} RootValue;

static PyTypeObject RootValueType;

/* Mirrors of CPython's private layouts of a Context and its HAMT (Include/internal/
 * pycore_context.h and pycore_hamt.h, the same in 3.11 to 3.13), checked against a real
 * context at import (layouts_known); when they do not match, roots always set and reset. */
typedef struct {
    PyObject_HEAD
    PyObject *ctx_prev;
    PyObject *ctx_vars;
    PyObject *ctx_weakreflist;
    int ctx_entered;
} ContextMirror;

typedef struct {
    PyObject_HEAD
    PyObject *h_root;
    PyObject *h_weakreflist;
    Py_ssize_t h_count;
} HamtMirror;

static int g_reuse_roots;             /* the layouts matched at import */
static PyTypeObject *g_bitmap_node;   /* the type of a HAMT's single-level node */

static int
is_closed(PyObject *value)
{
    return Py_IS_TYPE(value, &RootValueType) && ((RootValue *)value)->closed;
}

/* Whether `value`, the ContextVar's value in the current context, can be reached only through
 * that context: the context's HAMT is a single node, and neither the HAMT, nor the node, nor the
 * value has another holder (a copy of the context shares the HAMT; a mapping derived from it
 * copies the node's entries, taking a reference to the value). `extra` references to the value
 * are the caller's own. */
static int
held_only_here(PyObject *value, Py_ssize_t extra)
{
    if (!g_reuse_roots) {
        return 0;
    }
    ContextMirror *context = (ContextMirror *)PyThreadState_Get()->context;
    if (context == NULL || context->ctx_vars == NULL) {
        return 0;
    }
    HamtMirror *vars = (HamtMirror *)context->ctx_vars;
    return Py_REFCNT(vars) == 1 && vars->h_root != NULL && Py_IS_TYPE(vars->h_root, g_bitmap_node)
        && Py_REFCNT(vars->h_root) == 1 && Py_REFCNT(value) == 1 + extra;
}

/* At import: whether the mirrors above match this CPython (one variable set in a new context:
 * a "hamt" of one entry in a "hamt_bitmap_node", the context entered). */
static int
layouts_known(void)
{
#if defined(Py_GIL_DISABLED) || PY_VERSION_HEX >= 0x030E0000
    return 0; /* without the GIL, reference counts say nothing; later versions: unchecked */
#else
    int known = 0;
    PyObject *var = PyContextVar_New("invoseq_layout_probe", NULL);
    PyObject *context = PyContext_New();
    if (var != NULL && context != NULL && PyContext_Enter(context) == 0) {
        PyObject *token = PyContextVar_Set(var, Py_True);
        ContextMirror *mirror = (ContextMirror *)context;
        HamtMirror *vars = (HamtMirror *)mirror->ctx_vars;
        known = token != NULL && mirror->ctx_entered == 1 && vars != NULL
            && strcmp(Py_TYPE(vars)->tp_name, "hamt") == 0 && vars->h_count == 1
            && vars->h_root != NULL && strcmp(Py_TYPE(vars->h_root)->tp_name, "hamt_bitmap_node") == 0;
        if (known) {
            g_bitmap_node = Py_TYPE(vars->h_root);
        }
        Py_XDECREF(token);
        PyContext_Exit(context);
    }
    Py_XDECREF(var);
    Py_XDECREF(context);
    PyErr_Clear();
    return known;
#endif
}

static Py_ssize_t
root_value_length(PyObject *self)
{
    return 4;
}

static PyObject *
root_value_item(PyObject *self, Py_ssize_t index)
{
    RootValue *value = (RootValue *)self;
    switch (index) {
    case 0:
        return PyBytes_FromStringAndSize((const char *)value->seq, 16);
    case 1:
        return PyLong_FromUnsignedLongLong(value->iid);
    case 2:
        return PyLong_FromLong(0);
    case 3:
        return PyLong_FromLong(-1); /* ORIGIN_SYNC_ROOT */
    default:
        PyErr_SetString(PyExc_IndexError, "a context value has 4 items");
        return NULL;
    }
}

static PyObject *
root_value_repr(PyObject *self)
{
    PyObject *seq = root_value_item(self, 0);
    if (seq == NULL) {
        return NULL;
    }
    PyObject *repr = PyUnicode_FromFormat("RootValue(%R, %llu, 0, -1)", seq,
                                          (unsigned long long)((RootValue *)self)->iid);
    Py_DECREF(seq);
    return repr;
}

static PyMemberDef root_value_members[] = {
    {"closed", T_BOOL, offsetof(RootValue, closed), READONLY,
     "Its root ended: the ContextVar holding it means no sequence."},
    {NULL},
};

static PySequenceMethods root_value_as_sequence = {
    .sq_length = root_value_length,
    .sq_item = root_value_item,
};

static PyTypeObject RootValueType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracer._core._speedups.RootValue",
    .tp_doc = "A synchronous root's context value: (seq, iid, 0, -1).",
    .tp_basicsize = sizeof(RootValue),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_as_sequence = &root_value_as_sequence,
    .tp_members = root_value_members,
    .tp_repr = root_value_repr,
};
