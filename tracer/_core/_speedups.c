/* tracer._core._speedups: the C accelerator of the hot path (see docs/architecture.md, "C accelerator").
 *
 * Three types and a few functions:
 *
 * - TracedFunction: the sync call wrapper. It does what the pure-Python sync wrapper
 *   (tracer._core.bodies.SYNC) does, step for step: the disabled check, a read of the ContextVar
 *   (tracer._core.context.current) and the thread's invocation stack (its top is the parent when
 *   it began under the value read: a nested call writes no ContextVar; a root sets it, or reopens
 *   the value it left closed in its context: RootValue), an iid from the process-wide counter
 *   (next_iid() below is also the pure-Python code's counter), the monotonic clock
 *   (CLOCK_MONOTONIC's scale, which is what time.perf_counter_ns reads on Linux; read from the TSC
 *   where the kernel's clock is the TSC: _clock.h), a Start and an End or
 *   Error record in the thread's buffer. A failure of the tracer's own steps goes to
 *   recorder.internal_error and the function still runs; the user's exceptions propagate
 *   unchanged, after an Error record. capture(), nested() and start() give the Python side the
 *   same parents (tracer._core.stack, the coroutine and generator wrappers).
 *
 * - EventBuffer: a thread's events, as fixed-size records in a preallocated array that grows by
 *   doubling: recording allocates nothing per event. append() takes the event tuples that the
 *   Python wrappers (coroutines, generators, hand-offs) build, so a thread has one ordered buffer
 *   whichever wrapper recorded. take() swaps the array for a spare one and encodes the taken
 *   records as msgpack, exactly as msgspec encodes the tuples the pure-Python recorder keeps.
 *   `limit` is the thread's allowance under the process's memory bound (tracer/_core/budget.py): a
 *   Start compares the count with it, and past it asks the refill callback for more.
 *
 * - EncodedEvents: what take() returns: the encoded events and where each one starts, so the
 *   sender can cut batches at any event, as it slices a list. msgpack() gives one slice as a
 *   msgpack array, which the sender splices into the batch (msgspec.Raw). Indexing decodes one
 *   event (a list of the tuple's items), for the sender's looks at a chunk's first and last ones.
 *
 * Everything runs with the GIL held and the record writes call no Python code, so an append and
 * a take never interleave; that is the same argument as the list's atomic slice and delete.
 * Single-phase init, static types: one interpreter per process, like the rest of the tracer.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "_clock.h"

/* Event tags, as tracer.wire defines them. */
#define TAG_START 0
#define TAG_END 1
#define TAG_ERROR 2
#define TAG_HANDOFF 3
#define TAG_ATTRS 4

#define MAX_NAME 1024         /* tracer.wire.MAX_NAME: an error's type name is cut to this */
#define INITIAL_RECORDS 64    /* records preallocated per thread (4.5 KiB) */
/* A drained array up to this size is kept as the thread's spare, and reused by its next take:
 * fresh pages cost a page fault each on first write (measured 4-15 us in a VM here: 60-250 ns a
 * record), so a busy thread must not record into new memory every drain. 262,144 records (18 MiB)
 * is more than a thread records between two drains at 2 M events/s; an idle thread gives its
 * arrays back (trim). */
#define MAX_SPARE_RECORDS (1 << 18) /* a larger drained array is freed, not kept as the spare */
/* The spare arrays of all threads together, at most (18 MiB): their memory stays whatever the
 * number of threads; a thread with no spare allocates its fresh array at take(). */
#define MAX_SPARE_RECORDS_TOTAL (1 << 18)

/* ---------------------------------------------------------------------------------------------
 * Process-wide state. Set by configure() (recorder.py does it at import); until then a traced
 * function only calls through.
 */

static PyObject *g_context_var;   /* tracer._core.context.current */
static PyObject *g_internal_error; /* recorder.internal_error(exc) */
static PyObject *g_thread_events; /* recorder.thread_events(): this thread's EventBuffer */
static PyObject *g_encode;        /* msgspec's encode: for an event that fits no record layout */
static PyObject *g_decode;        /* msgspec's decode: EncodedEvents[i] */
static PyObject *g_clock;         /* NULL: CLOCK_MONOTONIC; else a callable returning int ns */
static PyObject *g_new_seq;       /* NULL: the generator below; else a callable */
static PyObject *g_next_iid;      /* NULL: g_last_iid + 1; else a callable */
static PyObject *g_adopt;         /* NULL: a root draws a new sequence; else a callable giving
                                     the root's context value, or None to draw one */
static PyObject *g_adopt_var;     /* NULL: ask g_adopt at every root; else ask it only when ... */
static PyObject *g_adopt_key;     /* ... this key is in the mapping this ContextVar holds */
static int g_disabled;
static PyObject *g_overflow;      /* recorder: counts a call run untraced inside an untraced root */
static PyObject *g_refill;        /* budget.refill(buffer, current): more allowance, or False
                                     (the call runs untraced, counted); NULL: no bound */
static Py_ssize_t g_spare_records; /* the records of every buffer's spare array */
static uint64_t g_last_iid;       /* the process-wide invocation counter */
static uint64_t g_rng[4];         /* xoshiro256** state for sequence ids, reseeded after fork */

/* A thread finds its buffer through this cache, without a Python call. The cache is valid for
 * the thread state it was filled on (ids are never reused) and while no buffer was created or
 * freed anywhere (the generation), so it can never point at a freed buffer; a miss asks
 * recorder.thread_events(), which registers the thread on its first event. */
static uint64_t g_generation = 1;
/* initial-exec: an offset from the thread pointer, where the default model for a shared object
 * calls __tls_get_addr on every access (3 % of a traced call). 24 bytes of glibc's static TLS
 * surplus, which it keeps for libraries loaded later. */
static _Thread_local __attribute__((tls_model("initial-exec"))) struct {
    uint64_t tstate_id;
    uint64_t generation;
    PyObject *buffer; /* borrowed: tls.events and the recorder's registry own it */
} t_cache;

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
    char *data = realloc(out->data, capacity); /* the C library's: see forget_allocation */
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

/* ---------------------------------------------------------------------------------------------
 * EncodedEvents: the result of EventBuffer.take(), sliceable at event boundaries.
 */

typedef struct {
    PyObject_HEAD
    PyObject *owner;      /* the EncodedEvents that owns data and offsets; NULL: this one */
    char *data;
    Py_ssize_t *offsets;  /* offsets[i]: where event i starts; offsets[count]: the end */
    Py_ssize_t start, stop;
} EncodedEvents;

static PyTypeObject EncodedEventsType;

static void
encoded_dealloc(EncodedEvents *self)
{
    if (self->owner == NULL) {
        free(self->data);
        free(self->offsets);
    }
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
    view->start = self->start + start;
    view->stop = self->start + stop;
    return (PyObject *)view;
}

