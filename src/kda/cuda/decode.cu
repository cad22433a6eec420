/*
 * decode.cu — the KDA decode kernel: few tokens a sequence (decode, and the
 * k+1 tokens of speculative verify), laid out for bandwidth, since such a
 * step is a stream over the state pool (every state read once, written once
 * or once per token of a verify table). And its emulation on the host,
 * thread by thread, for the tests of machines without a GPU.
 *
 * In the V-first pool a state row j (the 128 K channels of V column j: 512
 * bytes in fp32) is independent of every other row once the token's q^, k^,
 * exp(g), b and v[j] are known:
 *   S[:, j] *= exp(g);  u_j = v_j - S[:, j] . k^;  S[:, j] += b k^ u_j;
 *   o_j = S[:, j] . q^.
 * So a warp owns RPW rows, lane l holding channels 4l .. 4l + 3 of
 * each (one 16-byte load from an fp32 pool, 8 bytes from a bf16 one; from a
 * K-first pool, where a channel's RPW rows are the consecutive elements,
 * RPW elements from each of its 4 channels), every row's load issued
 * before anything else; the dot products finish by a xor
 * butterfly, whose fixed order makes reruns, and any number of tokens a call,
 * give the same bits. A block is (sequence, head, 8 RPW rows): 128 / (8 RPW)
 * blocks a (sequence, head) pair, so that at N = 64 there are
 * loads in flight on every multiprocessor. While the rows load, the block
 * prepares up to DEC_TOKENS tokens' vectors in shared memory (each half of
 * the block one token at a time); then each warp runs its rows through them
 * with no barrier, storing the rows after each token where a verify table
 * names a slot, and at the end where the sequence has a final slot.
 *
 * The arithmetic is written once, as per-thread phases (dec_*) that the
 * kernel runs with shuffles and barriers between them and the emulation runs
 * for every thread of a block in turn, the same butterflies in between; only
 * expf differs between the device and the host, so the emulation tests the
 * kernel's indexing, alignment and token logic, not its last bits.
 */
#include "kda/cuda/common.cuh"

#include <stdlib.h>

#define DEC_THREADS 256
#define DEC_WARPS (DEC_THREADS / 32)
#define DEC_TOKENS 8 /* tokens prepared at a time */
#define HALF 128     /* threads preparing one token */
#define FULL SP_KDA_FULL_MASK

/* RPW: V rows a warp (the plan's decode_rows_per_warp: 2, 4 or 8). */
template <int RPW> struct dec_shape {
    static constexpr int ROWS = DEC_WARPS * RPW;      /* a block's rows */
    static constexpr int BLOCKS = SP_KDA_D / ROWS;     /* blocks a (sequence, head) pair */
    static_assert(ROWS <= HALF && SP_KDA_D % ROWS == 0, "rows a block");
};

template <int RPW> struct dec_smem {
    float q[DEC_TOKENS][SP_KDA_D], k[DEC_TOKENS][SP_KDA_D], e[DEC_TOKENS][SP_KDA_D];
    float v[DEC_TOKENS][dec_shape<RPW>::ROWS]; /* v of the block's rows */
    float b[DEC_TOKENS];
    float red[2][2][HALF / 32]; /* per half: each warp's sums of q^2 and k^2 */
};

/* What a block works on: uniform over its threads. */
typedef struct dec_block {
    kda_seq sq;
    int64_t n, h;
    int row0; /* its first V row */
    float expA;
} dec_block;

/* One thread's registers: its 4 channels of its warp's rows. */
template <int RPW> struct dec_lane {
    float S[RPW][4];
    float dot[RPW]; /* this lane's share of a row's dot product */
    float sq, sk;   /* prep: q^2 and k^2 of its channel */
};

/* ---- the phases: the arithmetic of the kernel and of the emulation ------- */

/* Block x of the grid; 0 when it has nothing to do (a padded or skipped
 * sequence, or one without tokens). */
template <int RPW> static SP_HD int dec_begin(const kda_params &p, int64_t x, dec_block *b) {
    typedef dec_shape<RPW> SH;
    const int64_t pair = x / SH::BLOCKS;
    b->h = pair % p.H;
    b->n = pair / p.H;
    b->row0 = (int)(x % SH::BLOCKS) * SH::ROWS;
    if (!kda_seq_of(p, b->n, b->h, &b->sq) || b->sq.len == 0) return 0;
    b->expA = expf(p.A_log[b->h]);
    return 1;
}

