/* tracer._core._speedups, one of its parts: records, their msgpack encoding,
 * and the tracer's own memory kept out of tracemalloc's count.
 * Included once, in order, by _speedups.c (one translation unit: the parts share its static
 * state and helpers); see _speedups.c for the whole. */

/* ---------------------------------------------------------------------------------------------
 * Records and their msgpack encoding.
 */

enum {
    REC_START,       /* a = iid, b = parent, c = hid, d = method, t_ns, seq */
    REC_END,         /* a = iid, t_ns */
    REC_ERROR,       /* a = iid, t_ns, obj = the type name (str) */
    REC_ERROR_CNAME, /* a = iid, t_ns, cname = a static type's name (lives as long as the type) */
    REC_HANDOFF,     /* a = hid, b = parent, d = method, t_ns, obj = kind (str), seq */
    REC_OBJECT,      /* obj = an event in no fixed layout, encoded by msgspec at take() */
};

typedef struct {
    uint64_t a, b, c, d;
    int64_t t_ns;
    union {
        PyObject *obj; /* a strong reference */
        const char *cname;
    } u;
    uint8_t seq[16];
    uint8_t kind;
} Record;

static int
record_owns_object(const Record *r)
{
    return r->kind == REC_ERROR || r->kind == REC_HANDOFF || r->kind == REC_OBJECT;
}

typedef struct {
    char *data;
    Py_ssize_t size, capacity;
    int pooled; /* data is a block of the pool (_speedups_pool.h), else the C library's or fixed */
} Out;

static int
out_reserve(Out *out, Py_ssize_t extra)
{
    if (out->size + extra <= out->capacity) {
        return 0;
    }
    Py_ssize_t capacity = out->capacity * 2;
    if (capacity < out->size + extra) {
        capacity = out->size + extra;
    }
    char *data;
    if (out->pooled) {
        size_t pooled_capacity;
        data = pool_get((size_t)capacity, &pooled_capacity);
        if (data != NULL) {
            if (out->size > 0) {
                memcpy(data, out->data, out->size);
            }
            pool_put(out->data, (size_t)out->capacity);
            capacity = (Py_ssize_t)pooled_capacity;
        }
    }
    else {
        data = realloc(out->data, capacity); /* the C library's: see forget_allocation */
    }
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    out->data = data;
    out->capacity = capacity;
    return 0;
}

/* The put_* helpers write into space reserved beforehand (9 bytes per number at most). They
 * choose the shortest form, as msgspec does; the tests compare both encoders byte for byte. */

static inline void
put_byte(Out *out, uint8_t byte)
{
    out->data[out->size++] = (char)byte;
}

static inline void
put_be(Out *out, uint64_t value, int bytes)
{
    for (int shift = (bytes - 1) * 8; shift >= 0; shift -= 8) {
        put_byte(out, (uint8_t)(value >> shift));
    }
}

static inline void
put_uint(Out *out, uint64_t value)
{
    if (value < 128) {
        put_byte(out, (uint8_t)value);
    }
    else if (value < (1ULL << 8)) {
        put_byte(out, 0xcc);
        put_be(out, value, 1);
    }
    else if (value < (1ULL << 16)) {
        put_byte(out, 0xcd);
        put_be(out, value, 2);
    }
    else if (value < (1ULL << 32)) {
        put_byte(out, 0xce);
        put_be(out, value, 4);
    }
    else {
        put_byte(out, 0xcf);
        put_be(out, value, 8);
    }
}

static inline void
put_int(Out *out, int64_t value)
{
    if (value >= 0) {
        put_uint(out, (uint64_t)value);
    }
    else if (value >= -32) {
        put_byte(out, (uint8_t)value);
    }
    else if (value >= -(1LL << 7)) {
        put_byte(out, 0xd0);
        put_be(out, (uint64_t)value, 1);
    }
    else if (value >= -(1LL << 15)) {
        put_byte(out, 0xd1);
        put_be(out, (uint64_t)value, 2);
    }
    else if (value >= -(1LL << 31)) {
        put_byte(out, 0xd2);
        put_be(out, (uint64_t)value, 4);
    }
    else {
        put_byte(out, 0xd3);
        put_be(out, (uint64_t)value, 8);
    }
}

