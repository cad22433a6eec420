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
 * So a warp owns RPW consecutive rows of one (sequence, head) pair and works
 * alone. It starts copying its rows into its own shared memory (cp.async:
 * the bytes in flight hold no registers, so a multiprocessor keeps
 * 6 x 32 KB of the pool in flight), reads the token's q, k, g of its lanes'
 * channels (lane l: channels 4l .. 4l + 3) meanwhile and finishes the norms
 * of q and k by a xor butterfly; then it runs its rows DEC_GROUP at a time
 * through the token from shared memory into registers, the dot products
 * finishing by butterflies too, and stores each group's rows where they go
 * (a verify table's slot after the token, the final slot after the last
 * one; between tokens back to its shared memory, in fp32). No block
 * barrier. The butterflies' fixed order makes reruns, and any number of
 * tokens a call, give the same bits. A block is DEC_BLOCK_ROWS rows of one
 * pair (its token vectors stay in L1); the pool is streamed (evict-first
 * stores: it is touched once, the token vectors many times).
 *
 * A warp's shared memory holds its rows in fp32. A bf16 pool's rows (half
 * the bytes) are copied into its second half: group G's fp32 rows then
 * overwrite only bf16 rows of groups up to G, already read into registers.
 *
 * The arithmetic is written once, as per-lane phases (dec_*) that the
 * kernel runs with shuffles between them and the emulation runs for every
 * lane of a warp in turn, the same butterflies in between; only expf and
 * sqrtf may differ between the device and the host, so the emulation tests
 * the kernel's indexing, alignment and token logic, not its last bits.
 */
#include "cuda/ptx.cuh"
#include "kda/cuda/common.cuh"

#include <stdlib.h>
#include <string.h>

#define DEC_BLOCK_ROWS 64 /* rows a block: 32 KB of fp32 rows, two blocks a pair */
#define DEC_GROUP 4       /* rows a warp holds in registers at a time */
#define FULL SP_KDA_FULL_MASK

/* RPW: V rows a warp (the plan's decode_rows_per_warp: 8, 16 or 32). */
template <int RPW> struct dec_shape {
    static constexpr int WARPS = SP_KDA_D / RPW;            /* warps a pair */
    static constexpr int BLOCK_WARPS = DEC_BLOCK_ROWS / RPW; /* warps a block */
    static constexpr int BLOCKS = SP_KDA_D / DEC_BLOCK_ROWS; /* blocks a pair */
    static constexpr int GROUPS = RPW / DEC_GROUP;           /* register groups a warp */
    static_assert(SP_KDA_D == 32 * 4, "a lane's 4 channels of a row");
    static_assert(DEC_BLOCK_ROWS % RPW == 0 && RPW % DEC_GROUP == 0, "rows");
    static_assert(DEC_BLOCK_ROWS * SP_KDA_D * 4 <= 48 * 1024, "static shared memory");
};

/* A warp's shared memory: its rows, fp32. */
template <int RPW> struct dec_rows {
    float x[RPW][SP_KDA_D];
};

/* What a warp works on: uniform over its lanes. */
typedef struct dec_warp {
    kda_seq sq;
    int64_t n, h;
    int row0; /* its first V row */
    float expA;
} dec_warp;

/* One lane's registers (the group loop is not unrolled: v of the group's
 * rows is read with it). */
template <int RPW> struct dec_lane {
    float S[DEC_GROUP][4];    /* its channels of the group's rows */
    float q[4], k[4], g[4];   /* the token's: as read, then q^, k^, exp(g) */
    float bias[4];            /* dt_bias of its channels (softplus and lower-bound gates) */
    float v[DEC_GROUP];       /* the token's v of the group's rows */
    float beta;               /* as read, then b */
    float dot[DEC_GROUP];     /* this lane's share of a row's dot product */
    float sq, sk;             /* its share of q . q and k . k */
};

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

/* Start copying the warp's rows of the read slot into its shared memory,
 * the lane's 16-byte pieces of them (nothing for a fresh sequence); dt_bias
 * of the lane's channels. */
template <int RPW>
static SP_HD void dec_stage(const kda_params &p, const dec_warp &w, int lane, dec_rows<RPW> &m,
                            dec_lane<RPW> &l) {
    const int c = 4 * lane;
    SP_HD_UNROLL
    for (int i = 0; i < 4; i++)
        l.bias[i] = p.gate == SP_KDA_GATE_LOG_DECAY ? 0.0f : p.dt_bias[w.h * SP_KDA_D + c + i];
    if (w.sq.read_base < 0) return;
    const int64_t es = p.state_bf16 ? 2 : 4; /* bytes an element */
    const char *from = (const char *)p.state + (w.sq.read_base + (int64_t)w.row0 * SP_KDA_D) * es;
    char *to = (char *)m.x + (p.state_bf16 ? sizeof m / 2 : 0);
    const int pieces = (int)(RPW * SP_KDA_D * es / 16);
    for (int i = lane; i < pieces; i += 32) {
#ifdef __CUDA_ARCH__
        sp_cp_async16_(to + 16 * i, from + 16 * i);
#else
        memcpy(to + 16 * i, from + 16 * i, 16);
#endif
    }
}

