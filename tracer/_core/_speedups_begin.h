/* tracer._core._speedups, one of its parts: an invocation's beginning under the memory bound's
 * allowance, and its end, which the call wrapper (_speedups_wrapper.h) and the handlers share.
 * Included once, in order, by _speedups.c (one translation unit: the parts share its static
 * state and helpers); see _speedups.c for the whole. */

/* ---------------------------------------------------------------------------------------------
 * The allowance, begin() and the end.
 */

/* The 16-byte sequence of a context value (an open root's, or a (seq, ...) tuple's), or NULL. */
static const uint8_t *
sequence_of(PyObject *value)
{
    if (Py_IS_TYPE(value, &RootValueType)) {
        return ((RootValue *)value)->seq;
    }
    if (PyTuple_CheckExact(value) && PyTuple_GET_SIZE(value) >= 1) {
        PyObject *seq = PyTuple_GET_ITEM(value, 0);
        if (PyBytes_CheckExact(seq) && PyBytes_GET_SIZE(seq) == 16) {
            return (const uint8_t *)PyBytes_AS_STRING(seq);
        }
    }
    return NULL;
}

/* Whether `seen` (None, or a context value) is the sequence of the buffer's last refusal. */
static inline int
refused_before(EventBuffer *buffer, PyObject *seen)
{
    if (seen == Py_None) {
        return !buffer->refused_named;
    }
    const uint8_t *seq = buffer->refused_named ? sequence_of(seen) : NULL;
    return seq != NULL && memcmp(seq, buffer->refused_seq, 16) == 0;
}

/* Whether the thread may record another Start: under its allowance, or budget.refill reserved
 * more (1). Past it, refill counts the call as overflow (dropped, its sequence, read from
 * `current`, lossy) and the call runs untraced, Start and End alike (0); -1: refill failed.
 * A refusal refill says holds (False: the bound is spent, and the call's sequence is named
 * lossy already, or it has none) is remembered with its sequence: that sequence's next calls
 * are counted here, with no Python call, until the bound gives memory back (budget_changed).
 * A program the repository cannot keep up with would otherwise pay a Python call for every
 * call it makes untraced, more than recording it costs. */
static int
within_allowance(EventBuffer *buffer, PyObject *current)
{
    if (buffer->count < buffer->limit || g_refill == NULL) {
        return 1;
    }
    PyObject *seen = is_closed(current) ? Py_None : current;
    if (buffer->refused_epoch == g_budget_epoch && refused_before(buffer, seen)) {
        g_overflowed++;
        return 0;
    }
    PyObject *result = PyObject_CallFunctionObjArgs(g_refill, (PyObject *)buffer, seen, NULL);
    int granted = result == NULL ? -1 : PyObject_IsTrue(result);
    if (granted == 0 && result == Py_False) {
        const uint8_t *seq = seen == Py_None ? NULL : sequence_of(seen);
        if (seen == Py_None || seq != NULL) {
            buffer->refused_epoch = g_budget_epoch;
            buffer->refused_named = seq != NULL;
            if (seq != NULL) {
                memcpy(buffer->refused_seq, seq, 16);
            }
        }
    }
    Py_XDECREF(result);
    return granted;
}

/* A marker's `exotic` when the memory bound turned its call away (0: disabled, or a failure). */
#define PAST_BOUND_MARKER 1

/* Whether a call that would root a sequence (`current` None, or a root's closed value) starts
 * inside a call that runs untraced with no sequence (a marker on top of the thread's stack: a
 * root past the memory bound): it runs untraced too, counted, rather than root a sequence of
 * one call (the bound lets go as the sender delivers, and a busy program's nested calls made
 * hundreds of thousands of them). */
static inline int
inside_untraced_root(EventBuffer *buffer, PyObject *current)
{
    StackEntry *top = buffer->depth > 0 ? &buffer->stack[buffer->depth - 1] : NULL;
    return top != NULL && top->strand == NULL && top->exotic == PAST_BOUND_MARKER
           && (current == Py_None || is_closed(current));
}

/* Count a call run untraced inside an untraced root: it has no sequence to name, so it is
 * counted here (budget.take_overflow adds these). Always 0. */
static int
count_untraced_root(void)
{
    g_overflowed++;
    return 0;
}

/* The start of a synchronous invocation. 0: begun; 1: past the memory bound, run untraced;
 * -1 with an error set, and then nothing is left behind (the context is as it was). A nested
 * call touches no ContextVar beyond one cached read and allocates nothing: it pushes an entry
 * on the thread's stack. A root sets the ContextVar, so contexts copied inside it carry the
 * sequence. */
