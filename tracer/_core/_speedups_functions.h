/* tracer._core._speedups, one of its parts: the module's functions.
 * Included once, in order, by _speedups.c (one translation unit: the parts share its static
 * state and helpers); see _speedups.c for the whole. */

/* ---------------------------------------------------------------------------------------------
 * Module functions.
 */

static PyObject *
set_refill(PyObject *module, PyObject *callback)
{
    Py_XSETREF(g_refill, callback == Py_None ? NULL : Py_NewRef(callback));
    g_budget_epoch++;
    Py_RETURN_NONE;
}

static PyObject *
budget_changed(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    g_budget_epoch++;
    Py_RETURN_NONE;
}

static PyObject *
overflowed(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromUnsignedLongLong(g_overflowed);
}

static PyObject *
configure(PyObject *module, PyObject *args, PyObject *kwargs)
{
    PyObject *context_var, *internal_error, *thread_events, *encode, *decode;
    static char *keywords[] = {"context_var", "internal_error", "thread_events", "encode",
                               "decode", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!OOOO:configure", keywords,
                                     &PyContextVar_Type, &context_var, &internal_error,
                                     &thread_events, &encode, &decode)) {
        return NULL;
    }
    Py_XSETREF(g_context_var, Py_NewRef(context_var));
    Py_XSETREF(g_internal_error, Py_NewRef(internal_error));
    Py_XSETREF(g_thread_events, Py_NewRef(thread_events));
    Py_XSETREF(g_encode, Py_NewRef(encode));
    Py_XSETREF(g_decode, Py_NewRef(decode));
    g_generation++;
    Py_RETURN_NONE;
}

static PyObject *
set_enabled(PyObject *module, PyObject *enabled)
{
    int truth = PyObject_IsTrue(enabled);
    if (truth < 0) {
        return NULL;
    }
    g_disabled = !truth;
    Py_RETURN_NONE;
}

static PyObject *
set_sources(PyObject *module, PyObject *args, PyObject *kwargs)
{
    PyObject *clock = Py_None, *new_seq = Py_None, *next_iid = Py_None, *adopt = Py_None;
    PyObject *adopt_guard = Py_None;
    static char *keywords[] = {"clock", "new_seq", "next_iid", "adopt", "adopt_guard", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|$OOOOO:set_sources", keywords, &clock,
                                     &new_seq, &next_iid, &adopt, &adopt_guard)) {
        return NULL;
    }
    PyObject *guard_var = NULL, *guard_key = NULL;
    if (adopt_guard != Py_None) {
        if (!PyTuple_CheckExact(adopt_guard) || PyTuple_GET_SIZE(adopt_guard) != 2
            || !PyContextVar_CheckExact(PyTuple_GET_ITEM(adopt_guard, 0))) {
            PyErr_SetString(PyExc_TypeError, "adopt_guard is (a ContextVar, a key) or None");
            return NULL;
        }
        guard_var = PyTuple_GET_ITEM(adopt_guard, 0);
        guard_key = PyTuple_GET_ITEM(adopt_guard, 1);
        if (PyObject_Hash(guard_key) == -1) {
            return NULL;
        }
    }
    Py_CLEAR(g_adopt_seen);
    Py_XSETREF(g_adopt_var, Py_XNewRef(guard_var));
    Py_XSETREF(g_adopt_key, Py_XNewRef(guard_key));
    Py_XSETREF(g_clock, clock == Py_None ? NULL : Py_NewRef(clock));
    Py_XSETREF(g_new_seq, new_seq == Py_None ? NULL : Py_NewRef(new_seq));
    Py_XSETREF(g_next_iid, next_iid == Py_None ? NULL : Py_NewRef(next_iid));
    Py_XSETREF(g_adopt, adopt == Py_None ? NULL : Py_NewRef(adopt));
    Py_RETURN_NONE;
}

static PyObject *
next_iid(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromUnsignedLongLong(++g_last_iid);
}

static PyObject *
clock_ns(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromLongLong((long long)clock_now_ns());
}

static PyObject *
use_tsc(PyObject *module, PyObject *allowed)
{
    int truth = PyObject_IsTrue(allowed);
    if (truth < 0) {
        return NULL;
    }
    clock_use_tsc(truth);
    Py_RETURN_NONE;
}

static PyObject *
clock_reads_tsc(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(g_tsc.enabled);
}

static PyObject *
new_seq(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    PyObject *saved = g_new_seq;
    g_new_seq = NULL;
    PyObject *seq = draw_seq();
    g_new_seq = saved;
    return seq;
}

/* (seq, the innermost open invocation, 0) when the top of this thread's stack began under
 * `current`, the value the ContextVar holds now; else None. NULL with an error set. */
