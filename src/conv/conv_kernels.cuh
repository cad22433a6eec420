/*
 * conv_kernels.cuh — what every thread of the CUDA causal convolution does,
 * prefill (conv_prefill.cuh) and decode (conv_decode.cuh) alike: the
 * parameters of a launch, the loads and stores of 8 channels, one token's
 * arithmetic, the weights, and which work item a grid thread takes.
 * Everything here is host-callable too: sp_conv_emulate_ (conv_emulate.cu)
 * runs the kernels' threads one by one on the CPU, so that the tests check
 * the kernels' tiling, halo and state logic on machines without a GPU.
 * Included by conv.cu (the launcher) and conv_emulate.cu only.
 *
 * Memory-bound: per token and channel a thread reads two bytes of x and
 * writes two bytes of output, so the layout of the work is all about the
 * traffic. A thread owns 8 consecutive channels (one 16-byte bf16 vector)
 * and a work item: a tile of consecutive tokens, or a group of decode
 * sequences. A warp covers 256 channels of a row, so each load and store
 * is a full 512-byte line run.
 *
 * Rows of x that are only 8-byte aligned (a slice of a projection whose
 * width is 4 mod 8 elements) take two 8-byte loads per vector. Other
 * layouts (channel-major x, odd strides, C or key_dim not a multiple of 8)
 * take element-wise loads and stores in the same kernel; the arithmetic is
 * the same.
 *
 * Instructions per element are the other budget: at the HBM rate an SM must
 * finish about 4.6 elements per clock, at most some 25 issued instructions
 * each, and the fewer the better. So the layout path and the activation are
 * compile-time (one instance each: the vector path takes x from its stream
 * and walks the outputs with a pointer, no per-token layout branches), the
 * window is kept in fp32 (one conversion per input, not W), SiLU is four
 * instructions (act), and outputs are rounded two at a time with one cvt.
 *
 * Grid: one dimension of 128-thread blocks; thread g takes the vector of 8
 * channels g mod ceil(C/8) of work item g / ceil(C/8), so that no thread
 * idles past C. The launcher (conv.cu) sizes the items to the waves of
 * blocks the device holds.
 */
#ifndef SP_CONV_KERNELS_CUH
#define SP_CONV_KERNELS_CUH

#include "conv/conv_internal.h"
#include "cuda/ptx.cuh"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

/* A thread's code, for the device and for the emulation on the host. */
#define FN __host__ __device__ __forceinline__

#define THREADS 128
#define VEC 8 /* channels per thread: one 16-byte vector of bf16 */

/* A launch: the checked call's pointers, strides and layout paths, and its
 * work items (the launcher's rules fill it, conv.cu). */
typedef struct conv_params {
    const uint16_t *x;
    int64_t x_row, x_col;
    const void *w;
    int64_t w_c, w_j;
    const void *bias; /* NULL: none */
    int64_t b_c;
    sp_index_ cu;  /* unused in decode */
    sp_index_ idx;
    const uint8_t *init; /* NULL: no sequence starts from its slot */
    uint16_t *state;
    int64_t s_slot, s_c, s_j;
    sp_conv_seg seg[3];
    int nseg;
    int64_t T, C, N, slots, tile;
    int silu, decode, w_bf16;
    int x_vec;               /* bytes per load of x: 16, 8, or 0 (element-wise) */
    int out_vec, state_vec;  /* 16-byte stores allowed */
    int w_vec, b_vec;        /* weight rows [C, W] dense, bias dense: 16-byte loads */
    int64_t nvec;            /* vectors of 8 channels: ceil(C / 8) */
    int64_t tiles;           /* prefill: token tiles; decode: groups of `tile` sequences */
} conv_params;

/* The prefill's vector path (the kernels' FAST): x read and every output
 * written as 16-byte vectors. The launcher picks its instance by it; the
 * emulation runs the same instance. */
static FN bool vector_path(const conv_params &p) {
    return !p.decode && p.x_vec == 16 && p.out_vec;
}

/* Eight bf16 values, two to a word (element i in word i/2, low half first:
 * the order of a 16-byte load). Constant indices keep it in registers. */
typedef struct bf8 {
    uint32_t w[4];
} bf8;

static FN uint16_t get(const bf8 &v, int i) {
    return (uint16_t)(v.w[i >> 1] >> (16 * (i & 1)));
}

static FN void put(bf8 &v, int i, uint16_t h) {
    const int s = 16 * (i & 1);
    v.w[i >> 1] = (v.w[i >> 1] & ~(0xffffu << s)) | ((uint32_t)h << s);
}

static FN bf8 from_uint4(uint4 u) {
    bf8 v = {{u.x, u.y, u.z, u.w}};
    return v;
}

static FN uint4 to_uint4(const bf8 &v) {
    return make_uint4(v.w[0], v.w[1], v.w[2], v.w[3]);
}


/* The emulation's stand-in for the hardware's alignment fault: a vector
 * access at an address its width does not divide is counted, and
 * sp_conv_emulate_ fails. (A CPU would not notice.) One count per host
 * thread, so that emulations on two threads do not mix; conv_emulate.cu
 * defines it and reads it. */
