/* tracer._core._speedups, one of its parts: TracedFunction, the sync call
 * wrapper.
 * Included once, in order, by _speedups.c (one translation unit: the parts share its static
 * state and helpers); see _speedups.c for the whole. */

/* ---------------------------------------------------------------------------------------------
 * TracedFunction: the sync call wrapper.
 */

typedef struct {
    PyObject_HEAD
    PyObject *fn;
    uint64_t method;
    PyObject *dict; /* __name__, __qualname__, __doc__, __wrapped__, ... (functools.wraps) */
    PyObject *weakreflist;
    vectorcallfunc vectorcall;
} TracedFunction;

/* An invocation in flight: what the wrapper needs after the call. */
typedef struct {
    PyObject *buffer; /* strong: the end goes where the start went, and pops its stack */
    PyObject *token;  /* a root's: it set the ContextVar, and resets it at the end */
    uint64_t iid;
    Py_ssize_t index; /* its entry on the buffer's stack */
    PyObject *root;   /* borrowed: a root's RootValue (in the ContextVar while it runs), or NULL */
} Invocation;

/* The 4th item of a context value: where the value was set, so a Start that takes its parent
 * from the ContextVar knows whether that parent is exact (docs/architecture.md, "The invocation
 * stack"). A synchronous root's value says ORIGIN_SYNC_ROOT: its nested calls never set the
 * ContextVar, so a context copied inside one of them (by code we do not patch) still names the
 * root; a Start that finds such a value in the ContextVar, rather than on its thread's stack,
 * has the root for parent, an ancestor of the exact one, and is marked approximate. A strand's
 * value (a coroutine's, a generator's, a hand-off's runner) names the thread it runs on: on that
 * thread it is exact, on another the context travelled without a hand-off of ours. A 3-tuple
 * (integrations, remote contexts) is exact wherever it is found. */
#define ORIGIN_SYNC_ROOT (-1)

/* The tracer failed in one of its own steps (the error is set). An Exception is counted and
 * logged once by recorder.internal_error and cleared: the caller goes on (1). Anything else
 * (KeyboardInterrupt, SystemExit) propagates, as from traced_call's `except Exception` (0). */
static int
absorb_failure(void)
{
    if (!PyErr_ExceptionMatches(PyExc_Exception)) {
        return 0;
    }
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    if (traceback != NULL) {
        PyException_SetTraceback(value, traceback);
    }
    PyObject *result = PyObject_CallOneArg(g_internal_error, value);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
    if (result == NULL) {
        return 0;
    }
    Py_DECREF(result);
    return 1;
}

/* Whether a root asks g_adopt: with a guard, only when the guard's ContextVar holds a dict with
 * the key (OpenTelemetry's current Context has a span), so a root outside any span calls no
 * Python code. Raises nothing: when in doubt, the callback decides. */
static PyObject *g_adopt_seen;  /* the guard's last mapping (a strong reference) ... */
static int g_adopt_seen_wanted;  /* ... and whether it held the key: OpenTelemetry's Context is
                                    immutable, so the answer stands while it is the same one */

static int
adoption_wanted(void)
{
    if (g_adopt_var == NULL) {
        return 1;
    }
    PyObject *mapping = NULL;
    if (PyContextVar_Get(g_adopt_var, NULL, &mapping) < 0) {
        PyErr_Clear();
        return 1;
    }
    if (mapping == NULL) {
        return 0;
    }
    if (mapping == g_adopt_seen) {
        Py_DECREF(mapping);
        return g_adopt_seen_wanted;
    }
    int wanted = 1;
    if (PyDict_Check(mapping)) {
        wanted = PyDict_GetItemWithError(mapping, g_adopt_key) != NULL;
        if (PyErr_Occurred()) {
            PyErr_Clear();
            wanted = 1;
        }
        else if (strcmp(Py_TYPE(mapping)->tp_name, "Context") == 0) {
            Py_XSETREF(g_adopt_seen, Py_NewRef(mapping)); /* OpenTelemetry's: immutable */
            g_adopt_seen_wanted = wanted;
        }
    }
    Py_DECREF(mapping);
    return wanted;
}

