/* tracer._core._speedups, one of its parts: StrandTable, the open strands by frame.
 * Included once, in order, by _speedups.c (one translation unit: the parts share its static
 * state and helpers); see _speedups.c for the whole. */

/* ---------------------------------------------------------------------------------------------
 * StrandTable: a traced generator's or coroutine's frame -> its Strand, for the C handlers
 * (hooks._strands; the pure-Python handlers keep a dict). An open-addressing table keyed by the
 * frame object's address, with linear probing and deletion by moving the entries after a
 * removed one back (no tombstones): a dict that gains and loses one entry per strand fills with
 * deleted slots and rebuilt its keys every few strands, a fifth of a one-item generator's cost
 * in the handlers. It holds a reference to each frame and each state, as the dict did; what
 * Python reads of it is what hooks.sweep and the tests read of the dict: len(), items() (a
 * list), pop(frame, default) and popitem().
 */

/* A strand's key. From 3.12 a strand can end with no event the handlers see: 3.13 closes a
 * generator dropped at a yield outside any handler silently, and sys.monitoring raises no event
 * while one of its callbacks runs (a collection inside the tracer's own Python code, a thread's
 * registration, closes generators unseen). Their End is the sweep's, which finds such strands by
 * their frame object's reference count, so there the key is the frame object (a strong
 * reference). On 3.11 every close runs the handler the instrumented code has, so the key is the
 * strand's interpreter frame, which lives inside its generator or coroutine object, read from
 * the thread state: no frame object is made for it (making and freeing one was a fifth of the
 * instructions a one-item generator added). Such a key is an address, never dereferenced;
 * Python reads it as an int. */
#if PY_VERSION_HEX >= 0x030C0000
#define STRAND_KEYS_OWNED 1
#else
#define STRAND_KEYS_OWNED 0
#endif

/* The running strand's key (borrowed), or NULL. */
static inline PyObject *
strand_key(void)
{
#if STRAND_KEYS_OWNED
    return (PyObject *)PyEval_GetFrame();
#else
    return (PyObject *)PyThreadState_Get()->cframe->current_frame;
#endif
}

/* A key as Python sees it (a new reference), and back (NULL: none, no error set). */
static PyObject *
key_object(PyObject *key)
{
#if STRAND_KEYS_OWNED
    return Py_NewRef(key);
#else
    return PyLong_FromVoidPtr(key);
#endif
}

static PyObject *
key_from(PyObject *object)
{
#if STRAND_KEYS_OWNED
    return object;
#else
    void *key = PyLong_Check(object) ? PyLong_AsVoidPtr(object) : NULL;
    if (key == NULL) {
        PyErr_Clear();
    }
    return (PyObject *)key;
#endif
}

#if STRAND_KEYS_OWNED
#define KEY_KEEP(key) Py_NewRef(key)
#define KEY_DROP(key) Py_DECREF(key)
#else
#define KEY_KEEP(key) (key)
#define KEY_DROP(key) ((void)0)
#endif

typedef struct {
    PyObject *frame; /* the key (see strand_key), or NULL: an empty slot */
    PyObject *state; /* strong */
} TableSlot;

typedef struct {
    PyObject_HEAD
    TableSlot *slots;
    Py_ssize_t capacity; /* a power of two, or 0 */
    Py_ssize_t used;
} StrandTable;

static PyTypeObject StrandTableType;

#define TABLE_MIN_CAPACITY 64

static inline size_t
table_home(const StrandTable *table, PyObject *frame)
{
    uint64_t key = (uint64_t)(uintptr_t)frame >> 3; /* keys are 8-byte aligned at least */
    return (size_t)((key * 0x9E3779B97F4A7C15ULL) >> 32) & (size_t)(table->capacity - 1);
}

/* The slot of `frame`, or of the empty slot where it would go. */
static inline size_t
table_find(const StrandTable *table, PyObject *frame)
{
    size_t mask = (size_t)table->capacity - 1;
    size_t i = table_home(table, frame);
    while (table->slots[i].frame != NULL && table->slots[i].frame != frame) {
        i = (i + 1) & mask;
    }
    return i;
}

