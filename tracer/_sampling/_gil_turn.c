/* The sampler thread takes its turn at the GIL when its tick is due: see _gil_turn.pyi.
 *
 * A thread that wants the GIL waits for its holder to release it; only after a whole switch
 * interval (5 ms) without a switch does it ask the holder to drop it. A thread that releases the
 * GIL for microseconds at a time and takes it straight back (an event loop's select() between
 * task steps, short reads and writes) resets that wait every time: the waiter is woken, finds
 * the GIL taken again, and starts another interval. A sampler thread behind such a thread ticked
 * 7 times in 700 ms at a 1 ms interval, and what it saw was the thread at its GIL releases.
 *
 * So when the sampler's tick is due, Turn.wait() asks the holder to drop the GIL at once, as a
 * waiter whose interval expired does (the GIL drop request), and takes it: the holder gives it up
 * at its next eval-breaker check, exactly where it is, and waits until another thread has it.
 * A third thread may take it first (the sender, waking), and taking the GIL clears the request;
 * and the sampler thread may lose the GIL again before its next wait (a waiter whose interval
 * expired asks whoever holds it then), and take it back like any thread: starved again, for
 * seconds in tests. So a thread of the Turn's own, which never takes the GIL, repeats the
 * request every NUDGE_NS from the end of one wait() to the start of the next (``want``),
 * whenever the GIL is held by another thread than the sampler thread. A request is made only
 * under the GIL's own mutex: the sampler thread clears ``want`` holding the GIL, before it
 * releases it in wait(); so a request is either honoured by the sampler thread taking the GIL
 * or cleared when it does, and a holder is never left waiting for a switch nobody makes but
 * while the sampler thread is blocked on something other than the GIL between two waits
 * (nothing is, but the sampler's own lock for a moment). The sampler stops the Turn when it
 * ends, however it ends.
 */
#define PY_SSIZE_T_CLEAN
#define Py_BUILD_CORE_MODULE 1 /* the GIL's state: CPython's internal headers */
#include <Python.h>
#include "internal/pycore_interp.h"
#if PY_VERSION_HEX >= 0x030D0000
#  include "internal/pycore_ceval.h"
#endif
#if PY_VERSION_HEX < 0x030C0000
#  include "internal/pycore_runtime.h"
#endif
#include "internal/pycore_gil.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "_waits.h"

#if PY_VERSION_HEX < 0x030D0000
#  define Py_IsFinalizing _Py_IsFinalizing
#endif

#define NUDGE_NS 1000000L /* how often the request is repeated while the sampler thread waits */

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mutex;
    pthread_cond_t cond;        /* stop() was called; the sampler thread wants the GIL */
    int stopping;               /* under mutex */
    int nudging;                /* under the GIL: the nudger thread was started, not joined */
    pthread_t nudger;
    atomic_int want;            /* the sampler thread waits for the GIL */
    PyThreadState *waiter;      /* the sampler thread's state, while ``want`` */
    pid_t owner;  /* the process that made it: a forked child's copy of the mutex may be held */
} Turn;

static struct _gil_runtime_state *
the_gil(void)
{
#if PY_VERSION_HEX >= 0x030C0000
    return PyInterpreterState_Main()->ceval.gil;
#else
    return &_PyRuntime.ceval.gil;
#endif
}

/* Ask the GIL's holder to drop it at its next eval-breaker check, as take_gil() does when its
 * wait times out: under the GIL's mutex, only while the GIL is held by a thread other than
 * ``waiter`` (then its last holder is the thread holding it, alive) and ``waiter`` wants it. */
static void
request_drop(Turn *self, PyThreadState *waiter)
{
#ifdef Py_GIL_DISABLED
    return; /* a free-threaded build: no GIL to wait for */
#endif
    struct _gil_runtime_state *gil = the_gil();
    if (gil == NULL || Py_IsFinalizing()) {
        return; /* a finalizing interpreter may never let the waiter take the GIL */
    }
    pthread_mutex_lock(&gil->mutex);
#if PY_VERSION_HEX >= 0x030D0000
    PyThreadState *holder = (PyThreadState *)_Py_atomic_load_ptr_relaxed(&gil->last_holder);
    if (atomic_load(&self->want) && _Py_atomic_load_int_relaxed(&gil->locked) &&
        holder != NULL && holder != waiter) {
        _Py_set_eval_breaker_bit(holder, _PY_GIL_DROP_REQUEST_BIT);
    }
#else
    PyThreadState *holder = (PyThreadState *)_Py_atomic_load_relaxed(&gil->last_holder);
    if (atomic_load(&self->want) && _Py_atomic_load_relaxed(&gil->locked) && holder != waiter) {
        PyInterpreterState *interp = PyInterpreterState_Main();
        _Py_atomic_store_relaxed(&interp->ceval.gil_drop_request, 1);
        _Py_atomic_store_relaxed(&interp->ceval.eval_breaker, 1);
    }
#endif
    pthread_mutex_unlock(&gil->mutex);
}

