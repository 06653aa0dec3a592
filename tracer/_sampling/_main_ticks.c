/* The main thread samples itself, exactly where it is, when the sampler asks: see _main_ticks.pyi.
 *
 * A sampler thread that reads the main thread's stack (sys._current_frames) must hold the GIL,
 * and a running thread gives the GIL up only where it blocks or every switch interval (5 ms):
 * the sampler sees it at those points, not where it spends its time. An asyncio loop releases
 * the GIL in select() between task steps, so the sampler saw the loop, and the steps it caught
 * belonged to whichever task ran when a switch interval happened to expire.
 *
 * Here a thread of our own, which never takes the GIL (the sampler thread may wait for it for
 * long: a main thread that releases it for microseconds at a time wins it back each time), asks
 * the main thread at every tick to run a callback (Py_AddPendingCall needs neither the GIL nor
 * a thread state). The main thread runs it at its next eval-breaker check, within a few bytecodes when
 * it runs Python, and when it returns from a blocking call otherwise: the callback is given the
 * frame the main thread was in, exact in both cases. No signal is involved: none of the
 * program's system calls is interrupted, and its signal handlers and wakeup fd see nothing. At
 * most one request is outstanding, from the moment it is queued until the callback returns;
 * ticks that fall while it waits (the main thread is blocked) are counted and handed to the
 * callback, which credits them to the stack it finds. The callback runs hidden from other
 * tools' trace and profile functions and sys.monitoring callbacks (see run_in_main).
 */
#define PY_SSIZE_T_CLEAN
#include <patchlevel.h>
#if PY_VERSION_HEX < 0x030D0000
/* Before 3.13, the interpreter state's layout, for its eval breaker (see wake_main): the
   internal headers need the core's view of Python.h, which is the same API at the same ABI. */
#  define Py_BUILD_CORE_MODULE 1
#endif
#include <Python.h>
#if PY_VERSION_HEX < 0x030D0000
#  include "internal/pycore_interp.h"
#endif

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "_waits.h"

#if PY_VERSION_HEX < 0x030D0000
#  define Py_IsFinalizing _Py_IsFinalizing
#endif

typedef struct {
    PyObject_HEAD
    PyObject *callback; /* callback(frame, skipped), in the main thread */
    pthread_mutex_t mutex;
    pthread_cond_t cond;
    pthread_t thread;
    pid_t owner;           /* the process that started the thread (a forked child has none) */
    int running;           /* under the GIL: the thread was started and not yet joined */
    int stopping;          /* under mutex: stop() was called */
    int release_on_run;    /* under the GIL: the queued request drops the thread's reference */
    atomic_llong interval_ns; /* the mean interval between ticks (exponentially distributed) */
    atomic_int outstanding; /* a request is queued and has not finished running */
    atomic_long skipped;    /* ticks that fell while one was queued */
    atomic_long requests;   /* requests queued */
    atomic_llong asked_ns;  /* CLOCK_MONOTONIC when the outstanding request was queued */
    uint64_t random;        /* the thread's xorshift state */
} Ticks;

/* Make the main thread look at its pending calls at its next eval-breaker check.
 *
 * Python 3.13 does so when a call is added from any thread. Before 3.13 the eval breaker is one
 * flag for the interpreter, recomputed by whichever thread adds the call, and set only if that
 * thread may run pending calls: from here, it stays off, and the main thread sees the call only
 * when it next takes the GIL (after select(), again). Setting the flag is what a GIL drop request
 * does; a thread other than the main one that sees it finds nothing to do and goes on (until the
 * next GIL switch recomputes the flag, it looks again at each check). */
static void
wake_main(void)
{
#if PY_VERSION_HEX < 0x030D0000
    PyInterpreterState *interp = PyInterpreterState_Main();
    _Py_atomic_store_relaxed(&interp->ceval.eval_breaker, 1);
#endif
}

