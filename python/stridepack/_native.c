/*
 * _native.c — the CPython extension over libstridepack (linked in
 * statically): reads NumPy arrays (__array_interface__), PyTorch tensors
 * (their own fields) and any other DLPack producer, fills sp_tensors and
 * calls sp_pack / sp_copy_batch / the KDA entry points, all without a
 * Python-level loop on the hot path.
 *
 * What C cannot decide alone is delegated to the Python package, never on
 * a repeated eager call with a workspace: making a new output array (the
 * `frameworks` hooks), allocating a workspace, and every fallback to the
 * framework's own copy. For the latter the functions here raise
 * `Fallback(kind, index, reason)` and write nothing; stridepack._api
 * catches it and takes its slower general path.
 *
 * Build: python/CMakeLists.txt (by ctest's build and by the wheel backend).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The binding exposes the test hooks (copy pass count, boundary copies) to
 * its tests: the experimental section of the headers. */
#ifndef SP_EXPERIMENTAL
#define SP_EXPERIMENTAL
#endif
#include "stridepack.h"
#include "stridepack_kda.h"

#include "_torch_direct.h"

#define MAX_READ_DIMS 64 /* NumPy allows 64; more is refused as unsupported */
#define N_CACHES 4       /* workspaces whose torch outputs are kept */

enum { FW_NUMPY = 0, FW_TORCH = 1, FW_CUPY = 2, FW_DLPACK = 3, FW_COUNT = 4 };
static const char *const fw_names[FW_COUNT] = {"numpy", "torch", "cupy", "dlpack"};

/* A view as a producer describes it: strides in bytes, any number of dims. */
typedef struct view {
    uintptr_t ptr;
    int ndim;
    int64_t itemsize;
    int exact; /* sp_dtype, or -1: no stridepack dtype (moved as words) */
    sp_device device;
    int readonly;
    int requires_grad;
    int fw;
    PyObject *keep;  /* a DLPack capsule to hold while in use, or NULL */
    PyObject *dtype; /* torch: the dtype object (a module constant) */
    /* last: read_view clears only what comes before */
    int64_t shape[MAX_READ_DIMS];
    int64_t strides[MAX_READ_DIMS];
} view;

/* ---- module state (one interpreter) -------------------------------------- */

static PyObject *error_for; /* stridepack._errors.error: the exception for a status */
static PyObject *Fallback;        /* raised to ask for the general path */
static PyObject *frameworks;      /* list of FW_COUNT hook objects, or None */
static char reason[512];          /* why the last read was unsupported */

/* Interned attribute names. */
static PyObject *s_dtype, *s_layout, *s_is_neg, *s_is_conj, *s_is_cuda, *s_is_cpu,
    *s_get_device, *s_data_ptr, *s_shape, *s_stride, *s_requires_grad, *s_element_size,
    *s_array_interface, *s_data, *s_strides, *s_typestr, *s_dlpack, *s_dlpack_device,
    *s_stream, *s_name, *s_out, *s_is_contiguous, *s_cdata, *s_probes;

/* torch, found in sys.modules when first seen (never imported here). */
static PyTypeObject *torch_tensor;
static PyObject *torch_strided, *torch_grad_enabled, *torch_raw_stream;
static struct { PyObject *dtype; int sp; int size; int32_t code; } torch_dtypes[16];
static int n_torch_dtypes;
/* Whether torch tensors may be read through libtorch's C shim
 * (_torch_direct.h) rather than attribute by attribute: set when torch is
 * first seen, when both ways agreed on the probe tensors
 * (STRIDEPACK_TORCH_DIRECT=0 keeps it 0); and whether they are (the tests
 * turn it off and on: direct_reads()). */
static int direct_ok, direct;
static PyTypeObject *numpy_ndarray, *cupy_ndarray;

static PyObject *call0(PyObject *o, PyObject *name) {
#if PY_VERSION_HEX >= 0x03090000
    return PyObject_CallMethodNoArgs(o, name);
#else
    return PyObject_CallMethodObjArgs(o, name, NULL);
#endif
}

static PyObject *call1(PyObject *f, PyObject *arg) {
#if PY_VERSION_HEX >= 0x03090000
    return PyObject_CallOneArg(f, arg);
#else
    return PyObject_CallFunctionObjArgs(f, arg, NULL);
#endif
}

/* torch.Tensor's own getters and methods that the hot path reads, resolved
 * once (init_torch). For a tensor whose type is exactly torch.Tensor a read
 * calls the descriptor found then, without the attribute lookup on every
 * read (a pack of four views makes about fifty); a subclass, or a name
 * torch.Tensor does not define as a C getter or method, takes the lookup. */
enum { T_DTYPE, T_SHAPE, T_IS_CUDA, T_IS_CPU, T_REQUIRES_GRAD, T_CDATA, T_IS_NEG, T_STRIDE,
       T_DATA_PTR, T_GET_DEVICE, T_IS_CONTIGUOUS, T_COUNT };
static PyObject **const t_names[T_COUNT] = {&s_dtype, &s_shape, &s_is_cuda, &s_is_cpu,
                                            &s_requires_grad, &s_cdata, &s_is_neg, &s_stride,
                                            &s_data_ptr, &s_get_device, &s_is_contiguous};
static const char t_is_method[T_COUNT] = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1};
static PyObject *t_descr[T_COUNT]; /* NULL: look the name up */

/* x.<attribute a>, or x.<method a>() (a new reference, NULL on error). */
static PyObject *tget(PyObject *x, int a) {
    PyObject *d = t_descr[a];
    if (d && Py_TYPE(x) == torch_tensor)
        return t_is_method[a] ? call1(d, x)
                              : Py_TYPE(d)->tp_descr_get(d, x, (PyObject *)torch_tensor);
    return t_is_method[a] ? call0(x, *t_names[a]) : PyObject_GetAttr(x, *t_names[a]);
}

static void resolve_tensor_attrs(PyTypeObject *t) {
    for (int a = 0; a < T_COUNT; a++) {
        PyObject *d = PyObject_GetAttr((PyObject *)t, *t_names[a]);
        PyTypeObject *want = t_is_method[a] ? &PyMethodDescr_Type : &PyGetSetDescr_Type;
        if (d && Py_IS_TYPE(d, want) && Py_TYPE(d)->tp_descr_get) t_descr[a] = d;
        else Py_XDECREF(d);
    }
    PyErr_Clear();
}

/* The pending exception, taken (PyErr_Fetch is deprecated from 3.12). */
static PyObject *exc_take(void) {
#if PY_VERSION_HEX >= 0x030C0000
    return PyErr_GetRaisedException();
#else
    PyObject *t, *v, *tb;
    PyErr_Fetch(&t, &v, &tb);
    PyErr_NormalizeException(&t, &v, &tb);
    if (v && tb) PyException_SetTraceback(v, tb);
    Py_XDECREF(t);
    Py_XDECREF(tb);
    return v;
#endif
}

static void exc_restore(PyObject *e) {
#if PY_VERSION_HEX >= 0x030C0000
    PyErr_SetRaisedException(e);
#else
    PyObject *t = (PyObject *)Py_TYPE(e);
    Py_INCREF(t);
    PyErr_Restore(t, e, PyException_GetTraceback(e));
#endif
}

static int unsupported(const char *fmt, const char *arg) {
    snprintf(reason, sizeof reason, fmt, arg);
    return 1;
}

static PyObject *find_type(const char *mod, const char *attr) {
    PyObject *m = PyDict_GetItemString(PyImport_GetModuleDict(), mod); /* borrowed */
    return m ? PyObject_GetAttrString(m, attr) : NULL;
}

/* What read_torch reads: RD_GRAD requires_grad too (the inputs of a copy;
 * a workspace's does not matter), RD_NO_NEG not the lazy negation and
 * conjugation bits (a tensor the binding built itself). */
enum { RD_GRAD = 1, RD_NO_NEG = 2 };

static int read_torch_attrs(PyObject *x, view *v, int flags);
static int read_torch_direct(PyObject *x, view *v, int flags);
static PyObject *hook(int fw);

static int same_view(const view *a, const view *b) {
    return a->ptr == b->ptr && a->ndim == b->ndim && a->itemsize == b->itemsize &&
           a->exact == b->exact && a->dtype == b->dtype && a->device.type == b->device.type &&
           a->device.ordinal == b->device.ordinal &&
           !memcmp(a->shape, b->shape, sizeof(int64_t) * (size_t)a->ndim) &&
           !memcmp(a->strides, b->strides, sizeof(int64_t) * (size_t)a->ndim);
}

/* The TensorImpl address, from torch's own getter Tensor._cdata (0 with
 * an exception set when it fails). Never read out of the object's memory:
 * only torch knows its layout. */
static uintptr_t cdata_of(PyObject *x) {
    PyObject *c = tget(x, T_CDATA);
    uintptr_t impl = c ? (uintptr_t)PyLong_AsVoidPtr(c) : 0;
    Py_XDECREF(c);
    return impl;
}

/* 1 when the direct reads give what the attribute reads give for each of
 * the torch hook's probe tensors (views of several dtypes, offsets and
 * stride orders), so that they may replace them; 0 otherwise, or when
 * STRIDEPACK_TORCH_DIRECT=0 or there are no probes. Runs once. */
static int direct_agrees(void) {
    const char *env = getenv("STRIDEPACK_TORCH_DIRECT");
    if ((env && !strcmp(env, "0")) || !t_descr[T_CDATA] || !frameworks) return 0;
    PyObject *h = hook(FW_TORCH);
    PyObject *probes = h ? PyObject_CallMethodNoArgs(h, s_probes) : NULL;
    PyObject *fast = probes ? PySequence_Fast(probes, "probes") : NULL;
    int ok = fast && PySequence_Fast_GET_SIZE(fast) > 0;
    for (Py_ssize_t i = 0; ok && i < PySequence_Fast_GET_SIZE(fast); i++) {
        PyObject *x = PySequence_Fast_GET_ITEM(fast, i);
        view a, b;
        memset(&a, 0, offsetof(view, shape));
        memset(&b, 0, offsetof(view, shape));
        ok = Py_TYPE(x) == torch_tensor && read_torch_direct(x, &a, RD_GRAD) == 0 &&
             read_torch_attrs(x, &b, RD_GRAD) == 0 && same_view(&a, &b);
    }
    Py_XDECREF(fast);
    Py_XDECREF(probes);
    PyErr_Clear();
    return ok;
}

