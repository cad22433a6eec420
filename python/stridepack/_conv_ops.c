/*
 * _conv_ops.c — the causal short convolution (include/stridepack_conv.h):
 * its prefill and decode and their float64 references, one entry point over
 * the arrays of sp_conv_args (read by _args.c's rule).
 */
#include "_binding.h"

static const char *const conv_names[] = {"x",     "weight",        "bias",
                                         "cu_seqlens", "state",   "state_indices",
                                         "has_initial_state", "out", "q", "k", "v"};
#define N_CONV 11

static const char *conv_none_hint(int i) {
    return i == 0   ? "bf16 [T, C] (decode: [N, C]): the projection's columns to convolve"
           : i == 1 ? "f32 or bf16 [C, W]: the taps"
           : i == 4 ? "bf16 [slots, C, W - 1]: the conv state pool"
                    : "int32 or int64 [N]: each sequence's slot, -1 for a padded one";
}
/* x, weight, state and state_indices are required (the library checks the
 * rest: cu_seqlens for the prefill, exactly one output layout); the
 * convolution writes the state (4) and its output (7 .. 10). */
static const call_arrays conv_arrays = {"convolution", "the convolution", conv_names, N_CONV,
                                        1u << 0 | 1u << 1 | 1u << 4 | 1u << 5,
                                        1u << 4 | 1u << 7 | 1u << 8 | 1u << 9 | 1u << 10,
                                        conv_none_hint};

/* conv(arrays, silu, decode, reference) */
PyObject *py_conv(PyObject *self, PyObject *args) {
    (void)self;
    PyObject *ts;
    int silu, decode, reference;
    if (!PyArg_ParseTuple(args, "Oppp", &ts, &silu, &decode, &reference)) return NULL;
    sp_conv_args a;
    sp_conv_args_init(&a);
    a.silu = silu;
    sp_tensor *const fields[N_CONV] = {&a.x,     &a.weight,        &a.bias,
                                       &a.cu_seqlens, &a.state,    &a.state_indices,
                                       &a.has_initial_state, &a.out, &a.q, &a.k, &a.v};
    view *v = views_new(N_CONV, NULL);
    if (!v) return NULL;
    PyObject *result = NULL;
    int fw0 = -1;
    sp_device dev = sp_cpu();
    uintptr_t stream = 0;
    if (read_call_arrays(ts, &conv_arrays, fields, v, 1, &fw0, &dev) < 0) goto done;
    if (fw0 >= 0 && stream_of(fw0, dev, &stream) < 0) goto done;
    struct CUstream_st *st_ = (struct CUstream_st *)stream;
    const int st = reference ? (decode ? sp_conv_decode_reference(&a) : sp_conv_prefill_reference(&a))
                             : (decode ? sp_conv_decode(&a, st_) : sp_conv_prefill(&a, st_));
    if (st != SP_OK) {
        raise_status(st);
        goto done;
    }
    result = Py_None;
    Py_INCREF(result);
done:
    views_free(v, N_CONV, NULL);
    return result;
}