static PyObject *
encoded_msgpack(EncodedEvents *self, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t count = encoded_length(self);
    Py_ssize_t length = self->offsets[self->stop] - self->offsets[self->start];
    uint8_t header[5];
    Out out = {(char *)header, 0, sizeof(header)};
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
    .tp_methods = encoded_methods,
};

/* ---------------------------------------------------------------------------------------------
 * EventBuffer: one thread's records.
 */

/* Record arrays of MAPPED_RECORDS or more (72 KiB) are mapped pages of their own: growing one
 * moves pages rather than copying them (mremap), its unused tail is never touched so it takes no
 * memory, and freeing one gives its memory back at once, so a busy thread's large, short-lived
 * arrays leave no holes in the heap: RSS stays near what the memory bound counts (72 bytes a
 * record). Capacities are INITIAL_RECORDS times a power of two. Smaller ones come from the C
 * library's malloc, not PyMem: they are the tracer's, not the program's, and a program measuring
 * its own allocations with tracemalloc must not count them. */
#define MAPPED_RECORDS 1024

static Record *
records_alloc(Py_ssize_t capacity)
{
    if (capacity < MAPPED_RECORDS) {
        return malloc(capacity * sizeof(Record));
    }
    void *mapped = mmap(NULL, capacity * sizeof(Record), PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return mapped == MAP_FAILED ? NULL : mapped;
}

static Record *
records_realloc(Record *records, Py_ssize_t capacity, Py_ssize_t new_capacity)
{
    if (new_capacity < MAPPED_RECORDS) {
        return realloc(records, new_capacity * sizeof(Record));
    }
    if (capacity >= MAPPED_RECORDS) {
        void *moved = mremap(records, capacity * sizeof(Record), new_capacity * sizeof(Record),
                             MREMAP_MAYMOVE);
        return moved == MAP_FAILED ? NULL : moved;
    }
    Record *mapped = records_alloc(new_capacity);
    if (mapped != NULL) {
        memcpy(mapped, records, capacity * sizeof(Record));
        free(records);
    }
    return mapped;
}

static void
records_free(Record *records, Py_ssize_t capacity)
{
    if (records != NULL && capacity >= MAPPED_RECORDS) {
        munmap(records, capacity * sizeof(Record));
    }
    else {
        free(records);
    }
}

/* An open synchronous invocation on the thread's invocation stack (see begin() below). */
typedef struct {
    uint64_t iid;
    PyObject *strand; /* strong: the ContextVar value the invocation began under */
    uint8_t seq[16];  /* its sequence (the strand's, copied: nested Starts need no lookup) */
    int exotic;       /* the strand fits no record layout: nested Starts read it as objects */
    /* Instrumented code's calls (monitor_start) only, else NULL: what the call's end needs. */
    PyObject *code;  /* strong: the code whose frame this is (its end pops this entry only) */
    PyObject *token; /* strong: a root's ContextVar token */
    PyObject *root;  /* borrowed (the strand): a root's RootValue */
    /* A strand's step (a generator's or coroutine's run from its start or a resume to its
     * yield): `code` is the strand's, `iid` and `seq` its invocation's, `strand` the value the
     * resumer ran under; popped at the yield. Calls in the step nest under it like a sync call's
     * children, and the ContextVar is left alone. */
    int step;
} StackEntry;

#define INITIAL_STACK 32

typedef struct {
    PyObject_HEAD
    Record *records;
    Py_ssize_t count, capacity;
    Record *spare; /* the array take() swaps in next (the previous take's, reused) */
    Py_ssize_t spare_capacity;
    /* The thread's open TracedFunction calls, innermost last: `depth` of them (they leave no
     * frame, so the sampler asks for this count as `active`). */
    StackEntry *stack;
    Py_ssize_t depth, stack_capacity;
    Py_ssize_t limit; /* the allowance: a Start past it asks g_refill (budget.py writes it) */
} EventBuffer;

static PyTypeObject EventBufferType;

/* The slot for the next record, growing the array when it is full (amortised: no allocation per
 * event). The caller fills the slot at once, with no Python call in between. */
static inline Record *
buffer_next_slot(EventBuffer *self)
{
    if (self->count == self->capacity) {
        Py_ssize_t capacity = self->capacity * 2;
        Record *records = records_realloc(self->records, self->capacity, capacity);
        if (records == NULL) {
            PyErr_NoMemory();
            return NULL;
        }
        self->records = records;
        self->capacity = capacity;
    }
    return &self->records[self->count++];
}

static void
release_records(Record *records, Py_ssize_t count)
{
    for (Py_ssize_t i = 0; i < count; i++) {
        if (record_owns_object(&records[i])) {
            Py_DECREF(records[i].u.obj);
        }
    }
}

static PyObject *
buffer_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "EventBuffer() takes no arguments");
        return NULL;
    }
    EventBuffer *self = (EventBuffer *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    self->records = records_alloc(INITIAL_RECORDS);
    if (self->records == NULL) {
        Py_DECREF(self);
        return PyErr_NoMemory();
    }
    self->capacity = INITIAL_RECORDS;
    g_generation++; /* a thread may be given a new buffer: caches ask again */
    return (PyObject *)self;
}