/* Token t's inputs as read: q, k, g of the lane's channels, v of the warp's
 * rows and beta (the same in every lane); the lane's shares of q . q and
 * k . k. */
template <int RPW>
static SP_HD void dec_read(const kda_params &p, const dec_warp &w, int64_t t, int lane,
                           dec_lane<RPW> &l) {
    const int c = 4 * lane;
    const uint16_t *q = kda_row(p.q, t, w.h) + c, *k = kda_row(p.k, t, w.h) + c;
    SP_HD_UNROLL
    for (int i = 0; i < 4; i++) {
        l.q[i] = sp_bf16_to_f32_(q[i]);
        l.k[i] = sp_bf16_to_f32_(k[i]);
        l.g[i] = kda_in(p.g, p.g_f32, t, w.h, c + i);
    }
    l.beta = kda_in(p.beta, p.beta_f32, t, w.h, 0);
    l.sq = (l.q[0] * l.q[0] + l.q[1] * l.q[1]) + (l.q[2] * l.q[2] + l.q[3] * l.q[3]);
    l.sk = (l.k[0] * l.k[0] + l.k[1] * l.k[1]) + (l.k[2] * l.k[2] + l.k[3] * l.k[3]);
}

/* With the full sums of squares: q^, k^, exp(g) of the lane's channels, b. */
template <int RPW>
static SP_HD void dec_prepare(const kda_params &p, const dec_warp &w, dec_lane<RPW> &l) {
    const float rq = p.scale / sqrtf(l.sq + (float)SP_KDA_EPS);
    const float rk = 1.0f / sqrtf(l.sk + (float)SP_KDA_EPS);
    SP_HD_UNROLL
    for (int i = 0; i < 4; i++) {
        l.q[i] *= rq;
        l.k[i] *= rk;
        l.g[i] = expf(sp_kda_log_decay_f32_(p.gate, p.lower_bound, w.expA, l.g[i], l.bias[i]));
    }
    l.beta = sp_kda_beta_f32_(p.beta_form, l.beta);
}

/* Group G's rows into registers: from the read slot's copy before the first
 * token (zeros for a fresh sequence), from the fp32 rows after. */
template <int RPW>
static SP_HD void dec_group_load(const kda_params &p, const dec_warp &w, int64_t t, int first,
                                 int G, int lane, const dec_rows<RPW> &m, dec_lane<RPW> &l) {
    const uint16_t *v = kda_row(p.v, t, w.h) + w.row0 + G * DEC_GROUP;
    SP_HD_UNROLL
    for (int r = 0; r < DEC_GROUP; r++) l.v[r] = sp_bf16_to_f32_(v[r]);
    SP_HD_UNROLL
    for (int r = 0; r < DEC_GROUP; r++) {
        float *x = l.S[r];
        const int row = G * DEC_GROUP + r;
        if (first && w.sq.read_base < 0) {
            x[0] = x[1] = x[2] = x[3] = 0.0f;
        } else if (first && p.state_bf16) {
            const uint16_t *h = (const uint16_t *)((const char *)m.x + sizeof m / 2);
            const uint2 u = *(const uint2 *)(h + row * SP_KDA_D + 4 * lane);
            x[0] = sp_bf16_to_f32_((uint16_t)u.x);
            x[1] = sp_bf16_to_f32_((uint16_t)(u.x >> 16));
            x[2] = sp_bf16_to_f32_((uint16_t)u.y);
            x[3] = sp_bf16_to_f32_((uint16_t)(u.y >> 16));
        } else {
            const float4 f = *(const float4 *)&m.x[row][4 * lane];
            x[0] = f.x, x[1] = f.y, x[2] = f.z, x[3] = f.w;
        }
    }
}

/* Step, 1: the group's rows decayed; their share of S[:, j] . k^. */
template <int RPW> static SP_HD void dec_decay(dec_lane<RPW> &l) {
    SP_HD_UNROLL
    for (int r = 0; r < DEC_GROUP; r++) {
        float d = 0.0f;
        SP_HD_UNROLL
        for (int i = 0; i < 4; i++) {
            l.S[r][i] *= l.g[i];
            d = fmaf(l.S[r][i], l.k[i], d);
        }
        l.dot[r] = d;
    }
}

/* Step, 2: with the full S . k^ of each row (dot[]), the rank-1 update;
 * the lane's share of S[:, j] . q^. */
