/* tracer._core._speedups, one of its parts: EventBuffer, one thread's records (its take()
 * gives EncodedEvents: _speedups_encoded.h).
 * Included once, in order, by _speedups.c (one translation unit: the parts share its static
 * state and helpers); see _speedups.c for the whole. */

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
    PyObject *state; /* strong: a step's strand state, which its yield finds here, else NULL */
    void *frame;     /* a step's frame, compared by its yield only (never dereferenced) */
} StackEntry;

/* Let go of what an entry leaving the stack holds. */
static inline void
entry_release(StackEntry *entry)
{
    Py_XDECREF(entry->strand);
    Py_XDECREF(entry->code);
    Py_XDECREF(entry->token);
    Py_XDECREF(entry->state);
}

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
    /* The last refusal of g_refill (see within_allowance): in which g_budget_epoch (0: none to
     * remember), and for which sequence (refused_named 0: a call with none, a root). */
    uint64_t refused_epoch;
    uint8_t refused_seq[16];
    char refused_named;
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
        entry_release(&self->stack[i]);
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
    size_t offsets_capacity;
    Py_ssize_t *offsets = (Py_ssize_t *)pool_get((count + 1) * sizeof(Py_ssize_t), &offsets_capacity);
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
        pool_put((char *)offsets, offsets_capacity);
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

    /* One pass: each record is encoded and its reference let go while its cache lines are
     * here (the records were written on the owner thread's core; a second pass over a batch of
     * them read each line from memory again), the next ones asked for ahead of the reads. */
    Out out = {NULL, 0, 0, 1};
    int failed = out_reserve(&out, HEADER_ROOM + count * 40) < 0;
    out.size = HEADER_ROOM; /* left for the header of the slice that begins here */
    Py_ssize_t done = 0;
    for (; !failed && done < count; done++) {
        Record *record = &taken[done];
        if (done + TAKE_PREFETCH_AHEAD < count) {
            __builtin_prefetch(record + TAKE_PREFETCH_AHEAD);
        }
        offsets[done] = out.size;
        failed = put_record(&out, record) < 0;
        if (record_owns_object(record)) {
            Py_DECREF(record->u.obj);
        }
    }
    release_records(taken + done, count - done); /* after a failure: those not encoded */
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
        pool_put(out.data, (size_t)out.capacity);
        pool_put((char *)offsets, offsets_capacity);
        return NULL;
    }
    offsets[count] = out.size;
    result->owner = NULL;
    result->data = out.data;
    result->offsets = offsets;
    result->data_capacity = (size_t)out.capacity;
    result->offsets_capacity = offsets_capacity;
    result->start = 0;
    result->stop = count;
    result->exported = result->packed = NULL;
    result->exported_size = 0;
    result->packed_capacity = 0;
    result->room_taken = 0;
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