static void
buffer_dealloc(EventBuffer *self)
{
    g_generation++; /* no thread's cache may keep pointing here */
    if (self->records != NULL) {
        release_records(self->records, self->count);
        records_free(self->records, self->capacity);
    }
    if (self->spare != NULL) {
        g_spare_records -= self->spare_capacity;
        records_free(self->spare, self->spare_capacity);
    }
    for (Py_ssize_t i = 0; i < self->depth; i++) { /* a thread that ended inside a call */
        Py_XDECREF(self->stack[i].strand);
        Py_XDECREF(self->stack[i].code);
        Py_XDECREF(self->stack[i].token);
    }
    free(self->stack);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static Py_ssize_t
buffer_length(EventBuffer *self)
{
    return self->count;
}

static int
fits_u64(PyObject *value, uint64_t *out)
{
    if (!PyLong_CheckExact(value)) {
        return 0;
    }
    *out = PyLong_AsUnsignedLongLong(value);
    if (*out == (uint64_t)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

static int
fits_i64(PyObject *value, int64_t *out)
{
    if (!PyLong_CheckExact(value)) {
        return 0;
    }
    int overflow;
    *out = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow || (*out == -1 && PyErr_Occurred())) {
        PyErr_Clear();
        return 0;
    }
    return 1;
}

static int
fits_seq(PyObject *value, uint8_t *out)
{
    if (!PyBytes_CheckExact(value) || PyBytes_GET_SIZE(value) != 16) {
        return 0;
    }
    memcpy(out, PyBytes_AS_STRING(value), 16);
    return 1;
}

/* Fill a record from an event tuple in one of the wire layouts; 0 when it fits none (it is then
 * kept as an object and encoded by msgspec, so the bytes still match). Raises nothing. */
static int
parse_event(PyObject *event, Record *r)
{
    if (!PyTuple_CheckExact(event) || PyTuple_GET_SIZE(event) < 3) {
        return 0;
    }
    PyObject **item = &PyTuple_GET_ITEM(event, 0);
    Py_ssize_t size = PyTuple_GET_SIZE(event);
    uint64_t tag;
    if (!fits_u64(item[0], &tag)) {
        return 0;
    }
    if (tag == TAG_START && size == 7) {
        r->kind = REC_START;
        return fits_u64(item[1], &r->a) && fits_u64(item[2], &r->b) && fits_u64(item[3], &r->c)
            && fits_u64(item[4], &r->d) && fits_i64(item[5], &r->t_ns) && fits_seq(item[6], r->seq);
    }
    if (tag == TAG_END && size == 3) {
        r->kind = REC_END;
        return fits_u64(item[1], &r->a) && fits_i64(item[2], &r->t_ns);
    }
    if (tag == TAG_ERROR && size == 4 && PyUnicode_CheckExact(item[3])) {
        r->kind = REC_ERROR;
        r->u.obj = item[3];
        return fits_u64(item[1], &r->a) && fits_i64(item[2], &r->t_ns)
            && PyUnicode_GET_LENGTH(item[3]) <= MAX_NAME;
    }
    if (tag == TAG_HANDOFF && size == 7 && PyUnicode_CheckExact(item[3])) {
        r->kind = REC_HANDOFF;
        r->u.obj = item[3];
        return fits_u64(item[1], &r->a) && fits_u64(item[2], &r->b) && fits_u64(item[4], &r->d)
            && fits_i64(item[5], &r->t_ns) && fits_seq(item[6], r->seq);
    }
    return 0;
}

static PyObject *
buffer_append(EventBuffer *self, PyObject *event)
{
    Record parsed;
    if (!parse_event(event, &parsed)) {
        parsed.kind = REC_OBJECT;
        parsed.u.obj = event;
    }
    Record *slot = buffer_next_slot(self);
    if (slot == NULL) {
        return NULL;
    }
    *slot = parsed;
    if (record_owns_object(slot)) {
        Py_INCREF(slot->u.obj);
    }
    Py_RETURN_NONE;
}

static PyObject *
buffer_take(EventBuffer *self, PyObject *const *args, Py_ssize_t nargs)
{
    Py_ssize_t count = self->count;
    if (nargs > 1) {
        PyErr_Format(PyExc_TypeError, "take() takes at most 1 argument (%zd given)", nargs);
        return NULL;
    }
    if (nargs == 1) {
        Py_ssize_t wanted = PyNumber_AsSsize_t(args[0], PyExc_OverflowError);
        if (wanted == -1 && PyErr_Occurred()) {
            return NULL;
        }
        if (wanted >= 0 && wanted < count) {
            count = wanted;
        }
    }
    if (count == 0) {
        Py_RETURN_NONE;
    }
    Py_ssize_t kept = self->count - count; /* recorded after the sender counted: they stay */
    Record *taken = self->records;
    Py_ssize_t taken_capacity = self->capacity;
    Py_ssize_t *offsets = malloc((count + 1) * sizeof(Py_ssize_t));
    Record *fresh = self->spare;
    Py_ssize_t fresh_capacity = self->spare_capacity;
    if (fresh == NULL || fresh_capacity < kept) {
        fresh_capacity = INITIAL_RECORDS; /* as many as this take's: the next interval's likely */
        while (fresh_capacity < kept || fresh_capacity < count) {
            fresh_capacity *= 2;
        }
        fresh = records_alloc(fresh_capacity);
    }
    if (offsets == NULL || fresh == NULL) {
        free(offsets);
        if (fresh != self->spare) {
            records_free(fresh, fresh_capacity);
        }
        return PyErr_NoMemory();
    }
    /* The swap: from here the owner thread records into the fresh array, and the taken records
     * are this call's alone (encoding may call msgspec, which may let other threads run). */
    if (fresh == self->spare) {
        g_spare_records -= self->spare_capacity;
        self->spare = NULL;
    }
    memcpy(fresh, taken + count, kept * sizeof(Record)); /* their references move with them */
    self->records = fresh;
    self->capacity = fresh_capacity;
    self->count = kept;

    Out out = {NULL, 0, 0};
    int failed = out_reserve(&out, count * 40) < 0;
    for (Py_ssize_t i = 0; !failed && i < count; i++) {
        offsets[i] = out.size;
        failed = put_record(&out, &taken[i]) < 0;
    }
    release_records(taken, count);
    if (self->spare == NULL && taken_capacity <= MAX_SPARE_RECORDS
        && g_spare_records + taken_capacity <= MAX_SPARE_RECORDS_TOTAL) {
        self->spare = taken;
        self->spare_capacity = taken_capacity;
        g_spare_records += taken_capacity;
    }
    else {
        records_free(taken, taken_capacity);
    }
    EncodedEvents *result = failed ? NULL : PyObject_New(EncodedEvents, &EncodedEventsType);
    if (result == NULL) {
        free(out.data);
        free(offsets);
        return NULL;
    }
    offsets[count] = out.size;
    result->owner = NULL;
    result->data = out.data;
    result->offsets = offsets;
    result->start = 0;
    result->stop = count;
    return (PyObject *)result;
}

/* An idle thread's buffer (nothing recorded since the last drain) gives its memory back: the
 * spare array, and a large empty array for a small one. */
static PyObject *
buffer_trim(EventBuffer *self, PyObject *Py_UNUSED(ignored))
{
    if (self->spare != NULL) {
        g_spare_records -= self->spare_capacity;
        records_free(self->spare, self->spare_capacity);
        self->spare = NULL;
        self->spare_capacity = 0;
    }
    if (self->count == 0 && self->capacity > INITIAL_RECORDS) {
        Record *small = records_alloc(INITIAL_RECORDS);
        if (small != NULL) {
            records_free(self->records, self->capacity);
            self->records = small;
            self->capacity = INITIAL_RECORDS;
        }
    }
    Py_RETURN_NONE;
}

static PySequenceMethods buffer_as_sequence = {
    .sq_length = (lenfunc)buffer_length,
};

static PyMethodDef buffer_methods[] = {
    {"append", (PyCFunction)buffer_append, METH_O,
     "Record an event tuple (the layouts of tracer.wire's events), as list.append would."},
    {"take", (PyCFunction)(void (*)(void))buffer_take, METH_FASTCALL,
     "take(count=-1, /): remove the oldest count events (every one when count < 0) and return "
     "them encoded (EncodedEvents), or None if there are none."},
    {"trim", (PyCFunction)buffer_trim, METH_NOARGS,
     "Give back the memory an idle thread's buffer holds: its spare array, a large empty one."},
    {NULL},
};

static PyMemberDef buffer_members[] = {
    {"active", T_PYSSIZET, offsetof(EventBuffer, depth), READONLY,
     "How many TracedFunction calls are in flight on the thread (the sampler asks)."},
    {"limit", T_PYSSIZET, offsetof(EventBuffer, limit), 0,
     "The thread's allowance, in events: a Start past it asks the refill callback."},
    {NULL},
};

static PyTypeObject EventBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracer._core._speedups.EventBuffer",
    .tp_doc = "One thread's events, as fixed-size records in a preallocated array.",
    .tp_basicsize = sizeof(EventBuffer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = buffer_new,
    .tp_dealloc = (destructor)buffer_dealloc,
    .tp_as_sequence = &buffer_as_sequence,
    .tp_methods = buffer_methods,
    .tp_members = buffer_members,
};

/* ---------------------------------------------------------------------------------------------
 * The hot path's sources: buffer, clock, iid, sequence id.
 */

/* This thread's buffer, a new reference. */
static PyObject *
current_buffer(void)
{
    uint64_t tstate_id = PyThreadState_GetID(PyThreadState_Get());
    if (t_cache.buffer != NULL && t_cache.tstate_id == tstate_id
        && t_cache.generation == g_generation) {
        return Py_NewRef(t_cache.buffer);
    }
    PyObject *buffer = PyObject_CallNoArgs(g_thread_events);
    if (buffer == NULL) {
        return NULL;
    }
    if (!Py_IS_TYPE(buffer, &EventBufferType)) {
        PyErr_Format(PyExc_TypeError, "thread_events() returned %.100s, not an EventBuffer",
                     Py_TYPE(buffer)->tp_name);
        Py_DECREF(buffer);
        return NULL;
    }
    t_cache.tstate_id = tstate_id;
    t_cache.generation = g_generation;
    t_cache.buffer = buffer;
    return buffer;
}

static inline int
read_clock(int64_t *t_ns)
{
    if (__builtin_expect(g_clock == NULL, 1)) {
        *t_ns = clock_now_ns();
        return 0;
    }
    PyObject *value = PyObject_CallNoArgs(g_clock);
    if (value == NULL) {
        return -1;
    }
    *t_ns = PyLong_AsLongLong(value);
    Py_DECREF(value);
    return *t_ns == -1 && PyErr_Occurred() ? -1 : 0;
}

static int
take_iid(uint64_t *iid)
{
    if (g_next_iid == NULL) {
        *iid = ++g_last_iid;
        return 0;
    }
    PyObject *value = PyObject_CallNoArgs(g_next_iid);
    if (value == NULL) {
        return -1;
    }
    *iid = PyLong_AsUnsignedLongLong(value);
    Py_DECREF(value);
    return *iid == (uint64_t)-1 && PyErr_Occurred() ? -1 : 0;
}

static inline uint64_t
rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t
rng_next(void)
{
    uint64_t result = rotl(g_rng[1] * 5, 7) * 9;
    uint64_t t = g_rng[1] << 17;
    g_rng[2] ^= g_rng[0];
    g_rng[3] ^= g_rng[1];
    g_rng[1] ^= g_rng[2];
    g_rng[0] ^= g_rng[3];
    g_rng[2] ^= t;
    g_rng[3] = rotl(g_rng[3], 45);
    return result;
}

static void
rng_seed(void)
{
    uint64_t seed[4] = {0, 0, 0, 0};
    if (getrandom(seed, sizeof(seed), 0) != (ssize_t)sizeof(seed)) {
        struct timespec now;
        clock_gettime(CLOCK_REALTIME, &now);
        seed[0] = (uint64_t)now.tv_nsec ^ ((uint64_t)now.tv_sec << 30);
        seed[1] = (uint64_t)getpid() * 0x9E3779B97F4A7C15ULL;
        seed[2] = (uint64_t)(uintptr_t)&seed;
    }
    /* splitmix64 spreads whatever the seed holds over the whole state (never all zero) */
    uint64_t z = seed[0] ^ seed[1] ^ seed[2] ^ seed[3];
    for (int i = 0; i < 4; i++) {
        z += 0x9E3779B97F4A7C15ULL;
        uint64_t x = z ^ seed[i];
        x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
        x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
        g_rng[i] = x ^ (x >> 31);
    }
}

/* A random 128-bit sequence id that is never zero (a valid W3C trace id), as ids.new_seq: the
 * lowest bit of the 9th byte set, so the right-most 7 bytes stay uniformly random (the W3C
 * "random" trace-flag, Level 2 §3.2.2.5.2). */
static void
draw_seq_bytes(uint8_t *bytes)
{
    uint64_t high = rng_next(), low = rng_next();
    for (int i = 0; i < 8; i++) {
        bytes[i] = (uint8_t)(high >> (56 - 8 * i));
        bytes[8 + i] = (uint8_t)(low >> (56 - 8 * i));
    }
    bytes[8] |= 1; /* ids.NONZERO_BIT */
}

static PyObject *
draw_seq(void)
{
    if (g_new_seq != NULL) {
        return PyObject_CallNoArgs(g_new_seq);
    }
    PyObject *seq = PyBytes_FromStringAndSize(NULL, 16);
    if (seq == NULL) {
        return NULL;
    }
    draw_seq_bytes((uint8_t *)PyBytes_AS_STRING(seq));
    return seq;
}

/* ---------------------------------------------------------------------------------------------
 * RootValue: what a synchronous root puts in the ContextVar, (seq, iid, 0, ORIGIN_SYNC_ROOT) as
 * a sequence of four, in one allocation with no references (so no GC tracking). Python code
 * reads it as it reads the tuples strands use.
 *
 * Setting and resetting the ContextVar is most of what a root costs (two new HAMTs, nodes and a
 * token: about 135 ns here). So a root that ends while its value can be reached through its own
 * context alone (no copy of the context, no other mapping holds it: held_only_here) does not
 * reset the ContextVar: it marks the value closed, which every reader takes for None, and the
 * next root in that context opens the same value again, with no ContextVar write at all. A value
 * anything else may hold is never reopened: that copy keeps seeing the root it was made in.
 */

typedef struct {
    PyObject_HEAD
    uint64_t iid;
    uint8_t seq[16];
    char closed; /* its root ended: no sequence (it may be opened again: see above) */
} RootValue;

static PyTypeObject RootValueType;

/* Mirrors of CPython's private layouts of a Context and its HAMT (Include/internal/
 * pycore_context.h and pycore_hamt.h, the same in 3.11 to 3.13), checked against a real
 * context at import (layouts_known); when they do not match, roots always set and reset. */
typedef struct {
    PyObject_HEAD
    PyObject *ctx_prev;
    PyObject *ctx_vars;
    PyObject *ctx_weakreflist;
    int ctx_entered;
} ContextMirror;

typedef struct {
    PyObject_HEAD
    PyObject *h_root;
    PyObject *h_weakreflist;
    Py_ssize_t h_count;
} HamtMirror;

static int g_reuse_roots;             /* the layouts matched at import */
static PyTypeObject *g_bitmap_node;   /* the type of a HAMT's single-level node */

static int
is_closed(PyObject *value)
{
    return Py_IS_TYPE(value, &RootValueType) && ((RootValue *)value)->closed;
}

/* Whether `value`, the ContextVar's value in the current context, can be reached only through
 * that context: the context's HAMT is a single node, and neither the HAMT, nor the node, nor the
 * value has another holder (a copy of the context shares the HAMT; a mapping derived from it
 * copies the node's entries, taking a reference to the value). `extra` references to the value
 * are the caller's own. */
static int
held_only_here(PyObject *value, Py_ssize_t extra)
{
    if (!g_reuse_roots) {
        return 0;
    }
    ContextMirror *context = (ContextMirror *)PyThreadState_Get()->context;
    if (context == NULL || context->ctx_vars == NULL) {
        return 0;
    }
    HamtMirror *vars = (HamtMirror *)context->ctx_vars;
    return Py_REFCNT(vars) == 1 && vars->h_root != NULL && Py_IS_TYPE(vars->h_root, g_bitmap_node)
        && Py_REFCNT(vars->h_root) == 1 && Py_REFCNT(value) == 1 + extra;
}

/* At import: whether the mirrors above match this CPython (one variable set in a new context:
 * a "hamt" of one entry in a "hamt_bitmap_node", the context entered). */
static int
layouts_known(void)
{
#if defined(Py_GIL_DISABLED) || PY_VERSION_HEX >= 0x030E0000
    return 0; /* without the GIL, reference counts say nothing; later versions: unchecked */
#else
    int known = 0;
    PyObject *var = PyContextVar_New("invoseq_layout_probe", NULL);
    PyObject *context = PyContext_New();
    if (var != NULL && context != NULL && PyContext_Enter(context) == 0) {
        PyObject *token = PyContextVar_Set(var, Py_True);
        ContextMirror *mirror = (ContextMirror *)context;
        HamtMirror *vars = (HamtMirror *)mirror->ctx_vars;
        known = token != NULL && mirror->ctx_entered == 1 && vars != NULL
            && strcmp(Py_TYPE(vars)->tp_name, "hamt") == 0 && vars->h_count == 1
            && vars->h_root != NULL && strcmp(Py_TYPE(vars->h_root)->tp_name, "hamt_bitmap_node") == 0;
        if (known) {
            g_bitmap_node = Py_TYPE(vars->h_root);
        }
        Py_XDECREF(token);
        PyContext_Exit(context);
    }
    Py_XDECREF(var);
    Py_XDECREF(context);
    PyErr_Clear();
    return known;
#endif
}

static Py_ssize_t
root_value_length(PyObject *self)
{
    return 4;
}

static PyObject *
root_value_item(PyObject *self, Py_ssize_t index)
{
    RootValue *value = (RootValue *)self;
    switch (index) {
    case 0:
        return PyBytes_FromStringAndSize((const char *)value->seq, 16);
    case 1:
        return PyLong_FromUnsignedLongLong(value->iid);
    case 2:
        return PyLong_FromLong(0);
    case 3:
        return PyLong_FromLong(-1); /* ORIGIN_SYNC_ROOT */
    default:
        PyErr_SetString(PyExc_IndexError, "a context value has 4 items");
        return NULL;
    }
}

static PyObject *
root_value_repr(PyObject *self)
{
    PyObject *seq = root_value_item(self, 0);
    if (seq == NULL) {
        return NULL;
    }
    PyObject *repr = PyUnicode_FromFormat("RootValue(%R, %llu, 0, -1)", seq,
                                          (unsigned long long)((RootValue *)self)->iid);
    Py_DECREF(seq);
    return repr;
}

static PyMemberDef root_value_members[] = {
    {"closed", T_BOOL, offsetof(RootValue, closed), READONLY,
     "Its root ended: the ContextVar holding it means no sequence."},
    {NULL},
};

static PySequenceMethods root_value_as_sequence = {
    .sq_length = root_value_length,
    .sq_item = root_value_item,
};

static PyTypeObject RootValueType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracer._core._speedups.RootValue",
    .tp_doc = "A synchronous root's context value: (seq, iid, 0, -1).",
    .tp_basicsize = sizeof(RootValue),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_as_sequence = &root_value_as_sequence,
    .tp_members = root_value_members,
    .tp_repr = root_value_repr,
};

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
    entry->code = entry->token = entry->root = NULL;
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
        StackEntry *entry = &buffer->stack[buffer->depth];
        Py_XDECREF(entry->strand);
        Py_XDECREF(entry->code);
        Py_XDECREF(entry->token);
    }
}

