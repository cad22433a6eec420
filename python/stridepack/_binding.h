/*
 * _binding.h — what the files of the extension module stridepack._native
 * share: the view as a producer describes it (strides in bytes, any number
 * of dims), and one section per file.
 *
 *   _readers.c  NumPy (__array_interface__), PyTorch (its own fields, or
 *               libtorch's C shim: _torch_direct.h) and DLPack -> view
 *   _layout.c   view -> sp_tensor / sp_copy_pair (words, merged dims: the
 *               library's src/view_import.h), and the views' text for
 *               messages
 *   _ops.c      pack, pack_into, copy_batch, workspace_bytes: arguments
 *               checked, the library called, errors raised; torch outputs
 *               kept per workspace
 *   _args.c     the arrays of one library entry into its sp_tensor fields,
 *               by one rule (the KDA calls and the convolution)
 *   _kda_ops.c  the four KDA calls, the boundary object and the inputs
 *               boundary object (its pack is in _ops.c, beside pack)
 *   _conv_ops.c the causal convolution (prefill, decode, their references)
 *   _native.c   the module: its method table, small queries, init
 *
 * Internal to the module (hidden symbols, no prefix); nothing here is API.
 */
#ifndef SP_BINDING_H
#define SP_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

/* The binding exposes the test hooks (copy pass count, boundary copies) to
 * its tests: the experimental section of the headers. */
#ifndef SP_EXPERIMENTAL
#define SP_EXPERIMENTAL
#endif
#include "stridepack.h"
#include "stridepack_conv.h"
#include "stridepack_kda.h"

#define MAX_READ_DIMS 64 /* NumPy allows 64; more is refused as unsupported */
#define N_LOCAL_VIEWS 8  /* views a call holds on the stack (more are allocated) */

enum { FW_NUMPY = 0, FW_TORCH = 1, FW_CUPY = 2, FW_DLPACK = 3, FW_COUNT = 4 };
extern const char *const fw_names[FW_COUNT];

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

/* ---- _readers.c ---- */

extern char reason[512];     /* why the last read or conversion was unsupported */
extern PyObject *frameworks; /* list of FW_COUNT hook objects (configure()), or None */
/* Interned attribute names (readers_init). */
extern PyObject *s_dtype, *s_layout, *s_is_neg, *s_is_conj, *s_is_cuda, *s_is_cpu,
    *s_get_device, *s_data_ptr, *s_shape, *s_stride, *s_requires_grad, *s_element_size,
    *s_array_interface, *s_data, *s_strides, *s_typestr, *s_dlpack, *s_dlpack_device,
    *s_stream, *s_name, *s_out, *s_is_contiguous, *s_cdata, *s_probes;
/* torch, found in sys.modules when first seen (never imported here). */
extern PyTypeObject *torch_tensor;
extern PyObject *torch_grad_enabled, *torch_raw_stream;
/* Whether torch tensors may be read through libtorch's C shim (set when
 * torch is first seen, when both ways agreed on the probe tensors), and
 * whether they are (the tests turn it off and on: direct_reads()). */
extern int direct_ok, direct;

/* torch.Tensor's getters and methods that tget() reads. */
enum { T_DTYPE, T_SHAPE, T_IS_CUDA, T_IS_CPU, T_REQUIRES_GRAD, T_CDATA, T_IS_NEG, T_STRIDE,
       T_DATA_PTR, T_GET_DEVICE, T_IS_CONTIGUOUS, T_COUNT };
/* What read_torch reads: RD_GRAD requires_grad too (the inputs of a copy;
 * a workspace's does not matter), RD_NO_NEG not the lazy negation and
 * conjugation bits (a tensor the binding built itself). */
enum { RD_GRAD = 1, RD_NO_NEG = 2 };

/* The attribute names interned: 0, or -1 with an exception set. */
int readers_init(void);
PyObject *call0(PyObject *o, PyObject *name);
PyObject *call1(PyObject *f, PyObject *arg);
PyObject *tget(PyObject *x, int a);
int truth(PyObject *r);
int framework_of(PyObject *x);
int read_view(PyObject *x, int fw, view *v, uintptr_t dl_stream, int flags);
int read_torch(PyObject *x, view *v, int flags);
void view_clear(view *v);
int init_torch(void);
PyObject *hook(int fw);