static int init_torch(void) {
    static const struct { const char *name; int sp, size; } names[] = {
        {"bool", SP_BOOL, 1},      {"uint8", SP_U8, 1},      {"int8", SP_I8, 1},
        {"int16", SP_I16, 2},      {"uint16", SP_U16, 2},    {"int32", SP_I32, 4},
        {"uint32", SP_U32, 4},     {"int64", SP_I64, 8},     {"uint64", SP_U64, 8},
        {"float16", SP_F16, 2},    {"bfloat16", SP_BF16, 2}, {"float32", SP_F32, 4},
        {"float64", SP_F64, 8}};
    PyObject *torch = PyDict_GetItemString(PyImport_GetModuleDict(), "torch");
    PyObject *cc = NULL;
    if (!torch) return 0;
    PyObject *t = PyObject_GetAttrString(torch, "Tensor");
    if (!t || !PyType_Check(t)) { Py_XDECREF(t); PyErr_Clear(); return 0; }
    torch_strided = PyObject_GetAttrString(torch, "strided");
    torch_grad_enabled = PyObject_GetAttrString(torch, "is_grad_enabled");
    if (!torch_strided || !torch_grad_enabled) { Py_DECREF(t); return -1; }
    cc = PyObject_GetAttrString(torch, "_C");
    /* The raw handle without building a torch.cuda.Stream (torch's own
     * compiler calls it too); absent in CPU-only torch builds. */
    torch_raw_stream = cc ? PyObject_GetAttrString(cc, "_cuda_getCurrentRawStream") : NULL;
    Py_XDECREF(cc);
    PyErr_Clear();
    const int shim = td_load();
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        PyObject *d = PyObject_GetAttrString(torch, names[i].name);
        if (!d) { PyErr_Clear(); continue; }
        torch_dtypes[n_torch_dtypes].dtype = d;
        torch_dtypes[n_torch_dtypes].sp = names[i].sp;
        torch_dtypes[n_torch_dtypes].size = names[i].size;
        torch_dtypes[n_torch_dtypes].code = shim ? td_dtype_code(names[i].name) : -1;
        n_torch_dtypes++;
    }
    resolve_tensor_attrs((PyTypeObject *)t);
    torch_tensor = (PyTypeObject *)t;
    direct = direct_ok = shim && direct_agrees();
    return 0;
}

/* The framework of x, or -1 (not an array: TypeError set). */
static int framework_of(PyObject *x) {
    if (!torch_tensor && init_torch() < 0) return -1;
    if (torch_tensor && PyObject_TypeCheck(x, torch_tensor)) return FW_TORCH;
    if (!numpy_ndarray) {
        PyObject *t = find_type("numpy", "ndarray");
        if (t && PyType_Check(t)) numpy_ndarray = (PyTypeObject *)t; else Py_XDECREF(t);
        PyErr_Clear();
    }
    if (numpy_ndarray && PyObject_TypeCheck(x, numpy_ndarray)) return FW_NUMPY;
    if (!cupy_ndarray) {
        PyObject *t = find_type("cupy", "ndarray");
        if (t && PyType_Check(t)) cupy_ndarray = (PyTypeObject *)t; else Py_XDECREF(t);
        PyErr_Clear();
    }
    if (cupy_ndarray && PyObject_TypeCheck(x, cupy_ndarray)) return FW_CUPY;
    if (PyObject_HasAttr(x, s_dlpack)) return FW_DLPACK;
    PyErr_Format(PyExc_TypeError, "stridepack: %s is not an array (no __dlpack__)",
                 Py_TYPE(x)->tp_name);
    return -1;
}

static void view_clear(view *v) {
    Py_CLEAR(v->keep);
    v->dtype = NULL;
}

/* Fill shape (and strides, when st is not None) from sequences of ints
 * (tuples, torch.Size included, are read in place). */
static int read_dims(view *v, PyObject *shape, PyObject *st, int64_t unit) {
    PyObject *fs = PyTuple_Check(shape) ? (Py_INCREF(shape), shape)
                                        : PySequence_Fast(shape, "shape is not a sequence");
    PyObject *fst = NULL;
    int r = -1;
    if (!fs) return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fs);
    if (n > MAX_READ_DIMS) { r = unsupported("%s dims", "too many"); goto done; }
    v->ndim = (int)n;
    for (Py_ssize_t i = 0; i < n; i++)
        v->shape[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fs, i));
    if (st && st != Py_None) {
        fst = PyTuple_Check(st) ? (Py_INCREF(st), st)
                                : PySequence_Fast(st, "strides is not a sequence");
        if (!fst) goto done;
        if (PySequence_Fast_GET_SIZE(fst) != n) {
            PyErr_SetString(PyExc_ValueError, "strides and shape differ in length");
            goto done;
        }
        for (Py_ssize_t i = 0; i < n; i++)
            v->strides[i] = unit * PyLong_AsLongLong(PySequence_Fast_GET_ITEM(fst, i));
    } else {
        int64_t acc = v->itemsize;
        for (int i = v->ndim - 1; i >= 0; i--) { v->strides[i] = acc; acc *= v->shape[i]; }
    }
    r = PyErr_Occurred() ? -1 : 0;
done:
    Py_DECREF(fs);
    Py_XDECREF(fst);
    return r;
}

/* The truth of a new reference r (consumed): 1, 0, or -1 on error. */
static int truth(PyObject *r) {
    if (!r) return -1;
    int b = PyObject_IsTrue(r);
    Py_DECREF(r);
    return b;
}

static int bool_attr(PyObject *x, int a) { return truth(tget(x, a)); }

static int64_t int_of(PyObject *r) {
    if (!r) return -1;
    int64_t i = PyLong_AsLongLong(r);
    Py_DECREF(r);
    return i;
}

/* The attributes read are the fewest that describe the view; each is a
 * Python-level call, so every one counts on the eager path. */
static int read_torch_attrs(PyObject *x, view *v, int flags) {
    int b;
    PyObject *dt = tget(x, T_DTYPE);
    if (!dt) return -1;
    Py_DECREF(dt); /* dtypes are module constants */
    v->dtype = dt;
    v->exact = -1;
    for (int i = 0; i < n_torch_dtypes; i++)
        if (torch_dtypes[i].dtype == dt) {
            v->exact = torch_dtypes[i].sp;
            v->itemsize = torch_dtypes[i].size;
            break;
        }
    if (v->exact < 0) {
        /* Only other dtypes (complex ones) can carry the conjugation bit. */
        if (!(flags & RD_NO_NEG) && (b = truth(call0(x, s_is_conj))) != 0) return b < 0 ? -1 :
            unsupported("%s", "the view has torch's lazy negation or conjugation bit set");
        if ((v->itemsize = int_of(call0(x, s_element_size))) <= 0)
            return PyErr_Occurred() ? -1 : unsupported("%s", "element size 0");
    }
    if ((b = bool_attr(x, T_IS_CUDA)) < 0) return -1;
    if (b) {
        int64_t d = int_of(tget(x, T_GET_DEVICE));
        if (d < 0) return -1;
        v->device = sp_cuda((int32_t)d);
    } else {
        if ((b = bool_attr(x, T_IS_CPU)) < 0) return -1;
        if (!b) return unsupported("%s", "a torch device other than CPU and CUDA");
        v->device = sp_cpu();
    }
    if ((flags & RD_GRAD) && (v->requires_grad = bool_attr(x, T_REQUIRES_GRAD)) < 0) return -1;
    PyObject *st = tget(x, T_STRIDE);
    if (!st) {
        /* Sparse, MKL-DNN and other layouts have no strides. */
        PyObject *e = exc_take();
        PyObject *layout = PyObject_GetAttr(x, s_layout);
        int strided = layout == torch_strided;
        Py_XDECREF(layout);
        PyErr_Clear();
        if (strided) { exc_restore(e); return -1; }
        Py_XDECREF(e);
        return unsupported("%s", "not a strided tensor");
    }
    PyObject *p = tget(x, T_DATA_PTR);
    v->ptr = p ? (uintptr_t)PyLong_AsUnsignedLongLong(p) : 0;
    Py_XDECREF(p);
    PyObject *shape = PyErr_Occurred() ? NULL : tget(x, T_SHAPE);
    int r = shape ? read_dims(v, shape, st, v->itemsize) : -1;
    Py_XDECREF(shape);
    Py_DECREF(st);
    return r;
}

/* The same through libtorch's C shim: one attribute read (the TensorImpl's
 * address) and requires_grad where autograd records. 0 done, -1 error, 1
 * when the attribute reads must do it (a dtype or device the table lacks,
 * a layout without strides: they also give the right error). */
static int read_torch_direct(PyObject *x, view *v, int flags) {
    uintptr_t impl = cdata_of(x);
    td_meta m;
    if (!impl || td_describe(impl, &m) < 0 || m.device == TD_OTHER || m.ndim > MAX_READ_DIMS) {
        PyErr_Clear();
        return 1;
    }
    int k = 0;
    while (k < n_torch_dtypes && torch_dtypes[k].code != m.dtype) k++;
    if (k == n_torch_dtypes) return 1;
    v->dtype = torch_dtypes[k].dtype;
    v->exact = torch_dtypes[k].sp;
    v->itemsize = torch_dtypes[k].size;
    v->device = m.device == TD_CUDA ? sp_cuda(m.device_index) : sp_cpu();
    v->ptr = m.data;
    v->ndim = (int)m.ndim;
    for (int i = 0; i < v->ndim; i++) {
        v->shape[i] = m.sizes[i];
        v->strides[i] = m.strides[i] * v->itemsize;
    }
    /* Autograd records nothing with grad mode off (no_grad, inference_mode). */
    if ((flags & RD_GRAD) && td_grad_enabled() != 0 &&
        (v->requires_grad = bool_attr(x, T_REQUIRES_GRAD)) < 0)
        return -1;
    return 0;
}

static int read_torch(PyObject *x, view *v, int flags) {
    int b;
    /* A lazy negation or conjugation is a flag on the view, not in its
     * memory: copying bits would drop it. */
    if (!(flags & RD_NO_NEG) && (b = bool_attr(x, T_IS_NEG)) != 0) return b < 0 ? -1 :
        unsupported("%s", "the view has torch's lazy negation or conjugation bit set");
    if (direct && Py_TYPE(x) == torch_tensor) {
        int r = read_torch_direct(x, v, flags);
        if (r <= 0) return r;
    }
    return read_torch_attrs(x, v, flags);
}

static int exact_of_typestr(PyObject *x, const char *ts, int64_t size) {
    char kind = ts[1];
    int native = ts[0] == '|' || ts[0] == '=' || ts[0] == (PY_LITTLE_ENDIAN ? '<' : '>');
    if (!native) return -1; /* bits of another byte order are not this dtype's values */
    switch (kind) {
    case 'b': return size == 1 ? SP_BOOL : -1;
    case 'u': return size == 1 ? SP_U8 : size == 2 ? SP_U16 : size == 4 ? SP_U32 :
                     size == 8 ? SP_U64 : -1;
    case 'i': return size == 1 ? SP_I8 : size == 2 ? SP_I16 : size == 4 ? SP_I32 :
                     size == 8 ? SP_I64 : -1;
    case 'f': return size == 2 ? SP_F16 : size == 4 ? SP_F32 : size == 8 ? SP_F64 : -1;
    case 'V':
        if (size == 2) { /* bf16 as a NumPy dtype (ml_dtypes) shows as V2 */
            PyObject *dt = PyObject_GetAttr(x, s_dtype);
            PyObject *nm = dt ? PyObject_GetAttr(dt, s_name) : NULL;
            int bf = nm && PyUnicode_Check(nm) && PyUnicode_CompareWithASCIIString(nm, "bfloat16") == 0;
            Py_XDECREF(nm);
            Py_XDECREF(dt);
            PyErr_Clear();
            return bf ? SP_BF16 : -1;
        }
        return -1;
    default: return -1;
    }
}

/* NumPy through __array_interface__: read-only arrays and byte strides that
 * are not a multiple of the element size work (NumPy's __dlpack__ refuses). */