/* Whether the thread may record another Start: under its allowance, or budget.refill reserved
 * more (1). Past it, refill counts the call as overflow (dropped, its sequence, read from
 * `current`, lossy) and the call runs untraced, Start and End alike (0); -1: refill failed. */
static int
within_allowance(EventBuffer *buffer, PyObject *current)
{
    if (buffer->count < buffer->limit || g_refill == NULL) {
        return 1;
    }
    PyObject *seen = is_closed(current) ? Py_None : current;
    PyObject *result = PyObject_CallFunctionObjArgs(g_refill, (PyObject *)buffer, seen, NULL);
    int granted = result == NULL ? -1 : PyObject_IsTrue(result);
    Py_XDECREF(result);
    return granted;
}

/* A marker's `exotic` when the memory bound turned its call away (0: disabled, or a failure). */
#define PAST_BOUND_MARKER 1

/* Whether a call that would root a sequence (`current` None, or a root's closed value) starts
 * inside a call that runs untraced with no sequence (a marker on top of the thread's stack: a
 * root past the memory bound): it runs untraced too, counted, rather than root a sequence of
 * one call (the bound lets go as the sender delivers, and a busy program's nested calls made
 * hundreds of thousands of them). */
static inline int
inside_untraced_root(EventBuffer *buffer, PyObject *current)
{
    StackEntry *top = buffer->depth > 0 ? &buffer->stack[buffer->depth - 1] : NULL;
    return top != NULL && top->strand == NULL && top->exotic == PAST_BOUND_MARKER
           && (current == Py_None || is_closed(current));
}