/* ---- _layout.c ---- */

int is_dense(const view *v);
int to_tensor(const view *v, sp_tensor *t);
int pair_tensors(const view *s, const view *d, sp_copy_pair *p);
int elements_tensor(const view *v, sp_tensor *t);
const char *shape_text(const view *v, char *buf, size_t n);
const char *strides_text(const view *v, char *buf, size_t n);
const char *dtype_text(const view *v, char *buf, size_t n);

/* ---- _ops.c ---- */

extern PyObject *error_for;     /* stridepack._errors.error: the exception for a status */
extern PyObject *Fallback;      /* raised to ask for the general path */
extern PyObject *cache_drop_fn; /* the weakref callback that drops a workspace's outputs */

PyObject *raise_sp(int code, const char *message);
PyObject *raise_status(int status);
int stream_of(int fw, sp_device dev, uintptr_t *out);
view *views_new(Py_ssize_t n, view *local);
void views_free(view *v, Py_ssize_t n, view *local);
const char *device_name(sp_device d, char *buf, size_t n);
int scratch_of(PyObject *x, int fw, view *wv, sp_device dev, uintptr_t dl_stream,
               const char *name, void **ptr, size_t *bytes);
PyObject *cache_drop(PyObject *self, PyObject *ref);
PyObject *py_pack(PyObject *self, PyObject *args);
PyObject *py_pack_into(PyObject *self, PyObject *args);
PyObject *py_copy_batch(PyObject *self, PyObject *args);
PyObject *py_workspace_bytes(PyObject *self, PyObject *xs);
PyObject *py_readable(PyObject *self, PyObject *x);
PyObject *py_describe(PyObject *self, PyObject *args);
PyObject *py_kda_inputs_pack(PyObject *self, PyObject *args);

/* ---- _args.c ---- */

/* The arrays of one entry: n names; bit i of `required`, array i may not be
 * None; bit i of `written`, the entry writes array i (a read-only one is
 * refused); none_hint(i), what array i is, for the None message. entry and
 * writer name the call in messages ("KDA", "the prefill"). */
typedef struct call_arrays {
    const char *entry, *writer;
    const char *const *names;
    int n;
    unsigned required, written;
    const char *(*none_hint)(int i);
} call_arrays;
/* Each array of the tuple ts into *fields[i] (None left unset), views in
 * v[0 .. n); check_written 0 skips the read-only refusal (a query that
 * writes nothing). *fw0, *dev: the first array's framework and device
 * (-1 and the CPU when every array is None). 0, or -1 with the error set. */
int read_call_arrays(PyObject *ts, const call_arrays *c, sp_tensor *const fields[], view *v,
                     int check_written, int *fw0, sp_device *dev);

/* ---- _conv_ops.c ---- */
PyObject *py_conv(PyObject *self, PyObject *args);

/* ---- _kda_ops.c ---- */

PyObject *py_kda_prefill(PyObject *self, PyObject *args);
PyObject *py_kda_reference(PyObject *self, PyObject *args);
PyObject *py_kda_boundary_run(PyObject *self, PyObject *args);
PyObject *py_kda_workspace_bytes(PyObject *self, PyObject *args);
PyObject *py_kda_reads_in_place(PyObject *self, PyObject *x);
PyObject *py_kda_available(PyObject *self, PyObject *unused);
PyObject *py_kda_kernel_name(PyObject *self, PyObject *k);
PyObject *py_boundary_create(PyObject *self, PyObject *args);
PyObject *py_boundary_close(PyObject *self, PyObject *cap);
PyObject *py_boundary_last_copied(PyObject *self, PyObject *cap);
PyObject *py_kda_inputs_create(PyObject *self, PyObject *args);
PyObject *py_kda_inputs_close(PyObject *self, PyObject *cap);
PyObject *py_kda_inputs_workspace_bytes(PyObject *self, PyObject *args);
/* The inputs boundary of a capsule from kda_inputs_create, or NULL with an
 * error set (not a capsule of ours, or closed). */
sp_kda_inputs *kda_inputs_of(PyObject *cap);

#endif