extern thread_local long sp_conv_emulated_misaligned_;
static FN void must_align(const void *at, unsigned bytes) {
#ifndef __CUDA_ARCH__
    sp_conv_emulated_misaligned_ += (uintptr_t)at % bytes != 0;
#else
    (void)at, (void)bytes;
#endif
}

static FN bf8 load_x(const conv_params &p, int64_t t, int64_t c0) {
    const uint16_t *row = p.x + t * p.x_row;
    if (p.x_vec == 16) {
        const uint4 *at = (const uint4 *)(row + c0);
        must_align(at, 16);
#ifdef __CUDA_ARCH__
        return from_uint4(__ldg(at));
#else
        return from_uint4(*at);
#endif
    }
    if (p.x_vec == 8) { /* rows 8-byte aligned: two loads */
        const uint2 *at = (const uint2 *)(row + c0);
        must_align(at, 8);
#ifdef __CUDA_ARCH__
        const uint2 lo = __ldg(at), hi = __ldg(at + 1);
#else
        const uint2 lo = at[0], hi = at[1];
#endif
        bf8 v = {{lo.x, lo.y, hi.x, hi.y}};
        return v;
    }
    bf8 v = {{0, 0, 0, 0}};
    SP_HD_UNROLL
    for (int i = 0; i < VEC; i++)
        if (c0 + i < p.C) put(v, i, row[(c0 + i) * p.x_col]);
    return v;
}

static FN int seg_of(const conv_params &p, int64_t c) {
    int i = p.nseg - 1;
    while (i > 0 && c < p.seg[i].first) i--;
    return i;
}

/* `si`: the segment of channel c0, which on the vector path (8 | key_dim)
 * holds all 8 channels. */
static FN void store_out(const conv_params &p, int si, int64_t t, int64_t c0, const bf8 &y) {
    if (p.out_vec) {
        const sp_conv_seg &g = p.seg[si];
        uint4 *at = (uint4 *)(g.data + t * g.row + (c0 - g.first));
        must_align(at, 16);
        *at = to_uint4(y);
        return;
    }
    SP_HD_UNROLL
    for (int i = 0; i < VEC; i++) {
        const int64_t c = c0 + i;
        if (c >= p.C) break;
        const sp_conv_seg &g = p.seg[seg_of(p, c)];
        g.data[t * g.row + (c - g.first) * g.col] = get(y, i);
    }
}

/* bf16 bits <-> the fp32 value the window holds. A window value came from
 * bf16, so its low 16 bits are zero and the way back is exact (NaN too). */
static FN float widen(uint16_t h) { return sp_bits_f32_((uint32_t)h << 16); }
static FN uint16_t narrow(float f) { return (uint16_t)(sp_f32_bits_(f) >> 16); }


/* The activation. On the device SiLU is y * rcp(1 + 2^(-y log2 e)) with
 * the hardware's exp2 and reciprocal: four instructions and two of the
 * special-function unit (what __fdividef adds is a range check whose
 * result is the same 0 for every y that reaches it). The host runs libm. */
template <int SILU> static FN float act(float y) {
    if (!SILU) return y;
#ifdef __CUDA_ARCH__
    float e, r;
    e = sp_ex2_ftz_(y * -SP_LOG2E);
    r = sp_rcp_ftz_(1.0f + e);
    return y * r;
#else
    return sp_conv_silu_(y);
#endif
}

/* One token of 8 channels: x the new input, z the window before it (z
 * then moves on by one token); returns the 8 outputs rounded to bf16. */
template <int W, int SILU>
static FN bf8 step(const float (&w)[VEC][W], const float (&bias)[VEC], float (&z)[W - 1][VEC],
                   const bf8 &x) {
    float y[VEC];
    SP_HD_UNROLL
    for (int i = 0; i < VEC; i++) {
        float zz[W];
        SP_HD_UNROLL
        for (int j = 0; j < W - 1; j++) zz[j] = z[j][i];
        zz[W - 1] = widen(get(x, i));
        y[i] = act<SILU>(sp_conv_sum_(w[i], zz, W, bias[i]));
        SP_HD_UNROLL
        for (int j = 0; j < W - 2; j++) z[j][i] = z[j + 1][i];
        z[W - 2][i] = zz[W - 1];
    }
    /* Round to nearest even, two at a time (one instruction). */
    bf8 out;
    SP_HD_UNROLL
    for (int k = 0; k < VEC / 2; k++) {
#ifdef __CUDA_ARCH__
        const __nv_bfloat162 h = __floats2bfloat162_rn(y[2 * k], y[2 * k + 1]);
        out.w[k] = *(const uint32_t *)&h;
#else
        out.w[k] = sp_f32_to_bf16_(y[2 * k]) | (uint32_t)sp_f32_to_bf16_(y[2 * k + 1]) << 16;
#endif
    }
    return out;
}

