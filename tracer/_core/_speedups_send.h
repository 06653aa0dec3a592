/* tracer._core._speedups, one of its parts: batch bodies handed to ZeroMQ without a copy.
 * Included once, in order, by _speedups.c (one translation unit: the parts share its static
 * state and helpers); see _speedups.c for the whole.
 *
 * pyzmq's send copies a body (a megabyte for a batch of 32,768 events) into a message libzmq
 * allocates: memory the C library has just mapped, or a heap top ZeroMQ's I/O thread gave back
 * when it freed the last one, so every page of it is a page fault on first write (measured: 6-10
 * faults and about 20 ns of the sender's time per traced call; docs/performance.md). pyzmq's own
 * zero-copy send needs a garbage-collector thread of its own, which it stops at exit before the
 * tracer's last flush. So the sender gives libzmq the body itself (zmq_msg_init_data): a lease
 * holds the body (a buffer export: a bytearray cannot be resized or freed meanwhile) until
 * libzmq's free function, run on its I/O thread without the GIL, marks the lease done; the
 * sender lets done leases go (reap_sent) before it encodes the next body, so the body's buffer
 * is reused once ZeroMQ is done with it (tracer/_shipping/bodies.py counts its references).
 *
 * libzmq is the one pyzmq loaded: its functions are looked up in the process (dlsym, then the
 * loaded objects whose name says libzmq), never linked, so a pyzmq built another way only means
 * the copying send (zero_copy_available() says False). */

#include <dlfcn.h>
#include <stdatomic.h>
#ifdef __linux__
#include <link.h>
#endif

#define ZMQ_DONTWAIT_FLAG 1
#define ZMQ_SNDMORE_FLAG 2

typedef struct {
    _Alignas(8) unsigned char opaque[64]; /* zmq_msg_t: 64 bytes in 4.3, none larger */
} ZmqMessage;

typedef void ZmqFree(void *data, void *hint);

static struct {
    int looked; /* 1: found; 0: not yet */
    int (*msg_init_data)(ZmqMessage *, void *, size_t, ZmqFree *, void *);
    int (*msg_send)(ZmqMessage *, void *, int);
    int (*msg_close)(ZmqMessage *);
    int (*send)(void *, const void *, size_t, int);
    int (*last_errno)(void);
} g_zmq;

typedef struct Lease {
    struct Lease *next;
    Py_buffer view;   /* the body, exported: it stays as it is while ZeroMQ holds it */
    atomic_int done;  /* set by libzmq's free function (its I/O thread, no GIL) */
} Lease;

static Lease *g_leases; /* changed with the GIL held only */

#ifdef __linux__
static int
find_libzmq(struct dl_phdr_info *info, size_t size, void *found)
{
    if (info->dlpi_name != NULL && strstr(info->dlpi_name, "libzmq") != NULL) {
        *(void **)found = dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD);
        return *(void **)found != NULL;
    }
    return 0;
}
#endif

static void *
zmq_symbol(void *library, const char *name)
{
    void *symbol = dlsym(RTLD_DEFAULT, name);
    return symbol != NULL || library == NULL ? symbol : dlsym(library, name);
}

/* libzmq's functions, looked up once. 1 when they are there (libzmq 4.1 or later). */
static int
zmq_found(void)
{
    if (g_zmq.looked) {
        return 1;
    }
    void *library = NULL;
#ifdef __linux__
    dl_iterate_phdr(find_libzmq, &library); /* pyzmq's wheels load theirs locally */
#endif
    void (*version)(int *, int *, int *) = zmq_symbol(library, "zmq_version");
    g_zmq.msg_init_data = zmq_symbol(library, "zmq_msg_init_data");
    g_zmq.msg_send = zmq_symbol(library, "zmq_msg_send");
    g_zmq.msg_close = zmq_symbol(library, "zmq_msg_close");
    g_zmq.send = zmq_symbol(library, "zmq_send");
    g_zmq.last_errno = zmq_symbol(library, "zmq_errno");
    int major = 0, minor = 0, patch = 0;
    if (version != NULL) {
        version(&major, &minor, &patch);
    }
    int found = g_zmq.msg_init_data != NULL && g_zmq.msg_send != NULL && g_zmq.msg_close != NULL
                && g_zmq.send != NULL && g_zmq.last_errno != NULL
                && (major > 4 || (major == 4 && minor >= 1));
    g_zmq.looked = found; /* not found: looked for again next time (pyzmq loads later) */
    return found;
}

