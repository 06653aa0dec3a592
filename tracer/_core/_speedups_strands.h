/* tracer._core._speedups, one of its parts: a strand's state (a traced generator's or
 * coroutine's invocation, from its start to its return or unwind) and its steps; its start and
 * end are _speedups_strand_ends.h's.
 * Included once, in order, by _speedups.c (one translation unit: the parts share its static
 * state and helpers); see _speedups.c for the whole. */

/* ---------------------------------------------------------------------------------------------
 * A strand keeps its state by frame in the table tracer._core.hooks shares (a StrandTable; its
 * sweep ends those that end unseen): its start records the Start, each step (its first run, each resume or throw,
 * to the next yield) runs as an entry on the thread's stack or under its own context value, and
 * its return or unwind ends it. The state is a Strand, made with no other object: the context
 * value (seq, iid, 0, origin) a step sets is made the first time one must (a strand that roots a
 * sequence, or is resumed from another), and most strands, whose steps run inside their own
 * sequence, never need it. (The pure-Python handlers keep a list instead: tracer._core.hooks.)
 */

static StrandTable *g_strands; /* hooks._strands: frame -> its Strand */
/* hooks._untraced_strands: frame -> [running, running] (True while a step runs: its marker is
 * on the thread's stack; None between steps), the strands turned away as roots past the bound */
static PyObject *g_untraced_strands;
static PyObject *g_sweep;   /* hooks.sweep(): ends the strands that ended unseen */
static Py_ssize_t g_sweep_at = 64; /* sweep when this many strands are open */

/* What the strand's running step did when it began (none runs: STEP_NONE). */
enum {
    STEP_NONE,       /* no step runs */
    STEP_ON_STACK,   /* an entry on the thread's stack (it began under a value of its sequence) */
    STEP_INNER,      /* it runs under a value code inside the frame set (nothing to undo) */
    STEP_COLLECTING, /* it began inside a collection on its thread, and set nothing */
    STEP_TOKEN,      /* it set the ContextVar: `token` resets it */
};

typedef struct {
    PyObject_HEAD
    uint64_t iid;
    uint8_t seq[16];
    long origin;       /* the thread it began on: its context value's fourth item */
    int step;          /* STEP_* */
    PyObject *seq_object; /* strong, or NULL: its sequence where it fits no record (exotic) */
    PyObject *value;   /* strong, or NULL until a step needs it: (seq, iid, 0, origin) */
    PyObject *token;   /* strong: the running step's ContextVar token (STEP_TOKEN), else NULL */
    PyObject *buffer;  /* strong: the EventBuffer of its Start */
    PyObject *inner;   /* strong, or NULL: the value its next step runs under (set in the frame) */
    PyObject *last;    /* strong, or NULL: the value its last entry step began under */
} Strand;

static PyTypeObject StrandType;

/* Strands let go of lately, kept for the next ones to begin (their allocation and free were a
 * tenth of what a one-item generator's start and end cost in the handlers on 3.12, where every
 * allocation reads the thread state). At most STRAND_FREELIST; only a thread holding the GIL
 * touches them. */
#define STRAND_FREELIST 64
static Strand *g_free_strands[STRAND_FREELIST];
static int g_free_strand_count;

static void
strand_dealloc(Strand *self)
{
    Py_XDECREF(self->seq_object);
    Py_XDECREF(self->value);
    Py_XDECREF(self->token);
    Py_XDECREF(self->buffer);
    Py_XDECREF(self->inner);
    Py_XDECREF(self->last);
    if (g_free_strand_count < STRAND_FREELIST) {
        g_free_strands[g_free_strand_count++] = self;
        return;
    }
    PyObject_Free(self);
}

static PyObject *
strand_repr(Strand *self)
{
    return PyUnicode_FromFormat("<tracer strand %llu>", (unsigned long long)self->iid);
}

static PyMemberDef strand_members[] = {
    {"iid", T_ULONGLONG, offsetof(Strand, iid), READONLY, "its invocation id"},
    {"buffer", T_OBJECT, offsetof(Strand, buffer), READONLY, "the EventBuffer of its Start"},
    {NULL},
};

/* Not collected: what a Strand holds (context values, a token, its thread's buffer) never
 * refers back to it except through its entry on a thread's stack, which its step's end pops. */