/* Count a call run untraced inside an untraced root (g_overflow). 0, or -1 with an error set. */
static int
count_untraced_root(void)
{
    if (g_overflow == NULL) {
        return 0;
    }
    PyObject *result = PyObject_CallNoArgs(g_overflow);
    Py_XDECREF(result);
    return result == NULL ? -1 : 0;
}

/* The start of a synchronous invocation. 0: begun; 1: past the memory bound, run untraced;
 * -1 with an error set, and then nothing is left behind (the context is as it was). A nested
 * call touches no ContextVar beyond one cached read and allocates nothing: it pushes an entry
 * on the thread's stack. A root sets the ContextVar, so contexts copied inside it carry the
 * sequence. */
static int
begin(uint64_t method, Invocation *inv)
{
    PyObject *current = NULL, *value = NULL;
    Beginning b = {0};
    inv->token = NULL;
    inv->root = NULL;
    inv->buffer = current_buffer();
    if (inv->buffer == NULL) {
        return -1;
    }
    EventBuffer *buffer = (EventBuffer *)inv->buffer;
    if (PyContextVar_Get(g_context_var, NULL, &current) < 0) {
        goto failed;
    }
    if (current == NULL) {
        PyErr_SetObject(PyExc_LookupError, g_context_var);
        goto failed;
    }
    if (inside_untraced_root(buffer, current)) {
        Py_DECREF(current);
        Py_CLEAR(inv->buffer);
        return count_untraced_root() < 0 ? -1 : 1;
    }
    int granted = within_allowance(buffer, current); /* past it: untraced, counted */
    if (granted <= 0) {
        Py_DECREF(current);
        Py_CLEAR(inv->buffer);
        return granted == 0 ? 1 : -1; /* -1: an error, as the Python wrapper's */
    }
    if (take_iid(&inv->iid) < 0) {
        goto failed;
    }
    /* a closed value of this context, which nothing else holds: the root opens it again */
    PyObject *reusable = is_closed(current) && held_only_here(current, 1) ? current : NULL;
    int found = find_parent(buffer, current, &b);
    current = NULL; /* b owns it (or, for a root, it is let go: reusable stays in the context) */
    if (found < 0) {
        goto failed;
    }
    if (b.strand == NULL) {
        if (find_root(&b) < 0) {
            goto failed;
        }
        if (reusable != NULL) {
            value = Py_NewRef(reusable);
        }
        else {
            value = (PyObject *)PyObject_New(RootValue, &RootValueType);
            if (value == NULL) {
                goto failed;
            }
        }
        ((RootValue *)value)->iid = inv->iid;
        memcpy(((RootValue *)value)->seq, b.seq_bytes, 16);
        ((RootValue *)value)->closed = 0;
        inv->root = value;
        if (reusable == NULL) {
            inv->token = PyContextVar_Set(g_context_var, value);
            if (inv->token == NULL) {
                goto failed;
            }
        }
        b.strand = value;
        value = NULL;
    }
    int64_t t_ns = 0;
    if (read_clock(&t_ns) < 0 || record_start(inv->buffer, &b, inv->iid, method, t_ns) < 0
        || stack_push(buffer, inv->iid, b.strand, &b) < 0) {
        goto failed;
    }
    inv->index = buffer->depth - 1;
    beginning_clear(&b);
    return 0;

failed:
    if (inv->root != NULL && inv->token == NULL) {
        ((RootValue *)inv->root)->closed = 1; /* reopened, and closed again: as it was */
    }
    if (inv->token != NULL) {
        PyObject *type, *error, *traceback;
        PyErr_Fetch(&type, &error, &traceback);
        if (PyContextVar_Reset(g_context_var, inv->token) < 0) {
            PyErr_Clear();
        }
        PyErr_Restore(type, error, traceback);
        Py_CLEAR(inv->token);
    }
    Py_CLEAR(inv->buffer);
    Py_XDECREF(current);
    Py_XDECREF(value);
    beginning_clear(&b);
    return -1;
}