/* `frame`'s state, borrowed, or NULL. */
static inline PyObject *
table_get(const StrandTable *table, PyObject *frame)
{
    if (table->used == 0) {
        return NULL;
    }
    return table->slots[table_find(table, frame)].state;
}

/* The entries rehashed into `capacity` slots (a power of two, at least twice `used`). */
static int
table_resize(StrandTable *table, Py_ssize_t capacity)
{
    TableSlot *slots = PyMem_Calloc((size_t)capacity, sizeof(TableSlot));
    if (slots == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    TableSlot *old = table->slots;
    Py_ssize_t old_capacity = table->capacity;
    table->slots = slots;
    table->capacity = capacity;
    for (Py_ssize_t i = 0; i < old_capacity; i++) {
        if (old[i].frame != NULL) {
            table->slots[table_find(table, old[i].frame)] = old[i];
        }
    }
    PyMem_Free(old);
    return 0;
}

static int
table_grow(StrandTable *table)
{
    return table_resize(table, table->capacity == 0 ? TABLE_MIN_CAPACITY : table->capacity * 2);
}

/* After a removal: a table an eighth full or less halves (a burst of open strands leaves no
 * table its size behind); it is then a quarter full, so neither the next start nor the next end
 * resizes it again. Without the memory for the smaller one it stays as it is. */
static void
table_shrink(StrandTable *table)
{
    if (table->capacity > TABLE_MIN_CAPACITY && table->used * 8 <= table->capacity
        && table_resize(table, table->capacity / 2) < 0) {
        PyErr_Clear();
    }
}

/* Keep `state` for `frame` (new references to both; one it had is let go). 0, or -1. */
static int
table_set(StrandTable *table, PyObject *frame, PyObject *state)
{
    if ((table->used + 1) * 2 > table->capacity && table_grow(table) < 0) {
        return -1;
    }
    TableSlot *slot = &table->slots[table_find(table, frame)];
    PyObject *old = slot->state;
    if (slot->frame == NULL) {
        slot->frame = KEY_KEEP(frame);
        table->used++;
    }
    slot->state = Py_NewRef(state);
    Py_XDECREF(old);
    return 0;
}

/* Take the entry at slot i out: the entries after it, up to an empty slot, that would not be
 * found past the hole move back into it. Its references go to the caller. */
static void
table_remove_at(StrandTable *table, size_t i, PyObject **frame, PyObject **state)
{
    size_t mask = (size_t)table->capacity - 1;
    *frame = table->slots[i].frame;
    *state = table->slots[i].state;
    size_t hole = i;
    for (size_t j = (i + 1) & mask; table->slots[j].frame != NULL; j = (j + 1) & mask) {
        size_t home = table_home(table, table->slots[j].frame);
        /* j's entry stays unless its home lies cyclically outside (hole, j] */
        int stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (!stays) {
            table->slots[hole] = table->slots[j];
            hole = j;
        }
    }
    table->slots[hole].frame = table->slots[hole].state = NULL;
    table->used--;
    table_shrink(table);
}

/* `frame`'s state taken out of the table: a new reference, or NULL when it has none. */
static PyObject *
table_pop(StrandTable *table, PyObject *frame)
{
    if (table->used == 0) {
        return NULL;
    }
    size_t i = table_find(table, frame);
    if (table->slots[i].frame == NULL) {
        return NULL;
    }
    PyObject *key, *state;
    table_remove_at(table, i, &key, &state);
    KEY_DROP(key);
    return state;
}

static void
table_dealloc(StrandTable *self)
{
    for (Py_ssize_t i = 0; i < self->capacity; i++) {
        if (self->slots[i].frame != NULL) {
            KEY_DROP(self->slots[i].frame);
        }
        Py_XDECREF(self->slots[i].state);
    }
    PyMem_Free(self->slots);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
table_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    if (PyTuple_GET_SIZE(args) != 0 || (kwargs != NULL && PyDict_GET_SIZE(kwargs) != 0)) {
        PyErr_SetString(PyExc_TypeError, "StrandTable() takes no arguments");
        return NULL;
    }
    StrandTable *table = (StrandTable *)type->tp_alloc(type, 0);
    if (table != NULL) {
        table->slots = NULL;
        table->capacity = table->used = 0;
    }
    return (PyObject *)table;
}

static Py_ssize_t
table_length(StrandTable *self)
{
    return self->used;
}

/* items(): the (frame, state) pairs, listed (the table may change while the caller reads them). */
static PyObject *
table_items(StrandTable *self, PyObject *Py_UNUSED(ignored))
{
    PyObject *items = PyList_New(0);
    for (Py_ssize_t i = 0; items != NULL && i < self->capacity; i++) {
        if (self->slots[i].frame == NULL) {
            continue;
        }
        PyObject *key = key_object(self->slots[i].frame);
        PyObject *pair = key == NULL ? NULL : PyTuple_Pack(2, key, self->slots[i].state);
        Py_XDECREF(key);
        if (pair == NULL || PyList_Append(items, pair) < 0) {
            Py_CLEAR(items);
        }
        Py_XDECREF(pair);
    }
    return items;
}

/* pop(frame, default=None) */
static PyObject *
table_pop_method(StrandTable *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "pop(frame, default=None)");
        return NULL;
    }
    PyObject *key = key_from(args[0]);
    PyObject *state = key == NULL ? NULL : table_pop(self, key);
    if (state != NULL) {
        return state;
    }
    return Py_NewRef(nargs == 2 ? args[1] : Py_None);
}

