/*
 * _args.c — the arrays of one library entry (the KDA calls, the
 * convolution), read once by one rule: each array of the call's tuple into
 * its sp_tensor field, with what only the binding can see refused by name
 * (None where the entry needs an array, a read-only array the entry writes,
 * an element type or layout the library has no tensor for).
 */
#include "_binding.h"

#include <stdio.h>

int read_call_arrays(PyObject *ts, const call_arrays *c, sp_tensor *const fields[], view *v,
                     int check_written, int *fw0, sp_device *dev) {
    char m[700];
    if (!PyTuple_Check(ts) || PyTuple_GET_SIZE(ts) != c->n) {
        PyErr_Format(PyExc_TypeError, "stridepack: %s takes a tuple of %d arrays", c->entry,
                     c->n);
        return -1;
    }
    *fw0 = -1;
    *dev = sp_cpu();
    for (int i = 0; i < c->n; i++) {
        PyObject *x = PyTuple_GET_ITEM(ts, i);
        if (x == Py_None) {
            if (c->required >> i & 1) {
                snprintf(m, sizeof m, "%s: None, but every %s call needs it (%s)", c->names[i],
                         c->entry, c->none_hint ? c->none_hint(i) : "see its header");
                raise_sp(SP_ERR_INVALID_ARGUMENT, m);
                return -1;
            }
            continue;
        }
        const int fw = framework_of(x);
        if (fw < 0) return -1;
        const int r = read_view(x, fw, &v[i], 0, 0);
        if (r < 0) return -1;
        if (r > 0) {
            snprintf(m, sizeof m, "%s: %s", c->names[i], reason);
            raise_sp(SP_ERR_UNSUPPORTED, m);
            return -1;
        }
        if (check_written && (c->written >> i & 1) && v[i].readonly) {
            snprintf(m, sizeof m, "%s: read-only, and %s writes it", c->names[i], c->writer);
            raise_sp(SP_ERR_INVALID_ARGUMENT, m);
            return -1;
        }
        if (v[i].exact < 0) {
            snprintf(m, sizeof m, "%s: element type has no stridepack dtype", c->names[i]);
            raise_sp(SP_ERR_DTYPE_MISMATCH, m);
            return -1;
        }
        if (elements_tensor(&v[i], fields[i])) {
            snprintf(m, sizeof m, "%s: %s", c->names[i], reason);
            raise_sp(SP_ERR_UNSUPPORTED, m);
            return -1;
        }
        if (*fw0 < 0) {
            *fw0 = fw;
            *dev = v[i].device;
        }
    }
    return 0;
}
