/*
 * conv_internal.h — what the convolution files share: the validated shape
 * of a call, the output segments (token-major is one segment, split is
 * three), the fp32 arithmetic that the CPU and the CUDA backend both run
 * (so that their outputs are bit-identical), and the backend entry points.
 * Included by C and by CUDA sources.
 */
#ifndef SP_CONV_INTERNAL_H
#define SP_CONV_INTERNAL_H

#include "bf16.h"
#include "index.h"
#include "internal.h"
#include "stridepack_conv.h"

#include <math.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the arithmetic, shared by the CPU and the CUDA backend ---------------- */

/* The convolution sum in fp32: the bias, then one fused multiply-add per tap,
 * z[0] the oldest input and z[W-1] the current token. Both backends run
 * exactly these operations, so without SiLU their outputs are identical. */
static inline SP_HD float sp_conv_sum_(const float *w, const float *z, int W, float bias) {
    float acc = bias;
    for (int j = 0; j < W; j++) acc = fmaf(w[j], z[j], acc);
    return acc;
}

/* y / (1 + exp(-y)). The kernel uses the hardware exp2 and reciprocal (a
 * correctly rounded exp and division would cost more instructions than a
 * memory-bound kernel can spend per element); the CPU uses libm. The two
 * differ by a few fp32 ulps, far below a bf16 ulp: after rounding to bf16
 * they agree except where the value lies next to a rounding boundary. */
static inline SP_HD float sp_conv_silu_(float y) {
#ifdef __CUDA_ARCH__
    return __fdividef(y, 1.0f + __expf(-y));
#else
    return y / (1.0f + expf(-y));
#endif
}

/* ---- the validated call --------------------------------------------------- */

/* Where the outputs of channels [first, next segment's first) go: channel
 * c of token t is element t*row + (c - first)*col of `data` (bf16). */
typedef struct sp_conv_seg {
    uint16_t *data;
    int64_t first, row, col;
} sp_conv_seg;

typedef struct sp_conv_dims {
    int64_t T, C, N, W, slots;
    int64_t key_dim, value_dim; /* split output; both 0 for token-major */
    int decode;                 /* 1: one token per sequence, token n is sequence n */
    int has_bias, has_init, weight_bf16;
    int nseg; /* 1 (token-major) or 3 (q, k, v) */
    sp_conv_seg seg[3];
    sp_device dev;
} sp_conv_dims;

/* The whole contract, in a fixed order, each violation its own error
 * naming the argument. Index contents are read for CPU tensors only, and
 * then only with host_indices (the kernel's emulation leaves them to the
 * kernel's guards, as on the device). Writes nothing but *d. */
sp_status sp_conv_check_(const sp_conv_args *a, int decode, int host_indices, sp_conv_dims *d);

/* Tokens [*s, *e) of sequence n, and whether it starts from its slot. */
static inline SP_HD void sp_conv_sequence_(sp_index_ cu, const uint8_t *init, int decode,
                                          int64_t n, int64_t *s, int64_t *e, int *from_slot) {
    if (decode) {
        *s = n;
        *e = n + 1;
        *from_slot = 1;
    } else {
        *s = sp_index_at_(cu, n);
        *e = sp_index_at_(cu, n + 1);
        *from_slot = init ? init[n] != 0 : 0;
    }
}

/* ---- element access on the host (CPU backend and reference) ------------ */

static inline float sp_conv_param_(const sp_tensor *t, int bf16, int64_t at) {
    return bf16 ? sp_bf16_to_f32_(((const uint16_t *)t->data)[at]) : ((const float *)t->data)[at];
}

static inline float sp_conv_weight_(const sp_conv_args *a, const sp_conv_dims *d, int64_t c,
                                    int64_t j) {
    return sp_conv_param_(&a->weight, d->weight_bf16,
                          c * a->weight.strides[0] + j * a->weight.strides[1]);
}

static inline float sp_conv_bias_(const sp_conv_args *a, const sp_conv_dims *d, int64_t c) {
    return d->has_bias ? sp_conv_param_(&a->bias, d->weight_bf16, c * a->bias.strides[0]) : 0.0f;
}

static inline uint16_t sp_conv_x_(const sp_conv_args *a, int64_t t, int64_t c) {
    return ((const uint16_t *)a->x.data)[t * a->x.strides[0] + c * a->x.strides[1]];
}

static inline uint16_t *sp_conv_state_(const sp_conv_args *a, int64_t slot, int64_t c, int64_t j) {
    const int64_t *st = a->state.strides;
    return (uint16_t *)a->state.data + slot * st[0] + c * st[1] + j * st[2];
}

static inline uint16_t *sp_conv_out_(const sp_conv_dims *d, int64_t t, int64_t c) {
    int i = d->nseg - 1;
    while (i > 0 && c < d->seg[i].first) i--;
    const sp_conv_seg *g = &d->seg[i];
    return g->data + t * g->row + (c - g->first) * g->col;
}

/* cu_seqlens of a checked call (absent in decode). */
static inline sp_index_ sp_conv_cu_of_(const sp_conv_args *a, const sp_conv_dims *d) {
    sp_index_ none = {NULL, 0};
    return d->decode ? none : sp_index_of_(&a->cu_seqlens);
}

/* Slot entry n of a checked call. */
static inline int64_t sp_conv_slot_(const sp_conv_args *a, int64_t n) {
    return sp_index_at_(sp_index_of_(&a->state_indices), n);
}

/* Sequence n's tokens and start, as sp_conv_sequence_, from host tensors. */
static inline void sp_conv_host_sequence_(const sp_conv_args *a, const sp_conv_dims *d, int64_t n,
                                          int64_t *s, int64_t *e, int *from_slot) {
    sp_conv_sequence_(sp_conv_cu_of_(a, d),
                     d->has_init ? (const uint8_t *)a->has_initial_state.data : NULL, d->decode, n,
                     s, e, from_slot);
}

/* Backends, called after the check with N > 0. */
sp_status sp_conv_cpu_(const sp_conv_args *a, const sp_conv_dims *d);
sp_status sp_conv_ref_(const sp_conv_args *a, const sp_conv_dims *d);
sp_status sp_conv_cuda_(const sp_conv_args *a, const sp_conv_dims *d, struct CUstream_st *stream);

/* CUDA builds: the whole call (the checks of a CUDA call: index contents
 * not read) with the CUDA kernel's threads run one by one on the host, on
 * CPU tensors; `tile` > 0 forces the prefill's tokens per tile (at least 8),
 * or decode's sequences per thread, 0 takes the launcher's choice. For
 * tests. */
sp_status sp_conv_emulate_(const sp_conv_args *a, int decode, int64_t tile);

/* CUDA builds: sp_conv_prefill (decode 0) or sp_conv_decode (1) on CUDA
 * tensors, with `items` tokens per tile (at least 8), or in decode `items`
 * sequences per thread, instead of the launcher's choice; 0 takes the
 * choice. The same checks and errors as the public calls; CPU tensors are
 * refused (SP_ERR_UNSUPPORTED). For tests and benchmarks. */
sp_status sp_conv_cuda_planned_(const sp_conv_args *a, int decode, int64_t items,
                                struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif /* SP_CONV_INTERNAL_H */