static PyTypeObject StrandType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracer._core._speedups.Strand",
    .tp_doc = "A traced generator's or coroutine's invocation in flight (its frame's state).",
    .tp_basicsize = sizeof(Strand),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_dealloc = (destructor)strand_dealloc,
    .tp_repr = (reprfunc)strand_repr,
    .tp_members = strand_members,
};

/* A strand's state in the table, borrowed, by its frame's key, or NULL (none: no error set). */
static Strand *
strand_of(PyObject **frame_out)
{
    PyObject *frame = strand_key(); /* borrowed: the traced frame's key */
    if (frame_out != NULL) {
        *frame_out = frame;
    }
    if (frame == NULL || g_strands == NULL) {
        return NULL;
    }
    return (Strand *)table_get(g_strands, frame); /* it holds nothing but strands */
}

/* The state of the strand of `frame`, taken out of the strands' table (its end): a new
 * reference, or NULL when it has none (no error set). */
static Strand *
pop_strand(PyObject *frame)
{
    if (frame == NULL || g_strands == NULL) {
        return NULL;
    }
    return (Strand *)table_pop(g_strands, frame);
}

/* The strand's context value, made the first time a step needs it: borrowed, or NULL with an
 * error set. */
static PyObject *
strand_context_value(Strand *strand)
{
    if (strand->value == NULL) {
        PyObject *seq = strand->seq_object != NULL
                            ? Py_NewRef(strand->seq_object)
                            : PyBytes_FromStringAndSize((const char *)strand->seq, 16);
        strand->value = strand_value(seq, strand->iid, strand->origin);
    }
    return strand->value;
}

/* Whether the ContextVar value `current` belongs to the sequence `seq` (16 bytes): an open
 * root's value, or a (seq, parent, hid[, origin]) value. */
static int
of_sequence(PyObject *current, const uint8_t *seq)
{
    if (is_closed(current) || (PyTuple_CheckExact(current) && PyTuple_GET_SIZE(current) < 3)) {
        return 0;
    }
    const uint8_t *own = sequence_of(current);
    return own != NULL && memcmp(own, seq, 16) == 0;
}

/* The step of `strand` runs under `value`: the ContextVar set to it, its token kept; inside a
 * collection on this thread nothing is set (see g_collecting). 0, or -1 with an error set. */
static int
step_set(Strand *strand, PyObject *value)
{
    if (collecting_here()) {
        strand->step = STEP_COLLECTING;
        return 0;
    }
    PyObject *token = PyContextVar_Set(g_context_var, value);
    if (token == NULL) {
        return -1;
    }
    Py_XSETREF(strand->token, token);
    strand->step = STEP_TOKEN;
    return 0;
}

/* A step of `strand` begins on this thread (`buffer`, borrowed), where the ContextVar holds
 * `current` (a reference this takes). When that is a value of the strand's own sequence, the
 * step is an entry on the thread's stack (its iid and sequence, that value, its code): the
 * calls it makes nest under it as under a synchronous call's, with no ContextVar write, and a
 * context C code copies meanwhile carries the sequence (with an ancestor for parent).
 * Otherwise (a strand that began a sequence, one resumed from another sequence or from none,
 * one whose sequence fits no record) the step sets the strand's value in the ContextVar, so
 * that copies carry the right sequence. 0, or -1 with an error set. */
static int
step_begin_under(Strand *strand, PyObject *code, PyObject *frame, PyObject *current,
                 PyObject *buffer)
{
    if (strand->inner != NULL) {
        /* code inside the frame set this value and had not reset it at the yield (a client
         * call attached across an await): the step runs under it, claiming nothing */
        int same = current == strand->inner; /* still in the task's context */
        Py_DECREF(current);
        if (same) {
            strand->step = STEP_INNER;
            return 0;
        }
        return step_set(strand, strand->inner);
    }
    if (strand->seq_object != NULL || !of_sequence(current, strand->seq)) {
        Py_DECREF(current);
        PyObject *value = strand_context_value(strand);
        return value == NULL ? -1 : step_set(strand, value);
    }
    StackEntry *entry = stack_next((EventBuffer *)buffer);
    if (entry == NULL) {
        Py_DECREF(current);
        return -1;
    }
    entry->iid = strand->iid;
    entry->strand = current; /* the reference PyContextVar_Get gave */
    memcpy(entry->seq, strand->seq, 16);
    entry->exotic = 0;
    entry->step = 1;
    entry->code = Py_NewRef(code);
    entry->token = entry->root = NULL;
    entry->state = Py_NewRef((PyObject *)strand);
    entry->frame = frame;
    strand->step = STEP_ON_STACK;
    return 0;
}