/* Append an event tuple built by Py_BuildValue (a Start that fits no record, an Attrs). */
static int
append_built(PyObject *buffer, PyObject *event)
{
    if (event == NULL) {
        return -1;
    }
    PyObject *result = buffer_append((EventBuffer *)buffer, event);
    Py_DECREF(event);
    Py_XDECREF(result);
    return result == NULL ? -1 : 0;
}

/* What a new invocation begins from: its Start's parent, hand-off and sequence. */
typedef struct {
    PyObject *strand;        /* new ref: the context value it runs under (NULL: a root's, made) */
    PyObject *seq, *parent, *hid; /* new refs, for a strand that fits no record */
    PyObject *seq_object;         /* new ref: a root's sequence id, as bytes (NULL: not drawn) */
    uint64_t parent_iid, hid_id;
    uint8_t seq_bytes[16];
    int exotic;
    int approximate;
} Beginning;

static void
beginning_clear(Beginning *b)
{
    Py_CLEAR(b->strand);
    Py_CLEAR(b->seq);
    Py_CLEAR(b->parent);
    Py_CLEAR(b->hid);
    Py_CLEAR(b->seq_object);
}

/* The parent of an invocation starting now on this thread, exactly: the innermost open
 * synchronous invocation of the stack when it began under the ContextVar value that is current
 * now (the same strand), else the value itself. `current` is that value (a new reference, given
 * to `b`); None leaves b->strand NULL: a root. 0, or -1 with an error set. */
static int
find_parent(EventBuffer *buffer, PyObject *current, Beginning *b)
{
    memset(b, 0, sizeof(*b));
    b->strand = current;
    if (buffer != NULL && buffer->depth > 0 && buffer->stack[buffer->depth - 1].strand == current) {
        StackEntry *top = &buffer->stack[buffer->depth - 1];
        b->parent_iid = top->iid;
        memcpy(b->seq_bytes, top->seq, 16);
        if (top->exotic) {
            b->exotic = 1;
            b->seq = PySequence_GetItem(current, 0);
            b->parent = PyLong_FromUnsignedLongLong(top->iid);
            b->hid = PyLong_FromLong(0);
            if (b->seq == NULL || b->parent == NULL || b->hid == NULL) {
                return -1;
            }
        }
        return 0;
    }
    if (current == Py_None || is_closed(current)) {
        Py_CLEAR(b->strand);
        return 0;
    }
    if (Py_IS_TYPE(current, &RootValueType)) {
        /* a root's value, found in the ContextVar and not on this thread's stack: the context
         * was copied inside the root, maybe in a call nested in it (ORIGIN_SYNC_ROOT) */
        b->parent_iid = ((RootValue *)current)->iid;
        memcpy(b->seq_bytes, ((RootValue *)current)->seq, 16);
        b->approximate = 1;
        return 0;
    }
    PyObject *items = PySequence_Tuple(current); /* `seq, parent, hid, *origin = current` */
    if (items == NULL) {
        return -1;
    }
    Py_ssize_t size = PyTuple_GET_SIZE(items);
    if (size != 3 && size != 4) {
        PyErr_Format(PyExc_ValueError, "the invocation context has %zd values, not 3 or 4", size);
        Py_DECREF(items);
        return -1;
    }
    b->seq = Py_NewRef(PyTuple_GET_ITEM(items, 0));
    b->parent = Py_NewRef(PyTuple_GET_ITEM(items, 1));
    b->hid = Py_NewRef(PyTuple_GET_ITEM(items, 2));
    if (size == 4) {
        long long origin = PyLong_AsLongLong(PyTuple_GET_ITEM(items, 3));
        if (origin == -1 && PyErr_Occurred()) {
            Py_DECREF(items);
            return -1;
        }
        b->approximate = origin == ORIGIN_SYNC_ROOT
            || (unsigned long long)origin != (unsigned long long)PyThread_get_thread_ident();
    }
    Py_DECREF(items);
    b->exotic = !(fits_u64(b->parent, &b->parent_iid) && fits_u64(b->hid, &b->hid_id)
                  && fits_seq(b->seq, b->seq_bytes));
    if (!b->exotic) {
        Py_CLEAR(b->seq);
        Py_CLEAR(b->parent);
        Py_CLEAR(b->hid);
    }
    return 0;
}

