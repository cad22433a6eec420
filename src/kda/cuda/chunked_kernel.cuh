/*
 * chunked_kernel.cuh — the one-pass chunked KDA kernel (chunk.cuh has the
 * math): one block per (sequence, head, slice of V columns) walks its
 * sequence a chunk at a time with the fp32 state in registers, K warps
 * preparing each chunk's operands ahead of the V warps (one_pass_traits).
 * A header so that the benchmarks can build timing probes of the same
 * kernel (bench/kda_probe.cu); the library's builds and launcher are in
 * chunked.cu.
 */
#ifndef SP_KDA_CUDA_CHUNKED_KERNEL_CUH
#define SP_KDA_CUDA_CHUNKED_KERNEL_CUH

#include "kda/cuda/chunk_k.cuh"
#include "kda/cuda/chunk_safe.cuh"
#include "kda/cuda/chunk_v.cuh"

#include <type_traits>

/* The registers a batch of products reads (A fragments a; accumulator
 * tiles c) made final before wgmma.fence: else the compiler may move one
 * after it and then has to wait for the tensor cores in between (ptxas
 * C7517, C7519). */
template <int NA>
static __device__ __forceinline__ void fence_fragments(uint32_t (&a)[NA][4]) {
#pragma unroll
    for (int k = 0; k < NA; k++)
#pragma unroll
        for (int e = 0; e < 4; e++) sp_reg_fence_(a[k][e]);
}
template <int NC> static __device__ __forceinline__ void fence_tiles(float (*c)[4]) {
#pragma unroll
    for (int j = 0; j < NC; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) sp_reg_fence_(c[j][e]);
}

/* The wgmma build (sm_90a, chunk_ops_sw): the V side's bf16 products on the
 * warpgroup's tensor cores, all 64 V rows of its four warps in one product
 * (wgmma; A, this warp's 16 rows, from registers; B read by the tensor
 * cores from the swizzled operands): P^T, O^T += S' Lk^T, S' Lq^T as 64 x
 * 32 products over the 128 channels, and S' += W^T R as 64 x 64 products
 * over the 32 tokens (R's rows are tokens: B MN-major). Each operand row is
 * then read once a warpgroup instead of once a warp. */
template <typename OPS> /* chunk_ops_sw (a template: unused below sm_90a) */
static __device__ __forceinline__ void state_products_wgmma(float S[DIM / 8][4], int lane, const OPS &s,
                                                        float P[CHUNK / 8][4], float O[CHUNK / 8][4]) {
    scale_columns(S, s.c, 0, lane & 3, DIM / 8);
    const unsigned lk = sp_smem_addr_(s.lk), lq = sp_smem_addr_(s.lq);
    /* In two halves of the channels (64-channel blocks), so that only one
     * half's A fragments are held while the tensor cores read them. */
#pragma unroll
    for (int half = 0; half < 2; half++) {
        uint32_t a[DIM / 32][4];
#pragma unroll
        for (int k = 0; k < DIM / 32; k++)
            acc_pair_as_a(S[2 * (4 * half + k)], S[2 * (4 * half + k) + 1], a[k]);
        fence_fragments(a), fence_tiles<CHUNK / 8>(P), fence_tiles<CHUNK / 8>(O);
        sp_wgmma_fence_();
#pragma unroll
        for (int k = 0; k < DIM / 32; k++) {
            /* channels 64 half + 16 k .. (K-major operands: 8-token row groups
             * sw128_bytes(8, 0) apart) */
            const unsigned off = sw128_bytes(0, 64 * half + 16 * k);
            sp_wgmma_m64n32k16_<0>(&P[0][0], a[k],
                                   sp_gmma_desc_sw128_(lk + off, 16, sw128_bytes(8, 0)));
            sp_wgmma_m64n32k16_<0>(&O[0][0], a[k],
                                   sp_gmma_desc_sw128_(lq + off, 16, sw128_bytes(8, 0)));
        }
        sp_wgmma_commit_();
        sp_wgmma_wait_<0>();
    }
    fence_tiles<CHUNK / 8>(P), fence_tiles<CHUNK / 8>(O);
}

