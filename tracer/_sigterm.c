/* SIGTERM wakes the tracer's watchdog through a pipe of its own: see _sigterm.pyi.
 *
 * Python runs a signal handler in the main thread between two bytecodes, so a SIGTERM that lands
 * just before the main thread blocks in a system call waits for that call to return, perhaps for
 * ever. The watchdog thread (tracer/_signals.py) acts at once instead, woken by a byte on its
 * pipe. That byte used to come from Python's signal wakeup fd, which is the process's: asyncio
 * and trio set their own, and trio refuses to run where it is taken. So the byte comes from
 * here: over the handler CPython installed for SIGTERM (the tracer's Python-level one), an
 * OS-level handler that writes the signal's number to the pipe and then calls CPython's, so that
 * the Python-level handler still runs as before. Nothing of the process changes but SIGTERM's
 * OS-level handler, which the tracer installs only where SIGTERM was at its default; a program
 * that installs a handler of its own (signal.signal) replaces both, as it replaced ours before.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <unistd.h>

static atomic_int wake_fd = -1;      /* the watchdog's pipe, write end; -1: none */
static struct sigaction previous;    /* CPython's action, called after the write */
static int hooked;                   /* under the GIL: ours is SIGTERM's OS-level handler */

static void
chained(int signum)
{
    int saved = errno; /* a handler must leave errno as it found it */
    int fd = atomic_load(&wake_fd);
    if (fd >= 0) {
        unsigned char byte = (unsigned char)signum;
        ssize_t written = write(fd, &byte, 1); /* non-blocking: a full pipe drops the byte */
        (void)written;
    }
    void (*handler)(int) = previous.sa_handler;
    if (handler != SIG_DFL && handler != SIG_IGN && handler != NULL) {
        handler(signum);
    }
    errno = saved;
}

/* Whether SIGTERM's OS-level handler is ours. */
static int
ours_installed(void)
{
    struct sigaction current;
    if (sigaction(SIGTERM, NULL, &current) != 0) {
        return 0;
    }
    return !(current.sa_flags & SA_SIGINFO) && current.sa_handler == chained;
}

static PyObject *
hook(PyObject *module, PyObject *arg)
{
    long value = PyLong_AsLong(arg);
    if (value == -1 && PyErr_Occurred()) {
        return NULL;
    }
    if (value < 0 || value > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "fd must be a file descriptor");
        return NULL;
    }
    int fd = (int)value;
    if (hooked && ours_installed()) {
        atomic_store(&wake_fd, fd);
        Py_RETURN_TRUE;
    }
    struct sigaction current;
    if (sigaction(SIGTERM, NULL, &current) != 0) {
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    if ((current.sa_flags & SA_SIGINFO) || current.sa_handler == SIG_DFL ||
        current.sa_handler == SIG_IGN) {
        Py_RETURN_FALSE; /* not a handler of CPython's: nothing to chain to */
    }
    struct sigaction wrapper = current;
    wrapper.sa_handler = chained;
    previous = current;
    atomic_store(&wake_fd, fd);
    if (sigaction(SIGTERM, &wrapper, NULL) != 0) {
        atomic_store(&wake_fd, -1);
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    hooked = 1;
    Py_RETURN_TRUE;
}

static PyObject *
unhook(PyObject *module, PyObject *unused)
{
    if (hooked && ours_installed()) {
        sigaction(SIGTERM, &previous, NULL);
    }
    hooked = 0;
    atomic_store(&wake_fd, -1); /* before the caller closes the pipe */
    Py_RETURN_NONE;
}

static PyObject *
is_hooked(PyObject *module, PyObject *unused)
{
    return PyBool_FromLong(hooked && ours_installed());
}

static PyMethodDef methods[] = {
    {"hook", hook, METH_O,
     "hook(fd): over CPython's SIGTERM handler, one that first writes the signal's number to "
     "fd; False where SIGTERM has no handler of CPython's. Again with another fd: that fd."},
    {"unhook", unhook, METH_NOARGS,
     "unhook(): CPython's handler back if ours is still installed; fd no longer written."},
    {"hooked", is_hooked, METH_NOARGS, "hooked(): whether ours is SIGTERM's OS-level handler."},
    {NULL},
};

static struct PyModuleDef sigterm_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "tracer._sigterm",
    .m_doc = "SIGTERM writes to the tracer's own pipe, then runs CPython's handler.",
    .m_size = -1,
    .m_methods = methods,
};

PyMODINIT_FUNC
PyInit__sigterm(void)
{
    return PyModule_Create(&sigterm_module);
}