/* A root's end: its value is closed where it stays reachable through this context alone, so
 * the next root here opens it again; else the ContextVar is reset (set to None when the value
 * was reopened: closed means None, and a copy made during the root keeps it, open). */
static int
end_root(Invocation *inv)
{
    PyObject *root = inv->root, *current = NULL;
    inv->root = NULL;
    if (PyContextVar_Get(g_context_var, NULL, &current) < 0) {
        current = NULL;
        PyErr_Clear();
    }
    int in_place = current == root && held_only_here(root, 1);
    Py_XDECREF(current);
    if (in_place) {
        ((RootValue *)root)->closed = 1;
        Py_CLEAR(inv->token);
        return 0;
    }
    if (inv->token != NULL) {
        int reset = PyContextVar_Reset(g_context_var, inv->token);
        Py_CLEAR(inv->token);
        return reset;
    }
    PyObject *token = PyContextVar_Set(g_context_var, Py_None);
    Py_XDECREF(token);
    return token == NULL ? -1 : 0;
}

/* Record the end (or the error, when error_type is set), pop the stack and, for a root, restore
 * the caller's context, even when recording failed. */
/* Record the end of invocation `iid` in `buffer`, or its error when error_type is set. */
static int
record_end(EventBuffer *buffer, uint64_t iid, PyTypeObject *error_type)
{
    int64_t t_ns = 0;
    int result = read_clock(&t_ns);
    uint8_t kind = REC_END;
    PyObject *name = NULL;
    const char *cname = NULL;
    if (result == 0 && error_type != NULL) {
        if (error_type->tp_flags & Py_TPFLAGS_HEAPTYPE) {
            /* `type(exc).__name__` is the heap type's ht_name; a str subclass is copied to a str */
            kind = REC_ERROR;
            name = PyUnicode_Substring(((PyHeapTypeObject *)error_type)->ht_name, 0,
                                       PY_SSIZE_T_MAX);
            result = name == NULL ? -1 : 0;
        }
        else {
            const char *dot = strrchr(error_type->tp_name, '.');
            kind = REC_ERROR_CNAME;
            cname = dot != NULL ? dot + 1 : error_type->tp_name;
        }
    }
    if (result == 0) {
        Record *slot = buffer_next_slot(buffer);
        if (slot != NULL) {
            slot->kind = kind;
            slot->a = iid;
            slot->t_ns = t_ns;
            if (kind == REC_ERROR) {
                slot->u.obj = name;
            }
            else if (kind == REC_ERROR_CNAME) {
                slot->u.cname = cname;
            }
        }
        else {
            Py_XDECREF(name);
            result = -1;
        }
    }
    return result;
}

static int
finish(Invocation *inv, PyTypeObject *error_type)
{
    EventBuffer *buffer = (EventBuffer *)inv->buffer;
    stack_pop(buffer, inv->index, inv->iid);
    int result = record_end(buffer, inv->iid, error_type);
    if (inv->root != NULL) {
        PyObject *type = NULL, *error = NULL, *traceback = NULL;
        if (result < 0) {
            PyErr_Fetch(&type, &error, &traceback);
        }
        int reset = end_root(inv);
        if (result < 0) {
            if (reset < 0) {
                PyErr_Clear();
            }
            PyErr_Restore(type, error, traceback);
        }
        else if (reset < 0) {
            result = -1;
        }
    }
    Py_CLEAR(inv->buffer);
    return result;
}