static inline void
put_array_header(Out *out, uint64_t length)
{
    if (length < 16) {
        put_byte(out, (uint8_t)(0x90 | length));
    }
    else if (length < (1ULL << 16)) {
        put_byte(out, 0xdc);
        put_be(out, length, 2);
    }
    else {
        put_byte(out, 0xdd);
        put_be(out, length, 4);
    }
}

static inline void
put_seq(Out *out, const uint8_t *seq)
{
    put_byte(out, 0xc4); /* bin 8 */
    put_byte(out, 16);
    memcpy(out->data + out->size, seq, 16);
    out->size += 16;
}

static int
put_utf8(Out *out, const char *text, Py_ssize_t length)
{
    if (out_reserve(out, length + 5) < 0) {
        return -1;
    }
    if (length < 32) {
        put_byte(out, (uint8_t)(0xa0 | length));
    }
    else if (length < (1 << 8)) {
        put_byte(out, 0xd9);
        put_be(out, (uint64_t)length, 1);
    }
    else if (length < (1 << 16)) {
        put_byte(out, 0xda);
        put_be(out, (uint64_t)length, 2);
    }
    else {
        put_byte(out, 0xdb);
        put_be(out, (uint64_t)length, 4);
    }
    memcpy(out->data + out->size, text, length);
    out->size += length;
    return 0;
}

/* A str, cut to max_chars code points when max_chars >= 0 (as `name[:max_chars]`). */
static int
put_str(Out *out, PyObject *text, Py_ssize_t max_chars)
{
    PyObject *cut = NULL;
    if (max_chars >= 0 && PyUnicode_GET_LENGTH(text) > max_chars) {
        cut = PyUnicode_Substring(text, 0, max_chars);
        if (cut == NULL) {
            return -1;
        }
        text = cut;
    }
    Py_ssize_t length;
    const char *utf8 = PyUnicode_AsUTF8AndSize(text, &length);
    int result = utf8 == NULL ? -1 : put_utf8(out, utf8, length);
    Py_XDECREF(cut);
    return result;
}

/* A static type's name, as `type(exc).__name__[:MAX_NAME]` gives it. */
static int
put_cname(Out *out, const char *name)
{
    size_t length = strlen(name);
    int ascii = length <= MAX_NAME;
    for (size_t i = 0; ascii && i < length; i++) {
        ascii = (unsigned char)name[i] < 0x80;
    }
    if (ascii) {
        return put_utf8(out, name, (Py_ssize_t)length);
    }
    PyObject *text = PyUnicode_FromString(name);
    if (text == NULL) {
        return -1;
    }
    int result = put_str(out, text, MAX_NAME);
    Py_DECREF(text);
    return result;
}

static int
put_object(Out *out, PyObject *event)
{
    PyObject *encoded = PyObject_CallOneArg(g_encode, event);
    if (encoded == NULL) {
        return -1;
    }
    if (!PyBytes_Check(encoded)) {
        Py_DECREF(encoded);
        PyErr_SetString(PyExc_TypeError, "the event encoder must return bytes");
        return -1;
    }
    Py_ssize_t length = PyBytes_GET_SIZE(encoded);
    int result = out_reserve(out, length);
    if (result == 0) {
        memcpy(out->data + out->size, PyBytes_AS_STRING(encoded), length);
        out->size += length;
    }
    Py_DECREF(encoded);
    return result;
}

