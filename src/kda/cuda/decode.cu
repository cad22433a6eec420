/*
 * decode.cu — the KDA decode kernel: few tokens a sequence (decode, and the
 * k+1 tokens of speculative verify), laid out for bandwidth, since such a
 * step is a stream over the state pool (every state read once, written once
 * or once per token of a verify table). And its emulation on the host,
 * lane by lane, for the tests of machines without a GPU.
 *
 * In the V-first pool a state row j (the 128 K channels of V column j: 512
 * bytes in fp32) is independent of every other row once the token's q^, k^,
 * exp(g), b and v[j] are known:
 *   S[:, j] *= exp(g);  u_j = v_j - S[:, j] . k^;  S[:, j] += b k^ u_j;
 *   o_j = S[:, j] . q^.
 * So a warp owns RPW rows of one (sequence, head) pair and works alone: lane
 * l holds channels 4l .. 4l + 3 of each row (one 16-byte load from an fp32
 * pool, 8 bytes from a bf16 one) and reads the token's q, k, g of the same
 * four channels itself, so that the norms of q and k, like the dot products,
 * finish by a xor butterfly over the warp. No shared memory, no barrier: the
 * state loads, issued first, and the token's loads are one latency apart
 * from the stores, and a warp reads token i + 1 while it runs token i. The
 * butterflies' fixed order makes reruns, and any number of tokens a call,
 * give the same bits. A block is DEC_WARPS warps of one pair (the pair's
 * token vectors stay in its L1); the rows are streamed (evict-first loads
 * and stores: the pool is touched once, the token vectors many times).
 *
 * The arithmetic is written once, as per-lane phases (dec_*) that the
 * kernel runs with shuffles between them and the emulation runs for every
 * lane of a warp in turn, the same butterflies in between; only expf and
 * sqrtf may differ between the device and the host, so the emulation tests
 * the kernel's indexing, alignment and token logic, not its last bits.
 */
#include "kda/cuda/common.cuh"

#include <stdlib.h>

#define DEC_WARPS 8 /* warps a block, all of one (sequence, head) pair */
#define FULL SP_KDA_FULL_MASK

/* RPW: V rows a warp (the plan's decode_rows_per_warp: 2, 4 or 8). */
template <int RPW> struct dec_shape {
    static constexpr int WARPS = SP_KDA_D / RPW;           /* warps a pair */
    static constexpr int BLOCKS = WARPS / DEC_WARPS;       /* blocks a pair */
    static_assert(SP_KDA_D == 32 * 4, "a lane's 4 channels of a row");
    static_assert(WARPS % DEC_WARPS == 0, "a block's warps are of one pair");
};

/* What a warp works on: uniform over its lanes. */
typedef struct dec_warp {
    kda_seq sq;
    int64_t n, h;
    int row0; /* its first V row */
    float expA;
} dec_warp;

/* One token's inputs for a lane's channels and its warp's rows, as read. */
template <int RPW> struct dec_token {
    float q[4], k[4], g[4];
    float v[RPW];
    float beta;
};

/* One lane's registers. */
template <int RPW> struct dec_lane {
    float S[RPW][4];  /* its channels of the warp's rows */
    float q[4], k[4], e[4]; /* the token's q^, k^, exp(g) */
    float dot[RPW];   /* this lane's share of a row's dot product */
    float sq, sk;     /* its share of q . q and k . k */
    float bias[4];    /* dt_bias of its channels (softplus and lower-bound gates) */
    dec_token<RPW> cur, next;
};

/* Streaming accesses to the pool (each state byte is touched once): the
 * device's evict-first loads and stores; plain ones on the host. */
static SP_HD float4 dec_ld4(const float *x) {
#ifdef __CUDA_ARCH__
    return __ldcs((const float4 *)x);
#else
    return *(const float4 *)x;
#endif
}
static SP_HD uint2 dec_ld4h(const uint16_t *x) {
#ifdef __CUDA_ARCH__
    return __ldcs((const uint2 *)x);
#else
    return *(const uint2 *)x;
#endif
}
static SP_HD void dec_st4(float *x, float4 f) {
#ifdef __CUDA_ARCH__
    __stcs((float4 *)x, f);
#else
    *(float4 *)x = f;
#endif
}
static SP_HD void dec_st4h(uint16_t *x, uint2 u) {
#ifdef __CUDA_ARCH__
    __stcs((uint2 *)x, u);
#else
    *(uint2 *)x = u;
#endif
}

/* ---- the phases: the arithmetic of the kernel and of the emulation ------- */

/* Warp x of the grid; 0 when it has nothing to do (a padded or skipped
 * sequence, or one without tokens). */
