/* tracer._core._speedups, one of its parts: where an invocation begins (its parent, its
 * sequence, its context value), its Start record and its entry on the thread's stack.
 * Included once, in order, by _speedups.c (one translation unit: the parts share its static
 * state and helpers); see _speedups.c for the whole. */

/* ---------------------------------------------------------------------------------------------
 * An invocation's parent, sequence, Start and stack entry.
 */

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
