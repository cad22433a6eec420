/*
 * _ops.c — pack, pack_into, copy_batch and workspace_bytes: each reads its
 * arrays (_readers.c), checks in the caller's terms what only the binding
 * sees (one framework, read-only destinations, shapes and dtypes of pairs,
 * a workspace that owns its bytes), converts them (_layout.c) and makes
 * one library call. What C cannot decide alone is left to the Python
 * package: making an output array (the `frameworks` hooks), allocating a
 * workspace, and every fallback to the framework's own copy, for which
 * these raise `Fallback(kind, index, reason)` having written nothing.
 */
#include "_binding.h"

#include <stdio.h>
#include <string.h>

#include "_torch_direct.h"

PyObject *error_for;
PyObject *Fallback;

/* ---- errors and streams --------------------------------------------------- */

PyObject *raise_sp(int code, const char *message) {
    char name[64];
    const char *s = sp_status_string((sp_status)code);
    size_t n = strcspn(s, ":");
    snprintf(name, sizeof name, "%.*s", (int)n, s);
    PyObject *e = PyObject_CallFunction(error_for, "sis", name, code, message);
    if (e) { PyErr_SetObject((PyObject *)Py_TYPE(e), e); Py_DECREF(e); }
    return NULL;
}

PyObject *raise_status(int status) { return raise_sp(status, sp_last_error()); }

static PyObject *raise_fallback(const char *kind, Py_ssize_t index, const char *why) {
    PyObject *a = Py_BuildValue("(sns)", kind, index, why);
    if (a) { PyErr_SetObject(Fallback, a); Py_DECREF(a); }
    return NULL;
}

/* The stream the work on `dev` runs on: torch's or CuPy's current stream,
 * the legacy default (NULL) for other producers. -1 on error. */