template <int RPW> static SP_HD int64_t dec_row(const dec_block &b, int w, int r) {
    return b.row0 + w * RPW + r;
}

/* N (2, 4 or 8) consecutive pool elements from element `at` (aligned to
 * N elements) as floats, or (STORE) from floats: 16-byte pieces of an fp32
 * pool (8-byte of a bf16 one), or one 8-byte (4-byte) piece for N = 2. */
template <int STORE, int N>
static SP_HD void dec_pool_io(const kda_params &p, int64_t at, float *x) {
    SP_HD_UNROLL
    for (int i = 0; i < N; i += 4) {
        float *y = x + i;
        if (N == 2 && p.state_bf16 && STORE) {
            *(uint32_t *)((uint16_t *)p.state + at) =
                (uint32_t)sp_f32_to_bf16_(y[0]) | (uint32_t)sp_f32_to_bf16_(y[1]) << 16;
        } else if (N == 2 && p.state_bf16) {
            const uint32_t u = *(const uint32_t *)((const uint16_t *)p.state + at);
            y[0] = sp_bf16_to_f32_((uint16_t)u), y[1] = sp_bf16_to_f32_((uint16_t)(u >> 16));
        } else if (N == 2 && STORE) {
            *(float2 *)((float *)p.state + at) = make_float2(y[0], y[1]);
        } else if (N == 2) {
            const float2 f = *(const float2 *)((const float *)p.state + at);
            y[0] = f.x, y[1] = f.y;
        } else if (p.state_bf16 && STORE) {
            uint2 u;
            u.x = (uint32_t)sp_f32_to_bf16_(y[0]) | (uint32_t)sp_f32_to_bf16_(y[1]) << 16;
            u.y = (uint32_t)sp_f32_to_bf16_(y[2]) | (uint32_t)sp_f32_to_bf16_(y[3]) << 16;
            *(uint2 *)((uint16_t *)p.state + at + i) = u;
        } else if (p.state_bf16) {
            const uint2 u = *(const uint2 *)((const uint16_t *)p.state + at + i);
            y[0] = sp_bf16_to_f32_((uint16_t)u.x), y[1] = sp_bf16_to_f32_((uint16_t)(u.x >> 16));
            y[2] = sp_bf16_to_f32_((uint16_t)u.y), y[3] = sp_bf16_to_f32_((uint16_t)(u.y >> 16));
        } else if (STORE) {
            *(float4 *)((float *)p.state + at + i) = make_float4(y[0], y[1], y[2], y[3]);
        } else {
            const float4 f = *(const float4 *)((const float *)p.state + at + i);
            y[0] = f.x, y[1] = f.y, y[2] = f.z, y[3] = f.w;
        }
    }
}

/* The thread's channels of its rows to (STORE) or from the slot at `base`
 * ([slot, h]): V-first, a row's 4 channels are contiguous; K-first (kf), a
 * channel's RPW rows are. */
template <int STORE, int RPW>
static SP_HD void dec_io(const kda_params &p, const dec_block &b, int64_t base, int kf, int tid,
                         float S[RPW][4]) {
    const int w = tid / 32, c = 4 * (tid % 32);
    if (!kf) {
        SP_HD_UNROLL
        for (int r = 0; r < RPW; r++)
            dec_pool_io<STORE, 4>(p, base + sp_kda_state_at_(0, c, dec_row<RPW>(b, w, r)), S[r]);
        return;
    }
    SP_HD_UNROLL
    for (int x = 0; x < 4; x++) {
        float y[RPW];
        SP_HD_UNROLL
        for (int r = 0; r < RPW; r++) y[r] = S[r][x];
        dec_pool_io<STORE, RPW>(p, base + sp_kda_state_at_(1, c + x, dec_row<RPW>(b, w, 0)), y);
        if (!STORE) {
            SP_HD_UNROLL
            for (int r = 0; r < RPW; r++) S[r][x] = y[r];
        }
    }
}