template <int RPW> static SP_HD int dec_begin(const kda_params &p, int64_t x, dec_warp *w) {
    typedef dec_shape<RPW> SH;
    const int64_t pair = x / SH::WARPS;
    w->h = pair % p.H;
    w->n = pair / p.H;
    w->row0 = (int)(x % SH::WARPS) * RPW;
    if (!kda_seq_of(p, w->n, w->h, &w->sq) || w->sq.len == 0) return 0;
    w->expA = p.gate == SP_KDA_GATE_LOG_DECAY ? 0.0f : expf(p.A_log[w->h]);
    return 1;
}

/* Load (or zero, for a fresh sequence) the lane's channels of its rows;
 * dt_bias of its channels. */
template <int RPW>
static SP_HD void dec_load(const kda_params &p, const dec_warp &w, int lane, dec_lane<RPW> &l) {
    const int c = 4 * lane;
    SP_HD_UNROLL
    for (int i = 0; i < 4; i++)
        l.bias[i] = p.gate == SP_KDA_GATE_LOG_DECAY ? 0.0f : p.dt_bias[w.h * SP_KDA_D + c + i];
    SP_HD_UNROLL
    for (int r = 0; r < RPW; r++) {
        float *x = l.S[r];
        const int64_t at = w.sq.read_base + (int64_t)(w.row0 + r) * SP_KDA_D + c;
        if (w.sq.read_base < 0) {
            x[0] = x[1] = x[2] = x[3] = 0.0f;
        } else if (p.state_bf16) {
            const uint2 u = dec_ld4h((const uint16_t *)p.state + at);
            x[0] = sp_bf16_to_f32_((uint16_t)u.x);
            x[1] = sp_bf16_to_f32_((uint16_t)(u.x >> 16));
            x[2] = sp_bf16_to_f32_((uint16_t)u.y);
            x[3] = sp_bf16_to_f32_((uint16_t)(u.y >> 16));
        } else {
            const float4 f = dec_ld4((const float *)p.state + at);
            x[0] = f.x, x[1] = f.y, x[2] = f.z, x[3] = f.w;
        }
    }
}

/* Store the lane's channels of its rows to the slot at `base` ([slot, h]). */
template <int RPW>
static SP_HD void dec_store(const kda_params &p, const dec_warp &w, int64_t base, int lane,
                            const dec_lane<RPW> &l) {
    const int c = 4 * lane;
    SP_HD_UNROLL
    for (int r = 0; r < RPW; r++) {
        const float *x = l.S[r];
        const int64_t at = base + (int64_t)(w.row0 + r) * SP_KDA_D + c;
        if (p.state_bf16) {
            uint2 u;
            u.x = (uint32_t)sp_f32_to_bf16_(x[0]) | (uint32_t)sp_f32_to_bf16_(x[1]) << 16;
            u.y = (uint32_t)sp_f32_to_bf16_(x[2]) | (uint32_t)sp_f32_to_bf16_(x[3]) << 16;
            dec_st4h((uint16_t *)p.state + at, u);
        } else {
            dec_st4((float *)p.state + at, make_float4(x[0], x[1], x[2], x[3]));
        }
    }
}

/* Token t's inputs for the lane (q, k, g of its channels; v of the warp's
 * rows, beta: the same in every lane). */
template <int RPW>
static SP_HD void dec_read(const kda_params &p, const dec_warp &w, int64_t t, int lane,
                           dec_token<RPW> &x) {
    const int c = 4 * lane;
    const uint16_t *q = kda_row(p.q, t, w.h) + c, *k = kda_row(p.k, t, w.h) + c;
    SP_HD_UNROLL
    for (int i = 0; i < 4; i++) {
        x.q[i] = sp_bf16_to_f32_(q[i]);
        x.k[i] = sp_bf16_to_f32_(k[i]);
        x.g[i] = kda_in(p.g, p.g_f32, t, w.h, c + i);
    }
    const uint16_t *v = kda_row(p.v, t, w.h) + w.row0;
    SP_HD_UNROLL
    for (int r = 0; r < RPW; r++) x.v[r] = sp_bf16_to_f32_(v[r]);
    x.beta = kda_in(p.beta, p.beta_f32, t, w.h, 0);
}

/* Step, 1: the lane's shares of q . q and k . k, to be summed over the warp. */
template <int RPW> static SP_HD void dec_squares(dec_lane<RPW> &l) {
    const dec_token<RPW> &x = l.cur;
    l.sq = (x.q[0] * x.q[0] + x.q[1] * x.q[1]) + (x.q[2] * x.q[2] + x.q[3] * x.q[3]);
    l.sk = (x.k[0] * x.k[0] + x.k[1] * x.k[1]) + (x.k[2] * x.k[2] + x.k[3] * x.k[3]);
}