int stream_of(int fw, sp_device dev, uintptr_t *out) {
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

const char *device_name(sp_device d, char *buf, size_t n) {
    if (d.type == SP_DEVICE_CUDA) snprintf(buf, n, "cuda:%d", (int)d.ordinal);
    else snprintf(buf, n, "cpu");
    return buf;
}

/* An array the library fills as raw bytes (a workspace), read into wv and
 * checked before any call: readable, writable, dense (only then are its
 * numel x itemsize bytes from its address its own: an expanded view covers
 * a few bytes many times, a strided one skips bytes that belong to others)
 * and on `dev`, where the call runs. 0 with *ptr and *bytes set; -1 with
 * the error raised, nothing written. */
int scratch_of(PyObject *x, int fw, view *wv, sp_device dev, uintptr_t dl_stream,
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
#define N_CACHES 4 /* workspaces whose torch outputs are kept */
static ws_cache caches[N_CACHES];
static int next_cache;
PyObject *cache_drop_fn;

static void cache_clear(ws_cache *c) {
    for (Py_ssize_t i = 0; i < c->n; i++) Py_CLEAR(c->e[i].out);
    c->n = 0;
    Py_CLEAR(c->ref);
}

PyObject *cache_drop(PyObject *self, PyObject *ref) {
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
view *views_new(Py_ssize_t n, view *local) {
    view *v = local && n <= N_LOCAL_VIEWS ? local : PyMem_Malloc((size_t)(n ? n : 1) * sizeof(view));
    if (!v) return (view *)PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) memset(&v[i], 0, offsetof(view, shape));
    return v;
}

void views_free(view *v, Py_ssize_t n, view *local) {
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

/* The list of outputs of a pack: items[i] itself where out[i] is in[i],
 * else an array of framework fw over the workspace ws (wv: its view) at
 * out[i]'s slot, reused from the previous call into the same torch
 * workspace when it still is what would be built. A workspace allocated
 * for the call (temporary) dies with it: nothing is kept. */
static PyObject *outputs_of(int fw, PyObject **items, Py_ssize_t n, const view *v,
                            const sp_tensor *in, const sp_tensor *out, PyObject *ws,
                            const view *wv, int temporary) {
    ws_cache *c = fw == FW_TORCH && !temporary ? cache_for(ws) : NULL;
    PyObject *result = PyList_New(n);
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
    return result;
}

/* pack(tensors, workspace=None): on CUDA, on the framework's current stream */
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

PyObject *py_pack(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xs, *ws = Py_None;
    if (!PyArg_ParseTuple(args, "O|O", &xs, &ws)) return NULL;
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
    if (stream_of(fw, dev, &stream) < 0) goto done;
    int st;
    if (dev.type == SP_DEVICE_CPU) { /* a CPU pass may be long: let other threads run */
        Py_BEGIN_ALLOW_THREADS
        st = sp_pack(in, (size_t)n, ws_ptr, ws_bytes, out, NULL, NULL);
        Py_END_ALLOW_THREADS
    } else {
        st = sp_pack(in, (size_t)n, ws_ptr, ws_bytes, out, NULL, (struct CUstream_st *)stream);
    }
    if (library_failed(st)) goto done;
    result = outputs_of(fw, items, n, v, in, out, ws, wv, own_ws != NULL);
done:
    views_free(v, n + 1, local);
    Py_XDECREF(own_ws);
    Py_DECREF(fast);
    return result;
}

/* workspace_bytes(tensors): inputs the binding cannot read count nothing. */
PyObject *py_workspace_bytes(PyObject *self, PyObject *xs) {
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
static PyObject *copy_pairs(PyObject **srcs, PyObject **dsts, Py_ssize_t n, names_style style) {
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
    /* The names are formatted only once a check has failed: a snprintf per
     * array on every call was a measurable part of the host cost. */
#define SP_NAMES_ (side_name(style, i, 0, sn, sizeof sn), side_name(style, i, 1, dn, sizeof dn))
    for (Py_ssize_t i = 0; i < n; i++) {
        const view *s = &v[2 * i], *d = &v[2 * i + 1];
        if (d->readonly) {
            SP_NAMES_;
            snprintf(m, sizeof m, "%s: read-only", dn);
            raise_sp(SP_ERR_INVALID_ARGUMENT, m);
            goto done;
        }
        /* In the caller's terms, before the views become words of a unit. */
        if (s->ndim != d->ndim ||
            memcmp(s->shape, d->shape, sizeof(int64_t) * (size_t)s->ndim)) {
            SP_NAMES_;
            snprintf(m, sizeof m, "%s: shape %s differs from %s %s", dn,
                     shape_text(d, a, sizeof a), sn, shape_text(s, b, sizeof b));
            raise_sp(SP_ERR_SHAPE_MISMATCH, m);
            goto done;
        }
        if (s->exact != d->exact || s->itemsize != d->itemsize) {
            SP_NAMES_;
            snprintf(m, sizeof m, "%s: dtype %s differs from %s %s", dn, dtype_text(d, a, sizeof a),
                     sn, dtype_text(s, b, sizeof b));
            raise_sp(SP_ERR_DTYPE_MISMATCH, m);
            goto done;
        }
        if (pair_tensors(s, d, &pairs[i])) {
            SP_NAMES_;
            snprintf(m, sizeof m, "%s: %s", sn, reason);
            raise_fallback("unsupported", i, m);
            goto done;
        }
    }
#undef SP_NAMES_
    if (stream_fw >= 0 && stream_of(stream_fw, stream_dev, &stream) < 0)
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

/* copy_batch(pairs) */
PyObject *py_copy_batch(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ps;
    if (!PyArg_ParseTuple(args, "O", &ps)) return NULL;
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
    result = copy_pairs(srcs, dsts, n, NAMES_PAIRS);
done:
    for (Py_ssize_t i = 0; i < held; i++) Py_DECREF(fasts[i]);
    PyMem_Free(fasts);
    PyMem_Free(srcs);
    Py_DECREF(fast);
    return result;
}

/* pack_into(inputs, outputs) */
PyObject *py_pack_into(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *xs, *os, *result = NULL;
    if (!PyArg_ParseTuple(args, "OO", &xs, &os)) return NULL;
    PyObject *fx = as_fast_list(xs, "inputs");
    PyObject *fo = fx ? as_fast_list(os, "outputs") : NULL;
    if (!fo) { Py_XDECREF(fx); return NULL; }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fx);
    if (PySequence_Fast_GET_SIZE(fo) != n) {
        PyErr_Format(PyExc_ValueError, "stridepack: %zd inputs but %zd outputs", n,
                     PySequence_Fast_GET_SIZE(fo));
    } else {
        result = copy_pairs(PySequence_Fast_ITEMS(fx), PySequence_Fast_ITEMS(fo), n,
                            NAMES_INPUTS_OUTPUTS);
    }
    Py_DECREF(fx);
    Py_DECREF(fo);
    return result;
}

/* readable(x): None when the binding can hand x to the library, else why not. */
PyObject *py_readable(PyObject *self, PyObject *x) {
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
PyObject *py_describe(PyObject *self, PyObject *args) {
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

/* ---- kda_inputs_pack ------------------------------------------------------ */

/* kda_inputs_pack(capsule, (q, k, v, g, beta), workspace, (type, ordinal)):
 * the inputs boundary's pack (sp_kda_inputs_pack) into its workspace, an
 * array on the boundary's device that the Python object owns; outputs as
 * pack's. */
PyObject *py_kda_inputs_pack(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap, *xs, *ws;
    int dtype_, dord;
    if (!PyArg_ParseTuple(args, "OOO(ii)", &cap, &xs, &ws, &dtype_, &dord)) return NULL;
    const sp_device dev = {dtype_, dord};
    sp_kda_inputs *p = kda_inputs_of(cap);
    if (!p) return NULL;
    PyObject *fast = as_fast_list(xs, "inputs");
    if (!fast) return NULL;
    enum { N = 5 };
    static const char *const names[N] = {"q", "k", "v", "g", "beta"};
    PyObject *result = NULL;
    if (PySequence_Fast_GET_SIZE(fast) != N) {
        PyErr_Format(PyExc_TypeError, "stridepack: KdaInputs.pack takes q, k, v, g, beta");
        Py_DECREF(fast);
        return NULL;
    }
    PyObject **items = PySequence_Fast_ITEMS(fast);
    view local[N_LOCAL_VIEWS], *v = views_new(N + 1, local), *wv = v ? &v[N] : NULL;
    sp_tensor in[N], out[N];
    int fw = -1;
    char m[800];
    if (!v) goto done;
    for (int i = 0; i < N; i++) {
        int f = framework_of(items[i]);
        if (f < 0) goto done;
        if (fw >= 0 && f != fw) {
            PyErr_Format(PyExc_TypeError, "stridepack: KdaInputs.pack takes one framework per "
                         "call, got %s and %s", fw_names[fw], fw_names[f]);
            goto done;
        }
        fw = f;
        int r = read_view(items[i], f, &v[i], 0, 1);
        if (r < 0) goto done;
        if (r == 0) r = elements_tensor(&v[i], &in[i]);
        if (r > 0) { /* not a view the library takes: the contract refuses it */
            snprintf(m, sizeof m, "%s: %s", names[i], reason);
            raise_sp(SP_ERR_INVALID_ARGUMENT, m);
            goto done;
        }
    }
    if (fw == FW_TORCH && autograd_check(v, N) < 0) goto done;
    int wfw = framework_of(ws);
    if (wfw < 0) goto done;
    void *ws_ptr;
    size_t ws_bytes;
    /* The workspace was checked at creation; read again for its framework
     * object and because a tensor's metadata can change in place. */
    if (wfw != fw) {
        PyErr_Format(PyExc_TypeError, "stridepack: KdaInputs.pack: %s inputs, but the "
                     "workspace is %s (the framework of the first call)", fw_names[fw],
                     fw_names[wfw]);
        goto done;
    }
    if (scratch_of(ws, wfw, wv, dev, 0, "workspace", &ws_ptr, &ws_bytes) < 0) goto done;
    uintptr_t stream = 0;
    if (stream_of(fw, in[0].device, &stream) < 0) goto done;
    int st;
    if (in[0].device.type == SP_DEVICE_CPU) {
        Py_BEGIN_ALLOW_THREADS
        st = sp_kda_inputs_pack(p, in, out, NULL, NULL);
        Py_END_ALLOW_THREADS
    } else {
        st = sp_kda_inputs_pack(p, in, out, NULL, (struct CUstream_st *)stream);
    }
    if (st != SP_OK) { raise_status(st); goto done; }
    result = outputs_of(fw, items, N, v, in, out, ws, wv, 0);
done:
    views_free(v, N + 1, local);
    Py_DECREF(fast);
    return result;
}
