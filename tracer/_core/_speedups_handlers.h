/* tracer._core._speedups, one of its parts: the handlers of instrumented
 * code (sys.monitoring on 3.12+, the 3.11 call sequence).
 * Included once, in order, by _speedups.c (one translation unit: the parts share its static
 * state and helpers); see _speedups.c for the whole. */

/* ---------------------------------------------------------------------------------------------
 * The handlers of instrumented code (sys.monitoring's PY_START, PY_RETURN and PY_UNWIND on 3.12+;
 * tracer._core.hooks says what each event means). A synchronous call's start does what
 * traced_vectorcall does before the call and pushes the entry with its code, token and root; its
 * end finds the entry on top of its thread's stack (an entry of another code: the frame began
 * before its code was instrumented, and is left alone) and finishes it. A call that runs
 * untraced (recording off, past the bound, a failure) pushes a marker (iid 0), so that its end
 * pops its own entry. A strand (generator, coroutine) keeps its state by frame in the table
 * tracer._core.hooks shares (its sweep ends those that end unseen): its start records the Start
 * and sets its context value, each yield resets it and each resume or throw sets it again, its
 * return or unwind ends it.
 */

static PyObject *g_strands; /* hooks._strands: frame -> [iid, value, token or None (True: on the
                            * stack; False: under a value of its own; Ellipsis: begun inside
                            * a collection, nothing set), buffer, ...] */
/* hooks._untraced_strands: frame -> [running, running] (True while a step runs: its marker is
 * on the thread's stack; None between steps), the strands turned away as roots past the bound */
static PyObject *g_untraced_strands;
static PyObject *g_sweep;   /* hooks.sweep(): ends the strands that ended unseen */
static Py_ssize_t g_sweep_at = 64; /* sweep when this many strands are open */
/* A traced code object's (method, kind) lives in its own extra slot (PEP 523's co_extra):
 * (method << 2) | kind, so a handler's lookup is one read, with no hashing (a code object hashes
 * its whole bytecode and constants on every lookup). NULL: not traced. */
static Py_ssize_t g_code_index = -1;

#if PY_VERSION_HEX >= 0x030C0000
#define REQUEST_CODE_INDEX PyUnstable_Eval_RequestCodeExtraIndex
#define CODE_GET_EXTRA PyUnstable_Code_GetExtra
#define CODE_SET_EXTRA PyUnstable_Code_SetExtra
#else
#define REQUEST_CODE_INDEX _PyEval_RequestCodeExtraIndex
#define CODE_GET_EXTRA _PyCode_GetExtra
#define CODE_SET_EXTRA _PyCode_SetExtra
#endif

static PyObject *
set_handlers(PyObject *module, PyObject *args)
{
    PyObject *strands, *sweep, *untraced = NULL;
    if (!PyArg_ParseTuple(args, "O!O|O!:set_handlers", &PyDict_Type, &strands, &sweep,
                          &PyDict_Type, &untraced)) {
        return NULL;
    }
    Py_XSETREF(g_untraced_strands, Py_XNewRef(untraced));
    if (g_code_index < 0) {
        g_code_index = REQUEST_CODE_INDEX(NULL);
        if (g_code_index < 0) {
            PyErr_SetString(PyExc_RuntimeError, "no code extra index left for the tracer");
            return NULL;
        }
    }
    Py_XSETREF(g_strands, Py_NewRef(strands));
    Py_XSETREF(g_sweep, Py_NewRef(sweep));
    Py_RETURN_NONE;
}