static int
run_in_main(void *arg)
{
    /* In the main thread, GIL held, from the eval loop's pending calls. */
    Ticks *self = (Ticks *)arg;
    long skipped = atomic_exchange(&self->skipped, 0);
    int status = 0;
    PyObject *callback = self->callback;
    PyFrameObject *frame = PyEval_GetFrame(); /* borrowed: where the main thread was */
    if (callback != NULL && frame != NULL && !self->release_on_run) {
        Py_INCREF(callback);
        /* Another tool's trace or profile function (coverage, a debugger, cProfile, VizTracer)
           and its sys.monitoring callbacks do not see the tick: it is the tracer's, not the
           program's (a debugger would step into it), and under a trace function it cost the
           program 2-3 times as much. It is also what kept 3.11 from spinning: a frame entered
           under a trace function while a pending call waits, inside a pending call (which may
           not run another), checks the eval breaker at its RESUME again and again, for ever. */
        PyThreadState *tstate = PyThreadState_Get();
        PyThreadState_EnterTracing(tstate);
        PyObject *result = PyObject_CallFunction(callback, "Ol", (PyObject *)frame, skipped);
        PyThreadState_LeaveTracing(tstate);
        if (result != NULL) {
            Py_DECREF(result);
        }
        else if (PyErr_ExceptionMatches(PyExc_Exception)) {
            PyErr_Clear(); /* the callback reports its own errors: none reaches the program */
        }
        else {
            status = -1; /* KeyboardInterrupt and the like: raised where the program was */
        }
        Py_DECREF(callback);
    }
    /* Only now may the next request be queued: one queued while the callback ran would run
       straight after it in the same pass over the pending calls, and again after that one
       whenever a tick takes longer than the interval (a slow machine, another tool's hook),
       so the main thread would do nothing else. The ticks that fell meanwhile are the tick's
       own time, not the program's: none is counted. */
    atomic_store(&self->skipped, 0);
    atomic_store(&self->outstanding, 0);
    if (self->release_on_run) { /* stopped while this request was queued */
        self->release_on_run = 0;
        Py_DECREF(self);
    }
    return status;
}

/* An exponentially distributed wait, capped at 2 intervals (so a phase's edges are never more
 * than that off), averaging 0.86 of one: the ticks are close to a Poisson process, as likely at
 * any instant as at any other whatever the program's rhythm, so that the share of ticks a
 * periodic phase gets is its share of the time, independently from tick to tick. */
static long long
jittered(Ticks *self)
{
    uint64_t x = self->random;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    self->random = x;
    long long interval = atomic_load(&self->interval_ns);
    double uniform = ((double)(x >> 11) + 0.5) / 9007199254740992.0; /* in (0, 1) */
    double wait = -log(uniform) * (double)interval;
    if (wait > 2.0 * (double)interval) {
        wait = 2.0 * (double)interval;
    }
    return (long long)wait;
}

static void
ask_main(Ticks *self)
{
    if (atomic_exchange(&self->outstanding, 1)) {
        /* The main thread has not run the last one: it is blocked (it recomputes the eval
           breaker itself when it takes the GIL back). Poking it again would only send the other
           threads through the eval loop's slow path until their next GIL switch. */
        atomic_fetch_add(&self->skipped, 1);
        return;
    }
    /* Stored before the request is queued, read by the callback while it runs: a main thread
       blocked in a call answers when the call returns, in the frame it was in when asked. */
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    atomic_store(&self->asked_ns, (long long)now.tv_sec * 1000000000LL + now.tv_nsec);
    if (Py_AddPendingCall(run_in_main, self) == 0) {
        atomic_fetch_add(&self->requests, 1);
        wake_main();
    }
    else { /* the queue is full: this tick is skipped */
        atomic_store(&self->outstanding, 0);
        atomic_fetch_add(&self->skipped, 1);
    }
}

static void *
ticker(void *arg)
{
    Ticks *self = (Ticks *)arg; /* kept alive by the reference start() took */
    pthread_mutex_lock(&self->mutex);
    while (!self->stopping) {
        long long delay_ns = jittered(self);
        struct timespec deadline = deadline_in(delay_ns);
        if (!wait_until(&self->cond, &self->mutex, &self->stopping, &deadline) &&
            !Py_IsFinalizing()) {
            ask_main(self);
        }
    }
    pthread_mutex_unlock(&self->mutex);
    return NULL;
}

static PyObject *
Ticks_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    PyObject *callback;
    static char *names[] = {"callback", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O:Ticks", names, &callback)) {
        return NULL;
    }
    if (!PyCallable_Check(callback)) {
        PyErr_SetString(PyExc_TypeError, "callback must be callable");
        return NULL;
    }
    Ticks *self = (Ticks *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    waits_init(&self->mutex, &self->cond);
    Py_INCREF(callback);
    self->callback = callback;
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    self->random = ((uint64_t)now.tv_nsec << 20) ^ (uint64_t)getpid() ^ (uint64_t)(uintptr_t)self;
    if (self->random == 0) {
        self->random = 0x9E3779B97F4A7C15ULL;
    }
    return (PyObject *)self;
}

