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

static const char *const kda_names[] = {
    "q",     "k",           "v",    "g", "beta", "A_log", "dt_bias", "cu_seqlens", "state",
    "state_indices", "o", "checkpoint_cu_starts", "checkpoints", "has_initial_state",
    "num_accepted_tokens"};
#define N_KDA 15
#define N_KDA_REQUIRED 11 /* all but the checkpoint arrays and the last two */
static const char *kda_none_hint(int i) {
    return i == 9 ? "int32 or int64 [N]: the state slot of each sequence (or a verify table "
                    "[N, W])"
                  : "see stridepack_kda.h";
}
/* The first 11 are required; the prefill writes the state (8), o (10) and
 * the checkpoints (12). */
static const call_arrays kda_arrays = {"KDA",           "the prefill",
                                       kda_names,       N_KDA,
                                       (1u << N_KDA_REQUIRED) - 1,
                                       1u << 8 | 1u << 10 | 1u << 12,
                                       kda_none_hint};

static void kda_fields(sp_kda_args *a, sp_tensor *f[N_KDA]) {
    sp_tensor *const all[N_KDA] = {&a->q,
                                   &a->k,
                                   &a->v,
                                   &a->g,
                                   &a->beta,
                                   &a->A_log,
                                   &a->dt_bias,
                                   &a->cu_seqlens,
                                   &a->state,
                                   &a->state_indices,
                                   &a->o,
                                   &a->checkpoint_cu_starts,
                                   &a->checkpoints,
                                   &a->has_initial_state,
                                   &a->num_accepted_tokens};
    for (int i = 0; i < N_KDA; i++) f[i] = all[i];
}

/* ---- library objects held by capsules (the boundary, KdaInputs) ---------- */

typedef struct owned {
    void *obj; /* NULL once closed */
    sp_status (*destroy)(void *);
    const char *what; /* for "<what>: already closed" */
} owned;

static void owned_free(PyObject *cap) {
    owned *o = PyCapsule_GetPointer(cap, PyCapsule_GetName(cap));
    if (o) {
        if (o->obj) o->destroy(o->obj);
        PyMem_Free(o);
    }
}

/* A capsule named `name` that owns obj (destroyed with it, or here when
 * the capsule cannot be made). */
static PyObject *owned_new(void *obj, sp_status (*destroy)(void *), const char *name,
                           const char *what) {
    owned *o = PyMem_Malloc(sizeof *o);
    if (!o) {
        destroy(obj);
        return PyErr_NoMemory();
    }
    *o = (owned){obj, destroy, what};
    PyObject *cap = PyCapsule_New(o, name, owned_free);
    if (!cap) {
        destroy(obj);
        PyMem_Free(o);
    }
    return cap;
}

/* The object of an open capsule; NULL with the error set otherwise. */
static void *owned_get(PyObject *cap, const char *name) {
    owned *o = PyCapsule_GetPointer(cap, name);
    if (!o) return NULL;
    if (!o->obj) {
        char m[64];
        snprintf(m, sizeof m, "%s: already closed", o->what);
        raise_sp(SP_ERR_INVALID_ARGUMENT, m);
    }
    return o->obj;
}

/* Destroy the object now (a second close does nothing). */
static PyObject *owned_close(PyObject *cap, const char *name) {
    owned *o = PyCapsule_GetPointer(cap, name);
    if (!o) return NULL;
    void *obj = o->obj;
    o->obj = NULL;
    const int st = obj ? o->destroy(obj) : SP_OK;
    if (st != SP_OK) return raise_status(st);
    Py_RETURN_NONE;
}

/* The device (type, ordinal) a constructor was given; -1 with the error set
 * for a negative CUDA ordinal (the library would only say "no device"). */
static int device_of(int type, int ordinal, sp_device *d) {
    if (type == SP_DEVICE_CUDA && ordinal < 0) {
        char m[128];
        snprintf(m, sizeof m, "device: CUDA ordinal %d is negative (devices are numbered from 0)",
                 ordinal);
        raise_sp(SP_ERR_INVALID_ARGUMENT, m);
        return -1;
    }
    *d = (sp_device){type, ordinal};
    return 0;
}

static sp_status destroy_boundary(void *b) { return sp_kda_boundary_destroy(b); }
static sp_status destroy_inputs(void *p) { return sp_kda_inputs_destroy(p); }
#define BOUNDARY_CAPSULE "stridepack.boundary"
#define INPUTS_CAPSULE "stridepack.kda_inputs"

typedef enum { KDA_PREFILL, KDA_REFERENCE, KDA_BOUNDARY_RUN, KDA_WORKSPACE_BYTES } kda_op;

/* One KDA call: read the 15 arrays (None for an absent optional one),
 * check what the binding alone can see (a None where an array is needed,
 * a read-only array the call writes, the workspace's bytes), then fill
 * sp_kda_args and call the library. */
