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
 * pops its own entry. A strand's (generator, coroutine) events go to _speedups_strands.h and
 * _speedups_strand_ends.h.
 */

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
    if (!PyArg_ParseTuple(args, "O!O|O!:set_handlers", &StrandTableType, &strands, &sweep,
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
    Py_XSETREF(g_strands, (StrandTable *)Py_NewRef(strands));
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