/* begin() for the common cases, inlined, with the default sources and under the thread's
 * allowance: a call nested in the top of its thread's stack (the ContextVar holds the value that
 * entry began under), or a root that opens its context's closed value again (RootValue). 0:
 * begun; 2: not one of these, and nothing done (begin() takes it). */
static inline int
begin_fast(uint64_t method, Invocation *inv)
{
    if (g_next_iid != NULL || g_clock != NULL || t_cache.buffer == NULL
        || t_cache.generation != g_generation
        || t_cache.tstate_id != PyThreadState_GetID(PyThreadState_Get())) {
        return 2;
    }
    EventBuffer *buffer = (EventBuffer *)t_cache.buffer;
    Py_ssize_t depth = buffer->depth;
    if (depth == buffer->stack_capacity || buffer->count >= buffer->limit) {
        return 2;
    }
    PyObject *current = NULL;
    if (PyContextVar_Get(g_context_var, NULL, &current) < 0) {
        PyErr_Clear(); /* begin() meets it again, and reports it */
        return 2;
    }
    StackEntry *top = depth > 0 ? &buffer->stack[depth - 1] : NULL;
    uint64_t parent = 0;
    const uint8_t *seq;
    RootValue *root = NULL;
    if (top != NULL && current == top->strand && !top->exotic) {
        parent = top->iid;
        seq = top->seq;
    }
    else if (current != NULL && is_closed(current) && g_new_seq == NULL
             && (top == NULL || top->strand != NULL) /* under a marker: begin() decides */
             && held_only_here(current, 1) && !(g_adopt != NULL && adoption_wanted())) {
        root = (RootValue *)current;
        draw_seq_bytes(root->seq);
        seq = root->seq;
    }
    else {
        Py_XDECREF(current);
        return 2;
    }
    Record *slot = buffer_next_slot(buffer);
    if (slot == NULL) {
        PyErr_Clear();
        Py_DECREF(current);
        return 2;
    }
    uint64_t iid = ++g_last_iid;
    if (root != NULL) {
        root->iid = iid;
        root->closed = 0;
    }
    int64_t t_ns = 0;
    read_clock(&t_ns); /* the default clock: it cannot fail */
    slot->kind = REC_START;
    slot->a = iid;
    slot->b = parent;
    slot->c = 0;
    slot->d = method;
    slot->t_ns = t_ns;
    memcpy(slot->seq, seq, 16);
    StackEntry *entry = &buffer->stack[depth];
    entry->iid = iid;
    entry->strand = current; /* the reference PyContextVar_Get gave */
    memcpy(entry->seq, seq, 16);
    entry->exotic = 0;
    entry->step = 0;
    entry->code = entry->token = entry->root = NULL;
    buffer->depth = depth + 1;
    inv->buffer = Py_NewRef((PyObject *)buffer);
    inv->token = NULL;
    inv->root = (PyObject *)root;
    inv->iid = iid;
    inv->index = depth;
    return 0;
}

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

/* ---------------------------------------------------------------------------------------------
 * Module functions.
 */

static PyObject *
set_refill(PyObject *module, PyObject *args)
{
    PyObject *callback, *overflow = Py_None;
    if (!PyArg_ParseTuple(args, "O|O:set_refill", &callback, &overflow)) {
        return NULL;
    }
    Py_XSETREF(g_refill, callback == Py_None ? NULL : Py_NewRef(callback));
    Py_XSETREF(g_overflow, overflow == Py_None ? NULL : Py_NewRef(overflow));
    Py_RETURN_NONE;
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

/* start()'s work: the strand's Start, and its context value (None past the bound). */
static PyObject *
begin_strand(uint64_t method)
{
    PyObject *buffer = current_buffer();
    if (buffer == NULL) {
        return NULL;
    }
    EventBuffer *events = (EventBuffer *)buffer;
    PyObject *current = NULL, *value = NULL;
    Beginning b = {0};
    uint64_t iid;
    if (PyContextVar_Get(g_context_var, Py_None, &current) < 0) {
        goto done;
    }
    if (inside_untraced_root(events, current)) {
        value = count_untraced_root() < 0 ? NULL : Py_NewRef(Py_None);
        goto done;
    }
    int granted = within_allowance(events, current);
    if (granted <= 0) {
        value = granted == 0 ? Py_NewRef(Py_None) : NULL;
        goto done;
    }
    if (take_iid(&iid) < 0) {
        goto done;
    }
    int found = find_parent(events, current, &b);
    current = NULL;
    if (found < 0 || (b.strand == NULL && find_root(&b) < 0)) {
        goto done;
    }
    int64_t t_ns = 0;
    if (read_clock(&t_ns) < 0 || record_start(buffer, &b, iid, method, t_ns) < 0) {
        goto done;
    }
    value = strand_value(beginning_seq(&b), iid, (long)PyThread_get_thread_ident());

done:
    Py_XDECREF(current);
    beginning_clear(&b);
    Py_DECREF(buffer);
    return value;
}


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

static PyObject *g_strands; /* hooks._strands: frame -> [iid, value, token or None, buffer] */
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
    if (state == NULL || !PyList_CheckExact(state) || PyList_GET_SIZE(state) != 6) {
        PyErr_Clear();
        return NULL;
    }
    return state;
}

/* Whether the ContextVar value `current` belongs to the sequence `seq` (16 bytes): an open
 * root's value, or a (seq, parent, hid[, origin]) value. */
