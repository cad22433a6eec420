/*
 * conv.cu — the CUDA causal convolution, prefill and decode, one launch.
 *
 * Memory-bound: per token and channel it reads two bytes of x and writes two
 * bytes of output, so the layout of the work is all about the traffic. A
 * thread owns 8 consecutive channels (one 16-byte bf16 vector) and a tile
 * of consecutive tokens; a warp covers 256 channels of a row, so each load
 * and store is a full 512-byte line run. The thread slides a window of the
 * W-1 previous inputs along its tile in registers. Its next inputs are in
 * flight meanwhile: on the vector path (16-byte rows of x and outputs, the
 * common layouts) RING of them, copied with cp.async into the thread's own
 * slots of shared memory, so that what is in flight costs no registers
 * (0.74 -> 0.91 of the limit at K3 TP1), in one stream through the tile
 * that runs on across its sequences (xring); elsewhere AHEAD of them,
 * loaded into registers before the first is used. At the tile's start the
 * window (the halo) is loaded from the W-1 rows before it, which the
 * neighbouring tile's block read moments earlier (an L2 hit, mostly): x is
 * read from memory about once.
 *
 * Sequences and the state pool. A sequence's first W-1 tokens and its state
 * slot belong to the tile that holds its first token, which may run up to
 * W-2 tokens past its own end to finish them: only that thread reads the
 * slot (the initial state is the window before those tokens) and it writes
 * the final state too, from its window when it saw the whole sequence, or
 * else from the sequence's last W-1 rows of x. So no slot is read by one
 * block and written by another: no ordering between blocks is needed, and
 * the call is one launch. Tiles after the first start past those W-1
 * tokens and take their halo from x.
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
 * instructions (act), and outputs are rounded two at a time with one cvt:
 * about 13 instructions an element on the vector path (ncu, with the ring's
 * loop unrolled), from 25; the token loop runs four tokens a pass, so that
 * the window slides by renaming registers, not by moving them.
 *
 * Grid: one dimension of 128-thread blocks; thread g takes the vector of 8
 * channels g mod ceil(C/8) of work item g / ceil(C/8), so that no thread
 * idles past C. Prefill items are token tiles, sized by choose_items to
 * the waves of blocks the device holds. Decode has its own kernel (no
 * shared memory, fewer registers, more threads): a thread takes up to 4
 * sequences, the weights read once, two sequences' windows and inputs in
 * flight at a time, the slot indices read a batch ahead. Its new window is
 * the old one moved on by the input, bits moved, not converted.
 */
#include "conv/conv_internal.h"
#include "cuda/ptx.cuh"
#include "cuda/runtime.h"

#include <cuda_bf16.h>
#include <cuda_runtime.h>

/* Everything a thread does is host-callable too: sp_conv_emulate_ runs the
 * kernel's threads one by one on the CPU, so that the tests check the
 * kernel's tiling, halo and state logic on machines without a GPU. */
#define FN __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define UNROLL _Pragma("unroll")
#define UNROLL_TOKENS _Pragma("unroll (SILU ? 4 : 2)") /* run_tokens' loop */
#else
#define UNROLL
#define UNROLL_TOKENS
#endif

#define THREADS 128
#define VEC 8   /* channels per thread: one 16-byte vector of bf16 */
#define AHEAD 8 /* tokens loaded before the first of them is used */
/* Tokens in flight per thread on the vector path (device). 8, not 16: with
 * the loop unrolled, the shorter code and start-up paid off at every
 * prefill shape measured on an H200 (docs/PERFORMANCE.md: T = 1024, H = 96
 * 0.73 -> 0.81 of the limit; T = 16384, H = 12 0.86 -> 0.88; K3 TP1 0.93
 * -> 0.94); 4, 6 and 12 did no better overall. Not unrolled, 16 still lost
 * (K3 TP1 0.935 against 0.940; T = 1024, H = 96 0.820 against 0.824). */
#define RING 8
#define DBATCH 2 /* decode: sequences in flight per thread */