template <typename OPS>
static __device__ __forceinline__ void state_add_wgmma(float S[DIM / 8][4], const float W[CHUNK / 8][4],
                                                   const OPS &s) {
    uint32_t a[CHUNK / 16][4];
#pragma unroll
    for (int kt = 0; kt < CHUNK / 16; kt++) acc_pair_as_a(W[2 * kt], W[2 * kt + 1], a[kt]);
    const unsigned r = sp_smem_addr_(s.r);
    fence_fragments(a), fence_tiles<DIM / 8>(S);
    sp_wgmma_fence_();
    /* Tokens 16 kt ..: 8-token groups 2 kt, 2 kt + 1; channels in two
     * 64-channel blocks (64 x 64 products: 32 accumulators each). */
#pragma unroll
    for (int kt = 0; kt < CHUNK / 16; kt++)
#pragma unroll
        for (int nb = 0; nb < 2; nb++)
            sp_wgmma_m64n64k16_<1>(&S[8 * nb][0], a[kt],
                                   sp_gmma_desc_sw128_(r + sw128_bytes(16 * kt, 64 * nb),
                                                       sw128_bytes(0, 64), sw128_bytes(8, 0)));
    sp_wgmma_commit_();
    sp_wgmma_wait_<0>();
    fence_tiles<DIM / 8>(S);
}

/* The rest, for this warp's 16 V rows (v_warp: the first, relative to the
 * block's columns): X^T = diag(b) (V - P)^T in place of P; W^T = X^T T^T;
 * o^T += W^T QK^T; S = diag(e) (S' + W^T R), or for a safe chunk (ANY: the
 * every-gate build) S = diag(e) S' + W^T R. */
template <int WG, int ANY, typename OPS>
static __device__ void state_update(float S[DIM / 8][4], float P[4][4], float O[4][4],
                                    const uint16_t (*v)[OP_PITCH], int v_warp, int lane,
                                    const OPS &s) {
    const int q = lane & 3, safe = ANY && chunk_is_safe(s);
    float W[CHUNK / 8][4];
    solve_w(P, &v[0][0], OP_PITCH, v_warp, s, lane, W);
    acc_times_m(W, s.qk, lane, O);
    if (safe) scale_columns(S, s.e, 0, q, DIM / 8);
    if constexpr (WG) {
        state_add_wgmma(S, W, s);
    } else {
#pragma unroll
        for (int kt = 0; kt < CHUNK / 16; kt++) {
            uint32_t a[4];
            acc_pair_as_a(W[2 * kt], W[2 * kt + 1], a);
            state_add_wr(S, DIM / 8, 0, lane, s, kt, a);
        }
    }
    if (!safe) scale_columns(S, s.e, 0, q, DIM / 8);
}

/* ---- the kernel's configuration ------------------------------------------ */

/* Warp specialization: the block's first two warpgroups (the K warps)
 * compute each chunk's K side (gates, norms, Lk, Lq, R, A and QK) into one
 * of STAGES operand buffers while the other two warpgroups (the V warps, 16
 * V rows each) run an earlier chunk's V side, one of them (V_SOLVER) first
 * solving for T while the others start the state's products; so the serial
 * walk over the chunks pays only the V side. The K warps also copy in each
 * chunk's k, q, g (two buffers; an f32 g one chunk at a time, copied once
 * every K thread has read the last) and v (STAGES + 1 buffers: the V warps
 * may still read chunk c - 1's while chunk c + 1's arrives). Two barriers per
 * operand buffer hand it over: FULL (an mbarrier: every K thread arrives
 * once it is written, with release semantics, the V warps wait on its phase
 * with acquire; a hand-over compute-sanitizer racecheck can follow; below
 * sm_90 a named barrier's arrive and sync) and EMPTY (a named barrier both
 * wait at: the V warps once done with it, the K warps before writing it
 * again). docs/TUNING.md, "ONE_PASS_HANDOVER".
 *
 * WGMMA: the build whose V side's bf16 products are wgmma (sm_90a;
 * elsewhere the same products by mma.sync on the swizzled operands). */