static PyObject *
mark_code(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t method, kind;
    if (nargs != 3 || !PyCode_Check(args[0]) || !fits_u64(args[1], &method)
        || !fits_u64(args[2], &kind) || kind > 3 || method == 0 || method > (UINTPTR_MAX >> 2)) {
        PyErr_SetString(PyExc_TypeError, "mark_code(code, method, kind): a traced code's entry");
        return NULL;
    }
    if (g_code_index < 0) {
        PyErr_SetString(PyExc_RuntimeError, "mark_code before set_handlers");
        return NULL;
    }
    void *entry = (void *)(uintptr_t)((method << 2) | kind);
    if (CODE_SET_EXTRA(args[0], g_code_index, entry) < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* The entry of `code`: 1 with method and kind; 0 when the code is not traced. */
static inline int
registered(PyObject *code, uint64_t *method, long *kind)
{
    void *entry = NULL;
    if (g_code_index < 0 || !PyCode_Check(code)
        || CODE_GET_EXTRA(code, g_code_index, &entry) < 0) {
        PyErr_Clear();
        return 0;
    }
    if (entry == NULL) {
        return 0;
    }
    *method = (uint64_t)((uintptr_t)entry >> 2);
    *kind = (long)((uintptr_t)entry & 3);
    return 1;
}


/* Whether a value of the strands' table is a strand's state (tracer._core.hooks makes the same
 * six-item lists). */
static inline int
is_strand_state(PyObject *state)
{
    return state != NULL && PyList_CheckExact(state) && PyList_GET_SIZE(state) == 6;
}

/* A strand's state, by its frame (tracer._core.hooks keeps the same table): borrowed, or NULL. */
static PyObject *
strand_state(PyObject **frame_out)
{
    PyObject *frame = (PyObject *)PyEval_GetFrame(); /* borrowed: the traced frame */
    if (frame_out != NULL) {
        *frame_out = frame;
    }
    if (frame == NULL || g_strands == NULL) {
        return NULL;
    }
    PyObject *state = PyDict_GetItemWithError(g_strands, frame);
    if (!is_strand_state(state)) {
        PyErr_Clear();
        return NULL;
    }
    return state;
}

/* The state of the strand of `frame`, taken out of the strands' table (its end): a new
 * reference, or NULL when it has none (no error set). One lookup, where a get and a delete
 * were two. */
static PyObject *
pop_strand(PyObject *frame)
{
    if (frame == NULL || g_strands == NULL || PyDict_GET_SIZE(g_strands) == 0) {
        return NULL;
    }
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *state = NULL;
    if (PyDict_Pop(g_strands, frame, &state) < 0) {
        PyErr_Clear();
        return NULL;
    }
#else
    PyObject *state = _PyDict_Pop(g_strands, frame, Py_None);
    if (state == NULL) {
        PyErr_Clear();
        return NULL;
    }
#endif
    if (!is_strand_state(state)) {
        Py_XDECREF(state); /* None (not there), or not a state: the table holds nothing else */
        state = NULL;
    }
    return state;
}

/* Whether the ContextVar value `current` belongs to the sequence `seq` (16 bytes): an open
 * root's value, or a (seq, parent, hid[, origin]) value. */
static int
of_sequence(PyObject *current, const char *seq)
{
    if (is_closed(current) || (PyTuple_CheckExact(current) && PyTuple_GET_SIZE(current) < 3)) {
        return 0;
    }
    const uint8_t *own = sequence_of(current);
    return own != NULL && memcmp(own, seq, 16) == 0;
}

/* The step of the strand whose state is `state` runs under `value`: the ContextVar set to it,
 * its token in state[2]; inside a collection on this thread nothing is set (Ellipsis there: see
 * g_collecting). 0, or -1 with an error set. */
static int
step_set(PyObject *state, PyObject *value)
{
    PyObject *token =
        collecting_here() ? Py_NewRef(Py_Ellipsis) : PyContextVar_Set(g_context_var, value);
    if (token == NULL) {
        return -1;
    }
    PyList_SetItem(state, 2, token);
    return 0;
}

/* A step of the strand whose state is `state` begins on this thread. When the ContextVar holds
 * a value of the strand's own sequence, the step is an entry on the thread's stack (its iid and
 * sequence, that value, its code): the calls it makes nest under it as under a synchronous
 * call's, with no ContextVar write, and a context C code copies meanwhile carries the sequence
 * (with an ancestor for parent); state[2] says so (True). Otherwise (a strand that began a
 * sequence, one resumed from another sequence or from none, one whose sequence fits no record)
 * the step sets the strand's value in the ContextVar, its token in state[2], so that copies
 * carry the right sequence. 0, or -1 with an error set. */
static int
step_begin(PyObject *state, PyObject *code, PyObject *frame)
{
    PyObject *value = PyList_GET_ITEM(state, 1);
    PyObject *seq = PyTuple_GET_ITEM(value, 0);
    uint64_t iid;
    PyObject *current = NULL;
    if (PyContextVar_Get(g_context_var, Py_None, &current) < 0) {
        return -1;
    }
    PyObject *inner = PyList_GET_ITEM(state, 4);
    if (inner != Py_None) {
        /* code inside the frame set this value and had not reset it at the yield (a client
         * call attached across an await): the step runs under it, claiming nothing */
        if (current == inner) { /* still in the task's context */
            Py_DECREF(current);
            PyList_SetItem(state, 2, Py_NewRef(Py_False));
            return 0;
        }
        Py_DECREF(current);
        return step_set(state, inner);
    }
    if (!PyBytes_CheckExact(seq) || PyBytes_GET_SIZE(seq) != 16
        || !fits_u64(PyList_GET_ITEM(state, 0), &iid)
        || !of_sequence(current, PyBytes_AS_STRING(seq))) {
        Py_DECREF(current);
        return step_set(state, value);
    }
    PyObject *buffer = current_buffer();
    if (buffer == NULL) {
        Py_DECREF(current);
        return -1;
    }
    StackEntry *entry = stack_next((EventBuffer *)buffer);
    if (entry == NULL) {
        Py_DECREF(current);
        Py_DECREF(buffer);
        return -1;
    }
    entry->iid = iid;
    entry->strand = current; /* the reference PyContextVar_Get gave */
    memcpy(entry->seq, PyBytes_AS_STRING(seq), 16);
    entry->exotic = 0;
    entry->step = 1;
    entry->code = Py_NewRef(code);
    entry->token = entry->root = NULL;
    entry->state = Py_NewRef(state);
    entry->frame = frame;
    Py_DECREF(buffer);
    PyList_SetItem(state, 2, Py_NewRef(Py_True));
    return 0;
}

/* The value in effect at the end of a step (`now`), when code inside the frame set it and has
 * not reset it (neither the strand's own value nor the one its last entry step began under), is
 * the one its next step runs under: state[4] (else None). */
static void
keep_inner(PyObject *state, PyObject *now)
{
    int normal = now == Py_None || now == PyList_GET_ITEM(state, 1)
                 || now == PyList_GET_ITEM(state, 5);
    PyObject *inner = normal ? Py_None : now;
    if (PyList_GET_ITEM(state, 4) != inner) {
        PyList_SetItem(state, 4, Py_NewRef(inner));
    }
}

/* At the end of a step of the strand whose state is `state`: the value in effect now, when code
 * inside the frame set it and has not reset it (neither the strand's own value nor the one its
 * last entry step began under), is the one its next step runs under (state[4]); an entry step's
 * value becomes state[5]. 0, or -1 with an error set. */
static int
remember_inner(PyObject *state, PyObject *code)
{
    PyObject *now = NULL;
    if (PyContextVar_Get(g_context_var, Py_None, &now) < 0) {
        return -1;
    }
    if (PyList_GET_ITEM(state, 2) == Py_True) {
        PyObject *buffer = current_buffer();
        if (buffer == NULL) {
            Py_DECREF(now);
            return -1;
        }
        EventBuffer *events = (EventBuffer *)buffer;
        uint64_t iid;
        if (fits_u64(PyList_GET_ITEM(state, 0), &iid)) {
            for (Py_ssize_t i = events->depth - 1; i >= 0; i--) {
                StackEntry *entry = &events->stack[i];
                if (entry->step && entry->code == code && entry->iid == iid) {
                    if (PyList_GET_ITEM(state, 5) != entry->strand) {
                        PyList_SetItem(state, 5, Py_NewRef(entry->strand));
                    }
                    break;
                }
            }
        }
        Py_DECREF(buffer);
    }
    keep_inner(state, now);
    Py_DECREF(now);
    return 0;
}

/* The step of the strand whose state is `state` ends (a yield, its return or unwind): its entry
 * leaves the thread's stack (the innermost of this code and invocation; any above it too), or
 * its ContextVar token is reset. 0, or -1 with an error set. */
static int
step_end(PyObject *state, PyObject *code)
{
    PyObject *token = PyList_GET_ITEM(state, 2);
    if (token == Py_None) {
        return 0;
    }
    if (token == Py_Ellipsis) { /* it began inside a collection, and set nothing: as it was */
        PyList_SetItem(state, 2, Py_NewRef(Py_None));
        return 0;
    }
    if (remember_inner(state, code) < 0) {
        return -1;
    }
    if (token == Py_False) { /* it ran under a value set inside the frame: nothing to undo */
        PyList_SetItem(state, 2, Py_NewRef(Py_None));
        return 0;
    }
    if (token == Py_True) {
        PyList_SetItem(state, 2, Py_NewRef(Py_None));
        uint64_t iid;
        if (!fits_u64(PyList_GET_ITEM(state, 0), &iid)) {
            return -1;
        }
        PyObject *buffer = current_buffer(); /* the step began on this thread: its entry is here */
        if (buffer == NULL) {
            return -1;
        }
        EventBuffer *events = (EventBuffer *)buffer;
        for (Py_ssize_t i = events->depth - 1; i >= 0; i--) {
            StackEntry *entry = &events->stack[i];
            if (entry->step && entry->code == code && entry->iid == iid) {
                stack_pop(events, i, iid);
                break;
            }
        }
        Py_DECREF(buffer);
        return 0;
    }
    Py_INCREF(token);
    PyList_SetItem(state, 2, Py_NewRef(Py_None));
    int reset = PyContextVar_Reset(g_context_var, token);
    Py_DECREF(token);
    return reset;
}

/* A step of a strand turned away as a root begins (`running`: its marker goes on top of the
 * thread's stack, with the strand's code, so the calls it makes run untraced too) or ends (the
 * marker comes off). 0, or -1 with an error set. */
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

/* A strand the memory bound turned away (begin_strand gave None, counted): when it would have
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
    if (PyDict_GET_SIZE(g_untraced_strands) >= g_sweep_at && g_sweep != NULL) {
        PyObject *swept = PyObject_CallNoArgs(g_sweep);
        if (swept == NULL) {
            return -1;
        }
        Py_DECREF(swept);
        Py_ssize_t open = PyDict_GET_SIZE(g_untraced_strands);
        g_sweep_at = open * 2 > g_sweep_at ? open * 2 : g_sweep_at;
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

/* A strand begins (a generator's or coroutine's first run): its Start, its state kept by frame,
 * its first step begun. 0, or -1 with an error set. */
static int
strand_begin(uint64_t method, PyObject *code)
{
    if (g_disabled || g_strands == NULL) {
        return 0;
    }
    if (PyDict_GET_SIZE(g_strands) >= g_sweep_at && g_sweep != NULL) {
        PyObject *swept = PyObject_CallNoArgs(g_sweep);
        if (swept == NULL) {
            return -1;
        }
        Py_DECREF(swept);
        Py_ssize_t open = PyDict_GET_SIZE(g_strands);
        g_sweep_at = open * 2 > 64 ? open * 2 : 64;
    }
    PyObject *frame = (PyObject *)PyEval_GetFrame();
    if (frame == NULL) {
        return 0;
    }
    PyObject *value = begin_strand(method);
    if (value == Py_None) {
        Py_DECREF(value);
        return untraced_strand_begin(frame, code);
    }
    if (value == NULL) {
        return -1;
    }
    PyObject *buffer = current_buffer();
    PyObject *state = buffer == NULL ? NULL : PyList_New(6);
    if (state == NULL) {
        Py_XDECREF(buffer);
        Py_DECREF(value);
        return -1;
    }
    PyList_SET_ITEM(state, 0, Py_NewRef(PyTuple_GET_ITEM(value, 1))); /* the iid */
    PyList_SET_ITEM(state, 1, value);
    PyList_SET_ITEM(state, 2, Py_NewRef(Py_None));
    PyList_SET_ITEM(state, 3, buffer);
    PyList_SET_ITEM(state, 4, Py_NewRef(Py_None)); /* the value to resume under, if any */
    PyList_SET_ITEM(state, 5, Py_NewRef(Py_None)); /* the value its last entry step began under */
    int stored = step_begin(state, code, frame);
    if (stored == 0) {
        stored = PyDict_SetItem(g_strands, frame, state);
        if (stored < 0) {
            PyObject *type, *error, *traceback;
            PyErr_Fetch(&type, &error, &traceback);
            if (step_end(state, code) < 0) {
                PyErr_Clear();
            }
            PyErr_Restore(type, error, traceback);
        }
    }
    Py_DECREF(state);
    return stored;
}

static int step_end_on_top(PyObject *code, PyObject *frame);

/* A strand ends: its End (its Error; GeneratorExit ends a generator ok), and its step ended.
 * 0, or -1 with an error set. */
static int
strand_end(long kind, PyObject *error, PyObject *code)
{
    PyObject *frame = (PyObject *)PyEval_GetFrame();
    PyObject *state = pop_strand(frame);
    if (state == NULL) {
        state = untraced_state();
        if (state == NULL) {
            return 0;
        }
        Py_INCREF(state);
        PyObject *type, *value, *traceback;
        PyErr_Fetch(&type, &value, &traceback);
        int ended = untraced_step(state, code, 0) < 0
                    || PyDict_DelItem(g_untraced_strands, frame) < 0;
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
    uint64_t iid;
    int result = fits_u64(PyList_GET_ITEM(state, 0), &iid) ? 0 : -1;
    if (result == 0) {
        int ok = error == NULL
                 || (kind == 1 && PyErr_GivenExceptionMatches(error, PyExc_GeneratorExit));
        PyObject *buffer = current_buffer();
        result = buffer == NULL
                     ? -1
                     : record_end((EventBuffer *)buffer, iid, ok ? NULL : Py_TYPE(error));
        Py_XDECREF(buffer);
    }
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    int ended = step_end_on_top(code, frame);
    ended = ended == 0 ? step_end(state, code) : ended < 0 ? -1 : 0;
    if (result < 0 || ended == 0) {
        PyErr_Clear();
        PyErr_Restore(type, value, traceback);
    }
    else {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        result = -1;
    }
    Py_DECREF(state);
    return result;
}

/* The common case of a step's end (a yield, a strand's return): the entry on top of the
 * thread's stack is the step of `frame` (it began under a value of its own sequence), so it
 * needs neither the strands' table nor a scan of the stack: step_end's work for an entry step,
 * with the entry known. 1 when it ended the step, 0 when step_end must, -1 with an error set. */
static int
step_end_on_top(PyObject *code, PyObject *frame)
{
    EventBuffer *events = (EventBuffer *)t_cache.buffer;
    if (events == NULL || t_cache.generation != g_generation || events->depth == 0) {
        return 0;
    }
    StackEntry *top = &events->stack[events->depth - 1];
    if (!top->step || top->code != code || top->state == NULL || top->frame != (void *)frame
        || PyList_GET_ITEM(top->state, 2) != Py_True) {
        return 0;
    }
    PyObject *now = NULL;
    if (PyContextVar_Get(g_context_var, Py_None, &now) < 0) {
        return -1;
    }
    PyObject *state = Py_NewRef(top->state); /* the pop below lets the entry's go */
    if (PyList_GET_ITEM(state, 5) != top->strand) {
        PyList_SetItem(state, 5, Py_NewRef(top->strand));
    }
    keep_inner(state, now); /* as remember_inner */
    Py_DECREF(now);
    PyList_SetItem(state, 2, Py_NewRef(Py_None));
    stack_pop(events, events->depth - 1, top->iid);
    Py_DECREF(state);
    return 1;
}

/* PY_YIELD: the step ends, and with it its entry on the thread's stack (or its context value). */
static PyObject *
monitor_yield(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1) {
        Py_RETURN_NONE;
    }
    int fast = step_end_on_top(args[0], (PyObject *)PyEval_GetFrame());
    if (fast != 0) {
        if (fast < 0 && !absorb_failure()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    PyObject *state = strand_state(NULL);
    if (state == NULL) { /* untraced, or turned away as a root past the bound */
        state = untraced_state();
        if (state != NULL && untraced_step(state, args[0], 0) < 0 && !absorb_failure()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    if (step_end(state, args[0]) < 0 && !absorb_failure()) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* PY_RESUME: a step begins. */
static PyObject *
monitor_resume(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *frame;
    PyObject *state = strand_state(&frame);
    if (nargs >= 1 && state == NULL) { /* untraced, or turned away as a root past the bound */
        state = untraced_state();
        if (state != NULL && untraced_step(state, args[0], 1) < 0 && !absorb_failure()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    if (nargs < 1 || state == NULL || PyList_GET_ITEM(state, 2) != Py_None) {
        Py_RETURN_NONE;
    }
    if (step_begin(state, args[0], frame) < 0 && !absorb_failure()) {
        return NULL;
    }
    Py_RETURN_NONE;
}

/* PY_THROW (process-wide): a traced strand resumed by throw() begins a step, as a resume. */
static PyObject *
monitor_throw(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    uint64_t method;
    long kind;
    if (nargs < 1 || !registered(args[0], &method, &kind)) {
        Py_RETURN_NONE;
    }
    return monitor_resume(module, args, nargs);
}

/* A marker on the thread's stack: the call of `code` runs untraced (`past_bound`: the memory
 * bound turned it away, and so roots inside it). */
static int
push_marker(PyObject *code, int past_bound)
{
    PyObject *buffer = current_buffer();
    if (buffer == NULL) {
        return -1;
    }
    StackEntry *entry = stack_next((EventBuffer *)buffer);
    if (entry == NULL) {
        Py_DECREF(buffer);
        return -1;
    }
    memset(entry, 0, sizeof(StackEntry));
    entry->exotic = past_bound ? PAST_BOUND_MARKER : 0;
    entry->code = Py_NewRef(code);
    Py_DECREF(buffer);
    return 0;
}

static PyObject *
monitor_start(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1) {
        Py_RETURN_NONE;
    }
    PyObject *code = args[0];
    uint64_t method;
    long kind;
    if (!registered(code, &method, &kind)) {
        Py_RETURN_NONE;
    }
    if (kind != 0) {
        if (strand_begin(method, code) < 0 && !absorb_failure()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    Invocation inv;
    int begun = 1;
    if (!g_disabled && g_context_var != NULL) {
        begun = begin_fast(method, &inv);
        if (begun == 2) {
            begun = begin(method, &inv);
        }
    }
    if (begun != 0) {
        if (begun < 0 && !absorb_failure()) {
            return NULL;
        }
        if (push_marker(code, begun == 1 && !g_disabled) < 0 && !absorb_failure()) {
            return NULL;
        }
        Py_RETURN_NONE;
    }
    StackEntry *entry = &((EventBuffer *)inv.buffer)->stack[inv.index];
    entry->code = Py_NewRef(code);
    entry->token = inv.token; /* the entry owns it now */
    entry->root = inv.root;
    Py_DECREF(inv.buffer);
    Py_RETURN_NONE;
}

/* The end of a call of `code`: `error` is the exception leaving its frame, or NULL. */
static PyObject *
monitor_end(PyObject *code, PyObject *error)
{
    /* The common case first: the top entry of the thread's stack is this code's (a synchronous
     * call's: a strand pushes no entry). The frame began on this thread state, so its cached
     * buffer, when valid, needs no check of the thread state. */
    EventBuffer *cached = (EventBuffer *)t_cache.buffer;
    PyObject *buffer;
    if (cached != NULL && t_cache.generation == g_generation && cached->depth > 0
        && cached->stack[cached->depth - 1].code == code && !cached->stack[cached->depth - 1].step) {
        buffer = Py_NewRef((PyObject *)cached);
    }
    else {
        uint64_t method;
        long kind;
        if (!registered(code, &method, &kind)) {
            Py_RETURN_NONE;
        }
        if (kind != 0) {
            if (strand_end(kind, error, code) < 0 && !absorb_failure()) {
                return NULL;
            }
            Py_RETURN_NONE;
        }
        buffer = current_buffer();
        if (buffer == NULL) {
            return absorb_failure() ? Py_NewRef(Py_None) : NULL;
        }
    }
    EventBuffer *events = (EventBuffer *)buffer;
    Py_ssize_t index = events->depth - 1;
    if (index < 0 || events->stack[index].code != code || events->stack[index].step) {
        Py_DECREF(buffer); /* a frame that began before its code was instrumented */
        Py_RETURN_NONE;
    }
    StackEntry *entry = &events->stack[index];
    if (entry->iid == 0) { /* it ran untraced */
        events->depth--;
        entry_release(entry);
        Py_DECREF(buffer);
        Py_RETURN_NONE;
    }
    Invocation inv;
    inv.buffer = buffer; /* finish() lets it go */
    inv.token = entry->token;
    entry->token = NULL;
    inv.iid = entry->iid;
    inv.index = index;
    inv.root = entry->root;
    if (finish(&inv, error == NULL ? NULL : Py_TYPE(error)) < 0 && !absorb_failure()) {
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyObject *
monitor_return(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1) {
        Py_RETURN_NONE;
    }
    return monitor_end(args[0], NULL);
}

static PyObject *
monitor_unwind(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 3) {
        Py_RETURN_NONE;
    }
    /* the exception is set while the frame unwinds: the handler's own steps must not see it */
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyObject *result = monitor_end(args[0], args[2]);
    if (result == NULL) {
        Py_XDECREF(type);
        Py_XDECREF(value);
        Py_XDECREF(traceback);
        return NULL;
    }
    PyErr_Restore(type, value, traceback);
    return result;
}

/* The handlers as sys.monitoring calls them: objects whose vectorcall is the handler itself.
 * A builtin function's call goes through cfunction_vectorcall_FASTCALL, which enters and leaves
 * a recursion check (a thread-state lookup each way); a traced call makes two of these calls. */
typedef PyObject *(*MonitorHandler)(PyObject *, PyObject *const *, Py_ssize_t);

typedef struct {
    PyObject_HEAD
    vectorcallfunc vectorcall;
    const char *name;
} MonitorHook;

#define HOOK_ENTRY(handler)                                                                      \
    static PyObject *handler##_vectorcall(PyObject *self, PyObject *const *args, size_t nargsf,  \
                                          PyObject *kwnames)                                     \
    {                                                                                            \
        if (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) {                                  \
            PyErr_SetString(PyExc_TypeError, #handler "() takes no keyword arguments");          \
            return NULL;                                                                         \
        }                                                                                        \
        return handler(NULL, args, PyVectorcall_NARGS(nargsf));                                  \
    }

HOOK_ENTRY(monitor_start)
HOOK_ENTRY(monitor_return)
HOOK_ENTRY(monitor_unwind)
HOOK_ENTRY(monitor_yield)
HOOK_ENTRY(monitor_resume)
HOOK_ENTRY(monitor_throw)

/* nothing(*args): None. The floor benchmarks' hook (benchmarks/real_floor.py): a call that does
 * no work, made as the handlers' are (the builtin `nothing` on 3.11, `hook_nothing` on 3.12+). */
static PyObject *
nothing(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    Py_RETURN_NONE;
}

HOOK_ENTRY(nothing)

static PyObject *
hook_repr(MonitorHook *self)
{
    return PyUnicode_FromFormat("<invoseq handler %s>", self->name);
}

static PyTypeObject MonitorHookType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracer._core._speedups.MonitorHook",
    .tp_doc = "A traced code's event handler, called as (code, offset[, value]).",
    .tp_basicsize = sizeof(MonitorHook),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL,
    .tp_vectorcall_offset = offsetof(MonitorHook, vectorcall),
    .tp_call = PyVectorcall_Call,
    .tp_repr = (reprfunc)hook_repr,
};

static int
add_hooks(PyObject *module)
{
    static const struct {
        const char *name;
        vectorcallfunc vectorcall;
    } hooks[] = {
        {"hook_start", monitor_start_vectorcall},   {"hook_return", monitor_return_vectorcall},
        {"hook_unwind", monitor_unwind_vectorcall}, {"hook_yield", monitor_yield_vectorcall},
        {"hook_resume", monitor_resume_vectorcall}, {"hook_throw", monitor_throw_vectorcall},
        {"hook_nothing", nothing_vectorcall},
    };
    for (size_t i = 0; i < sizeof(hooks) / sizeof(hooks[0]); i++) {
        MonitorHook *hook = PyObject_New(MonitorHook, &MonitorHookType);
        if (hook == NULL) {
            return -1;
        }
        hook->vectorcall = hooks[i].vectorcall;
        hook->name = hooks[i].name;
        int added = PyModule_AddObjectRef(module, hooks[i].name, (PyObject *)hook);
        Py_DECREF(hook);
        if (added < 0) {
            return -1;
        }
    }
    return 0;
}
