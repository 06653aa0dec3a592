/* Ingest's index pass over one batch (`_pack.c`), registered by the module in `_columns.c`. */

#ifndef INVOSEQ_PACK_H
#define INVOSEQ_PACK_H

#include <Python.h>

PyObject *pack_scan(PyObject *module, PyObject *args);
PyObject *pack_scan_batch(PyObject *module, PyObject *args);
PyObject *pack_bound_singles(PyObject *module, PyObject *args);

#endif