template <int WGMMA> struct one_pass_traits {
    static constexpr int K_THREADS = 256; /* two warpgroups (docs/TUNING.md, "ONE_PASS_REGISTERS") */
    static constexpr int V_WARPS = 8;     /* two warpgroups, 16 V rows a warp */
    static constexpr int THREADS = K_THREADS + 32 * V_WARPS;
    static constexpr int V_SOLVER = V_WARPS - 1; /* the V warp that solves for T */
    /* The K warps run up to STAGES - 1 chunks ahead (docs/TUNING.md,
     * "ONE_PASS_STAGES"). */
    static constexpr int STAGES = 3;
    static constexpr int V_BUFFERS = STAGES + 1;
    /* A 512-thread block holds 128 registers a thread, which the V side's
     * state and products exceed: the K warpgroups give registers up to the
     * V warpgroups (setmaxnreg, sm_90a). The wgmma build's K side needs more
     * (its swizzled stores), its V side fewer (wgmma's B operands take no
     * registers). docs/TUNING.md, "ONE_PASS_REGISTERS". */
    static constexpr int K_REGS = WGMMA ? 104 : 96;
    static constexpr int V_REGS = 256 - K_REGS;
    static_assert(K_REGS % 8 == 0 && V_REGS % 8 == 0 && K_REGS >= 24 && V_REGS <= 256,
                  "setmaxnreg takes multiples of 8 in [24, 256]");
    static_assert(K_REGS * K_THREADS + V_REGS * 32 * V_WARPS <= 64 * 1024,
                  "the split fits the multiprocessor's register file");
    /* Named barriers (0 is __syncthreads'): FULL + stage, EMPTY + stage. */
    static constexpr int BAR_K = 1, BAR_FULL = 2, BAR_EMPTY = BAR_FULL + STAGES,
                         BAR_V = BAR_EMPTY + STAGES, BAR_O = BAR_V + 1;
    static_assert(BAR_O < 16, "a block has 16 named barriers");
};

template <typename OPS, int STAGES> struct one_pass_smem_of {
    raw_chunk raw[2]; /* k, q, g of this chunk and, arriving, the next one's (an f32 g:
                       * one chunk's over both buffers' g, g_f32_staged) */
    /* v, the block's columns first; rows padded (OP_PITCH) so that the V
     * warps' transposing loads of it are conflict-free */
    uint16_t v[STAGES + 1][CHUNK][OP_PITCH];
    OPS ops[STAGES];
    chunk_work work[STAGES]; /* its A is read by the V warps' solver */
    alignas(16) uint16_t o[2][CHUNK][OP_PITCH]; /* o of a chunk, [token][the block's V columns] */
};
/* Each build's shared memory and the dynamic shared memory its launch asks
 * for: the wgmma build's operands 1 KB aligned (the launch adds the slack to
 * align the dynamic shared memory's start). */
template <int WGMMA> struct one_pass_smem;
template <> struct one_pass_smem<0> {
    typedef one_pass_smem_of<chunk_ops, one_pass_traits<0>::STAGES> type;
    static constexpr size_t BYTES = sizeof(type);
};
template <> struct one_pass_smem<1> {
    typedef one_pass_smem_of<chunk_ops_sw, one_pass_traits<1>::STAGES> type;
    static constexpr size_t BYTES = sizeof(type) + 1024;
};
static_assert(one_pass_smem<0>::BYTES <= 227 * 1024 && one_pass_smem<1>::BYTES <= 227 * 1024,
              "a block's shared memory on sm_90");
static_assert(one_pass_traits<0>::THREADS >= SP_KDA_LONGEST_FIRST_MAX_N &&
                  one_pass_traits<1>::THREADS >= SP_KDA_LONGEST_FIRST_MAX_N,
              "a block ranks every sequence of a longest-first plan, one a thread");

/* This warp's O^T (accumulator tiles: V rows v .. v + 15 of the block's,
 * tokens 8 nt8 + ...) into o[token][v ..], bf16. */