static int
begin(uint64_t method, Invocation *inv)
{
    PyObject *current = NULL, *value = NULL;
    Beginning b = {0};
    inv->token = NULL;
    inv->root = NULL;
    inv->buffer = current_buffer();
    if (inv->buffer == NULL) {
        return -1;
    }
    EventBuffer *buffer = (EventBuffer *)inv->buffer;
    if (PyContextVar_Get(g_context_var, NULL, &current) < 0) {
        goto failed;
    }
    if (current == NULL) {
        PyErr_SetObject(PyExc_LookupError, g_context_var);
        goto failed;
    }
    if (inside_untraced_root(buffer, current)) {
        Py_DECREF(current);
        Py_CLEAR(inv->buffer);
        return count_untraced_root() < 0 ? -1 : 1;
    }
    int granted = within_allowance(buffer, current); /* past it: untraced, counted */
    if (granted <= 0) {
        Py_DECREF(current);
        Py_CLEAR(inv->buffer);
        return granted == 0 ? 1 : -1; /* -1: an error, as the Python wrapper's */
    }
    if (take_iid(&inv->iid) < 0) {
        goto failed;
    }
    /* a closed value of this context, which nothing else holds: the root opens it again */
    PyObject *reusable = is_closed(current) && held_only_here(current, 1) ? current : NULL;
    int found = find_parent(buffer, current, &b);
    current = NULL; /* b owns it (or, for a root, it is let go: reusable stays in the context) */
    if (found < 0) {
        goto failed;
    }
    if (b.strand == NULL && reusable == NULL && collecting_here()) {
        /* a root would write the ContextVar inside a collection (see g_collecting): untraced */
        beginning_clear(&b);
        Py_CLEAR(inv->buffer);
        return count_untraced_root() < 0 ? -1 : 1;
    }
    if (b.strand == NULL) {
        if (find_root(&b) < 0) {
            goto failed;
        }
        if (reusable != NULL) {
            value = Py_NewRef(reusable);
        }
        else {
            value = (PyObject *)PyObject_New(RootValue, &RootValueType);
            if (value == NULL) {
                goto failed;
            }
        }
        ((RootValue *)value)->iid = inv->iid;
        memcpy(((RootValue *)value)->seq, b.seq_bytes, 16);
        ((RootValue *)value)->closed = 0;
        inv->root = value;
        if (reusable == NULL) {
            inv->token = PyContextVar_Set(g_context_var, value);
            if (inv->token == NULL) {
                goto failed;
            }
        }
        b.strand = value;
        value = NULL;
    }
    int64_t t_ns = 0;
    if (read_clock(&t_ns) < 0 || record_start(inv->buffer, &b, inv->iid, method, t_ns) < 0
        || stack_push(buffer, inv->iid, b.strand, &b) < 0) {
        goto failed;
    }
    inv->index = buffer->depth - 1;
    beginning_clear(&b);
    return 0;

failed:
    if (inv->root != NULL && inv->token == NULL) {
        ((RootValue *)inv->root)->closed = 1; /* reopened, and closed again: as it was */
    }
    if (inv->token != NULL) {
        PyObject *type, *error, *traceback;
        PyErr_Fetch(&type, &error, &traceback);
        if (PyContextVar_Reset(g_context_var, inv->token) < 0) {
            PyErr_Clear();
        }
        PyErr_Restore(type, error, traceback);
        Py_CLEAR(inv->token);
    }
    Py_CLEAR(inv->buffer);
    Py_XDECREF(current);
    Py_XDECREF(value);
    beginning_clear(&b);
    return -1;
}

/* A root's end: its value is closed where it stays reachable through this context alone, so
 * the next root here opens it again; else the ContextVar is reset (set to None when the value
 * was reopened: closed means None, and a copy made during the root keeps it, open). */
static int
end_root(Invocation *inv)
{
    PyObject *root = inv->root, *current = NULL;
    inv->root = NULL;
    if (PyContextVar_Get(g_context_var, NULL, &current) < 0) {
        current = NULL;
        PyErr_Clear();
    }
    int in_place = current == root && held_only_here(root, 1);
    Py_XDECREF(current);
    if (in_place) {
        ((RootValue *)root)->closed = 1;
        Py_CLEAR(inv->token);
        return 0;
    }
    if (inv->token != NULL) {
        int reset = PyContextVar_Reset(g_context_var, inv->token);
        Py_CLEAR(inv->token);
        return reset;
    }
    PyObject *token = PyContextVar_Set(g_context_var, Py_None);
    Py_XDECREF(token);
    return token == NULL ? -1 : 0;
}