template <int RPW> static SP_HD void dec_update(dec_lane<RPW> &l) {
    SP_HD_UNROLL
    for (int r = 0; r < DEC_GROUP; r++) {
        const float bu = l.beta * (l.v[r] - l.dot[r]);
        float d = 0.0f;
        SP_HD_UNROLL
        for (int i = 0; i < 4; i++) {
            l.S[r][i] = fmaf(l.k[i], bu, l.S[r][i]);
            d = fmaf(l.S[r][i], l.q[i], d);
        }
        l.dot[r] = d;
    }
}

/* Step, 3: o of the group's rows (full dots in dot[], the same in every
 * lane): lane r < DEC_GROUP stores row r's. */
template <int RPW>
static SP_HD void dec_out(const kda_params &p, const dec_warp &w, int64_t t, int G, int lane,
                          const dec_lane<RPW> &l) {
    if (lane >= DEC_GROUP) return;
    float x = l.dot[0];
    SP_HD_UNROLL
    for (int r = 1; r < DEC_GROUP; r++) x = lane == r ? l.dot[r] : x;
    p.o[(t * p.H + w.h) * SP_KDA_D + w.row0 + G * DEC_GROUP + lane] = sp_f32_to_bf16_(x);
}

/* The group's rows to the slot at `base` ([slot, h]), streamed. */
template <int RPW>
static SP_HD void dec_store(const kda_params &p, const dec_warp &w, int64_t base, int G, int lane,
                            const dec_lane<RPW> &l) {
    SP_HD_UNROLL
    for (int r = 0; r < DEC_GROUP; r++) {
        const float *x = l.S[r];
        const int64_t at = base + (int64_t)(w.row0 + G * DEC_GROUP + r) * SP_KDA_D + 4 * lane;
        if (p.state_bf16) {
            uint2 u;
            u.x = (uint32_t)sp_f32_to_bf16_(x[0]) | (uint32_t)sp_f32_to_bf16_(x[1]) << 16;
            u.y = (uint32_t)sp_f32_to_bf16_(x[2]) | (uint32_t)sp_f32_to_bf16_(x[3]) << 16;
#ifdef __CUDA_ARCH__
            __stcs((uint2 *)((uint16_t *)p.state + at), u);
#else
            *(uint2 *)((uint16_t *)p.state + at) = u;
#endif
        } else {
            const float4 f = make_float4(x[0], x[1], x[2], x[3]);
#ifdef __CUDA_ARCH__
            __stcs((float4 *)((float *)p.state + at), f);
#else
            *(float4 *)((float *)p.state + at) = f;
#endif
        }
    }
}

/* After token i (0-based in the sequence) the group's rows go to its verify
 * table slot, if any; after the last token to the final slot, if any;
 * else back to the warp's shared memory for the next token. */
template <int RPW>
static SP_HD void dec_group_done(const kda_params &p, const dec_warp &w, int64_t i, int G,
                                 int lane, dec_rows<RPW> &m, const dec_lane<RPW> &l) {
    if (p.ix.width > 0) {
        const int64_t to = sp_kda_token_slot_(&p.ix, w.n, i);
        if (to >= 0) dec_store(p, w, kda_slot_base(p, to, w.h), G, lane, l);
    }
    if (i + 1 < w.sq.len) {
        SP_HD_UNROLL
        for (int r = 0; r < DEC_GROUP; r++)
            *(float4 *)&m.x[G * DEC_GROUP + r][4 * lane] =
                make_float4(l.S[r][0], l.S[r][1], l.S[r][2], l.S[r][3]);
    } else if (w.sq.slot_base >= 0) {
        dec_store(p, w, w.sq.slot_base, G, lane, l);
    }
}

/* ---- the kernel ------------------------------------------------------------ */

static __device__ __forceinline__ float butterfly(float x) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(FULL, x, off);
    return x;
}

/* Six blocks a multiprocessor fit its shared memory: at 16 rows a warp the
 * registers are held to that too (ptxas, sm_90: 80 registers and a 32-byte
 * spill; 96 unbounded, 184 with the group loop unrolled). */
