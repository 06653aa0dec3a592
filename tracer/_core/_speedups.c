/* tracer._core._speedups: the C accelerator of the hot path (see docs/architecture.md, "C accelerator").
 *
 * Three types and a few functions:
 *
 * - TracedFunction: the sync call wrapper. It does what the pure-Python sync wrapper
 *   (tracer._core.wrapper_bodies.SYNC) does, step for step: the disabled check, a read of the ContextVar
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
 *   sender can cut batches at any event, as it slices a list. A slice exports itself as one
 *   msgpack array through the buffer protocol, which the sender splices into the batch
 *   (msgspec.Raw); msgpack() gives the same bytes as a bytes object. Indexing decodes one event
 *   (a list of the tuple's items), for the sender's looks at a chunk's first and last ones. Their
 *   memory comes from blocks the next takes reuse (_speedups_pool.h).
 *
 * Everything runs with the GIL held and the record writes call no Python code, so an append and
 * a take never interleave; that is the same argument as the list's atomic slice and delete.
 * Single-phase init, static types: one interpreter per process, like the rest of the tracer.
 *
 * The source is in parts by concern, which this file includes in order after the process-wide
 * state (one translation unit: they share its static state, and the compiler sees the hot path
 * whole): _speedups_pool.h (the blocks takes encode into, reused), _speedups_records.h
 * (records, their encoding, the tracer's memory), _speedups_encoded.h (EncodedEvents),
 * _speedups_events.h (EventBuffer), _speedups_sources.h (buffer, clock, iid and sequence id;
 * RootValue), _speedups_parents.h (an invocation's parent, sequence, Start and stack entry),
 * _speedups_begin.h (the allowance, begin() and the end), _speedups_wrapper.h
 * (TracedFunction), _speedups_functions.h (the module's functions), _speedups_table.h
 * (StrandTable), _speedups_strands.h and _speedups_strand_ends.h (the strands of instrumented
 * code: generators, coroutines), _speedups_handlers.h (the instrumented code's handlers),
 * _speedups_stacks.h (the sampler's stacks) and _speedups_send.h (bodies handed to libzmq).
 * The module's method table and init stay here, with
 * gc_phase (a collection runs on this thread: see g_collecting).
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

/* The module's interface, as tracer._core.accel.INTERFACE expects it: raised (in both) with every
 * change to what its functions and types take or give, so that a module built from older
 * sources is not used by newer Python code (or the other way round). */
#define SPEEDUPS_INTERFACE 4

/* Event tags, as tracer.wire defines them. */
#define TAG_START 0
#define TAG_END 1
#define TAG_ERROR 2
#define TAG_HANDOFF 3
#define TAG_ATTRS 4

#define MAX_NAME 1024         /* tracer.wire.MAX_NAME: an error's type name is cut to this */
#define INITIAL_RECORDS 64    /* records preallocated per thread (4.5 KiB) */
#define TAKE_PREFETCH_AHEAD 16 /* take() asks for the record this far ahead as it encodes */
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
/* budget.py's memory was given back (budget_changed()) this many times: a refusal remembered
 * in an earlier epoch is asked again. */
static uint64_t g_budget_epoch = 1;
/* The calls run untraced past the memory bound that were counted here, not by budget.overflow:
 * since the process started (budget.take_overflow reads the difference). */
static unsigned long long g_overflowed;
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

/* The thread state (its id) running a cyclic collection, 0 when none runs. CPython before 3.12
 * collects inside an allocation, so the finalizers a collection runs (a traced generator's
 * close, a __del__ calling traced code) interrupt whatever allocated: a ContextVar write among
 * others, which reads the context's mapping before it allocates and replaces it after. A
 * finalizer that writes a ContextVar of the same context in between frees the mapping the outer
 * write is still building on (memory corruption: python/cpython's contextvars take no reference
 * to it). So the handlers write no ContextVar while their own thread collects (gc_phase, a
 * gc.callbacks entry, says when): a generator's step there leaves the value as it is, a root
 * runs untraced, counted. 3.12 and later collect only between bytecodes: never set there. */
static uint64_t g_collecting;

static inline int
collecting_here(void)
{
    return g_collecting != 0 && g_collecting == PyThreadState_GetID(PyThreadState_Get());
}
/* initial-exec: an offset from the thread pointer, where the default model for a shared object
 * calls __tls_get_addr on every access (3 % of a traced call). 24 bytes of glibc's static TLS
 * surplus, which it keeps for libraries loaded later. */
static _Thread_local __attribute__((tls_model("initial-exec"))) struct {
    uint64_t tstate_id;
    uint64_t generation;
    PyObject *buffer; /* borrowed: tls.events and the recorder's registry own it */
} t_cache;

#include "_speedups_pool.h"
#include "_speedups_records.h"
#include "_speedups_encoded.h"
#include "_speedups_events.h"
#include "_speedups_sources.h"
#include "_speedups_parents.h"
#include "_speedups_begin.h"
#include "_speedups_wrapper.h"
#include "_speedups_functions.h"
#include "_speedups_table.h"
#include "_speedups_strands.h"
#include "_speedups_strand_ends.h"
#include "_speedups_handlers.h"
#include "_speedups_stacks.h"
#include "_speedups_send.h"

static PyObject *
after_fork(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    rng_seed();
    g_generation++;
    t_cache.buffer = NULL;
    pool_release(); /* the parent's blocks: the child's takes map their own */
    reap_leases(1); /* the parent's messages: no I/O thread of the child's holds them */
    Py_RETURN_NONE;
}