static __device__ __forceinline__ void stage_o(const float O[CHUNK / 8][4], uint16_t (*o)[OP_PITCH], int v,
                                               int lane) {
#if __CUDA_ARCH__ >= 900
    /* stmatrix.trans, four 8x8 tiles at a time: (V rows 0-7 | 8-15) x
     * (tokens 16j .. +7 | 16j + 8 .. +15); lanes 8m .. 8m + 7 address tile
     * m's 8 token rows. */
    const int m = lane >> 3;
#pragma unroll
    for (int j = 0; j < CHUNK / 16; j++) {
        const uint32_t x[4] = {sp_bf16x2_(O[2 * j][0], O[2 * j][1]), sp_bf16x2_(O[2 * j][2], O[2 * j][3]),
                               sp_bf16x2_(O[2 * j + 1][0], O[2 * j + 1][1]),
                               sp_bf16x2_(O[2 * j + 1][2], O[2 * j + 1][3])};
        sp_stsm_x4_trans_(&o[16 * j + 8 * (m >> 1) + (lane & 7)][v + 8 * (m & 1)], x);
    }
#else
    const int r = lane >> 2, q = lane & 3;
#pragma unroll
    for (int nt8 = 0; nt8 < CHUNK / 8; nt8++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[8 * nt8 + 2 * q + (e & 1)][v + r + 8 * (e >> 1)] = sp_bf16_rn_(O[nt8][e]);
#endif
}

/* The kernel. ANY: the build's gates (chunk_k.cuh: 0 K3, 1 every gate).
 * PROBE: flags, of the benchmark's builds only (bench/kda_probe.cu; the
 * library's are 0), timing probes: ONE_PASS_PROBE_V, _K do only the V
 * side's or only the K side's arithmetic, with wrong results;
 * ONE_PASS_PROBE_FACTORED (the every-gate build) takes every chunk in the
 * factored form, with no vote and no safe form compiled in: wrong results
 * only where a chunk's gates leave the factored form's bound. WGMMA: the
 * build (one_pass_traits). */
enum {
    ONE_PASS_PROBE_V = 1,
    ONE_PASS_PROBE_K = 2,
    ONE_PASS_PROBE_FACTORED = 4
};
#if __CUDA_ARCH__ >= 900
#define SP_KDA_MBARRIERS 1
#else
#define SP_KDA_MBARRIERS 0
#endif
/* The dynamic shared memory of a build: the hand-over's mbarriers after the
 * build's own (8-byte aligned: one slot of slack). */
template <int WGMMA> static constexpr size_t one_pass_launch_smem(void) {
    return one_pass_smem<WGMMA>::BYTES + 8 * (one_pass_traits<WGMMA>::STAGES + 1);
}
static_assert(one_pass_launch_smem<1>() <= 227 * 1024 && one_pass_launch_smem<0>() <= 227 * 1024,
              "a build's shared memory on sm_90");
template <int PROBE, int WGMMA, int ANY>
static __global__ void __launch_bounds__(one_pass_traits<WGMMA>::THREADS, 1)
    kda_chunked_kernel(kda_params p, int splits) {
    typedef one_pass_traits<WGMMA> TR;
    /* mbarriers need sm_90: below, the named barriers */
    constexpr int SIDE = PROBE & 3, MBAR = SP_KDA_MBARRIERS;
    constexpr int VOTE = ANY && !(PROBE & ONE_PASS_PROBE_FACTORED); /* chunks may be safe */
    constexpr int DO_K = SIDE != ONE_PASS_PROBE_V, DO_V = SIDE != ONE_PASS_PROBE_K;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int ON_WGMMA = WGMMA;
#else
    constexpr int ON_WGMMA = 0;
#endif
    typedef typename one_pass_smem<WGMMA>::type smem_t;
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    /* The wgmma build's operands 1 KB aligned (one_pass_smem<1>::BYTES has the slack). */
    const unsigned align = WGMMA ? (1024 - (sp_smem_addr_(smem_bytes) & 1023)) & 1023 : 0;
    smem_t &s = *(smem_t *)(smem_bytes + align);

    const int split = (int)(blockIdx.x % (unsigned)splits);
    const int64_t nh = blockIdx.x / (unsigned)splits, h = nh % p.H;
    /* The plan's block order: batch order, or the longest sequences first
     * (ranked in o's staging buffer, unused until the first chunk's end). */
    static_assert(sizeof(s.o) >= sizeof(int64_t) * (SP_KDA_LONGEST_FIRST_MAX_N + 1),
                  "o's staging buffer holds the ranking's scratch");
    int64_t *const rank_len = (int64_t *)(void *)&s.o[0][0][0];
    const int64_t n =
        p.longest_first && p.N <= SP_KDA_LONGEST_FIRST_MAX_N /* the plan's bound, kept here too */
            ? kda_seq_of_rank(p, nh / p.H, threadIdx.x, rank_len,
                              (int *)(rank_len + SP_KDA_LONGEST_FIRST_MAX_N))
            : nh / p.H;
    const int bv = DIM / splits, v0 = split * bv;
    /* w through a shuffle from lane 0: the compiler then knows it is the
     * same over the warp, so the products under branches on it are not in a
     * divergent path (where ptxas serializes wgmma: C7520). */
    const int tid = threadIdx.x, lane = tid & 31, w = __shfl_sync(SP_KDA_FULL_MASK, tid >> 5, 0);

    kda_seq sq;
    if (!kda_seq_of(p, n, h, &sq)) return;
    const int64_t L = sq.len, chunks = (L + CHUNK - 1) / CHUNK;
    /* The hand-over's mbarriers, after the build's shared memory (8-byte
     * aligned), each expecting every K thread's arrival. */
    unsigned full_bar = 0;
    if constexpr (MBAR) {
        const unsigned end = sp_smem_addr_(smem_bytes) + (unsigned)one_pass_smem<WGMMA>::BYTES;
        full_bar = (end + 7u) & ~7u;
        if (tid == 0) {
            for (int b = 0; b < TR::STAGES; b++) sp_mbarrier_init_(full_bar + 8 * b, TR::K_THREADS);
            sp_mbarrier_init_fence_();
        }
        __syncthreads();
    }

    if (w < TR::K_THREADS / 32) { /* ---- the K warps ---- */
        sp_setmaxnreg_dec_<TR::K_REGS>();
        const float expA = expf(p.A_log[h]);
        const float2 bias = pair_bias(p, h, tid);
        uint32_t beta_x = 0;
        if (w == 0 && lane < L) beta_x = beta_in<ANY>(p, sq.bos + lane, h);
        if (L > 0) {
            load_kqg<TR::K_THREADS>(p, sq, h, 0, tid, s.raw[0], !g_is_f32<ANY>(p));
            if (g_is_f32<ANY>(p))
                load_g_f32_to<TR::K_THREADS, G32_HOP>(p, sq, h, 0, tid, sp_smem_addr_(&s.raw[0].g[0][0]));
            load_v(p, sq, h, 0, v0, bv, tid, TR::K_THREADS, &s.v[0][0][0], OP_PITCH);
        }
        sp_cp_async_commit_();
        float gam[2][kside<TR::K_THREADS>::SEG];
        for (int64_t ci = 0; ci < chunks; ci++) {
            const int b = (int)(ci % TR::STAGES), rb = (int)(ci & 1);
            const int64_t c0 = ci * CHUNK;
            const int nt = (int)(L - c0 < CHUNK ? L - c0 : CHUNK);
            if (ci >= TR::STAGES) sp_bar_sync_(TR::BAR_EMPTY + b, TR::THREADS); /* chunk ci - STAGES is done with */
            sp_cp_async_wait_<0>();
            sp_bar_sync_(TR::BAR_K, TR::K_THREADS); /* this chunk landed; the K warps are done with the last */
            if (c0 + CHUNK < L) {
                load_kqg<TR::K_THREADS>(p, sq, h, c0 + CHUNK, tid, s.raw[rb ^ 1], !g_is_f32<ANY>(p));
                load_v(p, sq, h, c0 + CHUNK, v0, bv, tid, TR::K_THREADS, &s.v[(ci + 1) % TR::V_BUFFERS][0][0],
                       OP_PITCH);
            }
            sp_cp_async_commit_();
            int far = 0;
            if (DO_K)
                far = gates_and_norms<TR::K_THREADS, ANY>(
                    p, s.raw[rb], g_is_f32<ANY>(p) ? g_f32_staged(s.raw) : g32_rows{}, nt, tid, expA, bias,
                    beta_x, s.work[b], s.ops[b], gam);
            if (w == 0 && c0 + CHUNK + lane < L)
                beta_x = beta_in<ANY>(p, sq.bos + c0 + CHUNK + lane, h);
            int safe = 0;
            if constexpr (VOTE)
                safe = sp_bar_sync_or_(TR::BAR_K, TR::K_THREADS, far);
            else
                (void)far, sp_bar_sync_(TR::BAR_K, TR::K_THREADS);
            /* An f32 g: every K thread has read this chunk's (gates_and_norms,
             * before the barrier); the next chunk's copied in (one buffer). */
            if (g_is_f32<ANY>(p) && c0 + CHUNK < L) {
                load_g_f32_to<TR::K_THREADS, G32_HOP>(p, sq, h, c0 + CHUNK, tid,
                                                      sp_smem_addr_(&s.raw[0].g[0][0]));
                sp_cp_async_commit_();
            }
            if (!VOTE || !safe) {
                if (DO_K) operands<TR::K_THREADS>(s.raw[rb], tid, s.work[b], gam, s.ops[b]);
                sp_bar_sync_(TR::BAR_K, TR::K_THREADS);
                if (DO_K) intra_products<TR::K_THREADS>(w, lane, s.work[b], s.ops[b]);
            } else { /* the safe form (chunk_k.cuh) */
                const pair_sums m = safe_sums<TR::K_THREADS>(tid, s.work[b], gam, s.ops[b]);
                sp_bar_sync_(TR::BAR_K, TR::K_THREADS);
                float ka[safe_pairs<TR::K_THREADS>::EACH], qa[safe_pairs<TR::K_THREADS>::EACH];
                safe_products<TR::K_THREADS>(tid, s.raw[rb], s.ops[b], ka, qa);
                sp_bar_sync_(TR::BAR_K, TR::K_THREADS);
                safe_store<TR::K_THREADS>(tid, ka, qa, s.work[b], s.ops[b]);
                safe_operands<TR::K_THREADS>(s.raw[rb], tid, s.work[b], gam, m, s.ops[b]);
            }
            if (ANY && tid == 0) chunk_form(s.ops[b]) = (float)safe;
            /* G: the V side's tensor cores read Lk, Lq, R through the async
             * proxy; this thread's stores are ordered before those reads. */
            if (ON_WGMMA) sp_fence_proxy_async_();
            if constexpr (MBAR) {
                sp_mbarrier_arrive_(full_bar + 8 * b);
                /* The warp is converged here. Told so by this warp barrier,
                 * ptxas keeps the arrival's address in a uniform register;
                 * without it, in a per-thread one, and the every-gate builds
                 * spill (docs/TUNING.md, "ONE_PASS_HANDOVER"). */
                __syncwarp();
            } else
                sp_bar_arrive_(TR::BAR_FULL + b, TR::THREADS);
        }
        sp_cp_async_wait_<0>();
        return;
    }

    /* ---- the V warps ---- */
    sp_setmaxnreg_inc_<TR::V_REGS>();
    const int vw = w - TR::K_THREADS / 32, r = lane >> 2, q = lane & 3;
    const int is_v = vw < bv / 16;
    /* ON_WGMMA: a warpgroup's products take all four of its warps; those without
     * V rows of the block (splits of 32 columns) compute rows never stored. */
    const int does_v = ON_WGMMA ? 16 * (vw & ~3) < bv : is_v;
    const int vrow = v0 + 16 * vw + r; /* this lane's first V row */
    float S[DIM / 8][4];
    /* A sequence without tokens leaves its slot as it was, bit for bit. */
    if (is_v && L > 0)
        state_load(p.state, p.state_bf16, p.state_k_first, sq.read_base, vrow, 0, q, S, DIM / 8);
    if (ON_WGMMA && !is_v)
#pragma unroll
        for (int nd = 0; nd < DIM / 8; nd++) S[nd][0] = S[nd][1] = S[nd][2] = S[nd][3] = 0.0f;
    int64_t crow = sq.crow;
    /* o's pieces: bv / 8 (a power of two) to a token's row of the block's
     * columns. */
    const int o_lg = __ffs(bv / 8) - 1;
    uint16_t *const o_head = p.o + (sq.bos * p.H + h) * DIM + v0;
    const int64_t o_token = (int64_t)p.H * DIM;
    const int64_t chunks_per_ckpt = p.interval / CHUNK;
    for (int64_t ci = 0; ci < chunks; ci++) {
        const int b = (int)(ci % TR::STAGES);
        const int64_t c0 = ci * CHUNK;
        const int nt = (int)(L - c0 < CHUNK ? L - c0 : CHUNK);
        if constexpr (MBAR) /* the buffer's (ci / STAGES)-th use completes that phase */
            sp_mbarrier_wait_(full_bar + 8 * b, (unsigned)((ci / TR::STAGES) & 1));
        else
            sp_bar_sync_(TR::BAR_FULL + b, TR::THREADS);
        /* T is needed from solve_w on; the other V warps start on the
         * state's products meanwhile. */
        if (DO_V && vw == TR::V_SOLVER) solve_t(lane, s.work[b], s.ops[b]);
        float P[4][4] = {}, O[4][4] = {};
        if (DO_V && does_v) {
            if constexpr (ON_WGMMA)
                state_products_wgmma(S, lane, s.ops[b], P, O);
            else
                state_products(S, DIM / 8, 0, lane, s.ops[b], P, O);
        }
        sp_bar_sync_(TR::BAR_V, 32 * TR::V_WARPS);
        if (DO_V && does_v)
            state_update<ON_WGMMA, ANY>(S, P, O, s.v[ci % TR::V_BUFFERS], 16 * vw, lane, s.ops[b]);
        if (DO_V && is_v) {
            stage_o(O, s.o[ci & 1], 16 * vw, lane);
            if (chunks_per_ckpt > 0 && nt == CHUNK && (ci + 1) % chunks_per_ckpt == 0)
                state_store(p.ckpt, p.state_bf16, 0, kda_ckpt_base(p, crow++, h), vrow, 0, q, S,
                            DIM / 8);
        }
        /* The chunk's o, staged by every V warp, out as 16-byte rows rather
         * than each lane's 2-byte stores (docs/TUNING.md,
         * "ONE_PASS_OUTPUT_STAGING"). */
        sp_bar_sync_(TR::BAR_O, 32 * TR::V_WARPS);
        for (int piece = 32 * vw + lane; piece < CHUNK << o_lg; piece += 32 * TR::V_WARPS) {
            const int t = piece >> o_lg, col = (piece & ((1 << o_lg) - 1)) * 8;
            if (t < nt)
                *(uint4 *)(o_head + (c0 + t) * o_token + col) = *(const uint4 *)&s.o[ci & 1][t][col];
        }
        /* The K warps wait for this buffer only when a later chunk needs it.
         * A sync, not an arrive: the V warps then wait here rather than at
         * the next FULL, which the K warps arrive at just before (no cost:
         * docs/TUNING.md, "ONE_PASS_OUTPUT_STAGING"). */
        if (ci + TR::STAGES < chunks) sp_bar_sync_(TR::BAR_EMPTY + b, TR::THREADS);
    }
    if (is_v && L > 0)
        state_store(p.state, p.state_bf16, p.state_k_first, sq.slot_base, vrow, 0, q, S, DIM / 8);
}

/* One launch of the PROBE instance of the build WGMMA (gates ANY) with
 * `splits` blocks per (sequence, head); the current device must be the
 * tensors'. */
template <int PROBE, int WGMMA, int ANY>
static cudaError_t launch_one_pass_build(const kda_params *p, int splits, cudaStream_t stream) {
    const void *kernel = (const void *)kda_chunked_kernel<PROBE, WGMMA, ANY>;
    const int smem = (int)one_pass_launch_smem<WGMMA>();
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    void *params[] = {(void *)p, &splits};
    return cudaLaunchKernel(kernel, dim3((unsigned)(p->N * p->H * splits)),
                            dim3(one_pass_traits<WGMMA>::THREADS), params, (size_t)smem, stream);
}

/* The same, the build `wgmma` chosen at run time (the plan's). */
template <int PROBE, int ANY>
static cudaError_t launch_one_pass(const kda_params *p, int splits, int wgmma,
                                   cudaStream_t stream) {
    return wgmma ? launch_one_pass_build<PROBE, 1, ANY>(p, splits, stream)
                 : launch_one_pass_build<PROBE, 0, ANY>(p, splits, stream);
}

/* One launch of the PROBE instance for the call's gates (ANY), of the build
 * `wgmma` or (WGMMA_ONLY: the benchmark's every-gate probes) of the wgmma
 * build alone. */
template <int PROBE, int ANY, int WGMMA_ONLY>
static cudaError_t launch_one_pass_of(const kda_params *p, int splits, int wgmma,
                                      cudaStream_t stream) {
    if constexpr (WGMMA_ONLY)
        return launch_one_pass_build<PROBE, 1, ANY>(p, splits, stream);
    else
        return launch_one_pass<PROBE, ANY>(p, splits, wgmma, stream);
}

/* The same for the call's gates: K3's build, or the every-gate build of the
 * call's gate form and g dtype (with_call_gates; docs/TUNING.md,
 * "CHUNKED_EVERY_GATE": the code a chunk runs). */
template <int PROBE, int WGMMA_ONLY = 0>
static cudaError_t launch_one_pass_gates(const kda_params *p, int splits, int wgmma,
                                         cudaStream_t stream) {
    return with_call_gates(p, [&](auto g) {
        return launch_one_pass_of<PROBE, decltype(g)::value, WGMMA_ONLY>(p, splits, wgmma, stream);
    });
}

#endif /* SP_KDA_CUDA_CHUNKED_KERNEL_CUH */