static PyObject *
Ticks_start(Ticks *self, PyObject *arg)
{
    long long interval_ns = PyLong_AsLongLong(arg);
    if (interval_ns == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (interval_ns <= 0) {
        PyErr_SetString(PyExc_ValueError, "interval_ns must be positive");
        return NULL;
    }
    if (self->running || self->stopping) {
        PyErr_SetString(PyExc_RuntimeError, "a Ticks starts once");
        return NULL;
    }
    atomic_store(&self->interval_ns, interval_ns);
    self->owner = getpid();
    Py_INCREF(self); /* the thread's */
    int error = pthread_create(&self->thread, NULL, ticker, self);
    if (error != 0) {
        Py_DECREF(self);
        errno = error;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    self->running = 1;
    Py_RETURN_NONE;
}

/* Stop and join the thread (GIL released); idempotent; nothing in a forked child. */
static void
stop_ticker(Ticks *self)
{
    if (!self->running) {
        return;
    }
    self->running = 0;
    if (self->owner != getpid()) {
        return; /* a child of a fork: the thread and its reference stayed in the parent */
    }
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mutex);
    self->stopping = 1;
    pthread_cond_broadcast(&self->cond);
    pthread_mutex_unlock(&self->mutex);
    pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS
    if (atomic_load(&self->outstanding)) {
        self->release_on_run = 1; /* the queued request holds the object until it runs */
    }
    else {
        Py_DECREF(self);
    }
}

static PyObject *
Ticks_stop(Ticks *self, PyObject *unused)
{
    stop_ticker(self);
    Py_RETURN_NONE;
}

static int
Ticks_traverse(Ticks *self, visitproc visit, void *arg)
{
    Py_VISIT(self->callback);
    return 0;
}

static int
Ticks_clear(Ticks *self)
{
    Py_CLEAR(self->callback);
    return 0;
}

static void
Ticks_dealloc(Ticks *self)
{
    /* Never while the thread runs: it holds a reference. */
    PyObject_GC_UnTrack(self);
    Ticks_clear(self);
    pthread_cond_destroy(&self->cond);
    pthread_mutex_destroy(&self->mutex);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *
Ticks_get_interval(Ticks *self, void *closure)
{
    return PyLong_FromLongLong(atomic_load(&self->interval_ns));
}

static int
Ticks_set_interval(Ticks *self, PyObject *value, void *closure)
{
    if (value == NULL) {
        PyErr_SetString(PyExc_AttributeError, "interval_ns cannot be deleted");
        return -1;
    }
    long long interval_ns = PyLong_AsLongLong(value);
    if (interval_ns == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (interval_ns <= 0) {
        PyErr_SetString(PyExc_ValueError, "interval_ns must be positive");
        return -1;
    }
    atomic_store(&self->interval_ns, interval_ns);
    return 0;
}

static PyObject *
Ticks_requests(Ticks *self, void *closure)
{
    return PyLong_FromLong(atomic_load(&self->requests));
}

static PyMethodDef Ticks_methods[] = {
    {"start", (PyCFunction)Ticks_start, METH_O,
     "start(interval_ns): start the thread that asks the main thread, about every interval, to "
     "run the callback (never while it has not run the last request)."},
    {"stop", (PyCFunction)Ticks_stop, METH_NOARGS,
     "stop(): stop the thread and wait for it; no request is made after. Idempotent."},
    {NULL},
};

static PyObject *
Ticks_asked(Ticks *self, void *closure)
{
    return PyLong_FromLongLong(atomic_load(&self->asked_ns));
}

static PyGetSetDef Ticks_getset[] = {
    {"interval_ns", (getter)Ticks_get_interval, (setter)Ticks_set_interval,
     "the mean interval between ticks; may change while the thread runs", NULL},
    {"requests", (getter)Ticks_requests, NULL, "requests made so far", NULL},
    {"asked_ns", (getter)Ticks_asked, NULL,
     "when the latest request was queued (CLOCK_MONOTONIC, time.perf_counter_ns's clock)", NULL},
    {NULL},
};

static PyTypeObject TicksType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracer._sampling._main_ticks.Ticks",
    .tp_basicsize = sizeof(Ticks),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "Ticks(callback): a thread that asks the main thread to sample itself.",
    .tp_new = Ticks_new,
    .tp_dealloc = (destructor)Ticks_dealloc,
    .tp_traverse = (traverseproc)Ticks_traverse,
    .tp_clear = (inquiry)Ticks_clear,
    .tp_methods = Ticks_methods,
    .tp_getset = Ticks_getset,
};

static struct PyModuleDef main_ticks_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tracer._sampling._main_ticks",
    .m_doc = "The main thread samples itself when the sampler asks (Py_AddPendingCall).",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__main_ticks(void)
{
    if (PyType_Ready(&TicksType) < 0) {
        return NULL;
    }
    PyObject *module = PyModule_Create(&main_ticks_module);
    if (module == NULL) {
        return NULL;
    }
    Py_INCREF(&TicksType);
    if (PyModule_AddObject(module, "Ticks", (PyObject *)&TicksType) < 0) {
        Py_DECREF(&TicksType);
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