/* A root: a sequence of its own, or the trace already current that it adopts (OpenTelemetry's,
 * tracer._core.adoption.adopt). Fills b as find_parent does, b->strand left NULL. */
static int
find_root(Beginning *b)
{
    if (g_adopt != NULL && adoption_wanted()) {
        PyObject *adopted = PyObject_CallNoArgs(g_adopt);
        if (adopted == NULL) {
            return -1;
        }
        if (adopted != Py_None) {
            if (find_parent(NULL, adopted, b) < 0) {
                return -1;
            }
            b->approximate = 0;
            Py_CLEAR(b->strand);
            if (b->exotic) {
                PyErr_SetString(PyExc_ValueError, "an adopted context fits no record");
                return -1;
            }
            return 0;
        }
        Py_DECREF(adopted);
    }
    if (g_new_seq == NULL) {
        draw_seq_bytes(b->seq_bytes);
        return 0;
    }
    b->seq_object = draw_seq();
    if (b->seq_object == NULL) {
        return -1;
    }
    if (!fits_seq(b->seq_object, b->seq_bytes)) {
        PyErr_SetString(PyExc_ValueError, "a sequence id is 16 bytes");
        return -1;
    }
    return 0;
}

/* A root's context value, (seq, iid, 0, ORIGIN_SYNC_ROOT) for a synchronous root, (seq, iid, 0,
 * this thread) for a strand's: what a context copied inside it carries. Steals `seq`. */
static PyObject *
strand_value(PyObject *seq, uint64_t iid, long origin)
{
    PyObject *value = PyTuple_New(4);
    PyObject *iid_object = PyLong_FromUnsignedLongLong(iid);
    PyObject *origin_object = PyLong_FromLong(origin);
    if (value == NULL || iid_object == NULL || origin_object == NULL || seq == NULL) {
        Py_XDECREF(value);
        Py_XDECREF(iid_object);
        Py_XDECREF(origin_object);
        Py_XDECREF(seq);
        return NULL;
    }
    PyTuple_SET_ITEM(value, 0, seq);
    PyTuple_SET_ITEM(value, 1, iid_object);
    PyTuple_SET_ITEM(value, 2, PyLong_FromLong(0));
    PyTuple_SET_ITEM(value, 3, origin_object);
    return value;
}

/* The sequence id of a beginning, as an object (a new reference). */
static PyObject *
beginning_seq(const Beginning *b)
{
    PyObject *seq = b->seq_object != NULL ? b->seq_object : b->seq;
    if (seq != NULL) {
        return Py_NewRef(seq);
    }
    return PyBytes_FromStringAndSize((const char *)b->seq_bytes, 16);
}

/* The Start record (and, when the parent is approximate, the Attrs that says so). */
static int
record_start(PyObject *buffer, const Beginning *b, uint64_t iid, uint64_t method, int64_t t_ns)
{
    if (b->exotic) {
        if (append_built(buffer, Py_BuildValue("(iKOOKLO)", TAG_START, (unsigned long long)iid,
                                               b->parent, b->hid, (unsigned long long)method,
                                               (long long)t_ns, b->seq))
            < 0) {
            return -1;
        }
    }
    else {
        Record *slot = buffer_next_slot((EventBuffer *)buffer);
        if (slot == NULL) {
            return -1;
        }
        slot->kind = REC_START;
        slot->a = iid;
        slot->b = b->parent_iid;
        slot->c = b->hid_id;
        slot->d = method;
        slot->t_ns = t_ns;
        memcpy(slot->seq, b->seq_bytes, 16);
    }
    if (b->approximate) {
        return append_built(buffer, Py_BuildValue("(iK{ss})", TAG_ATTRS, (unsigned long long)iid,
                                                  "invoseq.parent", "approximate"));
    }
    return 0;
}

/* The next entry of the thread's stack, growing it when full (NULL: no memory, the error set);
 * the caller fills it at once. */
