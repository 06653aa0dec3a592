/* The local namespace `tracer run` runs a traced script's module code in: see _namespace.pyi.
 *
 * A script's functions must be traced the moment they are defined, before its module-level code
 * calls them (what `main()` at the bottom of a script does), so `tracer run` executes the module's
 * code with a local namespace of its own (`tracer/run/autowrap.py`, `DefiningNamespace`): every
 * name read and written goes to the module's globals, and a function or class stored is handed to
 * `define` first, which traces it. CPython runs module code whose local namespace is not a dict
 * through the mapping protocol: each name a module-level statement reads or writes is a call to
 * the namespace. Written in Python, each was a method call, and a module-level loop ran ten times
 * slower than untraced; here each is a C call (about 1.3 times the untraced loop). The rules are
 * the Python class's, which remains where this is not built; the tests run both.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

typedef struct {
    PyObject_HEAD
    PyObject *globals;  /* the module's dict: every read and write */
    PyObject *builtins; /* the builtins' dict: a name the module lacks is read there */
    PyObject *define;   /* define(name, value) -> what to store, for a function or a class */
} Namespace;

static int
namespace_traverse(Namespace *self, visitproc visit, void *arg)
{
    Py_VISIT(self->globals);
    Py_VISIT(self->builtins);
    Py_VISIT(self->define);
    return 0;
}

static int
namespace_clear(Namespace *self)
{
    Py_CLEAR(self->globals);
    Py_CLEAR(self->builtins);
    Py_CLEAR(self->define);
    return 0;
}

/* A Python subclass's instance holds its (heap) type: CPython's subtype_dealloc, which calls
 * this, drops that reference and visits the type in its traverse. */
static void
namespace_dealloc(Namespace *self)
{
    PyObject_GC_UnTrack(self);
    namespace_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
namespace_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"globals", "builtins", "define", NULL};
    PyObject *globals, *builtins, *define;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O!O!O:Namespace", keywords, &PyDict_Type,
                                     &globals, &PyDict_Type, &builtins, &define)) {
        return NULL;
    }
    if (!PyCallable_Check(define)) {
        PyErr_SetString(PyExc_TypeError, "Namespace: define must be callable");
        return NULL;
    }
    Namespace *self = (Namespace *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->globals = Py_NewRef(globals);
    self->builtins = Py_NewRef(builtins);
    self->define = Py_NewRef(define);
    return (PyObject *)self;
}

/* A name: the module's, else the builtins' (so a builtin's lookup raises no KeyError first). */
static PyObject *
namespace_getitem(Namespace *self, PyObject *key)
{
    PyObject *value = PyDict_GetItemWithError(self->globals, key);
    if (value == NULL && !PyErr_Occurred()) {
        value = PyDict_GetItemWithError(self->builtins, key);
        if (value == NULL && !PyErr_Occurred()) {
            PyErr_SetObject(PyExc_KeyError, key);
        }
    }
    return value == NULL ? NULL : Py_NewRef(value);
}

/* A store goes to the module's dict; a function or a class through `define` first. */
static int
namespace_setitem(Namespace *self, PyObject *key, PyObject *value)
{
    if (value == NULL) {
        return PyDict_DelItem(self->globals, key);
    }
    if (!PyFunction_Check(value) && !PyType_Check(value)) {
        return PyDict_SetItem(self->globals, key, value);
    }
    PyObject *stored = PyObject_CallFunctionObjArgs(self->define, key, value, NULL);
    if (stored == NULL) {
        return -1;
    }
    int failed = PyDict_SetItem(self->globals, key, stored);
    Py_DECREF(stored);
    return failed;
}

static Py_ssize_t
namespace_length(Namespace *self)
{
    return PyDict_Size(self->globals);
}

static int
namespace_contains(Namespace *self, PyObject *key)
{
    return PyDict_Contains(self->globals, key);
}

static PyObject *
namespace_get_globals(Namespace *self, void *closure)
{
    return Py_NewRef(self->globals);
}

static PyGetSetDef namespace_getset[] = {
    {"globals", (getter)namespace_get_globals, NULL, "The module's dict.", NULL},
    {NULL},
};

static PyMappingMethods namespace_as_mapping = {
    .mp_length = (lenfunc)namespace_length,
    .mp_subscript = (binaryfunc)namespace_getitem,
    .mp_ass_subscript = (objobjargproc)namespace_setitem,
};

static PySequenceMethods namespace_as_sequence = {
    .sq_contains = (objobjproc)namespace_contains,
};

static PyTypeObject NamespaceType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracer.run._namespace.Namespace",
    .tp_basicsize = sizeof(Namespace),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "A module's local namespace for exec: reads and writes go to its globals; a "
              "function or class stored passes through define(name, value) first.",
    .tp_new = namespace_new,
    .tp_dealloc = (destructor)namespace_dealloc,
    .tp_traverse = (traverseproc)namespace_traverse,
    .tp_clear = (inquiry)namespace_clear,
    .tp_as_mapping = &namespace_as_mapping,
    .tp_as_sequence = &namespace_as_sequence,
    .tp_getset = namespace_getset,
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tracer.run._namespace",
    .m_doc = "The local namespace tracer run executes a traced script's module code in.",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__namespace(void)
{
    if (PyType_Ready(&NamespaceType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&module_def);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "Namespace", (PyObject *)&NamespaceType) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
