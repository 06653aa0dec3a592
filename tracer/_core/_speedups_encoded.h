/* tracer._core._speedups, one of its parts: EncodedEvents, what EventBuffer.take() returns
 * (_speedups_events.h).
 * Included once, in order, by _speedups.c (one translation unit: the parts share its static
 * state and helpers); see _speedups.c for the whole. */

/* ---------------------------------------------------------------------------------------------
 * EncodedEvents: the result of EventBuffer.take(), sliceable at event boundaries.
 */

typedef struct {
    PyObject_HEAD
    PyObject *owner;      /* the EncodedEvents that owns data and offsets; NULL: this one */
    char *data;           /* blocks of the pool (_speedups_pool.h), the owner's */
    Py_ssize_t *offsets;  /* offsets[i]: where event i starts; offsets[count]: the end */
    size_t data_capacity, offsets_capacity;
    Py_ssize_t start, stop;
    /* This slice as one msgpack array, made at its first export (the buffer protocol), which is
     * how the sender splices it into a batch (msgspec.Raw): `exported` (NULL until then) is
     * in the owner's data, its header written in the room before the first event, when this
     * slice starts there and the room is free; else the copy in `packed`, a block of the pool. */
    char *exported;
    Py_ssize_t exported_size;
    char *packed;
    size_t packed_capacity;
    int room_taken; /* the owner's: a slice's header is in the room before its first event */
} EncodedEvents;

/* The room take() leaves before the first event: an array header's largest size. */
#define HEADER_ROOM 5

static PyTypeObject EncodedEventsType;

static void
encoded_dealloc(EncodedEvents *self)
{
    if (self->owner == NULL) {
        pool_put(self->data, self->data_capacity);
        pool_put((char *)self->offsets, self->offsets_capacity);
    }
    pool_put(self->packed, self->packed_capacity);
    Py_XDECREF(self->owner);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t
encoded_length(EncodedEvents *self)
{
    return self->stop - self->start;
}

/* Event i, decoded: the items of the tuple the pure-Python recorder would hold, as a list. */
static PyObject *
encoded_item(EncodedEvents *self, Py_ssize_t index)
{
    if (index < 0 || index >= encoded_length(self)) {
        PyErr_SetString(PyExc_IndexError, "EncodedEvents index out of range");
        return NULL;
    }
    if (g_decode == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "tracer._core._speedups is not configured");
        return NULL;
    }
    Py_ssize_t start = self->offsets[self->start + index];
    Py_ssize_t stop = self->offsets[self->start + index + 1];
    PyObject *event = PyBytes_FromStringAndSize(self->data + start, stop - start);
    if (event == NULL) {
        return NULL;
    }
    PyObject *decoded = PyObject_CallOneArg(g_decode, event);
    Py_DECREF(event);
    return decoded;
}

static PyObject *
encoded_subscript(EncodedEvents *self, PyObject *item)
{
    if (PyIndex_Check(item)) {
        Py_ssize_t index = PyNumber_AsSsize_t(item, PyExc_IndexError);
        if (index == -1 && PyErr_Occurred()) {
            return NULL;
        }
        return encoded_item(self, index < 0 ? index + encoded_length(self) : index);
    }
    if (!PySlice_Check(item)) {
        PyErr_Format(PyExc_TypeError, "EncodedEvents indices must be integers or slices, not %.100s",
                     Py_TYPE(item)->tp_name);
        return NULL;
    }
    Py_ssize_t start, stop, step;
    if (PySlice_Unpack(item, &start, &stop, &step) < 0) {
        return NULL;
    }
    if (step != 1) {
        PyErr_SetString(PyExc_ValueError, "EncodedEvents slices take no step");
        return NULL;
    }
    PySlice_AdjustIndices(encoded_length(self), &start, &stop, step);
    if (stop < start) {
        stop = start;
    }
    EncodedEvents *view = PyObject_New(EncodedEvents, &EncodedEventsType);
    if (view == NULL) {
        return NULL;
    }
    PyObject *owner = self->owner != NULL ? self->owner : (PyObject *)self;
    view->owner = Py_NewRef(owner);
    view->data = self->data;
    view->offsets = self->offsets;
    view->data_capacity = view->offsets_capacity = 0;
    view->start = self->start + start;
    view->stop = self->start + stop;
    view->exported = view->packed = NULL;
    view->exported_size = 0;
    view->packed_capacity = 0;
    view->room_taken = 0;
    return (PyObject *)view;
}