/* Step, 2: with the full sums, q^, k^ and exp(g) of the lane's channels;
 * its rows decayed, their share of S[:, j] . k^. */
template <int RPW>
static SP_HD void dec_decay(const kda_params &p, const dec_warp &w, dec_lane<RPW> &l) {
    const dec_token<RPW> &x = l.cur;
    const float rq = p.scale / sqrtf(l.sq + (float)SP_KDA_EPS);
    const float rk = 1.0f / sqrtf(l.sk + (float)SP_KDA_EPS);
    SP_HD_UNROLL
    for (int i = 0; i < 4; i++) {
        l.q[i] = x.q[i] * rq;
        l.k[i] = x.k[i] * rk;
        l.e[i] = expf(sp_kda_log_decay_f32_(p.gate, p.lower_bound, w.expA, x.g[i], l.bias[i]));
    }
    SP_HD_UNROLL
    for (int r = 0; r < RPW; r++) {
        float d = 0.0f;
        SP_HD_UNROLL
        for (int i = 0; i < 4; i++) {
            l.S[r][i] *= l.e[i];
            d = fmaf(l.S[r][i], l.k[i], d);
        }
        l.dot[r] = d;
    }
}

/* Step, 3: with the full S . k^ of each row (dot[]), the rank-1 update;
 * the lane's share of S[:, j] . q^. */
template <int RPW>
static SP_HD void dec_update(const kda_params &p, dec_lane<RPW> &l) {
    const float b = sp_kda_beta_f32_(p.beta_form, l.cur.beta);
    SP_HD_UNROLL
    for (int r = 0; r < RPW; r++) {
        const float bu = b * (l.cur.v[r] - l.dot[r]);
        float d = 0.0f;
        SP_HD_UNROLL
        for (int i = 0; i < 4; i++) {
            l.S[r][i] = fmaf(l.k[i], bu, l.S[r][i]);
            d = fmaf(l.S[r][i], l.q[i], d);
        }
        l.dot[r] = d;
    }
}

/* Step, 4: o of the warp's rows (full dots in dot[], the same in every
 * lane): lane r < RPW stores row r's (the warp's stores coalesce). */
template <int RPW>
static SP_HD void dec_out(const kda_params &p, const dec_warp &w, int64_t t, int lane,
                          const dec_lane<RPW> &l) {
    if (lane >= RPW) return;
    float x = l.dot[0];
    SP_HD_UNROLL
    for (int r = 1; r < RPW; r++) x = lane == r ? l.dot[r] : x;
    p.o[(t * p.H + w.h) * SP_KDA_D + w.row0 + lane] = sp_f32_to_bf16_(x);
}

/* After token i (0-based in the sequence): the rows to its table slot. */
template <int RPW>
static SP_HD void dec_token_store(const kda_params &p, const dec_warp &w, int64_t i, int lane,
                                  const dec_lane<RPW> &l) {
    if (p.ix.width == 0) return;
    const int64_t to = sp_kda_token_slot_(&p.ix, w.n, i);
    if (to >= 0) dec_store(p, w, kda_slot_base(p, to, w.h), lane, l);
}

/* ---- the kernel ------------------------------------------------------------ */

static __device__ __forceinline__ float butterfly(float x) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(FULL, x, off);
    return x;
}

template <int RPW>
static __global__ void __launch_bounds__(DEC_WARPS * 32) kda_decode_kernel(kda_params p) {
    const int lane = threadIdx.x % 32;
    dec_warp w;
    if (!dec_begin<RPW>(p, (int64_t)blockIdx.x * DEC_WARPS + threadIdx.x / 32, &w)) return;
    dec_lane<RPW> l;
    dec_load(p, w, lane, l); /* in flight while the first token is read */
    dec_read(p, w, w.sq.bos, lane, l.cur);
    for (int64_t i = 0; i < w.sq.len; i++) {
        if (i + 1 < w.sq.len) dec_read(p, w, w.sq.bos + i + 1, lane, l.next);
        dec_squares(l);
        l.sq = butterfly(l.sq);
        l.sk = butterfly(l.sk);
        dec_decay(p, w, l);
#pragma unroll
        for (int r = 0; r < RPW; r++) l.dot[r] = butterfly(l.dot[r]);
        dec_update(p, l);
#pragma unroll
        for (int r = 0; r < RPW; r++) l.dot[r] = butterfly(l.dot[r]);
        dec_out(p, w, w.sq.bos + i, lane, l);
        dec_token_store(p, w, i, lane, l);
        l.cur = l.next;
    }
    if (w.sq.slot_base >= 0) dec_store(p, w, w.sq.slot_base, lane, l);
}