static int
of_sequence(PyObject *current, const char *seq)
{
    if (Py_IS_TYPE(current, &RootValueType)) {
        return !((RootValue *)current)->closed
            && memcmp(((RootValue *)current)->seq, seq, 16) == 0;
    }
    if (!PyTuple_CheckExact(current) || PyTuple_GET_SIZE(current) < 3) {
        return 0;
    }
    PyObject *first = PyTuple_GET_ITEM(current, 0);
    return PyBytes_CheckExact(first) && PyBytes_GET_SIZE(first) == 16
        && memcmp(PyBytes_AS_STRING(first), seq, 16) == 0;
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
step_begin(PyObject *state, PyObject *code)
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
        PyObject *token = PyContextVar_Set(g_context_var, inner);
        if (token == NULL) {
            return -1;
        }
        PyList_SetItem(state, 2, token);
        return 0;
    }
    if (!PyBytes_CheckExact(seq) || PyBytes_GET_SIZE(seq) != 16
        || !fits_u64(PyList_GET_ITEM(state, 0), &iid)
        || !of_sequence(current, PyBytes_AS_STRING(seq))) {
        Py_DECREF(current);
        PyObject *token = PyContextVar_Set(g_context_var, value);
        if (token == NULL) {
            return -1;
        }
        PyList_SetItem(state, 2, token);
        return 0;
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
    Py_DECREF(buffer);
    PyList_SetItem(state, 2, Py_NewRef(Py_True));
    return 0;
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
    int normal = now == Py_None || now == PyList_GET_ITEM(state, 1)
                 || now == PyList_GET_ITEM(state, 5);
    PyObject *inner = normal ? Py_None : now;
    if (PyList_GET_ITEM(state, 4) != inner) {
        PyList_SetItem(state, 4, Py_NewRef(inner));
    }
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
    int stored = step_begin(state, code);
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

/* A strand ends: its End (its Error; GeneratorExit ends a generator ok), and its step ended.
 * 0, or -1 with an error set. */
static int
strand_end(long kind, PyObject *error, PyObject *code)
{
    PyObject *frame;
    PyObject *state = strand_state(&frame);
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
    Py_INCREF(state);
    if (PyDict_DelItem(g_strands, frame) < 0) {
        Py_DECREF(state);
        return -1;
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
    int ended = step_end(state, code);
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

/* PY_YIELD: the step ends, and with it its entry on the thread's stack (or its context value). */
static PyObject *
monitor_yield(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    PyObject *state = strand_state(NULL);
    if (nargs < 1) {
        Py_RETURN_NONE;
    }
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
    PyObject *state = strand_state(NULL);
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
    if (step_begin(state, args[0]) < 0 && !absorb_failure()) {
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
        Py_XDECREF(entry->strand);
        Py_XDECREF(entry->code);
        Py_XDECREF(entry->token);
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

static PyObject *
after_fork(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    rng_seed();
    g_generation++;
    t_cache.buffer = NULL;
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"set_refill", set_refill, METH_VARARGS,
     "set_refill(callback, overflow=None): callback(buffer, current) when a Start finds its "
     "buffer at its limit returns whether it may record (None: no limit); overflow() counts a "
     "call run untraced inside an untraced root"},
    {"configure", (PyCFunction)(void (*)(void))configure, METH_VARARGS | METH_KEYWORDS,
     "configure(context_var, internal_error, thread_events, encode, decode): what it uses."},
    {"set_enabled", set_enabled, METH_O, "Turn recording on or off (decorator.set_enabled)."},
    {"set_sources", (PyCFunction)(void (*)(void))set_sources, METH_VARARGS | METH_KEYWORDS,
     "set_sources(*, clock=None, new_seq=None, next_iid=None, adopt=None, adopt_guard=None): "
     "replace a source (None: its own; for adopt, no adoption: every root draws a new sequence; "
     "adopt_guard=(var, key): ask adopt only when key is in var's mapping)."},
    {"next_iid", next_iid, METH_NOARGS, "The next invocation id of this process."},
    {"untracked", (PyCFunction)(void (*)(void))untracked, METH_FASTCALL,
     "untracked(make, arg, /): make(arg), a bytes object the tracer keeps, which tracemalloc "
     "forgets at once (the program does not count it)."},
    {"clock", clock_ns, METH_NOARGS,
     "The hot path's clock, ns on CLOCK_MONOTONIC's scale (time.perf_counter_ns on Linux): read "
     "from the TSC once its rate is measured (_clock.h)."},
    {"use_tsc", use_tsc, METH_O,
     "use_tsc(allowed): whether clock() may read the TSC (where the kernel's clocksource is the "
     "TSC: tracer/_core/clock.py); it starts measuring the TSC's rate anew."},
    {"clock_reads_tsc", clock_reads_tsc, METH_NOARGS,
     "True once clock() reads the TSC (its rate measured), False while it reads clock_gettime."},
    {"new_seq", new_seq, METH_NOARGS, "A random 16-byte sequence id, never zero."},
    {"capture", capture, METH_NOARGS,
     "The exact current context (seq, innermost invocation, hand-off), or None."},
    {"nested", nested, METH_NOARGS,
     "(seq, innermost invocation, 0) when it is on this thread's stack in this strand, or None."},
    {"start", start, METH_O,
     "start(method): record a strand's Start; its context value, or None past the bound."},
    {"after_fork", after_fork, METH_NOARGS, "In a forked child: reseed, forget cached buffers."},
    {"set_handlers", set_handlers, METH_VARARGS,
     "set_handlers(strands, sweep, untraced=None): the strands' table by frame, what ends those "
     "unseen, and the table of strands turned away as roots past the memory bound."},
    {"monitor_start", (PyCFunction)(void (*)(void))monitor_start, METH_FASTCALL,
     "monitor_start(code, offset): a traced code's frame starts (PY_START)."},
    {"monitor_return", (PyCFunction)(void (*)(void))monitor_return, METH_FASTCALL,
     "monitor_return(code, offset, value): a traced code's frame returns (PY_RETURN)."},
    {"monitor_unwind", (PyCFunction)(void (*)(void))monitor_unwind, METH_FASTCALL,
     "monitor_unwind(code, offset, exc): an exception leaves a frame (PY_UNWIND)."},
    {"monitor_yield", (PyCFunction)(void (*)(void))monitor_yield, METH_FASTCALL,
     "monitor_yield(code, offset, value): a traced strand's step ends (PY_YIELD)."},
    {"monitor_resume", (PyCFunction)(void (*)(void))monitor_resume, METH_FASTCALL,
     "monitor_resume(code, offset): a traced strand's step begins (PY_RESUME)."},
    {"monitor_throw", (PyCFunction)(void (*)(void))monitor_throw, METH_FASTCALL,
     "monitor_throw(code, offset, exc): a strand resumed by throw() (PY_THROW)."},
    {"mark_code", (PyCFunction)(void (*)(void))mark_code, METH_FASTCALL,
     "mark_code(code, method, kind): the code is traced (its extra slot holds the entry)."},
    {NULL},
};

static struct PyModuleDef speedups_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tracer._core._speedups",
    .m_doc = "The C accelerator of the tracer's hot path (docs/architecture.md).",
    .m_size = -1,
    .m_methods = module_methods,
};

PyMODINIT_FUNC
PyInit__speedups(void)
{
    g_reuse_roots = layouts_known();
    if (PyType_Ready(&TracedFunctionType) < 0 || PyType_Ready(&EventBufferType) < 0
        || PyType_Ready(&RootValueType) < 0
        || PyType_Ready(&EncodedEventsType) < 0 || PyType_Ready(&MonitorHookType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "TracedFunction", (PyObject *)&TracedFunctionType) < 0
        || PyModule_AddObjectRef(module, "EventBuffer", (PyObject *)&EventBufferType) < 0
        || PyModule_AddObjectRef(module, "EncodedEvents", (PyObject *)&EncodedEventsType) < 0
        || add_hooks(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    rng_seed();
    return module;
}