static int read_numpy(PyObject *x, view *v) {
    PyObject *ai = PyObject_GetAttr(x, s_array_interface);
    if (!ai) return -1;
    int r = -1;
    PyObject *data = PyDict_GetItemWithError(ai, s_data);
    PyObject *shape = PyDict_GetItemWithError(ai, s_shape);
    PyObject *st = PyDict_GetItemWithError(ai, s_strides);
    PyObject *ts = PyDict_GetItemWithError(ai, s_typestr);
    if (!data || !shape || !ts || !PyTuple_Check(data) || PyTuple_GET_SIZE(data) != 2) {
        if (!PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "bad __array_interface__");
        goto done;
    }
    const char *t = PyUnicode_AsUTF8(ts);
    if (!t) goto done;
    if (t[1] == 'O') { r = unsupported("%s", "object arrays hold references, not plain bits"); goto done; }
    v->itemsize = strtol(t + 2, NULL, 10);
    if (v->itemsize <= 0) { r = unsupported("dtype %s has no bytes", t); goto done; }
    if (t[1] == 'U') v->itemsize *= 4; /* typestr counts UCS4 characters */
    v->exact = exact_of_typestr(x, t, v->itemsize);
    v->ptr = (uintptr_t)PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(data, 0));
    v->readonly = PyObject_IsTrue(PyTuple_GET_ITEM(data, 1));
    v->device = sp_cpu();
    if (PyErr_Occurred()) goto done;
    r = read_dims(v, shape, st, 1);
done:
    Py_DECREF(ai);
    return r;
}

/* ---- DLPack ---------------------------------------------------------------- */
/* The structs of dlpack.h (v0.8 DLManagedTensor and v1.0
 * DLManagedTensorVersioned; DLTensor is the same in both), mirrored. */
typedef struct { int32_t device_type, device_id; } dl_device;
typedef struct { uint8_t code, bits; uint16_t lanes; } dl_dtype;
typedef struct {
    void *data;
    dl_device device;
    int32_t ndim;
    dl_dtype dtype;
    int64_t *shape;
    int64_t *strides;
    uint64_t byte_offset;
} dl_tensor;
typedef struct { dl_tensor t; void *ctx; void (*deleter)(void *); } dl_managed;
typedef struct {
    uint32_t major, minor;
    void *ctx;
    void (*deleter)(void *);
    uint64_t flags;
    dl_tensor t;
} dl_managed_versioned;

enum { DL_CPU = 1, DL_CUDA = 2, DL_CUDA_HOST = 3, DL_CUDA_MANAGED = 13 };
enum { DL_INT = 0, DL_UINT = 1, DL_FLOAT = 2, DL_BFLOAT = 4, DL_BOOL = 6 };

static int dl_exact(dl_dtype d) {
    int s = d.bits;
    switch (d.code) {
    case DL_BOOL: return s == 8 ? SP_BOOL : -1;
    case DL_UINT: return s == 8 ? SP_U8 : s == 16 ? SP_U16 : s == 32 ? SP_U32 : s == 64 ? SP_U64 : -1;
    case DL_INT: return s == 8 ? SP_I8 : s == 16 ? SP_I16 : s == 32 ? SP_I32 : s == 64 ? SP_I64 : -1;
    case DL_FLOAT: return s == 16 ? SP_F16 : s == 32 ? SP_F32 : s == 64 ? SP_F64 : -1;
    case DL_BFLOAT: return s == 16 ? SP_BF16 : -1;
    default: return -1;
    }
}

static int dl_device_of(int32_t type, int32_t id, sp_device *d) {
    if (type == DL_CPU || type == DL_CUDA_HOST) { *d = sp_cpu(); return 0; }
    if (type == DL_CUDA || type == DL_CUDA_MANAGED) { *d = sp_cuda(id); return 0; }
    snprintf(reason, sizeof reason, "DLPack device type %d is neither CPU nor CUDA", (int)type);
    return 1;
}

/* Export x with __dlpack__ and read the capsule without consuming it: the
 * capsule's own destructor calls the producer's deleter when it is dropped.
 * `stream` is the stream the work will run on (0: the legacy default). */
static int read_dlpack(PyObject *x, view *v, uintptr_t stream) {
    int cuda = 0;
    if (PyObject_HasAttr(x, s_dlpack_device)) {
        PyObject *d = call0(x, s_dlpack_device);
        if (!d) return -1;
        PyObject *t0 = PySequence_GetItem(d, 0);
        Py_DECREF(d);
        long type = t0 ? PyLong_AsLong(t0) : DL_CPU;
        Py_XDECREF(t0);
        if (PyErr_Occurred()) { PyErr_Clear(); type = DL_CPU; }
        cuda = type == DL_CUDA || type == DL_CUDA_MANAGED;
    }
    PyObject *cap;
    if (cuda) {
        /* DLPack names the legacy default stream 1. */
        PyObject *kw = Py_BuildValue("{s:K}", "stream", (unsigned long long)(stream ? stream : 1));
        PyObject *f = kw ? PyObject_GetAttr(x, s_dlpack) : NULL;
        cap = f ? PyObject_Call(f, PyTuple_New(0), kw) : NULL;
        Py_XDECREF(f);
        Py_XDECREF(kw);
    } else {
        cap = call0(x, s_dlpack);
    }
    if (!cap) {
        if (PyErr_ExceptionMatches(PyExc_BufferError) || PyErr_ExceptionMatches(PyExc_RuntimeError) ||
            PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_ValueError)) {
            PyObject *e = exc_take();
            PyObject *s = e ? PyObject_Str(e) : NULL;
            const char *text = s ? PyUnicode_AsUTF8(s) : NULL;
            snprintf(reason, sizeof reason, "__dlpack__ refused: %s", text ? text : "?");
            Py_XDECREF(s);
            Py_XDECREF(e);
            PyErr_Clear();
            return 1;
        }
        return -1;
    }
    dl_tensor *t;
    if (PyCapsule_IsValid(cap, "dltensor")) {
        t = &((dl_managed *)PyCapsule_GetPointer(cap, "dltensor"))->t;
    } else if (PyCapsule_IsValid(cap, "dltensor_versioned")) {
        dl_managed_versioned *m = PyCapsule_GetPointer(cap, "dltensor_versioned");
        if (m->major != 1) {
            Py_DECREF(cap);
            snprintf(reason, sizeof reason, "DLPack major version %u is not supported", m->major);
            return 1;
        }
        v->readonly = (int)(m->flags & 1); /* DLPACK_FLAG_BITMASK_READ_ONLY */
        t = &m->t;
    } else {
        Py_DECREF(cap);
        PyErr_SetString(PyExc_TypeError, "__dlpack__() did not return a DLPack capsule");
        return -1;
    }
    v->keep = cap;
    if (t->dtype.lanes != 1 || t->dtype.bits == 0 || t->dtype.bits % 8) {
        snprintf(reason, sizeof reason, "DLPack dtype code %d, %d bits x %d lanes",
                 t->dtype.code, t->dtype.bits, t->dtype.lanes);
        return 1;
    }
    if (dl_device_of(t->device.device_type, t->device.device_id, &v->device)) return 1;
    if (t->ndim < 0 || t->ndim > MAX_READ_DIMS) return unsupported("%s dims", "too many");
    v->itemsize = t->dtype.bits / 8;
    v->exact = dl_exact(t->dtype);
    v->ndim = t->ndim;
    v->ptr = (uintptr_t)t->data + (uintptr_t)t->byte_offset;
    int64_t acc = v->itemsize;
    for (int i = v->ndim - 1; i >= 0; i--) {
        v->shape[i] = t->shape[i];
        v->strides[i] = t->strides ? t->strides[i] * v->itemsize : acc;
        acc *= t->shape[i];
    }
    return 0;
}

/* Read x (of framework fw) into v: 0 done, 1 unsupported (reason set),
 * -1 Python error. `flags`: RD_* (torch only). */
static int read_view(PyObject *x, int fw, view *v, uintptr_t dl_stream, int flags) {
    memset(v, 0, offsetof(view, shape)); /* the caller cleared keep */
    v->exact = -1;
    v->fw = fw;
    switch (fw) {
    case FW_TORCH: return read_torch(x, v, flags);
    case FW_NUMPY: return read_numpy(x, v);
    default: return read_dlpack(x, v, dl_stream);
    }
}

/* ---- view math (byte views -> sp_tensors) ------------------------------ */

static int64_t numel(const view *v) {
    int64_t n = 1;
    for (int i = 0; i < v->ndim; i++) n *= v->shape[i];
    return n;
}

static int is_dense(const view *v) {
    int64_t expect = v->itemsize;
    for (int i = 0; i < v->ndim; i++) if (v->shape[i] == 0) return 1;
    for (int i = v->ndim - 1; i >= 0; i--) {
        if (v->shape[i] != 1 && v->strides[i] != expect) return 0;
        expect *= v->shape[i];
    }
    return 1;
}

/* Widest power of two <= 8 dividing the element size, the address and
 * every stride that is ever applied: the lowest bit set in any of them (a
 * negative stride has the low bits of its magnitude). */
static int best_unit(const view *v) {
    uint64_t bits = 8 | (uint64_t)v->itemsize | (numel(v) ? (uint64_t)v->ptr : 0);
    for (int i = 0; i < v->ndim; i++)
        if (v->shape[i] > 1) bits |= (uint64_t)v->strides[i];
    return (int)(bits & (0 - bits));
}

typedef struct { int ndim; int64_t shape[MAX_READ_DIMS + 1]; int64_t strides[2][MAX_READ_DIMS + 1]; } layout;

/* v moved in `unit`-byte words: one more dim when the unit is smaller than
 * the element. Returns the sp_dtype. */
static int unit_layout(const view *v, int unit, layout *l, int which) {
    l->ndim = v->ndim;
    for (int i = 0; i < v->ndim; i++) {
        l->shape[i] = v->shape[i];
        l->strides[which][i] = v->strides[i] / unit;
    }
    if (unit < v->itemsize) {
        l->shape[l->ndim] = v->itemsize / unit;
        l->strides[which][l->ndim] = 1;
        l->ndim++;
    }
    if (unit == v->itemsize && v->exact >= 0) return v->exact;
    return unit == 1 ? SP_U8 : unit == 2 ? SP_U16 : unit == 4 ? SP_U32 : SP_U64;
}

/* Merge dims jointly for k stride lists (row-major order kept, so the dense
 * destination of the result is that of the original). Used only for views
 * with more than SP_MAX_DIMS dims. */
static void coalesce(layout *l, int k) {
    int out = 0;
    for (int i = 0; i < l->ndim; i++) if (l->shape[i] == 0) {
        l->ndim = 1; l->shape[0] = 0;
        for (int j = 0; j < k; j++) l->strides[j][0] = 1;
        return;
    }
    for (int i = 0; i < l->ndim; i++) {
        if (l->shape[i] == 1) continue;
        int merge = out > 0;
        for (int j = 0; j < k && merge; j++)
            merge = l->strides[j][out - 1] == l->shape[i] * l->strides[j][i];
        if (merge) {
            l->shape[out - 1] *= l->shape[i];
            for (int j = 0; j < k; j++) l->strides[j][out - 1] = l->strides[j][i];
        } else {
            l->shape[out] = l->shape[i];
            for (int j = 0; j < k; j++) l->strides[j][out] = l->strides[j][i];
            out++;
        }
    }
    l->ndim = out;
}