/* Load (or zero, for a fresh sequence) the thread's channels of its rows. */
template <int RPW>
static SP_HD void dec_load(const kda_params &p, const dec_block &b, int kf, int tid,
                           dec_lane<RPW> &l) {
    if (b.sq.read_base >= 0) {
        dec_io<0, RPW>(p, b, b.sq.read_base, kf, tid, l.S);
        return;
    }
    SP_HD_UNROLL
    for (int r = 0; r < RPW; r++) l.S[r][0] = l.S[r][1] = l.S[r][2] = l.S[r][3] = 0.0f;
}

/* Store the thread's channels of its rows to the slot at `base` ([slot, h]). */
template <int RPW>
static SP_HD void dec_store(const kda_params &p, const dec_block &b, int64_t base, int kf, int tid,
                            const dec_lane<RPW> &l) {
    dec_io<1, RPW>(p, b, base, kf, tid, const_cast<float (*)[4]>(l.S));
}

/* Prep, 1: token t's channel tid % 128, squared (q and k), to be summed over
 * the warp. */
template <int RPW>
static SP_HD void dec_prep_squares(const kda_params &p, const dec_block &b, int64_t t, int tid,
                                   dec_lane<RPW> &l) {
    const int c = tid % HALF;
    const float qf = sp_bf16_to_f32_(kda_row(p.q, t, b.h)[c]);
    const float kf = sp_bf16_to_f32_(kda_row(p.k, t, b.h)[c]);
    l.sq = qf * qf;
    l.sk = kf * kf;
}

/* Prep, 2: the warp's sums (lane 0's, after the butterfly) into red[]. */
template <int RPW>
static SP_HD void dec_prep_partial(int tid, const dec_lane<RPW> &l, dec_smem<RPW> &s) {
    const int half = tid / HALF, w4 = (tid % HALF) / 32;
    if (tid % 32 == 0) {
        s.red[half][0][w4] = l.sq;
        s.red[half][1][w4] = l.sk;
    }
}

/* Prep, 3: token t (i-th of the chunk) normalized, gated, into shared memory. */
template <int RPW>
static SP_HD void dec_prep_store(const kda_params &p, const dec_block &b, int64_t t, int i,
                                 int tid, dec_smem<RPW> &s) {
    const int half = tid / HALF, c = tid % HALF;
    const float *rq = s.red[half][0], *rk = s.red[half][1];
    const float tq = (rq[0] + rq[1]) + (rq[2] + rq[3]), tk = (rk[0] + rk[1]) + (rk[2] + rk[3]);
    const float qf = sp_bf16_to_f32_(kda_row(p.q, t, b.h)[c]);
    const float kf = sp_bf16_to_f32_(kda_row(p.k, t, b.h)[c]);
    s.q[i][c] = qf * (p.scale / sqrtf(tq + (float)SP_KDA_EPS));
    s.k[i][c] = kf * (1.0f / sqrtf(tk + (float)SP_KDA_EPS));
    const float x = kda_in(p.g, p.g_f32, t, b.h, c);
    s.e[i][c] = expf(sp_kda_log_decay_f32_(p.gate, p.lower_bound, b.expA, x,
                                           p.dt_bias[b.h * SP_KDA_D + c]));
    if (c < dec_shape<RPW>::ROWS)
        s.v[i][c] = sp_bf16_to_f32_(kda_row(p.v, t, b.h)[b.row0 + c]);
    if (c == 0)
        s.b[i] = sp_kda_beta_f32_(p.beta_form, kda_in(p.beta, p.beta_f32, t, b.h, 0));
}

/* Step, 1: decay the thread's channels of each row by token i; their share
 * of S[:, j] . k^. */
template <int RPW>
static SP_HD void dec_decay(int i, int tid, const dec_smem<RPW> &s, dec_lane<RPW> &l) {
    const int c = 4 * (tid % 32);
    SP_HD_UNROLL
    for (int r = 0; r < RPW; r++) {
        float d = 0.0f;
        SP_HD_UNROLL
        for (int x = 0; x < 4; x++) {
            l.S[r][x] *= s.e[i][c + x];
            d = fmaf(l.S[r][x], s.k[i][c + x], d);
        }
        l.dot[r] = d;
    }
}

/* Step, 2: with the full S . k^ of each row (dot[]), the rank-1 update;
 * the thread's share of S[:, j] . q^. */