/* Record the end of invocation `iid` in `buffer`, or its error when error_type is set. */
static int
record_end(EventBuffer *buffer, uint64_t iid, PyTypeObject *error_type)
{
    int64_t t_ns = 0;
    int result = read_clock(&t_ns);
    uint8_t kind = REC_END;
    PyObject *name = NULL;
    const char *cname = NULL;
    if (result == 0 && error_type != NULL) {
        if (error_type->tp_flags & Py_TPFLAGS_HEAPTYPE) {
            /* `type(exc).__name__` is the heap type's ht_name; a str subclass is copied to a str */
            kind = REC_ERROR;
            name = PyUnicode_Substring(((PyHeapTypeObject *)error_type)->ht_name, 0,
                                       PY_SSIZE_T_MAX);
            result = name == NULL ? -1 : 0;
        }
        else {
            const char *dot = strrchr(error_type->tp_name, '.');
            kind = REC_ERROR_CNAME;
            cname = dot != NULL ? dot + 1 : error_type->tp_name;
        }
    }
    if (result == 0) {
        Record *slot = buffer_next_slot(buffer);
        if (slot != NULL) {
            slot->kind = kind;
            slot->a = iid;
            slot->t_ns = t_ns;
            if (kind == REC_ERROR) {
                slot->u.obj = name;
            }
            else if (kind == REC_ERROR_CNAME) {
                slot->u.cname = cname;
            }
        }
        else {
            Py_XDECREF(name);
            result = -1;
        }
    }
    return result;
}

/* Record the end (or the error, when error_type is set), pop the stack and, for a root, restore
 * the caller's context, even when recording failed. */
static int
finish(Invocation *inv, PyTypeObject *error_type)
{
    EventBuffer *buffer = (EventBuffer *)inv->buffer;
    stack_pop(buffer, inv->index, inv->iid);
    int result = record_end(buffer, inv->iid, error_type);
    if (inv->root != NULL) {
        PyObject *type = NULL, *error = NULL, *traceback = NULL;
        if (result < 0) {
            PyErr_Fetch(&type, &error, &traceback);
        }
        int reset = end_root(inv);
        if (result < 0) {
            if (reset < 0) {
                PyErr_Clear();
            }
            PyErr_Restore(type, error, traceback);
        }
        else if (reset < 0) {
            result = -1;
        }
    }
    Py_CLEAR(inv->buffer);
    return result;
}

/* begin() for the common cases, inlined, with the default sources and under the thread's
 * allowance: a call nested in the top of its thread's stack (the ContextVar holds the value that
 * entry began under), or a root that opens its context's closed value again (RootValue). 0:
 * begun; 2: not one of these, and nothing done (begin() takes it). */
static inline int
begin_fast(uint64_t method, Invocation *inv)
{
    if (g_next_iid != NULL || g_clock != NULL || t_cache.buffer == NULL
        || t_cache.generation != g_generation
        || t_cache.tstate_id != PyThreadState_GetID(PyThreadState_Get())) {
        return 2;
    }
    EventBuffer *buffer = (EventBuffer *)t_cache.buffer;
    Py_ssize_t depth = buffer->depth;
    if (depth == buffer->stack_capacity || buffer->count >= buffer->limit) {
        return 2;
    }
    PyObject *current = NULL;
    if (PyContextVar_Get(g_context_var, NULL, &current) < 0) {
        PyErr_Clear(); /* begin() meets it again, and reports it */
        return 2;
    }
    StackEntry *top = depth > 0 ? &buffer->stack[depth - 1] : NULL;
    uint64_t parent = 0;
    const uint8_t *seq;
    RootValue *root = NULL;
    if (top != NULL && current == top->strand && !top->exotic) {
        parent = top->iid;
        seq = top->seq;
    }
    else if (current != NULL && is_closed(current) && g_new_seq == NULL
             && (top == NULL || top->strand != NULL) /* under a marker: begin() decides */
             && held_only_here(current, 1) && !(g_adopt != NULL && adoption_wanted())) {
        root = (RootValue *)current;
        draw_seq_bytes(root->seq);
        seq = root->seq;
    }
    else {
        Py_XDECREF(current);
        return 2;
    }
    Record *slot = buffer_next_slot(buffer);
    if (slot == NULL) {
        PyErr_Clear();
        Py_DECREF(current);
        return 2;
    }
    uint64_t iid = ++g_last_iid;
    if (root != NULL) {
        root->iid = iid;
        root->closed = 0;
    }
    int64_t t_ns = 0;
    read_clock(&t_ns); /* the default clock: it cannot fail */
    slot->kind = REC_START;
    slot->a = iid;
    slot->b = parent;
    slot->c = 0;
    slot->d = method;
    slot->t_ns = t_ns;
    memcpy(slot->seq, seq, 16);
    StackEntry *entry = &buffer->stack[depth];
    entry->iid = iid;
    entry->strand = current; /* the reference PyContextVar_Get gave */
    memcpy(entry->seq, seq, 16);
    entry->exotic = 0;
    entry->step = 0;
    entry->code = entry->token = entry->root = entry->state = NULL;
    buffer->depth = depth + 1;
    inv->buffer = Py_NewRef((PyObject *)buffer);
    inv->token = NULL;
    inv->root = (PyObject *)root;
    inv->iid = iid;
    inv->index = depth;
    return 0;
}