static int fill(sp_tensor *t, const view *v, int dtype, const layout *l, int which) {
    if (l->ndim > SP_MAX_DIMS) {
        snprintf(reason, sizeof reason, "%d dims remain after merging (at most %d)", l->ndim,
                 SP_MAX_DIMS);
        return 1;
    }
    memset(t, 0, sizeof *t);
    t->data = (void *)v->ptr;
    t->dtype = dtype;
    t->ndim = l->ndim;
    memcpy(t->shape, l->shape, sizeof(int64_t) * (size_t)l->ndim);
    memcpy(t->strides, l->strides[which], sizeof(int64_t) * (size_t)l->ndim);
    t->device = v->device;
    return 0;
}

static int to_tensor(const view *v, sp_tensor *t) {
    layout l;
    int dtype = unit_layout(v, best_unit(v), &l, 0);
    if (l.ndim > SP_MAX_DIMS) coalesce(&l, 1);
    return fill(t, v, dtype, &l, 0);
}

/* src and dst of a copy, in one unit when they share an element type (each
 * its own otherwise: the library then rejects the pair and says why). */
static int pair_tensors(const view *s, const view *d, sp_copy_pair *p) {
    int same = s->itemsize == d->itemsize && s->exact == d->exact;
    int us = best_unit(s), ud = best_unit(d);
    if (same) us = ud = us < ud ? us : ud;
    layout l, ld;
    int ts = unit_layout(s, us, &l, 0);
    int td = unit_layout(d, ud, &ld, 1);
    int same_shape = l.ndim == ld.ndim && !memcmp(l.shape, ld.shape, sizeof(int64_t) * (size_t)l.ndim);
    if (l.ndim > SP_MAX_DIMS && same_shape) {
        memcpy(l.strides[1], ld.strides[1], sizeof ld.strides[1]);
        coalesce(&l, 2);
        ld = l;
    }
    return fill(&p->src, s, ts, &l, 0) || fill(&p->dst, d, td, &ld, 1);
}

/* ---- errors and streams --------------------------------------------------- */

static PyObject *raise_sp(int code, const char *message) {
    char name[64];
    const char *s = sp_status_string((sp_status)code);
    size_t n = strcspn(s, ":");
    snprintf(name, sizeof name, "%.*s", (int)n, s);
    PyObject *e = PyObject_CallFunction(error_for, "sis", name, code, message);
    if (e) { PyErr_SetObject((PyObject *)Py_TYPE(e), e); Py_DECREF(e); }
    return NULL;
}

static PyObject *raise_status(int status) { return raise_sp(status, sp_last_error()); }

static PyObject *raise_fallback(const char *kind, Py_ssize_t index, const char *why) {
    PyObject *a = Py_BuildValue("(sns)", kind, index, why);
    if (a) { PyErr_SetObject(Fallback, a); Py_DECREF(a); }
    return NULL;
}

static PyObject *hook(int fw) {
    if (!frameworks || !PyList_Check(frameworks) || PyList_GET_SIZE(frameworks) != FW_COUNT) {
        PyErr_SetString(PyExc_RuntimeError, "stridepack._native: frameworks not configured");
        return NULL;
    }
    return PyList_GET_ITEM(frameworks, fw);
}

/* The stream the work on `dev` runs on: torch's or CuPy's current stream,
 * the legacy default (NULL) for other producers. -1 on error. */
static int stream_of(int fw, sp_device dev, uintptr_t *out) {
    *out = 0;
    if (dev.type != SP_DEVICE_CUDA) return 0;
    PyObject *r = NULL;
    if (fw == FW_TORCH && direct && td_cuda_stream((int)dev.ordinal, out) == 0) return 0;
    if (fw == FW_TORCH && torch_raw_stream) {
        PyObject *ord = PyLong_FromLong((long)dev.ordinal); /* a cached small int */
        r = ord ? call1(torch_raw_stream, ord) : NULL;
        Py_XDECREF(ord);
    } else if (fw == FW_TORCH || fw == FW_CUPY) {
        PyObject *h = hook(fw);
        r = h ? PyObject_CallMethod(h, "current_stream", "i", (int)dev.ordinal) : NULL;
    } else {
        return 0;
    }
    if (!r) return -1;
    *out = (uintptr_t)PyLong_AsUnsignedLongLong(r);
    Py_DECREF(r);
    return PyErr_Occurred() ? -1 : 0;
}

/* Fallback("autograd") when torch records autograd for any of v[0..n). */
static int autograd_check(view *v, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) if (v[i].requires_grad) {
        const int on = truth(PyObject_CallObject(torch_grad_enabled, NULL));
        if (on) { if (on > 0) raise_fallback("autograd", i, "autograd is recording"); return -1; }
        return 0;
    }
    return 0;
}

/* After a library call: 0 for SP_OK; else -1 with Fallback raised for
 * SP_ERR_UNSUPPORTED (nothing was written: the framework's copy can do it)
 * or a StridepackError for any other error. */
static int library_failed(int st) {
    if (st == SP_OK) return 0;
    if (st == SP_ERR_UNSUPPORTED) {
        char m[600];
        snprintf(m, sizeof m, "the library reports unsupported input (%s)", sp_last_error());
        raise_fallback("unsupported", -1, m);
    } else {
        raise_status(st);
    }
    return -1;
}

static const char *device_name(sp_device d, char *buf, size_t n) {
    if (d.type == SP_DEVICE_CUDA) snprintf(buf, n, "cuda:%d", (int)d.ordinal);
    else snprintf(buf, n, "cpu");
    return buf;
}

/* "(64, 33)": the shape of v, for messages. */
static const char *shape_text(const view *v, char *buf, size_t n) {
    size_t at = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < v->ndim && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, i ? ", %lld" : "%lld", (long long)v->shape[i]);
    if (at < n) snprintf(buf + at, n - at, v->ndim == 1 ? ",)" : ")");
    return buf;
}

static const char *strides_text(const view *v, char *buf, size_t n) {
    size_t at = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < v->ndim && at < n; i++)
        at += (size_t)snprintf(buf + at, n - at, i ? ", %lld" : "%lld", (long long)v->strides[i]);
    if (at < n) snprintf(buf + at, n - at, v->ndim == 1 ? ",)" : ")");
    return buf;
}

/* The element type of v, for messages. */
static const char *dtype_text(const view *v, char *buf, size_t n) {
    if (v->exact >= 0) snprintf(buf, n, "%s", sp_dtype_name((sp_dtype)v->exact));
    else snprintf(buf, n, "a %lld-byte type without a stridepack dtype", (long long)v->itemsize);
    return buf;
}

/* An array the library fills as raw bytes (a workspace), read into wv and
 * checked before any call: readable, writable, dense (only then are its
 * numel x itemsize bytes from its address its own: an expanded view covers
 * a few bytes many times, a strided one skips bytes that belong to others)
 * and on `dev`, where the call runs. 0 with *ptr and *bytes set; -1 with
 * the error raised, nothing written. */
static int scratch_of(PyObject *x, int fw, view *wv, sp_device dev, uintptr_t dl_stream,
                      const char *name, void **ptr, size_t *bytes) {
    char m[800], a[256], b[256];
    const int r = read_view(x, fw, wv, dl_stream, 0);
    if (r < 0) return -1;
    if (r > 0) {
        snprintf(m, sizeof m, "%s: %s", name, reason);
        raise_sp(SP_ERR_INVALID_ARGUMENT, m);
        return -1;
    }
    if (wv->readonly) {
        snprintf(m, sizeof m, "%s: read-only, and the call writes it", name);
        raise_sp(SP_ERR_INVALID_ARGUMENT, m);
        return -1;
    }
    if (!is_dense(wv)) {
        snprintf(m, sizeof m,
                 "%s: not contiguous (shape %s, byte strides %s): the call writes every byte "
                 "of it, so it must own them (an expanded or strided view does not)",
                 name, shape_text(wv, a, sizeof a), strides_text(wv, b, sizeof b));
        raise_sp(SP_ERR_INVALID_ARGUMENT, m);
        return -1;
    }
    if (wv->device.type != dev.type || wv->device.ordinal != dev.ordinal) {
        snprintf(m, sizeof m, "%s: on %s, but the call runs on %s", name,
                 device_name(wv->device, a, sizeof a), device_name(dev, b, sizeof b));
        raise_sp(SP_ERR_DEVICE_MISMATCH, m);
        return -1;
    }
    int64_t n = 1;
    for (int i = 0; i < wv->ndim; i++)
        if (__builtin_mul_overflow(n, wv->shape[i], &n)) break;
    uint64_t total;
    if (n < 0 || __builtin_mul_overflow((uint64_t)n, (uint64_t)wv->itemsize, &total) ||
        total > SIZE_MAX) {
        snprintf(m, sizeof m, "%s: its size in bytes overflows", name);
        raise_sp(SP_ERR_OVERFLOW, m);
        return -1;
    }
    *ptr = (void *)wv->ptr;
    *bytes = (size_t)total;
    return 0;
}

/* v as an sp_tensor of its own element type (the KDA arrays): strides in
 * whole elements, at most SP_MAX_DIMS dims. 0, or 1 with `reason` set. */
static int elements_tensor(const view *v, sp_tensor *t) {
    int whole = v->ndim <= SP_MAX_DIMS;
    for (int d = 0; d < v->ndim && whole; d++) whole = v->strides[d] % v->itemsize == 0;
    if (!whole) {
        snprintf(reason, sizeof reason, "strides not whole elements, or more than %d dims",
                 SP_MAX_DIMS);
        return 1;
    }
    layout l;
    unit_layout(v, (int)v->itemsize, &l, 0);
    return fill(t, v, v->exact, &l, 0);
}

/* ---- torch outputs of pack, kept per workspace ------------------------------ */
/* A repeated eager pack into the same workspace gets the output tensors of
 * the previous call again when they still are what it would build (same
 * address, dtype, shape and strides: checked each time, so a caller's
 * in-place change of a view's metadata is noticed). Kept only for outputs
 * the torch hook built directly on the workspace's storage (no reference to
 * the workspace tensor itself), and dropped when the workspace tensor dies
 * (a weak reference), so a dropped workspace is freed. */
#define CACHE_DIMS 8 /* outputs of more dims are built anew each call */
typedef struct {
    PyObject *ref; /* weakref to the workspace, NULL when the slot is free */
    Py_ssize_t n;
    struct {
        uintptr_t ptr;
        PyObject *dtype, *out;
        int ndim;
        int64_t shape[CACHE_DIMS], strides[CACHE_DIMS]; /* the output's, strides in bytes */
    } e[SP_MAX_PAIRS_PER_LAUNCH];
} ws_cache;
static ws_cache caches[N_CACHES];
static int next_cache;
static PyObject *cache_drop_fn;

static void cache_clear(ws_cache *c) {
    for (Py_ssize_t i = 0; i < c->n; i++) Py_CLEAR(c->e[i].out);
    c->n = 0;
    Py_CLEAR(c->ref);
}

static PyObject *cache_drop(PyObject *self, PyObject *ref) {
    (void)self;
    for (int i = 0; i < N_CACHES; i++) if (caches[i].ref == ref) cache_clear(&caches[i]);
    Py_RETURN_NONE;
}