static PyObject *
innermost(PyObject *current)
{
    PyObject *buffer = current_buffer();
    if (buffer == NULL) {
        return NULL;
    }
    EventBuffer *events = (EventBuffer *)buffer;
    PyObject *result = Py_None;
    if (events->depth > 0 && events->stack[events->depth - 1].strand == current) {
        /* A strand's step may run under None or another sequence's value: its entry says */
        StackEntry *top = &events->stack[events->depth - 1];
        PyObject *seq = top->exotic ? PySequence_GetItem(current, 0)
                                    : PyBytes_FromStringAndSize((const char *)top->seq, 16);
        result = seq == NULL ? NULL
                             : Py_BuildValue("(NKi)", seq,
                                             (unsigned long long)events->stack[events->depth - 1].iid,
                                             0);
    }
    else {
        Py_INCREF(result);
    }
    Py_DECREF(buffer);
    return result;
}

/* The ContextVar's value, a new reference (None when unset or before configure()). */
static PyObject *
context_value(void)
{
    PyObject *current = NULL;
    if (g_context_var == NULL) {
        Py_RETURN_NONE;
    }
    return PyContextVar_Get(g_context_var, Py_None, &current) < 0 ? NULL : current;
}

/* The exact current context, for whatever hands work on (tracer._core.stack.capture): the
 * innermost open invocation when it is on this thread's stack in this strand, else the
 * ContextVar's value, its first three items; None outside any sequence. */
static PyObject *
capture(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    PyObject *current = context_value();
    if (current == NULL) {
        return NULL;
    }
    PyObject *result = innermost(current);
    if (result == Py_None && current != Py_None && !is_closed(current)) {
        Py_DECREF(result);
        if (PyTuple_CheckExact(current) && PyTuple_GET_SIZE(current) == 3) {
            result = Py_NewRef(current);
        }
        else {
            PyObject *items = PySequence_Tuple(current);
            result = items == NULL ? NULL : PyTuple_GetSlice(items, 0, 3);
            if (result != NULL && PyTuple_GET_SIZE(result) != 3) {
                PyErr_SetString(PyExc_ValueError, "the invocation context has under 3 values");
                Py_CLEAR(result);
            }
            Py_XDECREF(items);
        }
    }
    Py_DECREF(current);
    return result;
}

/* The innermost open invocation when it is on this thread's stack in this strand, else None
 * (the ContextVar's value is then as exact as a context copied now can be): what a context
 * copied now should carry (tracer._patching.contexts). */
static PyObject *
nested(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    PyObject *current = context_value();
    if (current == NULL) {
        return NULL;
    }
    PyObject *result = t_cache.buffer == NULL ? Py_NewRef(Py_None) : innermost(current);
    Py_DECREF(current);
    return result;
}

/* The start of a strand's invocation (a coroutine's, a generator's: the Python wrappers): its
 * Start recorded with the exact parent, as begin() finds it, and the context value it runs
 * under returned, (seq, iid, 0, this thread); None past the memory bound (it runs untraced).
 * Its wrapper sets the ContextVar at each step of its own; nothing is pushed on the stack. */
static PyObject *begin_strand(uint64_t method);

static PyObject *
start(PyObject *module, PyObject *method_object)
{
    uint64_t method;
    if (!fits_u64(method_object, &method)) {
        PyErr_SetString(PyExc_TypeError, "start(method): an interned method id");
        return NULL;
    }
    return begin_strand(method);
}

/* The Start of a strand beginning now on this thread (`events`' own): its iid, and its
 * beginning (b, which the caller clears) with its sequence. 0: begun; 1: past the memory bound
 * (it runs untraced, counted); -1 with an error set. */
static int
begin_strand_start(EventBuffer *events, uint64_t method, uint64_t *iid, Beginning *b)
{
    PyObject *current = NULL;
    memset(b, 0, sizeof(*b));
    if (PyContextVar_Get(g_context_var, Py_None, &current) < 0) {
        return -1;
    }
    if (inside_untraced_root(events, current)) {
        Py_DECREF(current);
        return count_untraced_root() < 0 ? -1 : 1;
    }
    int granted = within_allowance(events, current);
    if (granted <= 0) {
        Py_DECREF(current);
        return granted == 0 ? 1 : -1;
    }
    if (take_iid(iid) < 0) {
        Py_DECREF(current);
        return -1;
    }
    if (find_parent(events, current, b) < 0 || (b->strand == NULL && find_root(b) < 0)) {
        return -1; /* find_parent took `current` */
    }
    int64_t t_ns = 0;
    if (read_clock(&t_ns) < 0 || record_start((PyObject *)events, b, *iid, method, t_ns) < 0) {
        return -1;
    }
    return 0;
}

/* start()'s work: the strand's Start, and its context value (None past the bound). */
static PyObject *
begin_strand(uint64_t method)
{
    PyObject *buffer = current_buffer();
    if (buffer == NULL) {
        return NULL;
    }
    Beginning b = {0};
    uint64_t iid = 0;
    int begun = begin_strand_start((EventBuffer *)buffer, method, &iid, &b);
    PyObject *value = begun < 0   ? NULL
                      : begun > 0 ? Py_NewRef(Py_None)
                                  : strand_value(beginning_seq(&b), iid,
                                                 (long)PyThread_get_thread_ident());
    beginning_clear(&b);
    Py_DECREF(buffer);
    return value;
}
