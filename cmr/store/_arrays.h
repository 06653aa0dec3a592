/* int64 columns handed to Python as `array.array('q')` (or 'Q') without a copy.
 *
 * A column is built in a buffer from PyMem_Malloc; `array.frombytes` then copied it into the
 * array's own buffer: for `cmr show` of a million calls, fifteen 8 MB columns copied into fresh
 * pages (a seventh of its time, most of it the kernel's page faults). Here the array takes the
 * buffer as its own (`ob_item`, freed by the array with PyMem_Free, as its own buffer is), when
 * the array type's layout is the one CPython 3.11-3.13 have: `arrays_init` checks it on an array
 * it makes (its size, its buffer, its exports) and, on any difference, every column is copied as
 * before. */

#ifndef INVOSEQ_ARRAYS_H
#define INVOSEQ_ARRAYS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct { /* CPython's arrayobject (Modules/arraymodule.c), 3.11 to 3.13 */
    PyObject_VAR_HEAD
    char *ob_item;
    Py_ssize_t allocated;
    const void *ob_descr;
    PyObject *weakreflist;
    Py_ssize_t ob_exports;
} ArrayLayout;

static PyObject *array_type; /* array.array, imported when the module is created */
static int array_adoptable;  /* the layout above is the array type's */

/* Imports array.array and checks its layout on an empty array and one of three items. */
static int arrays_init(void) {
    if (!array_type) {
        PyObject *module = PyImport_ImportModule("array");
        if (!module) return -1;
        array_type = PyObject_GetAttrString(module, "array");
        Py_DECREF(module);
        if (!array_type) return -1;
    }
    PyObject *empty = PyObject_CallFunction(array_type, "s", "q");
    PyObject *three = PyObject_CallFunction(array_type, "s(LLL)", "q", 7LL, 8LL, 9LL);
    if (!empty || !three) {
        Py_XDECREF(empty);
        Py_XDECREF(three);
        return -1;
    }
    Py_buffer view;
    int ok = PyType_Check(array_type) &&
             ((PyTypeObject *)array_type)->tp_basicsize == (Py_ssize_t)sizeof(ArrayLayout) &&
             ((ArrayLayout *)empty)->ob_item == NULL && ((ArrayLayout *)empty)->allocated == 0 &&
             PyObject_GetBuffer(three, &view, PyBUF_SIMPLE) == 0;
    if (ok) {
        const ArrayLayout *a = (const ArrayLayout *)three;
        ok = Py_SIZE(three) == 3 && a->ob_item == view.buf && view.len == 24 &&
             a->allocated >= 3 && a->ob_exports == 1 && ((const int64_t *)view.buf)[2] == 9;
        PyBuffer_Release(&view);
        ok = ok && a->ob_exports == 0;
    }
    PyErr_Clear(); /* a refused buffer only means copying */
    array_adoptable = ok;
    Py_DECREF(empty);
    Py_DECREF(three);
    return 0;
}

/* An array of `typecode` ('q' or 'Q') of the `n` 8-byte values at `data`, a buffer of
 * `allocated` values from PyMem_Malloc: the array's own buffer from now on, or (when the layout
 * is not the one expected) copied, then freed. Takes `data` in every case. */
static PyObject *array_adopt(const char *typecode, void *data, Py_ssize_t n, Py_ssize_t allocated) {
    PyObject *out = PyObject_CallFunction(array_type, "s", typecode);
    if (!out) {
        PyMem_Free(data);
        return NULL;
    }
    ArrayLayout *a = (ArrayLayout *)out;
    if (array_adoptable && a->ob_item == NULL && a->allocated == 0) {
        a->ob_item = data;
        a->allocated = data ? allocated : 0;
        Py_SET_SIZE(out, data ? n : 0);
        return out;
    }
    if (n) {
        PyObject *view = PyMemoryView_FromMemory((char *)data, n * 8, PyBUF_READ);
        PyObject *done = view ? PyObject_CallMethod(out, "frombytes", "O", view) : NULL;
        Py_XDECREF(view);
        if (!done) Py_CLEAR(out);
        Py_XDECREF(done);
    }
    PyMem_Free(data);
    return out;
}

/* A new array of `typecode` of `n` 8-byte values, not set yet: `*data` is its buffer. */
static PyObject *array_of(const char *typecode, Py_ssize_t n, void **data) {
    void *buffer = PyMem_Malloc(n ? (size_t)n * 8 : 8);
    if (!buffer) return PyErr_NoMemory();
    if (array_adoptable) {
        PyObject *out = array_adopt(typecode, buffer, n, n ? n : 1);
        *data = buffer;
        return out;
    }
    memset(buffer, 0, n ? (size_t)n * 8 : 8);
    PyObject *out = array_adopt(typecode, buffer, n, n);
    if (!out) return NULL;
    Py_buffer view;
    if (PyObject_GetBuffer(out, &view, PyBUF_SIMPLE) < 0) {
        Py_DECREF(out);
        return NULL;
    }
    *data = view.buf; /* stays put: the array is not resized while it is filled */
    PyBuffer_Release(&view);
    return out;
}

#endif