static int refers_to(PyObject *ref, PyObject *x) {
#if PY_VERSION_HEX >= 0x030D0000
    PyObject *o = NULL;
    if (PyWeakref_GetRef(ref, &o) < 0) { PyErr_Clear(); return 0; }
    Py_XDECREF(o);
    return o == x;
#else
    return PyWeakref_GetObject(ref) == x;
#endif
}

static ws_cache *cache_for(PyObject *ws) {
    for (int i = 0; i < N_CACHES; i++)
        if (caches[i].ref && refers_to(caches[i].ref, ws)) return &caches[i];
    ws_cache *c = &caches[next_cache];
    next_cache = (next_cache + 1) % N_CACHES;
    cache_clear(c);
    c->ref = PyWeakref_NewRef(ws, cache_drop_fn);
    if (!c->ref) { PyErr_Clear(); return NULL; }
    return c;
}

/* out's layout, read as an input's (without the negation bits: the torch
 * hook built it); 0 when read, else nothing is left pending. */
static int read_out(PyObject *out, view *o) {
    memset(o, 0, offsetof(view, shape));
    int r = read_torch(out, o, RD_NO_NEG); /* holds no reference: nothing to clear */
    PyErr_Clear();
    return r;
}

static PyObject *cached_out(ws_cache *c, uintptr_t ptr, const view *x) {
    for (Py_ssize_t i = 0; i < c->n; i++) {
        if (c->e[i].ptr != ptr) continue;
        const size_t dims = sizeof(int64_t) * (size_t)x->ndim;
        if (c->e[i].dtype != x->dtype || c->e[i].ndim != x->ndim || memcmp(c->e[i].shape, x->shape, dims))
            return NULL;
        view o;
        if (read_out(c->e[i].out, &o) == 0 && o.ptr == ptr && o.dtype == x->dtype &&
            o.ndim == x->ndim && !memcmp(o.shape, x->shape, dims) &&
            !memcmp(o.strides, c->e[i].strides, dims)) {
            Py_INCREF(c->e[i].out);
            return c->e[i].out;
        }
        return NULL;
    }
    return NULL;
}

static void cache_put(ws_cache *c, uintptr_t ptr, const view *x, PyObject *out) {
    Py_ssize_t i;
    view o;
    if (x->ndim > CACHE_DIMS || read_out(out, &o) != 0 || o.ndim > CACHE_DIMS) return;
    for (i = 0; i < c->n && c->e[i].ptr != ptr; i++) {}
    if (i == SP_MAX_PAIRS_PER_LAUNCH) return;
    if (i == c->n) { c->n++; c->e[i].out = NULL; }
    c->e[i].ptr = ptr;
    c->e[i].dtype = x->dtype;
    c->e[i].ndim = o.ndim;
    memcpy(c->e[i].shape, o.shape, sizeof(int64_t) * (size_t)o.ndim);
    memcpy(c->e[i].strides, o.strides, sizeof(int64_t) * (size_t)o.ndim);
    Py_INCREF(out);
    Py_XSETREF(c->e[i].out, out);
}

/* ---- pack ------------------------------------------------------------------ */

/* n views ready for read_view (only their head cleared: the dim arrays
 * are filled by the read, and zeroing them would cost on every call): the
 * caller's `local` array when n fits it (the usual few tensors, with no
 * allocation on the per-call path), else allocated. */
#define N_LOCAL_VIEWS 8
static view *views_new(Py_ssize_t n, view *local) {
    view *v = local && n <= N_LOCAL_VIEWS ? local : PyMem_Malloc((size_t)(n ? n : 1) * sizeof(view));
    if (!v) return (view *)PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) memset(&v[i], 0, offsetof(view, shape));
    return v;
}

static void views_free(view *v, Py_ssize_t n, view *local) {
    if (!v) return;
    for (Py_ssize_t i = 0; i < n; i++) view_clear(&v[i]);
    if (v != local) PyMem_Free(v);
}

static PyObject *as_fast_list(PyObject *xs, const char *what) {
    if (PyList_CheckExact(xs) || PyTuple_CheckExact(xs)) {
        Py_INCREF(xs);
        return xs;
    }
    if (PyObject_HasAttr(xs, s_dlpack) || PyObject_HasAttr(xs, s_array_interface)) {
        PyErr_Format(PyExc_TypeError, "stridepack: %s must be a list, not one array", what);
        return NULL;
    }
    PyObject *fast = PySequence_Fast(xs, "not a list");
    if (!fast && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "stridepack: %s must be a list of arrays, not %s", what,
                     Py_TYPE(xs)->tp_name);
    }
    return fast;
}

/* Read xs[0..n) of one framework into v; *fw_out gets it. */
static int read_all(PyObject **items, Py_ssize_t n, view *v, int *fw_out, const char *what,
                    uintptr_t dl_stream) {
    int fw0 = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        int fw = framework_of(items[i]);
        if (fw < 0) return -1;
        if (fw0 >= 0 && fw != fw0) {
            PyErr_Format(PyExc_TypeError,
                         "stridepack: pack takes one framework per call, got %s and %s",
                         fw_names[fw0], fw_names[fw]);
            return -1;
        }
        fw0 = fw;
        int r = read_view(items[i], fw, &v[i], dl_stream, 1);
        if (r < 0) return -1;
        if (r > 0) {
            char msg[640];
            snprintf(msg, sizeof msg, "%s[%zd]: %s", what, i, reason);
            raise_fallback("unsupported", i, msg);
            return -1;
        }
    }
    *fw_out = fw0;
    return 0;
}

static PyObject *new_output(int fw, PyObject *ws, uintptr_t ws_ptr, uintptr_t slot, PyObject *x,
                            int *cacheable) {
    PyObject *h = hook(fw);
    if (!h) return NULL;
    PyObject *off = PyLong_FromSize_t((size_t)(slot - ws_ptr));
    PyObject *r = off ? PyObject_CallMethodObjArgs(h, s_out, ws, off, x, NULL) : NULL;
    Py_XDECREF(off);
    if (!r) return NULL;
    if (!PyTuple_Check(r) || PyTuple_GET_SIZE(r) != 2) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_TypeError, "framework out() must return (array, cacheable)");
        return NULL;
    }
    PyObject *o = PyTuple_GET_ITEM(r, 0);
    *cacheable = PyObject_IsTrue(PyTuple_GET_ITEM(r, 1));
    Py_INCREF(o);
    Py_DECREF(r);
    return o;
}

/* pack(tensors, workspace=None, stream=None) */
/* 1 when every item is a torch tensor that torch calls contiguous (sizes
 * of 1 may have any stride, as the library's density): one method call
 * each, where the general read takes every attribute. Such inputs are
 * their own outputs whatever else holds (autograd, lazy negation). */
static int all_torch_contiguous(PyObject **items, Py_ssize_t n) {
    if (!torch_tensor) return 0; /* torch not seen yet: the general path sets it up */
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyObject_TypeCheck(items[i], torch_tensor)) return 0;
        PyObject *r = tget(items[i], T_IS_CONTIGUOUS);
        if (!r) { /* e.g. sparse layouts: leave them to the general path */
            PyErr_Clear();
            return 0;
        }
        const int yes = r == Py_True;
        Py_DECREF(r);
        if (!yes) return 0;
    }
    return 1;
}

static PyObject *py_pack(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xs, *ws = Py_None, *stream_arg = Py_None;
    if (!PyArg_ParseTuple(args, "O|OO", &xs, &ws, &stream_arg)) return NULL;
    PyObject *fast = as_fast_list(xs, "tensors");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **items = PySequence_Fast_ITEMS(fast);
    PyObject *result = NULL, *own_ws = NULL;
    view local[N_LOCAL_VIEWS], *v = views_new(n + 1, local), *wv = v ? &v[n] : NULL;
    sp_tensor in[SP_MAX_PAIRS_PER_LAUNCH], out[SP_MAX_PAIRS_PER_LAUNCH];
    int fw = -1;
    uintptr_t stream = 0;
    if (!v) goto done;
    if (n == 0) { result = PyList_New(0); goto done; }
    if (all_torch_contiguous(items, n)) { /* nothing to move: each input is its output */
        result = PyList_New(n);
        for (Py_ssize_t i = 0; result && i < n; i++) { Py_INCREF(items[i]); PyList_SET_ITEM(result, i, items[i]); }
        goto done;
    }
    if (stream_arg != Py_None) {
        stream = (uintptr_t)PyLong_AsUnsignedLongLong(stream_arg);
        if (PyErr_Occurred()) goto done;
    }
    if (read_all(items, n, v, &fw, "tensors", stream) < 0) goto done;
    if (fw == FW_TORCH && autograd_check(v, n) < 0) goto done;
    if (n > SP_MAX_PAIRS_PER_LAUNCH) {
        raise_fallback("unsupported", -1, "more than 64 tensors in one pack");
        goto done;
    }
    int first = -1;
    for (Py_ssize_t i = 0; i < n; i++) {
        if (first < 0 && !is_dense(&v[i])) first = (int)i;
        if (to_tensor(&v[i], &in[i])) {
            char msg[640];
            snprintf(msg, sizeof msg, "tensors[%zd]: %s", i, reason);
            raise_fallback("unsupported", i, msg);
            goto done;
        }
    }
    if (first < 0) { /* nothing to move: no library call, no launch */
        result = PyList_New(n);
        for (Py_ssize_t i = 0; result && i < n; i++) { Py_INCREF(items[i]); PyList_SET_ITEM(result, i, items[i]); }
        goto done;
    }
    sp_device dev = v[first].device;
    if (ws == Py_None) {
        size_t need;
        int st = sp_pack_workspace_bytes(in, (size_t)n, &need);
        if (st != SP_OK) { raise_status(st); goto done; }
        PyObject *h = hook(fw);
        if (!h) goto done;
        own_ws = PyObject_CallMethod(h, "empty_bytes", "n(ii)", (Py_ssize_t)need, (int)dev.type, (int)dev.ordinal);
        if (!own_ws) goto done;
        ws = own_ws;
    }
    int wfw = framework_of(ws);
    if (wfw < 0) goto done;
    if (wfw != fw) {
        PyErr_Format(PyExc_TypeError, "stridepack: pack takes one framework per call, got %s and %s",
                     fw_names[fw], fw_names[wfw]);
        goto done;
    }
    void *ws_ptr;
    size_t ws_bytes;
    if (scratch_of(ws, wfw, wv, dev, stream, "workspace", &ws_ptr, &ws_bytes) < 0) goto done;
    if (stream_arg == Py_None && stream_of(fw, dev, &stream) < 0) goto done;
    int st;
    if (dev.type == SP_DEVICE_CPU) { /* a CPU pass may be long: let other threads run */
        Py_BEGIN_ALLOW_THREADS
        st = sp_pack(in, (size_t)n, ws_ptr, ws_bytes, out, NULL, NULL);
        Py_END_ALLOW_THREADS
    } else {
        st = sp_pack(in, (size_t)n, ws_ptr, ws_bytes, out, NULL, (struct CUstream_st *)stream);
    }
    if (library_failed(st)) goto done;
    /* A workspace allocated here dies with this call: nothing to keep. */
    ws_cache *c = fw == FW_TORCH && !own_ws ? cache_for(ws) : NULL;
    result = PyList_New(n);
    for (Py_ssize_t i = 0; result && i < n; i++) {
        PyObject *o;
        uintptr_t slot = (uintptr_t)out[i].data;
        if (slot == (uintptr_t)in[i].data) {
            o = items[i];
            Py_INCREF(o);
        } else if (!(o = c ? cached_out(c, slot, &v[i]) : NULL)) {
            int cacheable = 0;
            o = new_output(fw, ws, wv->ptr, slot, items[i], &cacheable);
            if (!o) { Py_CLEAR(result); break; }
            if (c && cacheable) cache_put(c, slot, &v[i], o);
        }
        PyList_SET_ITEM(result, i, o);
    }
done:
    views_free(v, n + 1, local);
    Py_XDECREF(own_ws);
    Py_DECREF(fast);
    return result;
}