template <int RPW> static cudaError_t launch(const kda_params *p, cudaStream_t stream) {
    void *params[] = {(void *)p};
    return cudaLaunchKernel((const void *)kda_decode_kernel<RPW>,
                            dim3((unsigned)(p->N * p->H * dec_shape<RPW>::BLOCKS)),
                            dim3(DEC_WARPS * 32), params, 0, stream);
}

extern "C" cudaError_t sp_kda_launch_decode_(const kda_params *p, const sp_kda_plan *plan,
                                             cudaStream_t stream) {
    switch (plan->decode_rows_per_warp) {
    case 2: return launch<2>(p, stream);
    case 8: return launch<8>(p, stream);
    default: return launch<4>(p, stream);
    }
}

/* ---- the emulation ------------------------------------------------------------ */

/* The butterfly over a warp's lanes of x(l) = field of lane l, in the order
 * the shuffles add: x_l += x_(l ^ off), off = 16, 8, 4, 2, 1. */
template <int RPW, typename F> static void host_butterfly(dec_lane<RPW> *L, F field) {
    for (int off = 16; off > 0; off >>= 1) {
        float next[32];
        for (int i = 0; i < 32; i++) next[i] = *field(L[i]) + *field(L[i ^ off]);
        for (int i = 0; i < 32; i++) *field(L[i]) = next[i];
    }
}

/* Warp x of the grid on the host, its lanes phase by phase. */
template <int RPW> static void emulate_warp(const kda_params &p, int64_t x, dec_lane<RPW> *L) {
    typedef dec_lane<RPW> lane_t;
    dec_warp w;
    if (!dec_begin<RPW>(p, x, &w)) return;
    for (int j = 0; j < 32; j++) dec_load(p, w, j, L[j]);
    for (int64_t i = 0; i < w.sq.len; i++) {
        for (int j = 0; j < 32; j++) {
            dec_read(p, w, w.sq.bos + i, j, L[j].cur);
            dec_squares(L[j]);
        }
        host_butterfly(L, [](lane_t &l) { return &l.sq; });
        host_butterfly(L, [](lane_t &l) { return &l.sk; });
        for (int j = 0; j < 32; j++) dec_decay(p, w, L[j]);
        for (int r = 0; r < RPW; r++) host_butterfly(L, [r](lane_t &l) { return &l.dot[r]; });
        for (int j = 0; j < 32; j++) dec_update(p, L[j]);
        for (int r = 0; r < RPW; r++) host_butterfly(L, [r](lane_t &l) { return &l.dot[r]; });
        for (int j = 0; j < 32; j++) {
            dec_out(p, w, w.sq.bos + i, j, L[j]);
            dec_token_store(p, w, i, j, L[j]);
        }
    }
    if (w.sq.slot_base >= 0)
        for (int j = 0; j < 32; j++) dec_store(p, w, w.sq.slot_base, j, L[j]);
}

template <int RPW> static sp_status emulate(const kda_params &p, const sp_kda_dims &d) {
    dec_lane<RPW> *lanes = (dec_lane<RPW> *)malloc(32 * sizeof *lanes);
    if (!lanes) return sp_set_error_(SP_ERR_OUT_OF_MEMORY, "sp_kda_decode_emulate_: no memory");
    for (int64_t x = 0; x < d.N * d.H * dec_shape<RPW>::WARPS; x++) emulate_warp(p, x, lanes);
    free(lanes);
    return SP_OK;
}
extern "C" sp_status sp_kda_decode_emulate_(const sp_kda_args *a, int rows_per_warp) {
    SP_REQUIRE(a, SP_ERR_INVALID_ARGUMENT, "args: NULL");
    SP_REQUIRE(rows_per_warp == 2 || rows_per_warp == 4 || rows_per_warp == 8,
               SP_ERR_INVALID_ARGUMENT, "rows_per_warp: %d is not 2, 4 or 8", rows_per_warp);
    sp_kda_args call = *a;
    call.kernel = SP_KDA_KERNEL_AUTO; /* the plan's device rule aside: checked below */
    sp_kda_dims d;
    SP_FORWARD(sp_kda_check_(&call, 1, &d));
    SP_REQUIRE(d.dev.type == SP_DEVICE_CPU, SP_ERR_UNSUPPORTED,
               "q: the decode kernel's emulation runs on CPU tensors only");
    const char *no = sp_kda_decode_layout_unsupported_(&call, &d);
    SP_REQUIRE(!no, SP_ERR_UNSUPPORTED, "kernel: the decode kernel cannot serve this call: %s", no);
    if (d.T == 0 || d.N == 0 || d.H == 0) return SP_OK;
    const kda_params p = sp_kda_cuda_params_(&call, &d);
    return rows_per_warp == 2 ? emulate<2>(p, d) : rows_per_warp == 8 ? emulate<8>(p, d)
                                                                      : emulate<4>(p, d);
}
