/* tracer._core._speedups, one of its parts: a strand's start and end (_speedups_strands.h has
 * its state and steps), the strands the memory bound turned away, and the yield and resume
 * that Python 3.11's instrumented bytecode calls.
 * Included once, in order, by _speedups.c (one translation unit: the parts share its static
 * state and helpers); see _speedups.c for the whole. */

/* ---------------------------------------------------------------------------------------------
 * Strands turned away, a strand's start and end, 3.11's yield and resume.
 */

/* A step of a strand turned away as a root begins (`running`: its marker goes on top of the
 * thread's stack, with the strand's code, so the calls it makes run untraced too) or ends (the
 * marker comes off). `state` is its [running, running] list. 0, or -1 with an error set. */
static int
untraced_step(PyObject *state, PyObject *code, int running)
{
    if ((PyList_GET_ITEM(state, 1) != Py_None) == running) {
        return 0;
    }
    PyObject *buffer = current_buffer();
    if (buffer == NULL) {
        return -1;
    }
    EventBuffer *events = (EventBuffer *)buffer;
    if (running) {
        StackEntry *entry = stack_next(events);
        if (entry == NULL) {
            Py_DECREF(buffer);
            return -1;
        }
        memset(entry, 0, sizeof(StackEntry));
        entry->exotic = PAST_BOUND_MARKER;
        entry->step = 1;
        entry->code = Py_NewRef(code);
    }
    else {
        for (Py_ssize_t i = events->depth - 1; i >= 0; i--) {
            StackEntry *entry = &events->stack[i];
            if (entry->step && entry->iid == 0 && entry->code == code
                && entry->exotic == PAST_BOUND_MARKER) {
                stack_pop(events, i, 0);
                break;
            }
        }
    }
    Py_DECREF(buffer);
    PyObject *flag = running ? Py_True : Py_None;
    PyList_SetItem(state, 0, Py_NewRef(flag));
    PyList_SetItem(state, 1, Py_NewRef(flag));
    return 0;
}

/* The state of the strand of the running frame if the memory bound turned it away as a root
 * (borrowed), or NULL: only looked for when the frame has no traced state. */
static PyObject *
untraced_state(void)
{
    if (g_untraced_strands == NULL || PyDict_GET_SIZE(g_untraced_strands) == 0) {
        return NULL;
    }
    PyObject *frame = (PyObject *)PyEval_GetFrame();
    PyObject *state = frame == NULL ? NULL : PyDict_GetItemWithError(g_untraced_strands, frame);
    if (state == NULL || !PyList_CheckExact(state) || PyList_GET_SIZE(state) != 2) {
        PyErr_Clear();
        return NULL;
    }
    return state;
}

/* The strands open in the table `traced` says (1: the traced ones, 0: those turned away). */
static Py_ssize_t
open_strands(int traced)
{
    return traced ? g_strands->used : PyDict_GET_SIZE(g_untraced_strands);
}

/* Sweep the strands' tables when this many are open in one of them (hooks.sweep): 0, or -1
 * with an error. */
static int
sweep_when_many(int traced, Py_ssize_t floor)
{
    if (open_strands(traced) < g_sweep_at || g_sweep == NULL) {
        return 0;
    }
    PyObject *swept = PyObject_CallNoArgs(g_sweep);
    if (swept == NULL) {
        return -1;
    }
    Py_DECREF(swept);
    Py_ssize_t open = open_strands(traced);
    g_sweep_at = open * 2 > floor ? open * 2 : floor;
    return 0;
}

/* A strand the memory bound turned away (its start was refused, counted): when it would have
 * rooted a sequence, it is kept apart and each of its steps is a marker on the thread's stack,
 * so the calls it makes run untraced and counted too, as a synchronous root's do, rather than
 * each root a sequence of one call once the bound lets go. 0, or -1 with an error set. */
static int
untraced_strand_begin(PyObject *frame, PyObject *code)
{
    PyObject *current = NULL;
    if (g_untraced_strands == NULL || PyContextVar_Get(g_context_var, Py_None, &current) < 0) {
        return g_untraced_strands == NULL ? 0 : -1;
    }
    int root = current == Py_None || is_closed(current);
    Py_DECREF(current);
    if (!root) {
        return 0;
    }
    if (sweep_when_many(0, g_sweep_at) < 0) {
        return -1;
    }
    PyObject *state = PyList_New(2);
    if (state == NULL) {
        return -1;
    }
    PyList_SET_ITEM(state, 0, Py_NewRef(Py_None));
    PyList_SET_ITEM(state, 1, Py_NewRef(Py_None));
    int stored = untraced_step(state, code, 1);
    if (stored == 0) {
        stored = PyDict_SetItem(g_untraced_strands, frame, state);
        if (stored < 0) {
            PyObject *type, *error, *traceback;
            PyErr_Fetch(&type, &error, &traceback);
            if (untraced_step(state, code, 0) < 0) {
                PyErr_Clear();
            }
            PyErr_Restore(type, error, traceback);
        }
    }
    Py_DECREF(state);
    return stored;
}

/* A new strand's state, from its beginning (begin_strand_start): a new reference, or NULL with
 * an error set. */
static Strand *
strand_new(PyObject *buffer, const Beginning *b, uint64_t iid)
{
    Strand *strand;
    if (g_free_strand_count > 0) {
        strand = g_free_strands[--g_free_strand_count];
        PyObject_Init((PyObject *)strand, &StrandType);
    }
    else if ((strand = PyObject_New(Strand, &StrandType)) == NULL) {
        return NULL;
    }
    strand->iid = iid;
    memcpy(strand->seq, b->seq_bytes, 16); /* unless exotic: then seq_object is its sequence */
    strand->origin = (long)PyThread_get_thread_ident();
    strand->step = STEP_NONE;
    strand->seq_object = b->exotic ? Py_NewRef(b->seq) : NULL;
    strand->value = strand->token = strand->inner = strand->last = NULL;
    strand->buffer = Py_NewRef(buffer);
    return strand;
}