/* step_begin_under() for a resume: the ContextVar and the thread's buffer read now. */
static int
step_begin(Strand *strand, PyObject *code, PyObject *frame)
{
    PyObject *current = NULL;
    if (PyContextVar_Get(g_context_var, Py_None, &current) < 0) {
        return -1;
    }
    PyObject *buffer = current_buffer();
    if (buffer == NULL) {
        Py_DECREF(current);
        return -1;
    }
    int begun = step_begin_under(strand, code, frame, current, buffer);
    Py_DECREF(buffer);
    return begun;
}

/* The value in effect at the end of a step (`now`), when code inside the frame set it and has
 * not reset it (neither the strand's own value nor the one its last entry step began under), is
 * the one its next step runs under (else none). */
static void
keep_inner(Strand *strand, PyObject *now)
{
    int normal = now == Py_None || now == strand->value || now == strand->last;
    PyObject *inner = normal ? NULL : now;
    if (strand->inner != inner) {
        Py_XSETREF(strand->inner, Py_XNewRef(inner));
    }
}

/* The entry of the running step of `strand` (of `code`) on this thread's stack, or -1. */
static Py_ssize_t
step_entry(EventBuffer *events, Strand *strand, PyObject *code)
{
    for (Py_ssize_t i = events->depth - 1; i >= 0; i--) {
        StackEntry *entry = &events->stack[i];
        if (entry->step && entry->code == code && entry->iid == strand->iid) {
            return i;
        }
    }
    return -1;
}

/* The entry step of `strand` at `index` of the thread's stack ends, with `now` in effect: the
 * value it began under is the strand's last, `now` its next step's when code inside the frame
 * set it (keep_inner), and the entry (with any left above it) leaves the stack. The caller
 * keeps `strand` alive through the pop, which lets the entry's reference go. */
static inline void
end_entry_step(Strand *strand, EventBuffer *events, Py_ssize_t index, PyObject *now)
{
    StackEntry *entry = &events->stack[index];
    if (strand->last != entry->strand) {
        Py_XSETREF(strand->last, Py_NewRef(entry->strand));
    }
    keep_inner(strand, now);
    stack_pop(events, index, strand->iid);
}

/* The step of `strand` ends (a yield, its return or unwind): the value in effect now, when code
 * inside the frame set it, is the one its next step runs under (keep_inner); its entry leaves
 * the thread's stack (the innermost of this code and invocation; any above it too), or its
 * ContextVar token is reset. 0, or -1 with an error set. */
static int
step_end(Strand *strand, PyObject *code)
{
    int step = strand->step;
    strand->step = STEP_NONE;
    if (step == STEP_NONE || step == STEP_COLLECTING) {
        return 0; /* none runs, or it began inside a collection and set nothing: as it was */
    }
    PyObject *now = NULL;
    if (PyContextVar_Get(g_context_var, Py_None, &now) < 0) {
        strand->step = step;
        return -1;
    }
    PyObject *buffer = step == STEP_ON_STACK ? current_buffer() : NULL;
    if (step == STEP_ON_STACK && buffer == NULL) {
        Py_DECREF(now);
        strand->step = step;
        return -1;
    }
    Py_ssize_t index = buffer == NULL ? -1 : step_entry((EventBuffer *)buffer, strand, code);
    if (index >= 0) {
        end_entry_step(strand, (EventBuffer *)buffer, index, now);
    }
    else {
        keep_inner(strand, now);
    }
    Py_DECREF(now);
    Py_XDECREF(buffer);
    if (step != STEP_TOKEN) {
        return 0; /* on the stack (popped), or under a value set inside the frame */
    }
    PyObject *token = strand->token;
    strand->token = NULL;
    int reset = token == NULL ? 0 : PyContextVar_Reset(g_context_var, token);
    Py_XDECREF(token);
    return reset;
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
        || ((Strand *)top->state)->step != STEP_ON_STACK) {
        return 0;
    }
    PyObject *now = NULL;
    if (PyContextVar_Get(g_context_var, Py_None, &now) < 0) {
        return -1;
    }
    Strand *strand = (Strand *)Py_NewRef(top->state); /* the pop lets the entry's go */
    strand->step = STEP_NONE;
    end_entry_step(strand, events, events->depth - 1, now);
    Py_DECREF(now);
    Py_DECREF(strand);
    return 1;
}
