/*
 * _readers.c — arrays read into views (_binding.h): NumPy through
 * __array_interface__ (read-only arrays and odd byte strides included),
 * PyTorch through its own fields (libtorch's C shim, _torch_direct.h, where
 * it agrees with the attribute reads on probe tensors; the attributes
 * otherwise) and anything else through __dlpack__. A read returns 0, 1 for
 * input the binding cannot hand over (`reason` says why) or -1 with a
 * Python error.
 */
#include "_binding.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "_torch_direct.h"

const char *const fw_names[FW_COUNT] = {"numpy", "torch", "cupy", "dlpack"};
PyObject *frameworks;
char reason[512];

PyObject *s_dtype, *s_layout, *s_is_neg, *s_is_conj, *s_is_cuda, *s_is_cpu, *s_get_device,
    *s_data_ptr, *s_shape, *s_stride, *s_requires_grad, *s_element_size, *s_array_interface,
    *s_data, *s_strides, *s_typestr, *s_dlpack, *s_dlpack_device, *s_stream, *s_name, *s_out,
    *s_is_contiguous, *s_cdata, *s_probes;

int readers_init(void) {
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
        if (!(*names[i].slot = PyUnicode_InternFromString(names[i].text))) return -1;
    return 0;
}

/* torch, found in sys.modules when first seen. */
PyTypeObject *torch_tensor;
PyObject *torch_grad_enabled, *torch_raw_stream;
static PyObject *torch_strided;
static struct { PyObject *dtype; int sp; int size; int32_t code; } torch_dtypes[16];
static int n_torch_dtypes;
int direct_ok, direct;
static PyTypeObject *numpy_ndarray, *cupy_ndarray;

PyObject *call0(PyObject *o, PyObject *name) {
#if PY_VERSION_HEX >= 0x03090000
    return PyObject_CallMethodNoArgs(o, name);
#else
    return PyObject_CallMethodObjArgs(o, name, NULL);
#endif
}

PyObject *call1(PyObject *f, PyObject *arg) {
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
static PyObject **const t_names[T_COUNT] = {&s_dtype, &s_shape, &s_is_cuda, &s_is_cpu,
                                            &s_requires_grad, &s_cdata, &s_is_neg, &s_stride,
                                            &s_data_ptr, &s_get_device, &s_is_contiguous};
static const char t_is_method[T_COUNT] = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1};
static PyObject *t_descr[T_COUNT]; /* NULL: look the name up */

/* x.<attribute a>, or x.<method a>() (a new reference, NULL on error). */
PyObject *tget(PyObject *x, int a) {
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

static int read_torch_attrs(PyObject *x, view *v, int flags);
static int read_torch_direct(PyObject *x, view *v, int flags);
PyObject *hook(int fw);

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

int init_torch(void) {
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
int framework_of(PyObject *x) {
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

void view_clear(view *v) {
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
int truth(PyObject *r) {
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

int read_torch(PyObject *x, view *v, int flags) {
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

/* x.__dlpack__(max_version=(1, 0)[, stream]): producers of DLPack 1.0 and
 * later then give a versioned capsule, which carries the read-only flag;
 * one that does not take max_version (TypeError) is asked again without.
 * On CUDA `stream` is the stream the work will run on (DLPack names the
 * legacy default 1). */
static PyObject *export_dlpack(PyObject *x, int cuda, uintptr_t stream) {
    PyObject *f = PyObject_GetAttr(x, s_dlpack);
    PyObject *none = f ? PyTuple_New(0) : NULL, *cap = NULL;
    for (int versioned = 1; none && versioned >= 0; versioned--) {
        PyObject *kw = cuda ? Py_BuildValue("{s:K}", "stream",
                                            (unsigned long long)(stream ? stream : 1))
                            : PyDict_New();
        PyObject *ver = versioned && kw ? Py_BuildValue("(ii)", 1, 0) : NULL;
        const int ok = kw && (!versioned || (ver && PyDict_SetItemString(kw, "max_version", ver) == 0));
        Py_XDECREF(ver);
        cap = ok ? PyObject_Call(f, none, kw) : NULL;
        Py_XDECREF(kw);
        if (cap || !ok || !versioned || !PyErr_ExceptionMatches(PyExc_TypeError)) break;
        PyErr_Clear(); /* a producer from before DLPack 1.0 */
    }
    Py_XDECREF(none);
    Py_XDECREF(f);
    return cap;
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
    PyObject *cap = export_dlpack(x, cuda, stream);
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
int read_view(PyObject *x, int fw, view *v, uintptr_t dl_stream, int flags) {
    memset(v, 0, offsetof(view, shape)); /* the caller cleared keep */
    v->exact = -1;
    v->fw = fw;
    switch (fw) {
    case FW_TORCH: return read_torch(x, v, flags);
    case FW_NUMPY: return read_numpy(x, v);
    default: return read_dlpack(x, v, dl_stream);
    }
}


PyObject *hook(int fw) {
    if (!frameworks || !PyList_Check(frameworks) || PyList_GET_SIZE(frameworks) != FW_COUNT) {
        PyErr_SetString(PyExc_RuntimeError, "stridepack._native: frameworks not configured");
        return NULL;
    }
    return PyList_GET_ITEM(frameworks, fw);
}