static StackEntry *
stack_next(EventBuffer *buffer)
{
    if (buffer->depth == buffer->stack_capacity) {
        Py_ssize_t capacity = buffer->stack_capacity ? buffer->stack_capacity * 2 : INITIAL_STACK;
        StackEntry *stack = realloc(buffer->stack, capacity * sizeof(StackEntry));
        if (stack == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        buffer->stack = stack;
        buffer->stack_capacity = capacity;
    }
    return &buffer->stack[buffer->depth++];
}

static int
stack_push(EventBuffer *buffer, uint64_t iid, PyObject *strand, const Beginning *b)
{
    StackEntry *entry = stack_next(buffer);
    if (entry == NULL) {
        return -1;
    }
    entry->iid = iid;
    entry->strand = Py_NewRef(strand);
    memcpy(entry->seq, b->seq_bytes, 16);
    entry->exotic = b->exotic;
    entry->step = 0;
    entry->code = entry->token = entry->root = entry->state = NULL;
    return 0;
}

/* Close the invocation's entry and any left above it (a stack switched under us, as greenlets
 * do, never leaves entries behind); an entry already closed is left alone. */
static inline void
stack_pop(EventBuffer *buffer, Py_ssize_t index, uint64_t iid)
{
    if (index >= buffer->depth || buffer->stack[index].iid != iid) {
        return;
    }
    while (buffer->depth > index) {
        buffer->depth--;
        entry_release(&buffer->stack[buffer->depth]);
    }
}

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

/* Record the end (or the error, when error_type is set), pop the stack and, for a root, restore
 * the caller's context, even when recording failed. */
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

/* A call the memory bound turned away: when it would have rooted a sequence, it runs under a
 * marker on the thread's stack, so the calls inside it run untraced too (inside_untraced_root);
 * a nested one needs none (its calls nest in its traced caller's sequence, as they would). */
static PyObject *
untraced_call(TracedFunction *self, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    PyObject *current = NULL;
    PyObject *buffer = current_buffer();
    if (buffer == NULL || PyContextVar_Get(g_context_var, Py_None, &current) < 0) {
        Py_XDECREF(buffer);
        PyErr_Clear(); /* no marker then: the call itself still runs */
        return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    }
    EventBuffer *events = (EventBuffer *)buffer;
    int root = current == Py_None || is_closed(current);
    Py_DECREF(current);
    StackEntry *marker = root ? stack_next(events) : NULL;
    if (marker == NULL) {
        PyErr_Clear();
        Py_DECREF(buffer);
        return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    }
    memset(marker, 0, sizeof(StackEntry));
    marker->exotic = PAST_BOUND_MARKER;
    Py_ssize_t index = events->depth - 1;
    PyObject *result = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    stack_pop(events, index, 0);
    Py_DECREF(buffer);
    return result;
}

static PyObject *
traced_vectorcall(PyObject *callable, PyObject *const *args, size_t nargsf, PyObject *kwnames)
{
    TracedFunction *self = (TracedFunction *)callable;
    if (g_disabled || g_context_var == NULL) {
        return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    }
    Invocation inv;
    int begun = begin_fast(self->method, &inv);
    if (begun == 2) {
        begun = begin(self->method, &inv);
    }
    if (begun == 1) {
        return untraced_call(self, args, nargsf, kwnames);
    }
    if (begun < 0) {
        if (!absorb_failure()) {
            return NULL;
        }
        return PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    }
    PyObject *result = PyObject_Vectorcall(self->fn, args, nargsf, kwnames);
    if (result != NULL) {
        if (finish(&inv, NULL) < 0 && !absorb_failure()) {
            Py_CLEAR(result);
        }
        return result;
    }
    /* The user's exception: an Error record naming its type, then it propagates unchanged. */
    PyObject *type, *error, *traceback;
    PyErr_Fetch(&type, &error, &traceback);
    PyErr_NormalizeException(&type, &error, &traceback);
    if (traceback != NULL) {
        PyException_SetTraceback(error, traceback);
    }
    PyTypeObject *error_type = error != NULL ? Py_TYPE(error) : (PyTypeObject *)type;
    if (finish(&inv, error_type) < 0 && !absorb_failure()) {
        /* a KeyboardInterrupt inside the tracer's own step: it propagates, chained */
        PyObject *inner_type, *inner, *inner_traceback;
        PyErr_Fetch(&inner_type, &inner, &inner_traceback);
        PyErr_NormalizeException(&inner_type, &inner, &inner_traceback);
        PyException_SetContext(inner, error);
        Py_XDECREF(type);
        Py_XDECREF(traceback);
        PyErr_Restore(inner_type, inner, inner_traceback);
        return NULL;
    }
    PyErr_Restore(type, error, traceback);
    return NULL;
}

static PyObject *
traced_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *fn;
    unsigned long long method;
    static char *keywords[] = {"fn", "method", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OK:TracedFunction", keywords, &fn, &method)) {
        return NULL;
    }
    if (!PyCallable_Check(fn)) {
        PyErr_Format(PyExc_TypeError, "TracedFunction wraps a callable, not %.100s",
                     Py_TYPE(fn)->tp_name);
        return NULL;
    }
    TracedFunction *self = (TracedFunction *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->fn = Py_NewRef(fn);
    self->method = method;
    self->vectorcall = traced_vectorcall;
    return (PyObject *)self;
}

static int
traced_traverse(TracedFunction *self, visitproc visit, void *arg)
{
    Py_VISIT(self->fn);
    Py_VISIT(self->dict);
    return 0;
}

static int
traced_clear(TracedFunction *self)
{
    Py_CLEAR(self->fn);
    Py_CLEAR(self->dict);
    return 0;
}

static void
traced_dealloc(TracedFunction *self)
{
    PyObject_GC_UnTrack(self);
    if (self->weakreflist != NULL) {
        PyObject_ClearWeakRefs((PyObject *)self);
    }
    traced_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Methods bind as functions do: through the class, the wrapper itself. */
static PyObject *
traced_descr_get(PyObject *self, PyObject *instance, PyObject *owner)
{
    if (instance == NULL || instance == Py_None) {
        return Py_NewRef(self);
    }
    return PyMethod_New(self, instance);
}

static PyObject *
traced_repr(TracedFunction *self)
{
    PyObject *name = self->dict != NULL ? PyDict_GetItemString(self->dict, "__qualname__") : NULL;
    if (name == NULL) {
        return PyUnicode_FromFormat("<traced %R>", self->fn);
    }
    return PyUnicode_FromFormat("<function %S at %p>", name, self);
}

/* Pickled by reference, as a function is: pickle finds it again under its module and qualname. */
static PyObject *
traced_reduce(PyObject *self, PyObject *Py_UNUSED(ignored))
{
    return PyObject_GetAttrString(self, "__qualname__");
}

static PyObject *
traced_get_method(TracedFunction *self, void *Py_UNUSED(closure))
{
    return PyLong_FromUnsignedLongLong(self->method);
}

static PyMethodDef traced_methods[] = {
    {"__reduce__", (PyCFunction)traced_reduce, METH_NOARGS, NULL},
    {NULL},
};

static PyGetSetDef traced_getset[] = {
    {"__dict__", PyObject_GenericGetDict, PyObject_GenericSetDict, NULL, NULL},
    {"_invoseq_method", (getter)traced_get_method, NULL, "The interned method id.", NULL},
    {NULL},
};

static PyTypeObject TracedFunctionType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracer._core._speedups.TracedFunction",
    .tp_doc = "TracedFunction(fn, method): calls fn inside an invocation of the interned method.",
    .tp_basicsize = sizeof(TracedFunction),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL
        | Py_TPFLAGS_METHOD_DESCRIPTOR,
    .tp_new = traced_new,
    .tp_dealloc = (destructor)traced_dealloc,
    .tp_traverse = (traverseproc)traced_traverse,
    .tp_clear = (inquiry)traced_clear,
    .tp_call = PyVectorcall_Call,
    .tp_vectorcall_offset = offsetof(TracedFunction, vectorcall),
    .tp_descr_get = traced_descr_get,
    .tp_repr = (reprfunc)traced_repr,
    .tp_dictoffset = offsetof(TracedFunction, dict),
    .tp_weaklistoffset = offsetof(TracedFunction, weakreflist),
    .tp_methods = traced_methods,
    .tp_getset = traced_getset,
};