/* A strand begins (a generator's or coroutine's first run): its Start, its state kept by frame,
 * its first step begun. 0, or -1 with an error set. */
static int
strand_begin(uint64_t method, PyObject *code)
{
    if (g_disabled || g_strands == NULL) {
        return 0;
    }
    if (sweep_when_many(1, 64) < 0) {
        return -1;
    }
    PyObject *frame = strand_key();
    if (frame == NULL) {
        return 0;
    }
    PyObject *buffer = current_buffer();
    if (buffer == NULL) {
        return -1;
    }
    Beginning b = {0};
    uint64_t iid = 0;
    int begun = begin_strand_start((EventBuffer *)buffer, method, &iid, &b);
    Strand *strand = begun == 0 ? strand_new(buffer, &b, iid) : NULL;
    /* the value the Start found its parent under (none for a root): the first step's too */
    PyObject *current = Py_NewRef(b.strand != NULL ? b.strand : Py_None);
    beginning_clear(&b);
    if (strand == NULL) {
        Py_DECREF(current);
        Py_DECREF(buffer);
        return begun == 1 ? untraced_strand_begin((PyObject *)PyEval_GetFrame(), code) : -1;
    }
#if !STRAND_KEYS_OWNED
    /* an address key an earlier strand left, ending unseen, ends it now (a frame object key
     * stays alive in the table: no later strand can have it) */
    Strand *unseen = (Strand *)table_get(g_strands, frame);
    if (unseen != NULL && record_end((EventBuffer *)unseen->buffer, unseen->iid, NULL) < 0) {
        PyErr_Clear();
    }
#endif
    int stored = step_begin_under(strand, code, frame, current, buffer);
    Py_DECREF(buffer);
    if (stored == 0) {
        stored = table_set(g_strands, frame, (PyObject *)strand);
        if (stored < 0) {
            PyObject *type, *error, *traceback;
            PyErr_Fetch(&type, &error, &traceback);
            if (step_end(strand, code) < 0) {
                PyErr_Clear();
            }
            PyErr_Restore(type, error, traceback);
        }
    }
    Py_DECREF(strand);
    return stored;
}

/* A strand ends: its End (its Error; GeneratorExit ends a generator ok), and its step ended.
 * 0, or -1 with an error set. */
static int
strand_end(long kind, PyObject *error, PyObject *code)
{
    PyObject *frame = strand_key();
    Strand *strand = pop_strand(frame);
    if (strand == NULL) {
        PyObject *state = untraced_state();
        if (state == NULL) {
            return 0;
        }
        Py_INCREF(state);
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        int ended = untraced_step(state, code, 0) < 0
                    || PyDict_DelItem(g_untraced_strands, (PyObject *)PyEval_GetFrame()) < 0;
        Py_DECREF(state);
        if (ended) {
            Py_XDECREF(type);
            Py_XDECREF(value);
            Py_XDECREF(traceback);
            return -1;
        }
        PyErr_Restore(type, value, traceback);
        return 0;
    }
    int ok = error == NULL
             || (kind == 1 && PyErr_GivenExceptionMatches(error, PyExc_GeneratorExit));
    PyObject *buffer = current_buffer();
    int result = buffer == NULL ? -1
                                : record_end((EventBuffer *)buffer, strand->iid,
                                             ok ? NULL : Py_TYPE(error));
    Py_XDECREF(buffer);
    /* The step ends even when the End could not be recorded; then the End's error is the one
     * reported (the common case, with none set, needs no saving: each save and restore reads
     * the thread state, which 3.12's shared libpython reaches through __tls_get_addr). */
    PyObject *type = NULL, *value = NULL, *traceback = NULL;
    if (result < 0) {
        PyErr_Fetch(&type, &value, &traceback);
    }
    int ended = step_end_on_top(code, frame);
    ended = ended == 0 ? step_end(strand, code) : ended < 0 ? -1 : 0;
    if (result < 0) {
        PyErr_Clear();
        PyErr_Restore(type, value, traceback);
    }
    else {
        result = ended;
    }
    Py_DECREF(strand);
    return result;
}

/* PY_YIELD: the step ends, and with it its entry on the thread's stack (or its context value). */
static PyObject *
monitor_yield(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1) {
        Py_RETURN_NONE;
    }
    int fast = step_end_on_top(args[0], strand_key());
    if (fast != 0) {
        if (fast < 0 && !absorb_failure()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    Strand *strand = strand_of(NULL);
    if (strand == NULL) { /* untraced, or turned away as a root past the bound */
        PyObject *state = untraced_state();
        if (state != NULL && untraced_step(state, args[0], 0) < 0 && !absorb_failure()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    if (step_end(strand, args[0]) < 0 && !absorb_failure()) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* PY_RESUME: a step begins. */
static PyObject *
monitor_resume(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *frame;
    Strand *strand = strand_of(&frame);
    if (nargs >= 1 && strand == NULL) { /* untraced, or turned away as a root past the bound */
        PyObject *state = untraced_state();
        if (state != NULL && untraced_step(state, args[0], 1) < 0 && !absorb_failure()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    if (nargs < 1 || strand == NULL || strand->step != STEP_NONE) {
        Py_RETURN_NONE;
    }
    if (step_begin(strand, args[0], frame) < 0 && !absorb_failure()) {
        return NULL;
    }
    Py_RETURN_NONE;
}