typedef struct conv_params {
    const uint16_t *x;
    int64_t x_row, x_col;
    const void *w;
    int64_t w_c, w_j;
    const void *bias; /* NULL: none */
    int64_t b_c;
    const int64_t *cu;
    const int32_t *idx;
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
 * sp_conv_emulate_ fails. (A CPU would not notice.) */
static long emulated_misaligned; /* host only */
static FN void must_align(const void *at, unsigned bytes) {
#ifndef __CUDA_ARCH__
    emulated_misaligned += (uintptr_t)at % bytes != 0;
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
    UNROLL
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
    UNROLL
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

/* The slot's W-1 inputs of 8 channels into z (tap j of channel i is
 * z[j][i]), or back. Dense state: channel c's taps are elements c*(W-1) ..
 * c*(W-1)+W-2, so 8 channels are W-1 16-byte vectors. */
template <int W>
static FN void state_io(const conv_params &p, int64_t slot, int64_t c0, float (&z)[W - 1][VEC],
                        bool store) {
    uint16_t *base = p.state + slot * p.s_slot;
    if (p.state_vec) {
        uint4 *v = (uint4 *)(base + c0 * (W - 1));
        must_align(v, 16);
        bf8 raw[W - 1] = {}; /* a store sets every half below */
        if (!store) {
            UNROLL
            for (int r = 0; r < W - 1; r++) raw[r] = from_uint4(v[r]);
        }
        UNROLL
        for (int i = 0; i < VEC; i++) {
            UNROLL
            for (int j = 0; j < W - 1; j++) {
                const int k = i * (W - 1) + j;
                if (store)
                    put(raw[k / VEC], k % VEC, narrow(z[j][i]));
                else
                    z[j][i] = widen(get(raw[k / VEC], k % VEC));
            }
        }
        if (store) {
            UNROLL
            for (int r = 0; r < W - 1; r++) v[r] = to_uint4(raw[r]);
        }
        return;
    }
    UNROLL
    for (int i = 0; i < VEC; i++) {
        if (c0 + i >= p.C) break;
        UNROLL
        for (int j = 0; j < W - 1; j++) {
            uint16_t *e = base + (c0 + i) * p.s_c + j * p.s_j;
            if (store)
                *e = narrow(z[j][i]);
            else
                z[j][i] = widen(*e);
        }
    }
}

/* The window before token t from x itself: z[j] <- row t-W+1+j. */
template <int W>
static FN void halo_from_x(const conv_params &p, int64_t t, int64_t c0, float (&z)[W - 1][VEC]) {
    UNROLL
    for (int j = 0; j < W - 1; j++) {
        const bf8 r = load_x(p, t - (W - 1) + j, c0);
        UNROLL
        for (int i = 0; i < VEC; i++) z[j][i] = widen(get(r, i));
    }
}

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
    UNROLL
    for (int i = 0; i < VEC; i++) {
        float zz[W];
        UNROLL
        for (int j = 0; j < W - 1; j++) zz[j] = z[j][i];
        zz[W - 1] = widen(get(x, i));
        y[i] = act<SILU>(sp_conv_sum_(w[i], zz, W, bias[i]));
        UNROLL
        for (int j = 0; j < W - 2; j++) z[j][i] = z[j + 1][i];
        z[W - 2][i] = zz[W - 1];
    }
    /* Round to nearest even, two at a time (one instruction). */
    bf8 out;
    UNROLL
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
    UNROLL
    for (int r = 0; r < N / 4; r++) {
        const bf8 v = load16(at + r * VEC);
        UNROLL
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
        UNROLL
        for (int i = 0; i < VEC; i++)
            UNROLL
            for (int j = 0; j < W; j++)
                w[i][j] = widen((uint16_t)(u[(i * W + j) >> 1] >> (16 * ((i * W + j) & 1))));
    } else if (p.w_vec) {
        uint32_t u[VEC * W]; /* f32 bits */
        load_words((const uint16_t *)((const float *)p.w + c0 * W), u);
        UNROLL
        for (int i = 0; i < VEC; i++)
            UNROLL
            for (int j = 0; j < W; j++) w[i][j] = sp_bits_f32_(u[i * W + j]);
    } else {
        UNROLL
        for (int i = 0; i < VEC; i++) {
            const int64_t c = c0 + i < p.C ? c0 + i : p.C - 1; /* past C: computed, never stored */
            UNROLL
            for (int j = 0; j < W; j++) {
                const int64_t at = c * p.w_c + j * p.w_j;
                w[i][j] = p.w_bf16 ? sp_bf16_to_f32_(((const uint16_t *)p.w)[at])
                                   : ((const float *)p.w)[at];
            }
        }
    }
    if (!p.bias) {
        UNROLL
        for (int i = 0; i < VEC; i++) bias[i] = 0.0f;
    } else if (p.b_vec) {
        const uint16_t *at = (const uint16_t *)((const char *)p.bias + c0 * (p.w_bf16 ? 2 : 4));
        const bf8 lo = load16(at);
        if (p.w_bf16) {
            UNROLL
            for (int i = 0; i < VEC; i++) bias[i] = widen(get(lo, i));
        } else {
            const bf8 hi = load16(at + VEC);
            UNROLL
            for (int i = 0; i < VEC; i++) bias[i] = sp_bits_f32_(i < 4 ? lo.w[i] : hi.w[i - 4]);
        }
    } else {
        UNROLL
        for (int i = 0; i < VEC; i++) {
            const int64_t c = c0 + i < p.C ? c0 + i : p.C - 1;
            bias[i] = p.w_bf16 ? sp_bf16_to_f32_(((const uint16_t *)p.bias)[c * p.b_c])
                               : ((const float *)p.bias)[c * p.b_c];
        }
    }
}

/* The vector path's next inputs: rows [row, row + RING) of the thread's 8
 * channels, in flight while earlier ones are used. One stream runs through
 * a tile, across the sequences in it, so that a sequence's first rows are
 * on their way while the one before it ends (a stream restarted at each
 * sequence waited out a memory latency there, most tiles once at T = 1024,
 * docs/PERFORMANCE.md). On the device the rows are copied (cp.async) into
 * the thread's own slots of shared memory, so that what is in flight costs
 * no registers; a slot is read back by the thread that filled it, once its
 * copy group has completed. The host loads them at once. */
typedef struct xring {
    const uint16_t *x;    /* row 0's vector */
    const uint16_t *next; /* the next row to load */
    int64_t xr;           /* x's row stride */
    int64_t row, end;     /* the next row used; rows from `end` are never read */
    int64_t left;         /* rows still to load */
    int u;                /* the slot of `row` */
#ifndef __CUDA_ARCH__
    bf8 slot[RING];
#endif
} xring;

/* A stream over rows before `end`, none in flight yet. */
static FN void ring_init(xring &r, const conv_params &p, int64_t c0, int64_t end) {
    r.x = p.x + c0;
    r.next = r.x;
    r.xr = p.x_row;
    r.row = -1;
    r.end = end;
    r.left = 0;
    r.u = 0;
}

#ifdef __CUDA_ARCH__
static __device__ __forceinline__ uint4 *ring_slot(int u) {
    __shared__ uint4 ring[RING][THREADS];
    return &ring[u][threadIdx.x];
}
#endif

/* The next row into slot u, if there is one to read; one copy group
 * either way. */
static FN void ring_issue(xring &r, int u) {
#ifdef __CUDA_ARCH__
    if (r.left > 0) sp_cp_async16_(ring_slot(u), r.next);
    sp_cp_async_commit_();
#else
    if (r.left > 0) r.slot[u] = load16(r.next);
#endif
    r.next += r.xr;
    r.left--;
}

/* Rows [a, b) next: the stream goes on if row a is its next, else (or if
 * b is past what it reads) restarts at a. */
static FN void ring_seek(xring &r, int64_t a, int64_t b) {
    if (a == r.row && b <= r.end) return;
#ifdef __CUDA_ARCH__
    sp_cp_async_wait_<0>();
#endif
    if (b > r.end) r.end = b;
    r.row = a;
    r.next = r.x + a * r.xr;
    r.left = r.end - a;
    r.u = 0;
    UNROLL
    for (int u = 0; u < RING; u++) ring_issue(r, u);
}

static FN bf8 ring_next(xring &r) {
#ifdef __CUDA_ARCH__
    sp_cp_async_wait_<RING - 1>();
    const bf8 x = from_uint4(*ring_slot(r.u));
#else
    const bf8 x = r.slot[r.u];
#endif
    ring_issue(r, r.u);
    r.row++;
    r.u = r.u == RING - 1 ? 0 : r.u + 1;
    return x;
}

/* Every copy landed (before the thread ends). */
static FN void ring_drain() {
#ifdef __CUDA_ARCH__
    sp_cp_async_wait_<0>();
#endif
}

/* Tokens [a, b) of one sequence, the window z already holding the W-1
 * inputs before a; z ends holding the W-1 inputs before b. FAST: x rows
 * and outputs are 16-byte vectors (the common layouts): x comes from the
 * stream r and outputs are walked with a pointer; else each access takes
 * the layout's general path. */
template <int W, int FAST, int SILU>
static FN void run_tokens(const conv_params &p, const float (&w)[VEC][W], const float (&bias)[VEC],
                          float (&z)[W - 1][VEC], xring &r, int64_t a, int64_t b, int64_t c0) {
    if (a >= b) return;
    const int si = seg_of(p, c0);
    if (FAST) {
        const sp_conv_seg &g = p.seg[si];
        uint16_t *op = g.data + a * g.row + (c0 - g.first);
        const int64_t orow = g.row;
        ring_seek(r, a, b);
        /* Four tokens a pass (two without SiLU, where ptxas spills at
         * four, W = 4): the window's shifts become renamed registers
         * instead of moves (ncu at T = 1024, H = 96: 18 % fewer
         * instructions; faster at every prefill shape measured, 0.5 to 1 %,
         * docs/PERFORMANCE.md). Fully unrolled with the ring, the loop's
         * code was what a short tile's warps waited to fetch. */
        UNROLL_TOKENS
        for (int64_t t = a; t < b; t++, op += orow) {
            const bf8 y = step<W, SILU>(w, bias, z, ring_next(r));
            must_align(op, 16);
            *(uint4 *)op = to_uint4(y);
        }
    } else {
        for (int64_t t = a; t < b; t += AHEAD) {
            const int64_t m = b - t;
            bf8 xs[AHEAD];
            UNROLL
            for (int u = 0; u < AHEAD; u++)
                if (u < m) xs[u] = load_x(p, t + u, c0);
            UNROLL
            for (int u = 0; u < AHEAD; u++) {
                if (u >= m) break;
                store_out(p, si, t + u, c0, step<W, SILU>(w, bias, z, xs[u]));
            }
        }
    }
}

/* First k in [0, n) with v[k] >= key, n if none. */
static FN int64_t lower_bound(const int64_t *v, int64_t n, int64_t key) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (v[mid] < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* One thread of the grid: token tile `bx` of `tiles`, channels from c0. */
template <int W, int FAST, int SILU>
static FN void conv_thread(const conv_params &p, int64_t bx, int64_t tiles, int64_t c0) {
    if (c0 >= p.C) return;
    const int64_t t0 = bx * p.tile;
    const int64_t t1 = t0 + p.tile < p.T ? t0 + p.tile : p.T;
    /* The halo and the first rows of the tile, on their way to L2 while the
     * sequence lookups and the weights are read: a tile's start then waits
     * on L2, not on memory. */
    if (FAST)
        for (int64_t t = t0 - (W - 1); t < t0 + RING && t < p.T; t++)
            if (t >= 0) prefetch_l2(p.x + t * p.x_row + c0);
    float w[VEC][W], bias[VEC];
    load_params<W>(p, c0, w, bias);
    float z[W - 1][VEC] = {}; /* channels past C are never loaded: zeros */
    /* The rows of the tile; a sequence that starts in its last W-2 rows
     * extends the stream past them (see the file's header). */
    xring r;
    ring_init(r, p, c0, t1);

    /* A sequence that began in an earlier tile: tokens from t0, or from its
     * W-th token if that is later; the halo comes from x. */
    const int64_t lo = lower_bound(p.cu, p.N + 1, t0);
    if (lo >= 1 && lo <= p.N) {
        const int64_t n = lo - 1, s = p.cu[n], e = p.cu[n + 1];
        const int32_t slot = p.idx[n];
        const int64_t a = t0 > s + W - 1 ? t0 : s + W - 1, b = t1 < e ? t1 : e;
        if (s >= 0 && s <= e && e <= p.T && slot >= 0 && slot < p.slots && a < b) {
            halo_from_x<W>(p, a, c0, z);
            run_tokens<W, FAST, SILU>(p, w, bias, z, r, a, b, c0);
        }
    }
    /* Sequences that begin in this tile (the last tile also owns those
     * that begin at T: empty ones, whose state is still written). */
    const bool last = bx == tiles - 1;
    for (int64_t n = lo; n < p.N; n++) {
        const int64_t s = p.cu[n], e = p.cu[n + 1];
        if (!(s < t1 || (last && s <= p.T))) break;
        const int32_t slot = p.idx[n];
        if (s < 0 || s > e || e > p.T || slot < 0 || slot >= p.slots) continue;
        if (p.init && p.init[n]) {
            state_io<W>(p, slot, c0, z, false);
        } else {
            UNROLL
            for (int j = 0; j < W - 1; j++)
                UNROLL
                for (int i = 0; i < VEC; i++) z[j][i] = 0.0f;
        }
        const int64_t own = t1 > s + W - 1 ? t1 : s + W - 1;
        const int64_t end = e < own ? e : own;
        run_tokens<W, FAST, SILU>(p, w, bias, z, r, s, end, c0);
        if (end < e) halo_from_x<W>(p, e, c0, z);
        state_io<W>(p, slot, c0, z, true);
    }
    ring_drain();
}

/* A slot's W-1 inputs of 8 channels as stored in the dense layout (tap j
 * of channel i is element i*(W-1)+j: W-1 16-byte vectors), whatever the
 * pool's strides: decode keeps its windows in this form while in flight,
 * half the registers of fp32. */
template <int W> struct window {
    bf8 v[W - 1];
};

template <int W> static FN void window_load(const conv_params &p, int64_t slot, int64_t c0,
                                            window<W> &r) {
    const uint16_t *base = p.state + slot * p.s_slot;
    if (p.state_vec) {
        UNROLL
        for (int k = 0; k < W - 1; k++) r.v[k] = load16(base + c0 * (W - 1) + k * VEC);
        return;
    }
    UNROLL
    for (int k = 0; k < W - 1; k++) r.v[k] = bf8{{0, 0, 0, 0}};
    UNROLL
    for (int i = 0; i < VEC; i++) {
        if (c0 + i >= p.C) break;
        UNROLL
        for (int j = 0; j < W - 1; j++)
            put(r.v[(i * (W - 1) + j) / VEC], (i * (W - 1) + j) % VEC,
                base[(c0 + i) * p.s_c + j * p.s_j]);
    }
}

template <int W> static FN void window_store(const conv_params &p, int64_t slot, int64_t c0,
                                             const window<W> &r) {
    uint16_t *base = p.state + slot * p.s_slot;
    if (p.state_vec) {
        UNROLL
        for (int k = 0; k < W - 1; k++) {
            uint4 *at = (uint4 *)(base + c0 * (W - 1) + k * VEC);
            must_align(at, 16);
            *at = to_uint4(r.v[k]);
        }
        return;
    }
    UNROLL
    for (int i = 0; i < VEC; i++) {
        if (c0 + i >= p.C) break;
        UNROLL
        for (int j = 0; j < W - 1; j++)
            base[(c0 + i) * p.s_c + j * p.s_j] =
                get(r.v[(i * (W - 1) + j) / VEC], (i * (W - 1) + j) % VEC);
    }
}

/* Decode: sequences [n0, n1) (token n is sequence n), channels from c0.
 * Nothing but loads and stores: the slot index, then the window and the
 * input of DBATCH sequences in flight together before the first is used,
 * the weights read once for all of them. The new window is the old one
 * moved on by the input: the same bf16 bits, moved, not converted. */
template <int W, int SILU>
static FN void decode_thread(const conv_params &p, int64_t n0, int64_t n1, int64_t c0) {
    if (c0 >= p.C) return;
    float w[VEC][W], bias[VEC];
    load_params<W>(p, c0, w, bias);
    const int si = seg_of(p, c0);
    int32_t next[DBATCH]; /* the next batch's slots, read a batch ahead */
    UNROLL
    for (int b = 0; b < DBATCH; b++) next[b] = n0 + b < n1 ? p.idx[n0 + b] : -1;
    for (int64_t n = n0; n < n1; n += DBATCH) {
        int32_t slot[DBATCH];
        bf8 x[DBATCH];
        window<W> r[DBATCH];
        UNROLL
        for (int b = 0; b < DBATCH; b++) {
            slot[b] = next[b];
            next[b] = n + DBATCH + b < n1 ? p.idx[n + DBATCH + b] : -1;
            if (n + b < n1) x[b] = load_x(p, n + b, c0); /* row n + b exists whatever the slot */
        }
        UNROLL
        for (int b = 0; b < DBATCH; b++)
            if (slot[b] >= 0 && slot[b] < p.slots) window_load<W>(p, slot[b], c0, r[b]);
        UNROLL
        for (int b = 0; b < DBATCH; b++) {
            if (slot[b] < 0 || slot[b] >= p.slots) continue; /* padded: nothing written */
            float z[W - 1][VEC];
            UNROLL
            for (int i = 0; i < VEC; i++)
                UNROLL
                for (int j = 0; j < W - 1; j++)
                    z[j][i] = widen(get(r[b].v[(i * (W - 1) + j) / VEC], (i * (W - 1) + j) % VEC));
            store_out(p, si, n + b, c0, step<W, SILU>(w, bias, z, x[b]));
            window<W> o = {}; /* every half is set below */
            UNROLL
            for (int i = 0; i < VEC; i++)
                UNROLL
                for (int j = 0; j < W - 1; j++) {
                    const int k = i * (W - 1) + j, from = k + 1; /* tap j+1, or the input */
                    put(o.v[k / VEC], k % VEC,
                        j < W - 2 ? get(r[b].v[from / VEC], from % VEC) : get(x[b], i));
                }
            window_store<W>(p, slot[b], c0, o);
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

/* Blocks per multiprocessor to aim for, so that ptxas keeps each instance
 * within the registers of 4 blocks (W = 2) or 3 (W = 3, 4), sm_90. At
 * W = 4 the vector path at 4 blocks spills a few registers and ran at 0.87
 * of its limit, against 0.91 at 3 (K3 TP1, docs/PERFORMANCE.md). */
template <int W, int FAST, int SILU>
static __global__ void __launch_bounds__(THREADS, W == 2 ? 4 : 3)
    conv_kernel(const conv_params p) {
    int64_t bx, c0;
    if (item_of(p, (int64_t)blockIdx.x * THREADS + threadIdx.x, &bx, &c0))
        conv_thread<W, FAST, SILU>(p, bx, p.tiles, c0);
}

/* No shared memory and fewer registers: more threads in flight. */
template <int W, int SILU>
static __global__ void __launch_bounds__(THREADS, 4) decode_kernel(const conv_params p) {
    int64_t grp, c0;
    if (item_of(p, (int64_t)blockIdx.x * THREADS + threadIdx.x, &grp, &c0)) {
        const int64_t n0 = grp * p.tile, n1 = n0 + p.tile < p.N ? n0 + p.tile : p.N;
        decode_thread<W, SILU>(p, n0, n1, c0);
    }
}

/* The instance for a call: form, width, vector layouts, activation. */
template <int W> static const void *kernel_of(const conv_params &p) {
    if (p.decode)
        return p.silu ? (const void *)decode_kernel<W, 1> : (const void *)decode_kernel<W, 0>;
    const bool fast = p.x_vec == 16 && p.out_vec;
    return fast ? (p.silu ? (const void *)conv_kernel<W, 1, 1> : (const void *)conv_kernel<W, 1, 0>)
                : (p.silu ? (const void *)conv_kernel<W, 0, 1> : (const void *)conv_kernel<W, 0, 0>);
}

static const void *kernel_for(const conv_params &p, int64_t W) {
    return W == 2 ? kernel_of<2>(p) : W == 3 ? kernel_of<3>(p) : kernel_of<4>(p);
}

/* ---- launcher ------------------------------------------------------------ */

static bool aligned16(const void *ptr) { return (uintptr_t)ptr % 16 == 0; }

/* Rows of `row` elements keep 16-byte alignment (or there is one row). */
static bool rows16(int64_t row, int64_t rows) { return rows <= 1 || (row * 2) % 16 == 0; }

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static int64_t forced_items; /* sp_conv_force_items_ */

extern "C" void sp_conv_force_items_(int64_t len) {
    __atomic_store_n(&forced_items, len, __ATOMIC_RELAXED);
}

/* Work items (token tiles, or decode groups of sequences) for a call, from
 * the blocks the device holds at once (`resident`); measured on an H200
 * (docs/PERFORMANCE.md). Prefill: tiles of 64 tokens, or 32, where that
 * makes at least 4 waves of blocks, so that the block scheduler evens out
 * the multiprocessors (0.93 of the limit at K3 TP1, where one wave of
 * 1490-token tiles gave 0.85); with fewer, one wave of the longest tiles,
 * none left over for a partial wave (at T = 1024, H = 96: 0.73, against
 * 0.71 for 2.9 waves of 32). A tile is 8 tokens at least. Decode: 4
 * sequences a thread (two batches of 2), fewer where the grid would not
 * fill one wave (at N = 512, H = 96: 0.94, against 0.79 for one). */
static void choose_items(const sp_conv_dims *d, conv_params *p, int64_t resident) {
    const int64_t units = d->decode ? d->N : d->T, least = d->decode ? 1 : 8;
    const int64_t slots = resident * THREADS; /* threads the device holds */
    int64_t len;
    if (d->decode) {
        const int64_t fill = units * p->nvec / slots;
        len = fill < 1 ? 1 : fill < 4 ? fill : 4;
    } else {
        len = 0;
        for (int64_t t = 64; t >= 32 && !len; t /= 2)
            if (cdiv(units, t) * p->nvec >= 4 * slots) len = t;
        if (!len) {
            const int64_t per_wave = slots / p->nvec;
            len = units > 0 ? cdiv(units, per_wave > 1 ? per_wave : 1) : 1;
        }
    }
    const int64_t forced = __atomic_load_n(&forced_items, __ATOMIC_RELAXED);
    if (forced > 0) len = forced;
    p->tile = len < least ? least : len;
    p->tiles = units > 0 ? cdiv(units, p->tile) : 1; /* T = 0: empty sequences get their state */
}

static void fill_params(const sp_conv_args *a, const sp_conv_dims *d, conv_params *p) {
    memset(p, 0, sizeof *p);
    p->x = (const uint16_t *)a->x.data;
    p->x_row = a->x.strides[0];
    p->x_col = a->x.strides[1];
    p->w = a->weight.data;
    p->w_c = a->weight.strides[0];
    p->w_j = a->weight.strides[1];
    p->bias = d->has_bias ? a->bias.data : NULL;
    p->b_c = d->has_bias ? a->bias.strides[0] : 0;
    p->cu = d->decode ? NULL : (const int64_t *)a->cu_seqlens.data;
    p->idx = (const int32_t *)a->state_indices.data;
    p->init = d->has_init ? (const uint8_t *)a->has_initial_state.data : NULL;
    p->state = (uint16_t *)a->state.data;
    p->s_slot = a->state.strides[0];
    p->s_c = a->state.strides[1];
    p->s_j = a->state.strides[2];
    p->nseg = d->nseg;
    for (int i = 0; i < d->nseg; i++) p->seg[i] = d->seg[i];
    p->T = d->T;
    p->C = d->C;
    p->N = d->N;
    p->slots = d->slots;
    p->silu = a->silu;
    p->decode = d->decode;
    p->w_bf16 = d->weight_bf16;

    const bool c8 = d->C % VEC == 0;
    if (c8 && p->x_col == 1) /* 16-byte loads where rows allow, else 8-byte */
        p->x_vec = aligned16(p->x) && rows16(p->x_row, d->T)                     ? 16
                   : (uintptr_t)p->x % 8 == 0 && (d->T <= 1 || (p->x_row * 2) % 8 == 0) ? 8
                                                                                       : 0;
    p->out_vec = c8 && d->key_dim % VEC == 0;
    for (int i = 0; i < d->nseg; i++) {
        const int64_t next = i + 1 < d->nseg ? d->seg[i + 1].first : d->C;
        if (next == d->seg[i].first) continue; /* no channel goes here */
        p->out_vec = p->out_vec && (next - d->seg[i].first == 1 || d->seg[i].col == 1) &&
                     aligned16(d->seg[i].data) && rows16(d->seg[i].row, d->T);
    }
    p->state_vec = c8 && (d->W == 2 || p->s_j == 1) && p->s_c == d->W - 1 && aligned16(p->state) &&
                   rows16(p->s_slot, d->slots);
    p->w_vec = c8 && p->w_j == 1 && p->w_c == d->W && aligned16(p->w);
    p->b_vec = c8 && d->has_bias && p->b_c == 1 && aligned16(p->bias);
    p->nvec = (d->C + VEC - 1) / VEC;
}

/* Blocks of a kernel instance the device runs at once: 0 until asked, per
 * device and instance (kernel_index). */
static int resident_cache[64][18];

static int kernel_index(const conv_params &p, int64_t W) {
    const int fast = p.x_vec == 16 && p.out_vec;
    return p.decode ? 12 + (int)(W - 2) * 2 + p.silu : (int)(W - 2) * 4 + fast * 2 + p.silu;
}

static sp_status resident_blocks(const void *kernel, int device, int index, int64_t *blocks) {
    int *slot = device >= 0 && device < 64 ? &resident_cache[device][index] : NULL;
    int have = slot ? __atomic_load_n(slot, __ATOMIC_RELAXED) : 0;
    if (have == 0) {
        int sms = 0, per_sm = 0;
        SP_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
        SP_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, THREADS, 0));
        have = sms * (per_sm > 0 ? per_sm : 1);
        if (slot) __atomic_store_n(slot, have, __ATOMIC_RELAXED);
    }
    *blocks = have;
    return SP_OK;
}

/* The launch's own status, not a pending error left by the caller. */
static sp_status launch(const void *kernel, conv_params *p, cudaStream_t stream) {
    void *params[] = {p};
    const int64_t blocks = cdiv(p->tiles * p->nvec, THREADS);
    SP_CUDA_CHECK(cudaLaunchKernel(kernel, dim3((unsigned)blocks), dim3(THREADS), params, 0, stream));
    return SP_OK;
}

static sp_status run_cuda(const sp_conv_args *a, const sp_conv_dims *d, cudaStream_t stream) {
    conv_params p;
    fill_params(a, d, &p);
    const void *kernel = kernel_for(p, d->W);
    int64_t resident = 0;
    SP_FORWARD(resident_blocks(kernel, (int)d->dev.ordinal, kernel_index(p, d->W), &resident));
    choose_items(d, &p, resident);
    return launch(kernel, &p, stream);
}

extern "C" sp_status sp_conv_cuda_(const sp_conv_args *a, const sp_conv_dims *d,
                                   struct CUstream_st *stream) {
    if (d->C == 0) return SP_OK;
    sp_cuda_device_guard g;
    SP_FORWARD(sp_cuda_device_enter_(&g, (int)d->dev.ordinal, "x"));
    return sp_cuda_device_leave_(&g, run_cuda(a, d, (cudaStream_t)stream));
}

/* The kernel on the host, thread by thread. No thread may depend on
 * another having run first, nor write what another writes: the even items
 * run first, last to first, then the odd ones, first to last, so that of
 * two neighbouring tiles the earlier runs first at every other boundary
 * and the later one at the rest. For tests. */
template <int W, int FAST, int SILU> static void emulate_as(const conv_params &p) {
    const int64_t tiles = p.tiles;
    for (int64_t i = 0; i < tiles; i++) {
        const int64_t even = (tiles - 1) / 2 + 1; /* items 0, 2, 4, ... */
        const int64_t bx = i < even ? 2 * (even - 1 - i) : 2 * (i - even) + 1;
        for (int64_t v = 0; v < p.nvec; v++) {
            int64_t item, c0;
            (void)item_of(p, bx * p.nvec + v, &item, &c0);
            if (p.decode) {
                const int64_t n0 = item * p.tile, n1 = n0 + p.tile < p.N ? n0 + p.tile : p.N;
                decode_thread<W, SILU>(p, n0, n1, c0);
            } else {
                conv_thread<W, FAST, SILU>(p, item, tiles, c0);
            }
        }
    }
}

/* The instance the launcher would pick (kernel_of), run on the host. */
template <int W> static void emulate(const conv_params &p) {
    const bool fast = !p.decode && p.x_vec == 16 && p.out_vec;
    if (fast && p.silu) emulate_as<W, 1, 1>(p);
    if (fast && !p.silu) emulate_as<W, 1, 0>(p);
    if (!fast && p.silu) emulate_as<W, 0, 1>(p);
    if (!fast && !p.silu) emulate_as<W, 0, 0>(p);
}

/* What an H200 holds of the prefill kernel at W = 4 (132 multiprocessors,
 * 3 blocks each): the launcher's choice on a machine without a GPU. */
#define EMULATED_RESIDENT (132 * 3)

extern "C" sp_status sp_conv_emulate_(const sp_conv_args *a, int decode, int64_t tile) {
    sp_conv_dims d;
    SP_FORWARD(sp_conv_check_(a, decode, 0, &d));
    SP_REQUIRE(d.dev.type == SP_DEVICE_CPU, SP_ERR_UNSUPPORTED,
               "x: the kernel's emulation runs on CPU tensors only");
    if (d.N == 0 || d.C == 0) return SP_OK;
    conv_params p;
    fill_params(a, &d, &p);
    choose_items(&d, &p, EMULATED_RESIDENT);
    if (tile > 0) { /* forced: tokens per tile (at least 8), or sequences per decode thread */
        const int64_t units = d.decode ? d.N : d.T;
        p.tile = d.decode ? tile : tile < 8 ? 8 : tile;
        p.tiles = units > 0 ? cdiv(units, p.tile) : 1;
    }
    emulated_misaligned = 0;
    if (d.W == 2) emulate<2>(p);
    if (d.W == 3) emulate<3>(p);
    if (d.W == 4) emulate<4>(p);
    SP_REQUIRE(emulated_misaligned == 0, SP_ERR_MISALIGNED,
               "x: %ld vector accesses of the kernel would fault on misaligned addresses",
               emulated_misaligned);
    return SP_OK;
}