template <int RPW>
static __global__ void __launch_bounds__(DEC_BLOCK_ROWS / RPW * 32, RPW == 16 ? 6 : 1)
    kda_decode_kernel(kda_params p) {
    typedef dec_shape<RPW> SH;
    __shared__ __align__(16) dec_rows<RPW> rows[SH::BLOCK_WARPS];
    const int lane = threadIdx.x % 32;
    dec_rows<RPW> &m = rows[threadIdx.x / 32];
    dec_warp w;
    if (!dec_begin<RPW>(p, (int64_t)blockIdx.x * SH::BLOCK_WARPS + threadIdx.x / 32, &w)) return;
    dec_lane<RPW> l;
    dec_stage(p, w, lane, m, l);
    sp_cp_async_commit_();
    for (int64_t i = 0; i < w.sq.len; i++) {
        dec_read(p, w, w.sq.bos + i, lane, l);
        l.sq = butterfly(l.sq);
        l.sk = butterfly(l.sk);
        dec_prepare(p, w, l);
        if (i == 0) sp_cp_async_wait_<0>();
        __syncwarp(); /* the rows copied, or kept by every lane */
#pragma unroll 1
        for (int G = 0; G < SH::GROUPS; G++) {
            dec_group_load(p, w, w.sq.bos + i, i == 0, G, lane, m, l);
            __syncwarp(); /* read by every lane before any keeps the group */
            dec_decay(l);
#pragma unroll
            for (int r = 0; r < DEC_GROUP; r++) l.dot[r] = butterfly(l.dot[r]);
            dec_update(l);
#pragma unroll
            for (int r = 0; r < DEC_GROUP; r++) l.dot[r] = butterfly(l.dot[r]);
            dec_out(p, w, w.sq.bos + i, G, lane, l);
            dec_group_done(p, w, i, G, lane, m, l);
        }
    }
}

template <int RPW> static cudaError_t launch(const kda_params *p, cudaStream_t stream) {
    void *params[] = {(void *)p};
    return cudaLaunchKernel((const void *)kda_decode_kernel<RPW>,
                            dim3((unsigned)(p->N * p->H * dec_shape<RPW>::BLOCKS)),
                            dim3(dec_shape<RPW>::BLOCK_WARPS * 32), params, 0, stream);
}

extern "C" cudaError_t sp_kda_launch_decode_(const kda_params *p, const sp_kda_plan *plan,
                                             cudaStream_t stream) {
    switch (plan->decode_rows_per_warp) {
    case 8: return launch<8>(p, stream);
    case 32: return launch<32>(p, stream);
    default: return launch<16>(p, stream);
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
template <int RPW>
static void emulate_warp(const kda_params &p, int64_t x, dec_rows<RPW> &m, dec_lane<RPW> *L) {
    typedef dec_lane<RPW> lane_t;
    dec_warp w;
    if (!dec_begin<RPW>(p, x, &w)) return;
    for (int j = 0; j < 32; j++) dec_stage(p, w, j, m, L[j]);
    for (int64_t i = 0; i < w.sq.len; i++) {
        for (int j = 0; j < 32; j++) dec_read(p, w, w.sq.bos + i, j, L[j]);
        host_butterfly(L, [](lane_t &l) { return &l.sq; });
        host_butterfly(L, [](lane_t &l) { return &l.sk; });
        for (int j = 0; j < 32; j++) dec_prepare(p, w, L[j]);
        for (int G = 0; G < dec_shape<RPW>::GROUPS; G++) {
            for (int j = 0; j < 32; j++) dec_group_load(p, w, w.sq.bos + i, i == 0, G, j, m, L[j]);
            for (int j = 0; j < 32; j++) dec_decay(L[j]);
            for (int r = 0; r < DEC_GROUP; r++)
                host_butterfly(L, [r](lane_t &l) { return &l.dot[r]; });
            for (int j = 0; j < 32; j++) dec_update(L[j]);
            for (int r = 0; r < DEC_GROUP; r++)
                host_butterfly(L, [r](lane_t &l) { return &l.dot[r]; });
            for (int j = 0; j < 32; j++) {
                dec_out(p, w, w.sq.bos + i, G, j, L[j]);
                dec_group_done(p, w, i, G, j, m, L[j]);
            }
        }
    }
}

template <int RPW> static sp_status emulate(const kda_params &p, const sp_kda_dims &d) {
    dec_rows<RPW> *m = (dec_rows<RPW> *)malloc(sizeof *m);
    dec_lane<RPW> *lanes = (dec_lane<RPW> *)malloc(32 * sizeof *lanes);
    if (!m || !lanes) {
        free(m);
        free(lanes);
        return sp_set_error_(SP_ERR_OUT_OF_MEMORY, "sp_kda_decode_emulate_: no memory");
    }
    for (int64_t x = 0; x < d.N * d.H * dec_shape<RPW>::WARPS; x++) emulate_warp(p, x, *m, lanes);
    free(m);
    free(lanes);
    return SP_OK;
}

extern "C" sp_status sp_kda_decode_emulate_(const sp_kda_args *a, int rows_per_warp) {
    SP_REQUIRE(a, SP_ERR_INVALID_ARGUMENT, "args: NULL");
    SP_REQUIRE(rows_per_warp == 8 || rows_per_warp == 16 || rows_per_warp == 32,
               SP_ERR_INVALID_ARGUMENT, "rows_per_warp: %d is not 8, 16 or 32", rows_per_warp);
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
    return rows_per_warp == 8    ? emulate<8>(p, d)
           : rows_per_warp == 32 ? emulate<32>(p, d)
                                 : emulate<16>(p, d);
}