template <int RPW>
static SP_HD void dec_update(int i, int tid, const dec_smem<RPW> &s, dec_lane<RPW> &l) {
    const int w = tid / 32, c = 4 * (tid % 32);
    SP_HD_UNROLL
    for (int r = 0; r < RPW; r++) {
        const float bu = s.b[i] * (s.v[i][w * RPW + r] - l.dot[r]);
        float d = 0.0f;
        SP_HD_UNROLL
        for (int x = 0; x < 4; x++) {
            l.S[r][x] = fmaf(s.k[i][c + x], bu, l.S[r][x]);
            d = fmaf(l.S[r][x], s.q[i][c + x], d);
        }
        l.dot[r] = d;
    }
}

/* Step, 3: o of the warp's rows (full dots in dot[], the same in every
 * lane): lane r < RPW stores row r's (the warp's stores coalesce). */
template <int RPW>
static SP_HD void dec_out(const kda_params &p, const dec_block &b, int64_t t, int tid,
                          const dec_lane<RPW> &l) {
    const int lane = tid % 32;
    if (lane >= RPW) return;
    float x = l.dot[0];
    SP_HD_UNROLL
    for (int r = 1; r < RPW; r++) x = lane == r ? l.dot[r] : x;
    p.o[(t * p.H + b.h) * SP_KDA_D + dec_row<RPW>(b, tid / 32, lane)] = sp_f32_to_bf16_(x);
}

/* After token i (0-based in the sequence): the rows to its table slot. */
template <int RPW>
static SP_HD void dec_token_store(const kda_params &p, const dec_block &b, int64_t i, int kf,
                                  int tid, const dec_lane<RPW> &l) {
    if (p.ix.width == 0) return;
    const int64_t to = sp_kda_token_slot_(&p.ix, b.n, i);
    if (to >= 0) dec_store(p, b, kda_slot_base(p, to, b.h), kf, tid, l);
}

/* ---- the kernel ------------------------------------------------------------ */

static __device__ __forceinline__ float butterfly(float x) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(FULL, x, off);
    return x;
}

static __device__ __forceinline__ void half_sync(int half) {
    if (half) asm volatile("bar.sync 2, 128;" ::: "memory");
    else asm volatile("bar.sync 1, 128;" ::: "memory");
}

/* KF: the pool K-first (p.state_k_first; an instance each, so that the
 * V-first one has no branch on it). */
template <int RPW, int KF>
static __global__ void __launch_bounds__(DEC_THREADS) kda_decode_kernel(kda_params p) {
    __shared__ __align__(16) dec_smem<RPW> s;
    dec_block b;
    if (!dec_begin<RPW>(p, blockIdx.x, &b)) return;
    const int tid = threadIdx.x, half = tid / HALF;
    dec_lane<RPW> l;
    dec_load(p, b, KF, tid, l); /* in flight during the first prep */
    for (int64_t c0 = 0; c0 < b.sq.len; c0 += DEC_TOKENS) {
        const int nt = (int)(b.sq.len - c0 < DEC_TOKENS ? b.sq.len - c0 : DEC_TOKENS);
        if (c0 > 0) __syncthreads(); /* every warp is done with the previous chunk */
        for (int i = half; i < nt; i += 2) {
            dec_prep_squares(p, b, b.sq.bos + c0 + i, tid, l);
            l.sq = butterfly(l.sq);
            l.sk = butterfly(l.sk);
            dec_prep_partial(tid, l, s);
            half_sync(half);
            dec_prep_store(p, b, b.sq.bos + c0 + i, i, tid, s);
            half_sync(half); /* red[] free for the half's next token */
        }
        __syncthreads();
        for (int i = 0; i < nt; i++) {
            dec_decay(i, tid, s, l);
#pragma unroll
            for (int r = 0; r < RPW; r++) l.dot[r] = butterfly(l.dot[r]);
            dec_update(i, tid, s, l);
#pragma unroll
            for (int r = 0; r < RPW; r++) l.dot[r] = butterfly(l.dot[r]);
            dec_out(p, b, b.sq.bos + c0 + i, tid, l);
            dec_token_store(p, b, c0 + i, KF, tid, l);
        }
    }
    if (b.sq.slot_base >= 0) dec_store(p, b, b.sq.slot_base, KF, tid, l);
}