/* workspace_bytes(tensors): inputs the binding cannot read count nothing. */
static PyObject *py_workspace_bytes(PyObject *self, PyObject *xs) {
    (void)self;
    PyObject *fast = as_fast_list(xs, "tensors");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast), m = 0;
    PyObject **items = PySequence_Fast_ITEMS(fast), *result = NULL;
    view *v = views_new(1, NULL);
    sp_tensor *in = PyMem_Calloc((size_t)(n ? n : 1), sizeof(sp_tensor));
    if (!v || !in) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        int fw = framework_of(items[i]);
        if (fw < 0) goto done;
        int r = read_view(items[i], fw, v, 0, 0);
        if (r == 0) r = to_tensor(v, &in[m]);
        view_clear(v);
        if (r < 0) goto done;
        if (r == 0) m++;
    }
    size_t need = 0;
    int st = sp_pack_workspace_bytes(in, (size_t)m, &need);
    result = st == SP_OK ? PyLong_FromSize_t(need) : raise_status(st);
done:
    views_free(v, 1, NULL);
    PyMem_Free(in);
    Py_DECREF(fast);
    return result;
}

/* ---- copy_batch / pack_into ------------------------------------------------ */

/* How a call names its arrays: copy_batch's pairs[i].src and pairs[i].dst,
 * pack_into's inputs[i] and outputs[i]. */
typedef enum { NAMES_PAIRS, NAMES_INPUTS_OUTPUTS } names_style;

static const char *side_name(names_style style, Py_ssize_t i, int dst, char *buf, size_t n) {
    if (style == NAMES_PAIRS) snprintf(buf, n, "pairs[%zd].%s", i, dst ? "dst" : "src");
    else snprintf(buf, n, "%s[%zd]", dst ? "outputs" : "inputs", i);
    return buf;
}

/* The library's message in the call's own names: sp_copy_batch names its
 * arguments pairs[i].src / pairs[i].dst (and pairs[i] for both). */
static void rename_pairs(names_style style, const char *text, char *out, size_t n) {
    size_t at = 0;
    while (*text && at + 1 < n) {
        unsigned long long i;
        int used = 0;
        if (style == NAMES_INPUTS_OUTPUTS && !strncmp(text, "pairs[", 6) &&
            sscanf(text + 6, "%llu]%n", &i, &used) == 1 && used > 0) {
            const char *rest = text + 6 + used;
            int w;
            if (!strncmp(rest, ".src", 4)) {
                w = snprintf(out + at, n - at, "inputs[%llu]", i);
                rest += 4;
            } else if (!strncmp(rest, ".dst", 4)) {
                w = snprintf(out + at, n - at, "outputs[%llu]", i);
                rest += 4;
            } else {
                w = snprintf(out + at, n - at, "inputs[%llu]/outputs[%llu]", i, i);
            }
            at += w > 0 ? (size_t)w : 0;
            if (at >= n) at = n - 1;
            text = rest;
            continue;
        }
        out[at++] = *text++;
    }
    out[at < n ? at : n - 1] = 0;
}

/* Copy srcs[i] into dsts[i], i < n, in one library call. */
static PyObject *copy_pairs(PyObject **srcs, PyObject **dsts, Py_ssize_t n, PyObject *stream_arg,
                            names_style style) {
    view local[N_LOCAL_VIEWS], *v = views_new(2 * n, local);
    sp_copy_pair local_pairs[N_LOCAL_VIEWS / 2]; /* each filled whole by pair_tensors */
    sp_copy_pair *pairs = n <= N_LOCAL_VIEWS / 2 ? local_pairs
                                                 : PyMem_Malloc((size_t)(n ? n : 1) * sizeof(sp_copy_pair));
    PyObject *result = NULL;
    int stream_fw = -1;
    sp_device stream_dev = sp_cpu();
    uintptr_t stream = 0;
    char m[900], sn[64], dn[64], a[256], b[256];
    if (!v) goto done;
    if (!pairs) { PyErr_NoMemory(); goto done; }
    if (stream_arg != Py_None) {
        stream = (uintptr_t)PyLong_AsUnsignedLongLong(stream_arg);
        if (PyErr_Occurred()) goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        for (int side = 0; side < 2; side++) {
            PyObject *x = side ? dsts[i] : srcs[i];
            int fw = framework_of(x);
            if (fw < 0) goto done;
            int r = read_view(x, fw, &v[2 * i + side], stream, 1);
            if (r < 0) goto done;
            if (r > 0) {
                snprintf(m, sizeof m, "%s: %s", side_name(style, i, side, sn, sizeof sn), reason);
                raise_fallback("unsupported", i, m);
                goto done;
            }
            if (stream_fw < 0 && v[2 * i + side].device.type == SP_DEVICE_CUDA && fw != FW_DLPACK) {
                stream_fw = fw;
                stream_dev = v[2 * i + side].device;
            }
        }
    }
    if (torch_tensor && autograd_check(v, 2 * n) < 0) goto done;
    for (Py_ssize_t i = 0; i < n; i++) {
        const view *s = &v[2 * i], *d = &v[2 * i + 1];
        side_name(style, i, 0, sn, sizeof sn);
        side_name(style, i, 1, dn, sizeof dn);
        if (d->readonly) {
            snprintf(m, sizeof m, "%s: read-only", dn);
            raise_sp(SP_ERR_INVALID_ARGUMENT, m);
            goto done;
        }
        /* In the caller's terms, before the views become words of a unit. */
        if (s->ndim != d->ndim ||
            memcmp(s->shape, d->shape, sizeof(int64_t) * (size_t)s->ndim)) {
            snprintf(m, sizeof m, "%s: shape %s differs from %s %s", dn,
                     shape_text(d, a, sizeof a), sn, shape_text(s, b, sizeof b));
            raise_sp(SP_ERR_SHAPE_MISMATCH, m);
            goto done;
        }
        if (s->exact != d->exact || s->itemsize != d->itemsize) {
            snprintf(m, sizeof m, "%s: dtype %s differs from %s %s", dn, dtype_text(d, a, sizeof a),
                     sn, dtype_text(s, b, sizeof b));
            raise_sp(SP_ERR_DTYPE_MISMATCH, m);
            goto done;
        }
        if (pair_tensors(s, d, &pairs[i])) {
            snprintf(m, sizeof m, "%s: %s", sn, reason);
            raise_fallback("unsupported", i, m);
            goto done;
        }
    }
    if (stream_arg == Py_None && stream_fw >= 0 && stream_of(stream_fw, stream_dev, &stream) < 0)
        goto done;
    int cpu = 1, st;
    for (Py_ssize_t i = 0; i < 2 * n && cpu; i++) cpu = v[i].device.type == SP_DEVICE_CPU;
    if (cpu) { /* a CPU pass may be long: let other threads run */
        Py_BEGIN_ALLOW_THREADS
        st = sp_copy_batch(pairs, (size_t)n, NULL);
        Py_END_ALLOW_THREADS
    } else {
        st = sp_copy_batch(pairs, (size_t)n, (struct CUstream_st *)stream);
    }
    if (st != SP_OK && st != SP_ERR_UNSUPPORTED && style != NAMES_PAIRS) {
        rename_pairs(style, sp_last_error(), m, sizeof m);
        raise_sp(st, m);
        goto done;
    }
    if (library_failed(st)) goto done;
    result = Py_None;
    Py_INCREF(result);
done:
    views_free(v, 2 * n, local);
    if (pairs != local_pairs) PyMem_Free(pairs);
    return result;
}

/* copy_batch(pairs, stream=None) */
static PyObject *py_copy_batch(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ps, *stream = Py_None;
    if (!PyArg_ParseTuple(args, "O|O", &ps, &stream)) return NULL;
    PyObject *fast = as_fast_list(ps, "pairs");
    if (!fast) return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast);
    PyObject **srcs = PyMem_Calloc((size_t)(2 * n + 1), sizeof(PyObject *)), **dsts = srcs + n;
    PyObject *result = NULL;
    Py_ssize_t held = 0;
    PyObject **fasts = PyMem_Calloc((size_t)(n + 1), sizeof(PyObject *));
    if (!srcs || !fasts) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *p = PySequence_Fast(PySequence_Fast_GET_ITEM(fast, i), "");
        if (!p || PySequence_Fast_GET_SIZE(p) != 2) {
            Py_XDECREF(p);
            PyErr_Clear();
            PyErr_Format(PyExc_TypeError, "stridepack: pairs[%zd] must be (src, dst)", i);
            goto done;
        }
        fasts[held++] = p;
        srcs[i] = PySequence_Fast_GET_ITEM(p, 0);
        dsts[i] = PySequence_Fast_GET_ITEM(p, 1);
    }
    result = copy_pairs(srcs, dsts, n, stream, NAMES_PAIRS);
done:
    for (Py_ssize_t i = 0; i < held; i++) Py_DECREF(fasts[i]);
    PyMem_Free(fasts);
    PyMem_Free(srcs);
    Py_DECREF(fast);
    return result;
}

/* pack_into(inputs, outputs, stream=None) */
static PyObject *py_pack_into(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xs, *os, *stream = Py_None, *result = NULL;
    if (!PyArg_ParseTuple(args, "OO|O", &xs, &os, &stream)) return NULL;
    PyObject *fx = as_fast_list(xs, "inputs");
    PyObject *fo = fx ? as_fast_list(os, "outputs") : NULL;
    if (!fo) { Py_XDECREF(fx); return NULL; }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fx);
    if (PySequence_Fast_GET_SIZE(fo) != n) {
        PyErr_Format(PyExc_ValueError, "stridepack: %zd inputs but %zd outputs", n,
                     PySequence_Fast_GET_SIZE(fo));
    } else {
        result = copy_pairs(PySequence_Fast_ITEMS(fx), PySequence_Fast_ITEMS(fo), n, stream,
                            NAMES_INPUTS_OUTPUTS);
    }
    Py_DECREF(fx);
    Py_DECREF(fo);
    return result;
}

/* readable(x): None when the binding can hand x to the library, else why not. */
static PyObject *py_readable(PyObject *self, PyObject *x) {
    (void)self;
    view *v = views_new(1, NULL);
    if (!v) return NULL;
    int fw = framework_of(x);
    int r = fw < 0 ? -1 : read_view(x, fw, v, 0, 0);
    sp_tensor t;
    if (r == 0) r = to_tensor(v, &t);
    views_free(v, 1, NULL);
    if (r < 0) return NULL;
    if (r == 0) Py_RETURN_NONE;
    return PyUnicode_FromString(reason);
}