static PyObject *
encoded_msgpack(EncodedEvents *self, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t count = encoded_length(self);
    Py_ssize_t length = self->offsets[self->stop] - self->offsets[self->start];
    uint8_t header[5];
    Out out = {(char *)header, 0, sizeof(header), 0};
    put_array_header(&out, (uint64_t)count);
    PyObject *result = PyBytes_FromStringAndSize(NULL, out.size + length);
    if (result == NULL) {
        return NULL;
    }
    memcpy(PyBytes_AS_STRING(result), header, out.size);
    memcpy(PyBytes_AS_STRING(result) + out.size, self->data + self->offsets[self->start], length);
    forget_allocation(result); /* spliced into a batch's body (msgspec.Raw) while it is built */
    return result;
}

/* The buffer protocol: the slice as one msgpack array (the bytes msgpack() returns), read-only.
 * A slice from the take's first event (the sender's usual one: a take of at most a batch) has
 * its header written in the room take() left before that event, and exports the owner's data
 * itself; any other is copied into a block of the pool at its first export, kept until the
 * slice is freed. The room serves one slice: what it exported stays as it was. */
static int
encoded_getbuffer(EncodedEvents *self, Py_buffer *view, int flags)
{
    if (self->exported == NULL) {
        Py_ssize_t first = self->offsets[self->start];
        Py_ssize_t length = self->offsets[self->stop] - first;
        EncodedEvents *owner = self->owner != NULL ? (EncodedEvents *)self->owner : self;
        uint8_t header[HEADER_ROOM];
        Out out = {(char *)header, 0, HEADER_ROOM, 0};
        put_array_header(&out, (uint64_t)encoded_length(self));
        if (self->start == 0 && !owner->room_taken && first >= out.size) {
            owner->room_taken = 1;
            self->exported = self->data + first - out.size;
            memcpy(self->exported, header, out.size);
        }
        else {
            size_t capacity;
            char *packed = pool_get((size_t)(out.size + length), &capacity);
            if (packed == NULL) {
                view->obj = NULL;
                PyErr_NoMemory();
                return -1;
            }
            memcpy(packed, header, out.size);
            memcpy(packed + out.size, self->data + first, length);
            self->packed = packed;
            self->packed_capacity = capacity;
            self->exported = packed;
        }
        self->exported_size = out.size + length;
    }
    return PyBuffer_FillInfo(view, (PyObject *)self, self->exported, self->exported_size, 1,
                             flags);
}

static PyBufferProcs encoded_as_buffer = {
    .bf_getbuffer = (getbufferproc)encoded_getbuffer,
};

static PyObject *
encoded_repr(EncodedEvents *self)
{
    return PyUnicode_FromFormat("<EncodedEvents: %zd events>", encoded_length(self));
}

static PyMappingMethods encoded_as_mapping = {
    .mp_length = (lenfunc)encoded_length,
    .mp_subscript = (binaryfunc)encoded_subscript,
};

static PySequenceMethods encoded_as_sequence = {
    .sq_length = (lenfunc)encoded_length,
    .sq_item = (ssizeargfunc)encoded_item, /* also makes it iterable, and reversed() */
};

static PyMethodDef encoded_methods[] = {
    {"msgpack", (PyCFunction)encoded_msgpack, METH_NOARGS,
     "The events as one msgpack array: the bytes msgspec gives for the list of their tuples."},
    {NULL},
};

static PyTypeObject EncodedEventsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracer._core._speedups.EncodedEvents",
    .tp_doc = "Events taken from a thread's buffer, encoded; slices cut at event boundaries.",
    .tp_basicsize = sizeof(EncodedEvents),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)encoded_dealloc,
    .tp_repr = (reprfunc)encoded_repr,
    .tp_as_mapping = &encoded_as_mapping,
    .tp_as_sequence = &encoded_as_sequence,
    .tp_as_buffer = &encoded_as_buffer,
    .tp_methods = encoded_methods,
};