/* libzmq's free function for a leased body: ZeroMQ is done with it. */
static void
lease_done(void *data, void *hint)
{
    atomic_store_explicit(&((Lease *)hint)->done, 1, memory_order_release);
}

/* Let the done leases go (their bodies' exports and references). With the GIL held. */
static void
reap_leases(int all)
{
    Lease **link = &g_leases;
    while (*link != NULL) {
        Lease *lease = *link;
        if (all || atomic_load_explicit(&lease->done, memory_order_acquire)) {
            *link = lease->next;
            PyBuffer_Release(&lease->view);
            free(lease);
        }
        else {
            link = &lease->next;
        }
    }
}

static PyObject *
zero_copy_available(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    return PyBool_FromLong(zmq_found());
}

static PyObject *
reap_sent(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    reap_leases(0);
    Py_RETURN_NONE;
}

static PyObject *
leased_bodies(PyObject *module, PyObject *Py_UNUSED(ignored))
{
    Py_ssize_t count = 0;
    for (Lease *lease = g_leases; lease != NULL; lease = lease->next) {
        count++;
    }
    return PyLong_FromSsize_t(count);
}

/* send_body(socket, header, body): header then body as one message, neither waiting nor copying
 * the body. None when ZeroMQ took it, else ZeroMQ's errno (EAGAIN: no room, or no connection). */
static PyObject *
send_body(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyLong_Check(args[0]) || !PyBytes_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "send_body(socket, header, body): a socket's address");
        return NULL;
    }
    if (!zmq_found()) {
        PyErr_SetString(PyExc_RuntimeError, "send_body: libzmq's functions are not loaded");
        return NULL;
    }
    void *socket = PyLong_AsVoidPtr(args[0]);
    if (socket == NULL) {
        return PyErr_Occurred() ? NULL : PyErr_Format(PyExc_ValueError, "no socket at 0");
    }
    reap_leases(0);
    Lease *lease = calloc(1, sizeof(Lease));
    if (lease == NULL) {
        return PyErr_NoMemory();
    }
    if (PyObject_GetBuffer(args[2], &lease->view, PyBUF_SIMPLE) < 0) {
        free(lease);
        return NULL;
    }
    if (g_zmq.send(socket, PyBytes_AS_STRING(args[1]), (size_t)PyBytes_GET_SIZE(args[1]),
                   ZMQ_DONTWAIT_FLAG | ZMQ_SNDMORE_FLAG)
        < 0) {
        int error = g_zmq.last_errno();
        PyBuffer_Release(&lease->view);
        free(lease);
        return PyLong_FromLong(error);
    }
    ZmqMessage message;
    if (g_zmq.msg_init_data(&message, lease->view.buf, (size_t)lease->view.len, lease_done, lease)
        < 0) {
        /* never seen (init_data only fails without memory); the header is out: end the message
         * with an empty frame, which the repository rejects and counts */
        int error = g_zmq.last_errno();
        (void)g_zmq.send(socket, "", 0, ZMQ_DONTWAIT_FLAG);
        PyBuffer_Release(&lease->view);
        free(lease);
        return PyLong_FromLong(error);
    }
    lease->next = g_leases; /* from here libzmq calls lease_done once, whatever happens */
    g_leases = lease;
    if (g_zmq.msg_send(&message, socket, ZMQ_DONTWAIT_FLAG) < 0) {
        /* a message's later parts are not refused once its first is taken, but for a socket
         * closed meanwhile: the message is not sent, its close runs the free function */
        int error = g_zmq.last_errno();
        (void)g_zmq.msg_close(&message);
        return PyLong_FromLong(error);
    }
    Py_RETURN_NONE;
}
