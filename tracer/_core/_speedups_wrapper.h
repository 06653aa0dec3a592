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