/* The nudger thread: while the sampler thread wants the GIL, ask for it every NUDGE_NS. */
static void *
nudger(void *arg)
{
    Turn *self = (Turn *)arg; /* outlives the thread: dealloc joins it */
    pthread_mutex_lock(&self->mutex);
    while (!self->stopping) {
        if (!atomic_load(&self->want)) {
            pthread_cond_wait(&self->cond, &self->mutex);
            continue;
        }
        PyThreadState *waiter = self->waiter;
        pthread_mutex_unlock(&self->mutex);
        request_drop(self, waiter);
        pthread_mutex_lock(&self->mutex);
        struct timespec next = deadline_in(NUDGE_NS);
        if (!self->stopping && atomic_load(&self->want)) {
            pthread_cond_timedwait(&self->cond, &self->mutex, &next);
        }
    }
    pthread_mutex_unlock(&self->mutex);
    return NULL;
}

/* Stop the nudger and, when ``join`` (the caller took the join on itself, holding the GIL, so
 * that only one caller joins), wait for it; without the GIL when the caller holds none. */
static void
stop_nudger(Turn *self, int join)
{
    pthread_mutex_lock(&self->mutex);
    self->stopping = 1;
    pthread_cond_broadcast(&self->cond);
    pthread_mutex_unlock(&self->mutex);
    if (join) {
        pthread_join(self->nudger, NULL);
    }
}

static PyObject *
Turn_new(PyTypeObject *type, PyObject *args, PyObject *kwargs)
{
    static char *names[] = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, ":Turn", names)) {
        return NULL;
    }
    Turn *self = (Turn *)type->tp_alloc(type, 0);
    if (self == NULL) {
        return NULL;
    }
    waits_init(&self->mutex, &self->cond);
    self->owner = getpid();
    return (PyObject *)self;
}

static PyObject *
Turn_wait(Turn *self, PyObject *arg)
{
    long long timeout_ns = PyLong_AsLongLong(arg);
    if (timeout_ns == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (timeout_ns < 0) {
        timeout_ns = 0;
    }
    if (self->owner != getpid()) {
        Py_RETURN_TRUE; /* a forked child has no sampler thread of its parent's */
    }
    if (!self->nudging && !self->stopping) {
        int error = pthread_create(&self->nudger, NULL, nudger, self);
        if (error != 0) {
            errno = error;
            return PyErr_SetFromErrno(PyExc_OSError);
        }
        self->nudging = 1;
    }
    PyThreadState *waiter = PyThreadState_Get();
    atomic_store(&self->want, 0); /* before this thread releases the GIL */
    int stopping;
    Py_BEGIN_ALLOW_THREADS
    struct timespec deadline = deadline_in(timeout_ns);
    pthread_mutex_lock(&self->mutex);
    stopping = wait_until(&self->cond, &self->mutex, &self->stopping, &deadline);
    if (!stopping) {
        self->waiter = waiter;
        atomic_store(&self->want, 1);
        pthread_cond_broadcast(&self->cond);
    }
    pthread_mutex_unlock(&self->mutex);
    if (!stopping) {
        request_drop(self, waiter); /* at once; the nudger repeats it */
    }
    Py_END_ALLOW_THREADS /* takes the GIL; ``want`` stays until the next wait */
    return PyBool_FromLong(stopping);
}

static PyObject *
Turn_stop(Turn *self, PyObject *unused)
{
    if (self->owner != getpid()) {
        Py_RETURN_NONE;
    }
    int join = self->nudging; /* the sampler thread, at its end, and shutdown may both stop it */
    self->nudging = 0;
    Py_BEGIN_ALLOW_THREADS
    stop_nudger(self, join);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static void
Turn_dealloc(Turn *self)
{
    if (self->owner == getpid()) {
        stop_nudger(self, self->nudging); /* a moment: the nudger never takes the GIL */
        self->nudging = 0;
    }
    pthread_cond_destroy(&self->cond);
    pthread_mutex_destroy(&self->mutex);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Turn_methods[] = {
    {"wait", (PyCFunction)Turn_wait, METH_O,
     "wait(timeout_ns) -> stopped: wait without the GIL until the timeout or stop(), then take "
     "the GIL at once (its holder drops it at its next check); True when stop() was called."},
    {"stop", (PyCFunction)Turn_stop, METH_NOARGS,
     "stop(): wake wait() now and make every later wait() return True at once."},
    {NULL},
};

static PyTypeObject TurnType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "tracer._sampling._gil_turn.Turn",
    .tp_basicsize = sizeof(Turn),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Turn(): the sampler thread's wait for its next tick, which ends holding the GIL.",
    .tp_new = Turn_new,
    .tp_dealloc = (destructor)Turn_dealloc,
    .tp_methods = Turn_methods,
};

static struct PyModuleDef gil_turn_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tracer._sampling._gil_turn",
    .m_doc = "The sampler thread takes its turn at the GIL when its tick is due.",
    .m_size = -1,
};

PyMODINIT_FUNC
PyInit__gil_turn(void)
{
    PyObject *module = PyModule_Create(&gil_turn_module);
    if (module != NULL && PyModule_AddType(module, &TurnType) < 0) {
        Py_CLEAR(module);
    }
    return module;
}