/* popitem(): any (frame, state) pair, taken out; KeyError when empty. */
static PyObject *
table_popitem(StrandTable *self, PyObject *Py_UNUSED(ignored))
{
    for (Py_ssize_t i = 0; self->used > 0 && i < self->capacity; i++) {
        if (self->slots[i].frame != NULL) {
            PyObject *frame, *state;
            table_remove_at(self, (size_t)i, &frame, &state);
            PyObject *key = key_object(frame);
            PyObject *pair = key == NULL ? NULL : PyTuple_Pack(2, key, state);
            Py_XDECREF(key);
            KEY_DROP(frame);
            Py_DECREF(state);
            return pair;
        }
    }
    PyErr_SetString(PyExc_KeyError, "popitem(): the strands' table is empty");
    return NULL;
}

/* strand_key_of(generator or coroutine): the key its strand has in the table, as items() gives
 * it (its frame object, or its interpreter frame's address): for tests. */
static PyObject *
strand_key_of(PyObject *module, PyObject *object)
{
#if STRAND_KEYS_OWNED
    return PyObject_GetAttrString(object, PyCoro_CheckExact(object) ? "cr_frame" : "gi_frame");
#else
    if (!PyGen_CheckExact(object) && !PyCoro_CheckExact(object)) {
        PyErr_SetString(PyExc_TypeError, "strand_key_of() takes a generator or a coroutine");
        return NULL;
    }
    /* a generator's and a coroutine's heads are alike: the frame lives in the object */
    return PyLong_FromVoidPtr((char *)object + offsetof(PyGenObject, gi_iframe));
#endif
}

static PyMethodDef table_methods[] = {
    {"items", (PyCFunction)table_items, METH_NOARGS, "The (frame, state) pairs, as a list."},
    {"pop", (PyCFunction)(void (*)(void))table_pop_method, METH_FASTCALL,
     "pop(frame, default=None): the frame's state, taken out."},
    {"popitem", (PyCFunction)table_popitem, METH_NOARGS, "A (frame, state) pair, taken out."},
    {NULL},
};

static PyMemberDef table_members[] = {
    {"capacity", T_PYSSIZET, offsetof(StrandTable, capacity), READONLY,
     "The slots the table has now: twice its entries at least, an eighth of them at most."},
    {NULL},
};

static PyMappingMethods table_as_mapping = {
    .mp_length = (lenfunc)table_length,
};

static PyTypeObject StrandTableType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracer._core._speedups.StrandTable",
    .tp_doc = "The open strands of the C handlers: frame -> Strand.",
    .tp_basicsize = sizeof(StrandTable),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = table_new,
    .tp_dealloc = (destructor)table_dealloc,
    .tp_as_mapping = &table_as_mapping,
    .tp_methods = table_methods,
    .tp_members = table_members,
};