/* Ask for the line at `at` to be brought into L2; nothing waits for it. */
static FN void prefetch_l2(const void *at) {
#ifdef __CUDA_ARCH__
    sp_prefetch_l2_(at);
#else
    (void)at;
#endif
}

static FN bf8 load16(const uint16_t *at) {
    must_align(at, 16);
#ifdef __CUDA_ARCH__
    return from_uint4(__ldg((const uint4 *)at));
#else
    return from_uint4(*(const uint4 *)at);
#endif
}

/* N consecutive 32-bit words from a 16-byte aligned address, N/4 loads. */
template <int N> static FN void load_words(const uint16_t *at, uint32_t (&u)[N]) {
    SP_HD_UNROLL
    for (int r = 0; r < N / 4; r++) {
        const bf8 v = load16(at + r * VEC);
        SP_HD_UNROLL
        for (int q = 0; q < 4; q++) u[4 * r + q] = v.w[q];
    }
}

/* The weights and the bias of channels c0 .. c0+7, read to fp32 exactly.
 * Dense [C, W] weight rows (and a dense bias) are 8W (or 8) consecutive
 * elements, 16-byte aligned since 8 | c0: read as 16-byte vectors, W or 2W
 * loads instead of 8W (a decode thread does little else). */
template <int W>
static FN void load_params(const conv_params &p, int64_t c0, float (&w)[VEC][W],
                           float (&bias)[VEC]) {
    if (p.w_vec && p.w_bf16) {
        uint32_t u[VEC * W / 2]; /* two bf16 a word */
        load_words((const uint16_t *)p.w + c0 * W, u);
        SP_HD_UNROLL
        for (int i = 0; i < VEC; i++)
            SP_HD_UNROLL
            for (int j = 0; j < W; j++)
                w[i][j] = widen((uint16_t)(u[(i * W + j) >> 1] >> (16 * ((i * W + j) & 1))));
    } else if (p.w_vec) {
        uint32_t u[VEC * W]; /* f32 bits */
        load_words((const uint16_t *)((const float *)p.w + c0 * W), u);
        SP_HD_UNROLL
        for (int i = 0; i < VEC; i++)
            SP_HD_UNROLL
            for (int j = 0; j < W; j++) w[i][j] = sp_bits_f32_(u[i * W + j]);
    } else {
        SP_HD_UNROLL
        for (int i = 0; i < VEC; i++) {
            const int64_t c = c0 + i < p.C ? c0 + i : p.C - 1; /* past C: computed, never stored */
            SP_HD_UNROLL
            for (int j = 0; j < W; j++) {
                const int64_t at = c * p.w_c + j * p.w_j;
                w[i][j] = p.w_bf16 ? sp_bf16_to_f32_(((const uint16_t *)p.w)[at])
                                   : ((const float *)p.w)[at];
            }
        }
    }
    if (!p.bias) {
        SP_HD_UNROLL
        for (int i = 0; i < VEC; i++) bias[i] = 0.0f;
    } else if (p.b_vec) {
        const uint16_t *at = (const uint16_t *)((const char *)p.bias + c0 * (p.w_bf16 ? 2 : 4));
        const bf8 lo = load16(at);
        if (p.w_bf16) {
            SP_HD_UNROLL
            for (int i = 0; i < VEC; i++) bias[i] = widen(get(lo, i));
        } else {
            const bf8 hi = load16(at + VEC);
            SP_HD_UNROLL
            for (int i = 0; i < VEC; i++) bias[i] = sp_bits_f32_(i < 4 ? lo.w[i] : hi.w[i - 4]);
        }
    } else {
        SP_HD_UNROLL
        for (int i = 0; i < VEC; i++) {
            const int64_t c = c0 + i < p.C ? c0 + i : p.C - 1;
            bias[i] = p.w_bf16 ? sp_bf16_to_f32_(((const uint16_t *)p.bias)[c * p.b_c])
                               : ((const float *)p.bias)[c * p.b_c];
        }
    }
}

/* Grid thread g covers vector g mod nvec of work item g / nvec (a token
 * tile, or a group of decode sequences): the vectors of a row are spread
 * over whole warps, and no block idles past C (at H = 12, C = 4608 is 4.5
 * blocks of 1024 channels). */
static FN bool item_of(const conv_params &p, int64_t g, int64_t *item, int64_t *c0) {
    *item = g / p.nvec;
    *c0 = (g - *item * p.nvec) * VEC;
    return *item < p.tiles;
}

/* ---- the launcher's rules (conv.cu), which the emulation follows too ---- */

/* The launch's parameters from the checked call; no work items yet. */
void sp_conv_fill_params_(const sp_conv_args *a, const sp_conv_dims *d, conv_params *p);

/* The work items (p->tile, p->tiles) for a device that holds `resident`
 * blocks of the instance at once; `forced` > 0 takes that length instead:
 * tokens per tile (at least 8), or in decode sequences per thread. */
void sp_conv_choose_items_(const sp_conv_dims *d, conv_params *p, int64_t resident,
                           int64_t forced);

#endif /* SP_CONV_KERNELS_CUH */