/* describe(x, via_dlpack=False): what the binding reads from x, as
 * (address, shape, byte strides, element size, sp_dtype or -1, (device
 * type, ordinal)); via_dlpack reads x through __dlpack__ whatever it is.
 * For tests: the direct reads and the DLPack export must agree. */
static PyObject *py_describe(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *x;
    int via_dlpack = 0;
    if (!PyArg_ParseTuple(args, "O|p", &x, &via_dlpack)) return NULL;
    view *v = views_new(1, NULL);
    if (!v) return NULL;
    int fw = via_dlpack ? FW_DLPACK : framework_of(x);
    int r = fw < 0 ? -1 : read_view(x, fw, v, 0, 0);
    PyObject *res = NULL;
    if (r > 0) PyErr_Format(PyExc_ValueError, "unsupported: %s", reason);
    if (r == 0) {
        PyObject *shape = PyTuple_New(v->ndim), *strides = PyTuple_New(v->ndim);
        for (int i = 0; shape && strides && i < v->ndim; i++) {
            PyTuple_SET_ITEM(shape, i, PyLong_FromLongLong(v->shape[i]));
            PyTuple_SET_ITEM(strides, i, PyLong_FromLongLong(v->strides[i]));
        }
        if (shape && strides)
            res = Py_BuildValue("(KOOLi(ii))", (unsigned long long)v->ptr, shape, strides,
                                (long long)v->itemsize, v->exact, (int)v->device.type,
                                (int)v->device.ordinal);
        Py_XDECREF(shape);
        Py_XDECREF(strides);
    }
    views_free(v, 1, NULL);
    return res;
}

/* ---- KDA ------------------------------------------------------------------- */

static const char *const kda_names[] = {"q", "k", "v", "g", "beta", "A_log", "dt_bias",
                                        "cu_seqlens", "state", "state_indices", "o",
                                        "checkpoint_cu_starts", "checkpoints"};
#define N_KDA 13
#define N_KDA_REQUIRED 11 /* all but the two checkpoint arrays */
/* The arrays the prefill writes: state (8), o (10), checkpoints (12). */
static int kda_written(int i) { return i == 8 || i == 10 || i == 12; }

static sp_tensor *kda_field(sp_kda_args *a, int i) {
    sp_tensor *f[N_KDA] = {&a->q, &a->k, &a->v, &a->g, &a->beta, &a->A_log, &a->dt_bias,
                           &a->cu_seqlens, &a->state, &a->state_indices, &a->o,
                           &a->checkpoint_cu_starts, &a->checkpoints};
    return f[i];
}

typedef struct { sp_kda_boundary *b; } boundary_box;

static void boundary_capsule_free(PyObject *cap) {
    boundary_box *box = PyCapsule_GetPointer(cap, "stridepack.boundary");
    if (box) { sp_kda_boundary_destroy(box->b); PyMem_Free(box); }
}

typedef enum { KDA_PREFILL, KDA_REFERENCE, KDA_BOUNDARY_RUN, KDA_WORKSPACE_BYTES } kda_op;

/* One KDA call: read the 13 arrays (None for an absent checkpoint array),
 * check what the binding alone can see (a None where an array is needed,
 * a read-only array the call writes, the workspace's bytes), then fill
 * sp_kda_args and call the library. */
static PyObject *kda_call(kda_op op, PyObject *bcap, PyObject *ts, int gate, float lb, float scale,
                          long long interval, int kernel, PyObject *ws) {
    if (!PyTuple_Check(ts) || PyTuple_GET_SIZE(ts) != N_KDA)
        return PyErr_Format(PyExc_TypeError, "stridepack: the KDA calls take a tuple of %d arrays",
                            N_KDA);
    boundary_box *box = NULL;
    if (op == KDA_BOUNDARY_RUN) {
        box = PyCapsule_GetPointer(bcap, "stridepack.boundary");
        if (!box) return NULL;
        if (!box->b) return raise_sp(SP_ERR_INVALID_ARGUMENT, "boundary: already closed");
    }
    sp_kda_args a;
    sp_kda_args_init(&a);
    a.gate = gate;
    a.lower_bound = lb;
    a.scale = scale;
    a.checkpoint_interval = interval;
    a.kernel = kernel;
    view *v = views_new(N_KDA + 1, NULL), *wv = v ? &v[N_KDA] : NULL;
    PyObject *result = NULL;
    int fw0 = -1;
    sp_device dev = sp_cpu();
    uintptr_t stream = 0;
    char m[700];
    if (!v) return NULL;
    for (int i = 0; i < N_KDA; i++) {
        PyObject *x = PyTuple_GET_ITEM(ts, i);
        if (x == Py_None) {
            if (i < N_KDA_REQUIRED) {
                snprintf(m, sizeof m, "%s: None, but every KDA call needs it (%s)", kda_names[i],
                         i == 9 ? "int32 [N]: the state slot of each sequence"
                                : "see stridepack_kda.h");
                raise_sp(SP_ERR_INVALID_ARGUMENT, m);
                goto done;
            }
            continue;
        }
        int fw = framework_of(x);
        if (fw < 0) goto done;
        int r = read_view(x, fw, &v[i], 0, 0);
        if (r < 0) goto done;
        if (r > 0) { snprintf(m, sizeof m, "%s: %s", kda_names[i], reason); raise_sp(SP_ERR_UNSUPPORTED, m); goto done; }
        if (op != KDA_WORKSPACE_BYTES && kda_written(i) && v[i].readonly) {
            snprintf(m, sizeof m, "%s: read-only, and the prefill writes it", kda_names[i]);
            raise_sp(SP_ERR_INVALID_ARGUMENT, m);
            goto done;
        }
        if (v[i].exact < 0) {
            snprintf(m, sizeof m, "%s: element type has no stridepack dtype", kda_names[i]);
            raise_sp(SP_ERR_DTYPE_MISMATCH, m);
            goto done;
        }
        if (elements_tensor(&v[i], kda_field(&a, i))) {
            snprintf(m, sizeof m, "%s: %s", kda_names[i], reason);
            raise_sp(SP_ERR_UNSUPPORTED, m);
            goto done;
        }
        if (fw0 < 0) { fw0 = fw; dev = v[i].device; }
    }
    if (op == KDA_WORKSPACE_BYTES) {
        size_t bytes = 0;
        const int st = sp_kda_prefill_workspace_bytes(&a, &bytes);
        result = st == SP_OK ? PyLong_FromSize_t(bytes) : raise_status(st);
        goto done;
    }
    if (ws != Py_None) {
        const int wfw = framework_of(ws);
        if (wfw < 0 || scratch_of(ws, wfw, wv, dev, 0, "workspace", &a.workspace,
                                  &a.workspace_bytes) < 0)
            goto done;
        if (a.workspace_bytes == 0) a.workspace = NULL; /* an empty one is none */
    }
    if (fw0 >= 0 && stream_of(fw0, dev, &stream) < 0) goto done;
    int st;
    if (op == KDA_BOUNDARY_RUN) st = sp_kda_boundary_run(box->b, &a, (struct CUstream_st *)stream);
    else if (op == KDA_REFERENCE) st = sp_kda_prefill_reference(&a);
    else st = sp_kda_prefill(&a, (struct CUstream_st *)stream);
    if (st != SP_OK) { raise_status(st); goto done; }
    result = Py_None;
    Py_INCREF(result);
done:
    views_free(v, N_KDA + 1, NULL);
    return result;
}

/* kda_prefill(arrays, gate, lower_bound, scale, checkpoint_interval, kernel, workspace) */
static PyObject *py_kda_prefill(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ts, *ws;
    int gate, kernel;
    float lb, scale;
    long long interval;
    if (!PyArg_ParseTuple(args, "OiffLiO", &ts, &gate, &lb, &scale, &interval, &kernel, &ws))
        return NULL;
    return kda_call(KDA_PREFILL, NULL, ts, gate, lb, scale, interval, kernel, ws);
}

/* kda_reference(arrays, gate, lower_bound, scale, checkpoint_interval) */
static PyObject *py_kda_reference(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ts;
    int gate;
    float lb, scale;
    long long interval;
    if (!PyArg_ParseTuple(args, "OiffL", &ts, &gate, &lb, &scale, &interval)) return NULL;
    return kda_call(KDA_REFERENCE, NULL, ts, gate, lb, scale, interval, 0, Py_None);
}

/* kda_boundary_run(boundary, arrays, gate, lower_bound, scale, checkpoint_interval, kernel,
 * workspace) */
static PyObject *py_kda_boundary_run(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap, *ts, *ws;
    int gate, kernel;
    float lb, scale;
    long long interval;
    if (!PyArg_ParseTuple(args, "OOiffLiO", &cap, &ts, &gate, &lb, &scale, &interval, &kernel, &ws))
        return NULL;
    return kda_call(KDA_BOUNDARY_RUN, cap, ts, gate, lb, scale, interval, kernel, ws);
}

/* kda_workspace_bytes(arrays, gate, lower_bound, scale, checkpoint_interval) */
static PyObject *py_kda_workspace_bytes(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ts;
    int gate;
    float lb, scale;
    long long interval;
    if (!PyArg_ParseTuple(args, "OiffL", &ts, &gate, &lb, &scale, &interval)) return NULL;
    return kda_call(KDA_WORKSPACE_BYTES, NULL, ts, gate, lb, scale, interval, 0, Py_None);
}

/* kda_available() -> whether the linked library's KDA prefill runs: one
 * CPU prefill of one token and one head, tried once. */
static PyObject *py_kda_available(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    static int known = -1;
    if (known < 0) {
        enum { D = SP_KDA_HEAD_DIM };
        static uint16_t qkvg[4][D], beta[1], o[D];
        static float A_log[1], dt_bias[D], state[D * D];
        static int64_t cu[2] = {0, 1};
        static int32_t slot[1];
        const int64_t tok[4] = {1, 1, 1, D}, bt[3] = {1, 1, 1}, one[1] = {1}, d1[1] = {D},
                      two[1] = {2}, st[4] = {1, 1, D, D};
        sp_kda_args a;
        int ok = sp_kda_args_init(&a) == SP_OK;
        sp_tensor *in[4] = {&a.q, &a.k, &a.v, &a.g};
        for (int i = 0; i < 4 && ok; i++)
            ok = sp_tensor_dense(in[i], qkvg[i], SP_BF16, 4, tok, sp_cpu()) == SP_OK;
        ok = ok && sp_tensor_dense(&a.beta, beta, SP_BF16, 3, bt, sp_cpu()) == SP_OK &&
             sp_tensor_dense(&a.A_log, A_log, SP_F32, 1, one, sp_cpu()) == SP_OK &&
             sp_tensor_dense(&a.dt_bias, dt_bias, SP_F32, 1, d1, sp_cpu()) == SP_OK &&
             sp_tensor_dense(&a.cu_seqlens, cu, SP_I64, 1, two, sp_cpu()) == SP_OK &&
             sp_tensor_dense(&a.state, state, SP_F32, 4, st, sp_cpu()) == SP_OK &&
             sp_tensor_dense(&a.state_indices, slot, SP_I32, 1, one, sp_cpu()) == SP_OK &&
             sp_tensor_dense(&a.o, o, SP_BF16, 4, tok, sp_cpu()) == SP_OK &&
             sp_kda_prefill(&a, NULL) == SP_OK;
        known = ok;
    }
    return PyBool_FromLong(known);
}