template <int RPW> static cudaError_t launch(const kda_params *p, cudaStream_t stream) {
    void *params[] = {(void *)p};
    return cudaLaunchKernel(p->state_k_first ? (const void *)kda_decode_kernel<RPW, 1>
                                             : (const void *)kda_decode_kernel<RPW, 0>,
                            dim3((unsigned)(p->N * p->H * dec_shape<RPW>::BLOCKS)),
                            dim3(DEC_THREADS), params, 0, stream);
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

/* The butterfly of every warp of the block over x(l) = field of lane l, in
 * the order the shuffles add: x_l += x_(l ^ off), off = 16, 8, 4, 2, 1. */
template <int RPW, typename F> static void host_butterfly(dec_lane<RPW> *lanes, F field) {
    for (int w = 0; w < DEC_WARPS; w++) {
        dec_lane<RPW> *L = lanes + 32 * w;
        for (int off = 16; off > 0; off >>= 1) {
            float next[32];
            for (int i = 0; i < 32; i++) next[i] = *field(L[i]) + *field(L[i ^ off]);
            for (int i = 0; i < 32; i++) *field(L[i]) = next[i];
        }
    }
}

/* Block x of the grid on the host, its threads phase by phase. */
template <int RPW>
static void emulate_block(const kda_params &p, int64_t x, dec_smem<RPW> &s, dec_lane<RPW> *lanes) {
    typedef dec_lane<RPW> lane_t;
    dec_block b;
    if (!dec_begin<RPW>(p, x, &b)) return;
    const int kf = p.state_k_first;
    for (int t = 0; t < DEC_THREADS; t++) dec_load(p, b, kf, t, lanes[t]);
    for (int64_t c0 = 0; c0 < b.sq.len; c0 += DEC_TOKENS) {
        const int nt = (int)(b.sq.len - c0 < DEC_TOKENS ? b.sq.len - c0 : DEC_TOKENS);
        for (int i = 0; i < nt; i++) { /* token i by half i % 2 */
            const int lo = (i % 2) * HALF;
            for (int t = lo; t < lo + HALF; t++)
                dec_prep_squares(p, b, b.sq.bos + c0 + i, t, lanes[t]);
            host_butterfly(lanes, [](lane_t &l) { return &l.sq; });
            host_butterfly(lanes, [](lane_t &l) { return &l.sk; });
            for (int t = lo; t < lo + HALF; t++) dec_prep_partial(t, lanes[t], s);
            for (int t = lo; t < lo + HALF; t++) dec_prep_store(p, b, b.sq.bos + c0 + i, i, t, s);
        }
        for (int i = 0; i < nt; i++) {
            for (int t = 0; t < DEC_THREADS; t++) dec_decay(i, t, s, lanes[t]);
            for (int r = 0; r < RPW; r++)
                host_butterfly(lanes, [r](lane_t &l) { return &l.dot[r]; });
            for (int t = 0; t < DEC_THREADS; t++) dec_update(i, t, s, lanes[t]);
            for (int r = 0; r < RPW; r++)
                host_butterfly(lanes, [r](lane_t &l) { return &l.dot[r]; });
            for (int t = 0; t < DEC_THREADS; t++) {
                dec_out(p, b, b.sq.bos + c0 + i, t, lanes[t]);
                dec_token_store(p, b, c0 + i, kf, t, lanes[t]);
            }
        }
    }
    if (b.sq.slot_base >= 0)
        for (int t = 0; t < DEC_THREADS; t++) dec_store(p, b, b.sq.slot_base, kf, t, lanes[t]);
}

template <int RPW> static sp_status emulate(const kda_params &p, const sp_kda_dims &d) {
    dec_smem<RPW> *s = (dec_smem<RPW> *)malloc(sizeof *s);
    dec_lane<RPW> *lanes = (dec_lane<RPW> *)malloc(DEC_THREADS * sizeof *lanes);
    if (!s || !lanes) {
        free(s);
        free(lanes);
        return sp_set_error_(SP_ERR_OUT_OF_MEMORY, "sp_kda_decode_emulate_: no memory");
    }
    for (int64_t x = 0; x < d.N * d.H * dec_shape<RPW>::BLOCKS; x++)
        emulate_block(p, x, *s, lanes);
    free(s);
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