static PyObject *
release_pool(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    pool_release();
    Py_RETURN_NONE;
}

static PyObject *
pool_bytes(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromSize_t(g_pool_bytes);
}

/* gc.callbacks entry (before 3.12): a collection starts or stops on this thread. */
static PyObject *
gc_phase(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs >= 1 && PyUnicode_Check(args[0])) {
        int start = PyUnicode_CompareWithASCIIString(args[0], "start") == 0;
        g_collecting = start ? PyThreadState_GetID(PyThreadState_Get()) : 0;
    }
    Py_RETURN_NONE;
}

static PyMethodDef module_methods[] = {
    {"set_refill", set_refill, METH_O,
     "set_refill(callback): callback(buffer, current) when a Start finds its buffer at its "
     "limit returns whether it may record (None: no limit): False also says that the same "
     "sequence's next calls are refused too until budget_changed()"},
    {"budget_changed", budget_changed, METH_NOARGS,
     "The memory bound gave memory back: the refusals remembered since are asked again."},
    {"overflowed", overflowed, METH_NOARGS,
     "The calls run untraced past the memory bound that C counted, since the process started."},
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
    {"untracked_into", (PyCFunction)(void (*)(void))untracked_into, METH_FASTCALL,
     "untracked_into(encode_into, obj, buffer, /): encode_into(obj, buffer) into a bytearray "
     "the tracer keeps, which tracemalloc forgets at once, its memory too."},
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
    {"after_fork", after_fork, METH_NOARGS,
     "In a forked child: reseed, forget cached buffers, unmap the parent's kept blocks."},
    {"release_pool", release_pool, METH_NOARGS,
     "Unmap the blocks kept for the next takes' encodings (an idle process gives them back)."},
    {"pool_bytes", pool_bytes, METH_NOARGS, "The bytes of the blocks kept for the next takes."},
    {"hold_stacks", (PyCFunction)(void (*)(void))hold_stacks, METH_FASTCALL,
     "hold_stacks(frames, depth): the frames of the stacks of sys._current_frames()'s result, "
     "made now and held in a list (at most depth a stack, the calling thread's left out)."},
    {"stack_ids", (PyCFunction)(void (*)(void))stack_ids, METH_FASTCALL,
     "stack_ids(frames, known, intern, max_depth): (frame ids, lines) of a sampled stack, "
     "outermost first, from a frame and its callers or a list of frames innermost first; ids by "
     "id(code) in known, else intern(code); 0 (the tracer's own) left out; max_depth kept."},
    {"strand_key_of", strand_key_of, METH_O,
     "strand_key_of(generator or coroutine): its strand's key in the C handlers' table."},
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
    {"send_body", (PyCFunction)(void (*)(void))send_body, METH_FASTCALL,
     "send_body(socket, header, body): header, then body without a copy (held until libzmq is "
     "done with it), as one message; None when ZeroMQ took it, else its errno (EAGAIN: no room)."},
    {"zero_copy_available", zero_copy_available, METH_NOARGS,
     "Whether send_body can be used: libzmq 4.1 or later is loaded (by pyzmq)."},
    {"reap_sent", reap_sent, METH_NOARGS,
     "Let go of the bodies libzmq is done with (their buffers can be reused)."},
    {"leased_bodies", leased_bodies, METH_NOARGS,
     "The bodies send_body gave ZeroMQ that reap_sent has not let go of yet."},
    {"nothing", (PyCFunction)(void (*)(void))nothing, METH_FASTCALL,
     "nothing(*args): None, doing nothing: the floor benchmarks' hook, called as the handlers are."},
    {"gc_phase", (PyCFunction)(void (*)(void))gc_phase, METH_FASTCALL,
     "gc_phase(phase, info): a gc.callbacks entry: while a collection runs on a thread (before "
     "3.12), its handlers write no ContextVar."},
    {NULL},
};

#if PY_VERSION_HEX < 0x030C0000
/* gc_phase joins gc.callbacks (see g_collecting). */
static int
watch_collections(PyObject *module)
{
    PyObject *gc = PyImport_ImportModule("gc");
    PyObject *callbacks = gc == NULL ? NULL : PyObject_GetAttrString(gc, "callbacks");
    PyObject *phase = callbacks == NULL ? NULL : PyObject_GetAttrString(module, "gc_phase");
    int result = phase == NULL || !PyList_Check(callbacks) ? -1 : PyList_Append(callbacks, phase);
    Py_XDECREF(phase);
    Py_XDECREF(callbacks);
    Py_XDECREF(gc);
    return result;
}
#endif

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
        || PyType_Ready(&EncodedEventsType) < 0 || PyType_Ready(&MonitorHookType) < 0
        || PyType_Ready(&StrandType) < 0 || PyType_Ready(&StrandTableType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&speedups_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddObjectRef(module, "TracedFunction", (PyObject *)&TracedFunctionType) < 0
        || PyModule_AddObjectRef(module, "EventBuffer", (PyObject *)&EventBufferType) < 0
        || PyModule_AddObjectRef(module, "EncodedEvents", (PyObject *)&EncodedEventsType) < 0
        || PyModule_AddObjectRef(module, "StrandTable", (PyObject *)&StrandTableType) < 0
        || PyModule_AddIntConstant(module, "INTERFACE", SPEEDUPS_INTERFACE) < 0
        || add_hooks(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
#if PY_VERSION_HEX < 0x030C0000
    if (watch_collections(module) < 0) {
        Py_DECREF(module);
        return NULL;
    }
#endif
    rng_seed();
    return module;
}