static PyObject *kda_call(kda_op op, PyObject *bcap, PyObject *ts, int gate, float lb, float scale,
                          long long interval, int kernel, PyObject *ws, int beta_form) {
    sp_kda_boundary *boundary = NULL;
    if (op == KDA_BOUNDARY_RUN && !(boundary = owned_get(bcap, BOUNDARY_CAPSULE))) return NULL;
    sp_kda_args a;
    sp_kda_args_init(&a);
    a.gate = gate;
    a.lower_bound = lb;
    a.scale = scale;
    a.checkpoint_interval = interval;
    a.kernel = kernel;
    a.beta_form = beta_form;
    view *v = views_new(N_KDA + 1, NULL), *wv = v ? &v[N_KDA] : NULL;
    PyObject *result = NULL;
    int fw0 = -1;
    sp_device dev = sp_cpu();
    uintptr_t stream = 0;
    if (!v) return NULL;
    sp_tensor *fields[N_KDA];
    kda_fields(&a, fields);
    if (read_call_arrays(ts, &kda_arrays, fields, v, op != KDA_WORKSPACE_BYTES, &fw0, &dev) < 0)
        goto done;
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
    if (op == KDA_BOUNDARY_RUN) st = sp_kda_boundary_run(boundary, &a, (struct CUstream_st *)stream);
    else if (op == KDA_REFERENCE) st = sp_kda_prefill_reference(&a);
    else st = sp_kda_prefill(&a, (struct CUstream_st *)stream);
    if (st != SP_OK) { raise_status(st); goto done; }
    result = Py_None;
    Py_INCREF(result);
done:
    views_free(v, N_KDA + 1, NULL);
    return result;
}

/* kda_prefill(arrays, gate, lower_bound, scale, checkpoint_interval, kernel, workspace,
 * beta_form=0) */
PyObject *py_kda_prefill(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ts, *ws;
    int gate, kernel, beta = 0;
    float lb, scale;
    long long interval;
    if (!PyArg_ParseTuple(args, "OiffLiO|i", &ts, &gate, &lb, &scale, &interval, &kernel, &ws,
                          &beta))
        return NULL;
    return kda_call(KDA_PREFILL, NULL, ts, gate, lb, scale, interval, kernel, ws, beta);
}

/* kda_reference(arrays, gate, lower_bound, scale, checkpoint_interval, beta_form=0) */
PyObject *py_kda_reference(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ts;
    int gate, beta = 0;
    float lb, scale;
    long long interval;
    if (!PyArg_ParseTuple(args, "OiffL|i", &ts, &gate, &lb, &scale, &interval, &beta))
        return NULL;
    return kda_call(KDA_REFERENCE, NULL, ts, gate, lb, scale, interval, 0, Py_None, beta);
}

/* kda_boundary_run(boundary, arrays, gate, lower_bound, scale, checkpoint_interval, kernel,
 * workspace, beta_form=0) */
PyObject *py_kda_boundary_run(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *cap, *ts, *ws;
    int gate, kernel, beta = 0;
    float lb, scale;
    long long interval;
    if (!PyArg_ParseTuple(args, "OOiffLiO|i", &cap, &ts, &gate, &lb, &scale, &interval, &kernel,
                          &ws, &beta))
        return NULL;
    return kda_call(KDA_BOUNDARY_RUN, cap, ts, gate, lb, scale, interval, kernel, ws, beta);
}

/* kda_workspace_bytes(arrays, gate, lower_bound, scale, checkpoint_interval, beta_form=0) */
PyObject *py_kda_workspace_bytes(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ts;
    int gate, beta = 0;
    float lb, scale;
    long long interval;
    if (!PyArg_ParseTuple(args, "OiffL|i", &ts, &gate, &lb, &scale, &interval, &beta)) return NULL;
    return kda_call(KDA_WORKSPACE_BYTES, NULL, ts, gate, lb, scale, interval, 0, Py_None, beta);
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
    sp_device d;
    if (device_of(type, ordinal, &d) < 0) return NULL;
    sp_kda_boundary *b = NULL;
    int st = sp_kda_boundary_create(&b, d, max_tokens, max_heads);
    if (st != SP_OK) return raise_status(st);
    return owned_new(b, destroy_boundary, BOUNDARY_CAPSULE, "boundary");
}

PyObject *py_boundary_close(PyObject *self, PyObject *cap) {
    (void)self;
    return owned_close(cap, BOUNDARY_CAPSULE);
}

PyObject *py_boundary_last_copied(PyObject *self, PyObject *cap) {
    (void)self;
    sp_kda_boundary *b = owned_get(cap, BOUNDARY_CAPSULE);
    if (!b) return NULL;
    size_t n = 0;
    int st = sp_kda_boundary_last_copied(b, &n);
    return st == SP_OK ? PyLong_FromSize_t(n) : raise_status(st);
}

/* ---- the inputs boundary ------------------------------------------------- */

sp_kda_inputs *kda_inputs_of(PyObject *cap) { return owned_get(cap, INPUTS_CAPSULE); }

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
    sp_device d;
    if (device_of(type, ordinal, &d) < 0) return NULL;
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
    return owned_new(p, destroy_inputs, INPUTS_CAPSULE, "KdaInputs");
}

PyObject *py_kda_inputs_close(PyObject *self, PyObject *cap) {
    (void)self;
    return owned_close(cap, INPUTS_CAPSULE);
}
