/*
 * _kda_ops.c — the KDA prefill, its float64 reference, the boundary's run
 * and the two-pass workspace size (include/stridepack_kda.h), one entry
 * point each, over one argument reader: every array the call writes (o,
 * the state pool, the checkpoints) is refused when read-only and the
 * workspace is checked as an array (_ops.c: scratch_of) before the call.
 */
#include "_binding.h"

#include <stdio.h>
#include <string.h>

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
PyObject *py_kda_prefill(PyObject *self, PyObject *args) {
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
PyObject *py_kda_reference(PyObject *self, PyObject *args) {
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
PyObject *py_kda_boundary_run(PyObject *self, PyObject *args) {
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
PyObject *py_kda_workspace_bytes(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ts;
    int gate;
    float lb, scale;
    long long interval;
    if (!PyArg_ParseTuple(args, "OiffL", &ts, &gate, &lb, &scale, &interval)) return NULL;
    return kda_call(KDA_WORKSPACE_BYTES, NULL, ts, gate, lb, scale, interval, 0, Py_None);
}

/* kda_reads_in_place(x) -> whether sp_kda_prefill reads the input x (q, k,
 * v or g) where it lies (sp_kda_reads_in_place): what the traced boundary
 * leaves uncopied. */
PyObject *py_kda_reads_in_place(PyObject *self, PyObject *x) {
    (void)self;
    view local[1];
    view *v = views_new(1, local);
    PyObject *result = NULL;
    sp_tensor t;
    if (!v) return NULL;
    const int fw = framework_of(x);
    if (fw >= 0) {
        const int r = read_view(x, fw, v, 0, 0);
        if (r == 0 && v->exact >= 0 && elements_tensor(v, &t) == 0)
            result = PyBool_FromLong(sp_kda_reads_in_place(&t));
        else if (r >= 0)
            result = PyBool_FromLong(0); /* not a view stridepack can read: copy it */
    }
    views_free(v, 1, local);
    return result;
}

/* kda_available() -> whether the linked library's KDA prefill runs: one
 * CPU prefill of one token and one head, tried once. */
PyObject *py_kda_available(PyObject *self, PyObject *unused) {
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
PyObject *py_kda_kernel_name(PyObject *self, PyObject *k) {
    (void)self;
    const long c = PyLong_AsLong(k);
    if (c == -1 && PyErr_Occurred()) return NULL;
    return PyUnicode_FromString(sp_kda_kernel_name((sp_kda_kernel)c));
}

PyObject *py_boundary_create(PyObject *self, PyObject *args) {
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

PyObject *py_boundary_close(PyObject *self, PyObject *cap) {
    (void)self;
    boundary_box *box = PyCapsule_GetPointer(cap, "stridepack.boundary");
    if (!box) return NULL;
    sp_kda_boundary *b = box->b;
    box->b = NULL;
    int st = sp_kda_boundary_destroy(b);
    if (st != SP_OK) return raise_status(st);
    Py_RETURN_NONE;
}

PyObject *py_boundary_last_copied(PyObject *self, PyObject *cap) {
    (void)self;
    boundary_box *box = PyCapsule_GetPointer(cap, "stridepack.boundary");
    if (!box) return NULL;
    if (!box->b) return raise_sp(SP_ERR_INVALID_ARGUMENT, "boundary: already closed");
    size_t n = 0;
    int st = sp_kda_boundary_last_copied(box->b, &n);
    return st == SP_OK ? PyLong_FromSize_t(n) : raise_status(st);
}

/* ---- the inputs boundary ------------------------------------------------- */

typedef struct { sp_kda_inputs *p; } inputs_box;

static void inputs_capsule_free(PyObject *cap) {
    inputs_box *box = PyCapsule_GetPointer(cap, "stridepack.kda_inputs");
    if (box) { sp_kda_inputs_destroy(box->p); PyMem_Free(box); }
}

sp_kda_inputs *kda_inputs_of(PyObject *cap) {
    inputs_box *box = PyCapsule_GetPointer(cap, "stridepack.kda_inputs");
    if (!box) return NULL;
    if (!box->p) raise_sp(SP_ERR_INVALID_ARGUMENT, "KdaInputs: already closed");
    return box->p;
}

/* kda_inputs_workspace_bytes(max_tokens, max_heads) -> int */
PyObject *py_kda_inputs_workspace_bytes(PyObject *self, PyObject *args) {
    (void)self;
    long long T, H;
    if (!PyArg_ParseTuple(args, "LL", &T, &H)) return NULL;
    size_t bytes = 0;
    int st = sp_kda_inputs_workspace_bytes(T, H, &bytes);
    return st == SP_OK ? PyLong_FromSize_t(bytes) : raise_status(st);
}

/* kda_inputs_create((type, ordinal), max_tokens, max_heads, workspace):
 * the workspace, an array the Python object keeps, is checked here as the
 * pack checks its workspace (writable, dense, on the device). */
PyObject *py_kda_inputs_create(PyObject *self, PyObject *args) {
    (void)self;
    int type, ordinal;
    long long T, H;
    PyObject *ws;
    if (!PyArg_ParseTuple(args, "(ii)LLO", &type, &ordinal, &T, &H, &ws)) return NULL;
    if (type == SP_DEVICE_CUDA && ordinal < 0) {
        char m[128];
        snprintf(m, sizeof m, "device: CUDA ordinal %d is negative (devices are numbered from 0)",
                 ordinal);
        return raise_sp(SP_ERR_INVALID_ARGUMENT, m);
    }
    sp_device d = {type, ordinal};
    void *ptr = NULL;
    size_t bytes = 0;
    if (ws != Py_None) {
        int fw = framework_of(ws);
        if (fw < 0) return NULL;
        view *wv = views_new(1, NULL);
        if (!wv) return NULL;
        int r = scratch_of(ws, fw, wv, d, 0, "workspace", &ptr, &bytes);
        views_free(wv, 1, NULL);
        if (r < 0) return NULL;
    }
    sp_kda_inputs *p = NULL;
    int st = sp_kda_inputs_create(&p, d, T, H, bytes ? ptr : NULL, bytes);
    if (st != SP_OK) return raise_status(st);
    inputs_box *box = PyMem_Malloc(sizeof *box);
    if (!box) { sp_kda_inputs_destroy(p); return PyErr_NoMemory(); }
    box->p = p;
    PyObject *cap = PyCapsule_New(box, "stridepack.kda_inputs", inputs_capsule_free);
    if (!cap) { sp_kda_inputs_destroy(p); PyMem_Free(box); }
    return cap;
}

PyObject *py_kda_inputs_close(PyObject *self, PyObject *cap) {
    (void)self;
    inputs_box *box = PyCapsule_GetPointer(cap, "stridepack.kda_inputs");
    if (!box) return NULL;
    sp_kda_inputs *p = box->p;
    box->p = NULL;
    int st = sp_kda_inputs_destroy(p);
    if (st != SP_OK) return raise_status(st);
    Py_RETURN_NONE;
}
