/* tracer._core._speedups, one of its parts: the sampler's stacks. stack_ids, a sampled stack's
 * frame ids and lines (tracer/_sampling/stacks.py's stack_of, in C), and hold_stacks, every
 * frame of the other threads' stacks made in one step (tracer/_sampling/sampler.py's
 * current_frames). Included once by _speedups.c; see it for the whole. */

/* Frames kept at most whatever max_depth says (stacks.py passes active.MAX_DEPTH, 512). */
#define STACK_IDS_LIMIT 4096

/* One frame's id: its code's, looked up by the code's address in `known` (id(code) -> id),
 * else from intern(code) (which adds it there). 0: the tracer's own code; -1: an error. */
static long
frame_code_id(PyFrameObject *frame, PyObject *known, PyObject *intern)
{
    PyCodeObject *code = PyFrame_GetCode(frame);
    PyObject *key = PyLong_FromVoidPtr(code);
    long id = -1;
    if (key != NULL) {
        PyObject *found = PyDict_GetItemWithError(known, key); /* borrowed */
        if (found != NULL) {
            id = PyLong_AsLong(found);
        }
        else if (!PyErr_Occurred()) {
            PyObject *interned = PyObject_CallOneArg(intern, (PyObject *)code);
            if (interned != NULL) {
                id = PyLong_AsLong(interned);
                Py_DECREF(interned);
            }
        }
        Py_DECREF(key);
    }
    Py_DECREF(code);
    return id == -1 && PyErr_Occurred() ? -1 : id;
}

/* The tuples of ids and lines, outermost first, from `count` kept innermost first. */
static PyObject *
stack_tuples(const long *ids, const int *lines, Py_ssize_t count)
{
    PyObject *id_tuple = PyTuple_New(count);
    PyObject *line_tuple = PyTuple_New(count);
    if (id_tuple == NULL || line_tuple == NULL) {
        Py_XDECREF(id_tuple);
        Py_XDECREF(line_tuple);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *id = PyLong_FromLong(ids[count - 1 - i]);
        PyObject *line = PyLong_FromLong(lines[count - 1 - i]);
        if (id == NULL || line == NULL) {
            Py_XDECREF(id);
            Py_XDECREF(line);
            Py_DECREF(id_tuple);
            Py_DECREF(line_tuple);
            return NULL;
        }
        PyTuple_SET_ITEM(id_tuple, i, id);
        PyTuple_SET_ITEM(line_tuple, i, line);
    }
    return Py_BuildValue("(NN)", id_tuple, line_tuple);
}

static PyObject *
stack_ids(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_Format(PyExc_TypeError, "stack_ids() takes 4 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *frames = args[0], *known = args[1], *intern = args[2];
    Py_ssize_t limit = PyNumber_AsSsize_t(args[3], PyExc_OverflowError);
    if (limit == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (!PyDict_Check(known)) {
        PyErr_SetString(PyExc_TypeError, "stack_ids(): known must be a dict");
        return NULL;
    }
    int listed = PyList_Check(frames);
    if (!listed && !PyFrame_Check(frames)) {
        PyErr_SetString(PyExc_TypeError, "stack_ids(): frames must be a frame or a list of frames");
        return NULL;
    }
    if (limit < 0 || limit > STACK_IDS_LIMIT) {
        limit = STACK_IDS_LIMIT;
    }
    long *ids = PyMem_Malloc((limit + 1) * sizeof(long));
    int *lines = PyMem_Malloc((limit + 1) * sizeof(int));
    if (ids == NULL || lines == NULL) {
        PyMem_Free(ids);
        PyMem_Free(lines);
        return PyErr_NoMemory();
    }
    Py_ssize_t count = 0;
    int failed = 0;
    /* innermost first: a list's items in order, or the frame and its callers */
    PyFrameObject *frame = listed ? NULL : (PyFrameObject *)Py_NewRef(frames);
    for (Py_ssize_t i = 0; count < limit; i++) {
        if (listed) {
            if (i >= PyList_GET_SIZE(frames)) {
                break;
            }
            PyObject *item = PyList_GET_ITEM(frames, i);
            if (!PyFrame_Check(item)) {
                PyErr_SetString(PyExc_TypeError, "stack_ids(): frames must hold frames");
                failed = 1;
                break;
            }
            frame = (PyFrameObject *)Py_NewRef(item);
        }
        else if (frame == NULL) {
            break;
        }
        long id = frame_code_id(frame, known, intern);
        if (id < 0) {
            failed = 1;
        }
        else if (id > 0) {
            int line = PyFrame_GetLineNumber(frame);
            ids[count] = id;
            lines[count] = line > 0 ? line : 0;
            count++;
        }
        PyFrameObject *back = listed ? NULL : PyFrame_GetBack(frame);
        Py_DECREF(frame);
        frame = back;
        if (failed) {
            break;
        }
    }
    Py_XDECREF(frame);
    PyObject *result = failed ? NULL : stack_tuples(ids, lines, count);
    PyMem_Free(ids);
    PyMem_Free(lines);
    return result;
}

/* hold_stacks(frames, depth): the frames of the stacks in `frames` (sys._current_frames()),
 * each from its top outwards, at most `depth` a stack, the calling thread's left out, in a list
 * that holds them. Making another thread's frame objects allocates; with the cyclic collector
 * held off (the caller's doing, before 3.12) no collection starts here, so no finalizer runs and
 * lets the GIL go while one is made: the other threads wait for the GIL throughout, and the
 * walks after this meet frame objects made already (tracer/_sampling/sampler.py,
 * current_frames). */
static PyObject *
hold_stacks(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyDict_Check(args[0])) {
        PyErr_SetString(PyExc_TypeError, "hold_stacks(frames, depth): frames must be a dict");
        return NULL;
    }
    Py_ssize_t depth = PyNumber_AsSsize_t(args[1], PyExc_OverflowError);
    if (depth == -1 && PyErr_Occurred()) {
        return NULL;
    }
    PyObject *held = PyList_New(0);
    if (held == NULL) {
        return NULL;
    }
    unsigned long own = PyThread_get_thread_ident();
    Py_ssize_t pos = 0;
    PyObject *ident, *top;
    while (PyDict_Next(args[0], &pos, &ident, &top)) {
        if (!PyFrame_Check(top) || (PyLong_Check(ident) && PyLong_AsUnsignedLong(ident) == own)) {
            PyErr_Clear();
            continue;
        }
        PyFrameObject *frame = (PyFrameObject *)Py_NewRef(top);
        for (Py_ssize_t i = 0; frame != NULL && i < depth; i++) {
            if (PyList_Append(held, (PyObject *)frame) < 0) {
                Py_DECREF(frame);
                Py_DECREF(held);
                return NULL;
            }
            PyFrameObject *back = PyFrame_GetBack(frame); /* made now, if it was not yet */
            Py_DECREF(frame);
            frame = back;
        }
        Py_XDECREF(frame);
        if (PyErr_Occurred()) {
            Py_DECREF(held);
            return NULL;
        }
    }
    return held;
}