/* kda_kernel_name(k) -> sp_kda_kernel_name(k): "auto", "recurrent", ...,
 * "unknown" past the last; the package builds its table from it. */
static PyObject *py_kda_kernel_name(PyObject *self, PyObject *k) {
    (void)self;
    const long c = PyLong_AsLong(k);
    if (c == -1 && PyErr_Occurred()) return NULL;
    return PyUnicode_FromString(sp_kda_kernel_name((sp_kda_kernel)c));
}

static PyObject *py_boundary_create(PyObject *self, PyObject *args) {
    (void)self;
    int type, ordinal;
    long long max_tokens, max_heads;
    if (!PyArg_ParseTuple(args, "(ii)LL", &type, &ordinal, &max_tokens, &max_heads)) return NULL;
    if (type == SP_DEVICE_CUDA && ordinal < 0) {
        char m[128];
        snprintf(m, sizeof m, "device: CUDA ordinal %d is negative (devices are numbered from 0)",
                 ordinal);
        return raise_sp(SP_ERR_INVALID_ARGUMENT, m);
    }
    sp_device d = {type, ordinal};
    sp_kda_boundary *b = NULL;
    int st = sp_kda_boundary_create(&b, d, max_tokens, max_heads);
    if (st != SP_OK) return raise_status(st);
    boundary_box *box = PyMem_Malloc(sizeof *box);
    if (!box) { sp_kda_boundary_destroy(b); return PyErr_NoMemory(); }
    box->b = b;
    PyObject *cap = PyCapsule_New(box, "stridepack.boundary", boundary_capsule_free);
    if (!cap) { sp_kda_boundary_destroy(b); PyMem_Free(box); }
    return cap;
}

static PyObject *py_boundary_close(PyObject *self, PyObject *cap) {
    (void)self;
    boundary_box *box = PyCapsule_GetPointer(cap, "stridepack.boundary");
    if (!box) return NULL;
    sp_kda_boundary *b = box->b;
    box->b = NULL;
    int st = sp_kda_boundary_destroy(b);
    if (st != SP_OK) return raise_status(st);
    Py_RETURN_NONE;
}

static PyObject *py_boundary_last_copied(PyObject *self, PyObject *cap) {
    (void)self;
    boundary_box *box = PyCapsule_GetPointer(cap, "stridepack.boundary");
    if (!box) return NULL;
    if (!box->b) return raise_sp(SP_ERR_INVALID_ARGUMENT, "boundary: already closed");
    size_t n = 0;
    int st = sp_kda_boundary_last_copied(box->b, &n);
    return st == SP_OK ? PyLong_FromSize_t(n) : raise_status(st);
}

/* ---- small queries ---------------------------------------------------------- */

static PyObject *py_version(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    return PyUnicode_FromString(sp_version());
}
static PyObject *py_status_string(PyObject *self, PyObject *code) {
    (void)self;
    long c = PyLong_AsLong(code);
    if (c == -1 && PyErr_Occurred()) return NULL;
    return PyUnicode_FromString(sp_status_string((sp_status)c));
}
static PyObject *py_cuda_available(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    return PyBool_FromLong(sp_cuda_available());
}
static PyObject *py_copy_pass_count(PyObject *self, PyObject *unused) {
    (void)self; (void)unused;
    return PyLong_FromUnsignedLongLong(sp_copy_pass_count());
}
/* The optional `on` of the test switches below: -1 error, 0 False, 1 True,
 * 2 not given; torch is looked up first. */
static int switch_arg(PyObject *args) {
    PyObject *on = Py_None;
    if (!PyArg_ParseTuple(args, "|O", &on)) return -1;
    if (!torch_tensor && init_torch() < 0) return -1;
    return on == Py_None ? 2 : PyObject_IsTrue(on);
}

/* direct_reads(on=None) -> whether torch tensors are read through the C
 * shim; on=False/True turns that off, or back on where the probe check
 * passed (for tests that compare both ways). */
static PyObject *py_direct_reads(PyObject *self, PyObject *args) {
    (void)self;
    const int on = switch_arg(args);
    if (on < 0) return NULL;
    if (on < 2) direct = on && direct_ok;
    return PyBool_FromLong(direct);
}

static PyObject *py_configure(PyObject *self, PyObject *fws) {
    (void)self;
    if (!PyList_Check(fws) || PyList_GET_SIZE(fws) != FW_COUNT)
        return PyErr_Format(PyExc_TypeError, "configure takes a list of %d frameworks", FW_COUNT);
    Py_INCREF(fws);
    Py_XSETREF(frameworks, fws);
    Py_RETURN_NONE;
}

#define METH(name, fn, flags, doc) {name, (PyCFunction)(void (*)(void))(fn), flags, PyDoc_STR(doc)}
static PyMethodDef methods[] = {
    METH("pack", py_pack, METH_VARARGS, "pack(tensors, workspace=None, stream=None) -> list"),
    METH("pack_into", py_pack_into, METH_VARARGS, "pack_into(inputs, outputs, stream=None)"),
    METH("copy_batch", py_copy_batch, METH_VARARGS, "copy_batch(pairs, stream=None)"),
    METH("workspace_bytes", py_workspace_bytes, METH_O, "workspace_bytes(tensors) -> int"),
    METH("readable", py_readable, METH_O, "readable(x) -> None or the reason it is not"),
    METH("describe", py_describe, METH_VARARGS, "describe(x, via_dlpack=False) -> the view read"),
    METH("kda_prefill", py_kda_prefill, METH_VARARGS,
         "kda_prefill(arrays, gate, lower_bound, scale, interval, kernel, workspace)"),
    METH("kda_reference", py_kda_reference, METH_VARARGS,
         "kda_reference(arrays, gate, lower_bound, scale, interval)"),
    METH("kda_boundary_run", py_kda_boundary_run, METH_VARARGS,
         "kda_boundary_run(boundary, arrays, gate, lower_bound, scale, interval, kernel, "
         "workspace)"),
    METH("kda_workspace_bytes", py_kda_workspace_bytes, METH_VARARGS,
         "kda_workspace_bytes(arrays, gate, lower_bound, scale, interval) -> int"),
    METH("kda_available", py_kda_available, METH_NOARGS,
         "kda_available() -> whether the library's KDA prefill runs (one CPU token, tried once)"),
    METH("kda_kernel_name", py_kda_kernel_name, METH_O, "sp_kda_kernel_name(k)"),
    METH("boundary_create", py_boundary_create, METH_VARARGS, "boundary_create(device, T, H)"),
    METH("boundary_close", py_boundary_close, METH_O, "boundary_close(capsule)"),
    METH("boundary_last_copied", py_boundary_last_copied, METH_O, "boundary_last_copied(capsule)"),
    METH("version", py_version, METH_NOARGS, "sp_version() of the linked library"),
    METH("status_string", py_status_string, METH_O, "sp_status_string(code)"),
    METH("cuda_available", py_cuda_available, METH_NOARGS, "sp_cuda_available()"),
    METH("copy_pass_count", py_copy_pass_count, METH_NOARGS, "sp_copy_pass_count()"),
    METH("configure", py_configure, METH_O, "configure(frameworks): the framework hooks"),
    METH("direct_reads", py_direct_reads, METH_VARARGS,
         "direct_reads(on=None) -> whether torch tensors are read through torch's C shim"),
    {NULL, NULL, 0, NULL}};

static PyMethodDef cache_drop_def = METH("_cache_drop", cache_drop, METH_O, "weakref callback");

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "stridepack._native",
    .m_doc = "stridepack's CPython extension over libstridepack", .m_size = -1,
    .m_methods = methods};

#define STR_(x) #x
#define STR(x) STR_(x)

PyMODINIT_FUNC PyInit__native(void) {
    struct { PyObject **slot; const char *text; } names[] = {
        {&s_dtype, "dtype"}, {&s_layout, "layout"}, {&s_is_neg, "is_neg"},
        {&s_is_conj, "is_conj"}, {&s_is_cuda, "is_cuda"}, {&s_is_cpu, "is_cpu"},
        {&s_get_device, "get_device"}, {&s_data_ptr, "data_ptr"}, {&s_shape, "shape"},
        {&s_stride, "stride"}, {&s_requires_grad, "requires_grad"},
        {&s_element_size, "element_size"}, {&s_array_interface, "__array_interface__"},
        {&s_data, "data"}, {&s_strides, "strides"}, {&s_typestr, "typestr"},
        {&s_dlpack, "__dlpack__"}, {&s_dlpack_device, "__dlpack_device__"},
        {&s_stream, "stream"}, {&s_name, "name"}, {&s_out, "out"},
        {&s_is_contiguous, "is_contiguous"}, {&s_cdata, "_cdata"}, {&s_probes, "probes"}};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (!(*names[i].slot = PyUnicode_InternFromString(names[i].text))) return NULL;
    PyObject *errors = PyImport_ImportModule("stridepack._errors");
    if (!errors) return NULL;
    error_for = PyObject_GetAttrString(errors, "error");
    Py_DECREF(errors);
    if (!error_for) return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
    Fallback = PyErr_NewExceptionWithDoc(
        "stridepack._native.Fallback",
        "Raised with (kind, index, reason) when the call needs the framework's own copy; "
        "nothing was written.", NULL, NULL);
    cache_drop_fn = PyCFunction_New(&cache_drop_def, NULL);
    if (!Fallback || !cache_drop_fn || PyModule_AddObject(m, "Fallback", Fallback) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(Fallback);
    /* The header this module was compiled against: the package checks it
     * against the library actually linked (sp_version()). */
    PyModule_AddStringConstant(m, "HEADER_VERSION",
                               STR(SP_VERSION_MAJOR) "." STR(SP_VERSION_MINOR) "." STR(SP_VERSION_PATCH));
    PyModule_AddIntConstant(m, "MAX_DIMS", SP_MAX_DIMS);
    PyModule_AddIntConstant(m, "PACK_ALIGN", SP_PACK_ALIGN);
    PyModule_AddIntConstant(m, "MAX_PAIRS_PER_LAUNCH", SP_MAX_PAIRS_PER_LAUNCH);
    /* sp_kda_gate and sp_kda_kernel, from the header: the package's tables
     * are built from these (and sp_kda_kernel_name), never typed in twice. */
    PyModule_AddIntConstant(m, "KDA_GATE_LOWER_BOUND", SP_KDA_GATE_LOWER_BOUND);
    PyModule_AddIntConstant(m, "KDA_GATE_SOFTPLUS", SP_KDA_GATE_SOFTPLUS);
    PyModule_AddIntConstant(m, "KDA_KERNEL_AUTO", SP_KDA_KERNEL_AUTO);
    PyModule_AddIntConstant(m, "KDA_KERNEL_RECURRENT", SP_KDA_KERNEL_RECURRENT);
    PyModule_AddIntConstant(m, "KDA_KERNEL_CHUNKED", SP_KDA_KERNEL_CHUNKED);
    PyModule_AddIntConstant(m, "KDA_KERNEL_CHUNKED_TWO_PASS", SP_KDA_KERNEL_CHUNKED_TWO_PASS);
    return m;
}