/* One record as the msgpack array of the tuple the pure-Python recorder would hold. */
static int
put_record(Out *out, const Record *r)
{
    if (r->kind == REC_OBJECT) {
        if (g_encode == NULL) {
            PyErr_SetString(PyExc_RuntimeError, "tracer._core._speedups is not configured");
            return -1;
        }
        return put_object(out, r->u.obj);
    }
    if (out_reserve(out, 96) < 0) {
        return -1;
    }
    switch (r->kind) {
    case REC_START:
        put_array_header(out, 7);
        put_uint(out, TAG_START);
        put_uint(out, r->a);
        put_uint(out, r->b);
        put_uint(out, r->c);
        put_uint(out, r->d);
        put_int(out, r->t_ns);
        put_seq(out, r->seq);
        return 0;
    case REC_END:
        put_array_header(out, 3);
        put_uint(out, TAG_END);
        put_uint(out, r->a);
        put_int(out, r->t_ns);
        return 0;
    case REC_ERROR:
    case REC_ERROR_CNAME:
        put_array_header(out, 4);
        put_uint(out, TAG_ERROR);
        put_uint(out, r->a);
        put_int(out, r->t_ns);
        return r->kind == REC_ERROR ? put_str(out, r->u.obj, MAX_NAME) : put_cname(out, r->u.cname);
    case REC_HANDOFF:
        put_array_header(out, 7);
        put_uint(out, TAG_HANDOFF);
        put_uint(out, r->a);
        put_uint(out, r->b);
        if (put_str(out, r->u.obj, -1) < 0 || out_reserve(out, 48) < 0) {
            return -1;
        }
        put_uint(out, r->d);
        put_int(out, r->t_ns);
        put_seq(out, r->seq);
        return 0;
    default:
        PyErr_SetString(PyExc_SystemError, "corrupt event record");
        return -1;
    }
}

/* ---------------------------------------------------------------------------------------------
 * The tracer's memory is not the program's. A program measuring its own allocations with
 * tracemalloc (more-itertools' tests do) must not count what the tracer holds for it: the record
 * arrays, the invocation stacks and the encoded events are the C library's (malloc), which
 * tracemalloc does not see; the bytes objects the sender keeps (a batch's body until the
 * repository acknowledges it, the events spliced into it) are made by Python's allocator, so
 * tracemalloc is told to forget them as soon as they exist.
 */

/* A bytes object is one block from PyObject_Malloc that starts at the object (bytes are not
 * tracked by the GC: no header before it), so its address is the key of its trace. Freeing it
 * later finds no trace, which tracemalloc ignores (3.11 to 3.13: tracemalloc_remove_trace
 * returns when the address is not traced); nothing reallocates it. Only a new object held once
 * is forgotten: a shared one (a cached single byte) may be anyone's. When tracemalloc is not
 * tracing, PyTraceMalloc_Untrack returns at once. */
static void
forget_allocation(PyObject *obj)
{
    if (PyBytes_CheckExact(obj) && Py_REFCNT(obj) == 1) {
        (void)PyTraceMalloc_Untrack(0, (uintptr_t)obj); /* 0: the domain of Python's allocators */
    }
}

/* untracked(make, arg): make(arg), a bytes object the tracer keeps, forgotten by tracemalloc in
 * the same step, so no other thread can run between the two and see it. */
static PyObject *
untracked(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2) {
        PyErr_Format(PyExc_TypeError, "untracked() takes 2 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *made = PyObject_CallOneArg(args[0], args[1]);
    if (made != NULL) {
        forget_allocation(made);
    }
    return made;
}

/* untracked_into(encode_into, obj, buffer): encode_into(obj, buffer) into a bytearray the tracer
 * keeps and reuses (a batch's body: tracer/_shipping/bodies.py), whose object and memory
 * tracemalloc then forgets in the same step. The memory may have moved as it grew; the block it
 * lies in now is the one tracemalloc was told of last. */
static PyObject *
untracked_into(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "untracked_into() takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    if (!PyByteArray_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "untracked_into() encodes into a bytearray");
        return NULL;
    }
    PyObject *result = PyObject_CallFunctionObjArgs(args[0], args[1], args[2], NULL);
    if (result == NULL) {
        return NULL;
    }
    Py_DECREF(result);
    PyByteArrayObject *buffer = (PyByteArrayObject *)args[2];
    (void)PyTraceMalloc_Untrack(0, (uintptr_t)buffer); /* not a GC object: its block starts here */
    if (buffer->ob_bytes != NULL) {
        (void)PyTraceMalloc_Untrack(0, (uintptr_t)buffer->ob_bytes);
    }
    Py_RETURN_NONE;
}
