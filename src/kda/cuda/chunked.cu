/*
 * chunked.cu — the chunked KDA prefill on tensor cores (mma.sync, tf32
 * operands, fp32 accumulation). One block per (sequence, head, slice of V
 * columns) walks its sequence 32 tokens at a time with the fp32 state in
 * registers; inside a chunk everything is matrix products (the WY form of
 * the gated delta rule with a per-channel gate):
 *
 *   gam_i  = sum of g_t over t <= i in the chunk   (per channel, fp32)
 *   A[i,j] = b_i sum_d k_i[d] k_j[d] exp(gam_i - gam_j)[d]   j < i
 *   QK[i,j] =    sum_d q_i[d] k_j[d] exp(gam_i - gam_j)[d]   j <= i
 *   T      = (I + A)^-1     (16 x 16 blocks: forward substitution in fp32, T21 by tf32 products)
 *   W      = T diag(b) (V - Kg S0)             Kg row i = k_i exp(gam_i)
 *   o      = Qg S0 + QK W                      Qg row i = q_i exp(gam_i)
 *   S1     = diag(exp(gam_31)) S0 + Kd^T W     Kd row j = k_j exp(gam_31 - gam_j)
 *
 * (k and q already normalized, q scaled.) The products need exp(gam_i -
 * gam_j) split into a row factor and a column factor around a reference
 * token m, the 16th: Lk row i = k_i exp(gam_i - gam_m), Lq likewise from q,
 * R row j = k_j exp(gam_m - gam_j); then A = b (Lk R^T), QK = Lq R^T. Each
 * factor stays within e^(+-16 |g|max): with the lower-bound gate (|g| <= 5)
 * within e^80, which fp32 and tf32 represent, while the true products are
 * at most 1. So the kernel serves the lower-bound gate only (the softplus
 * gate has no bound; dispatch.c sends it to the recurrent kernel). The same
 * three operands serve the state: with c = exp(gam_m) and e =
 * exp(gam_31 - gam_m) per channel, Kg = Lk diag(c), Qg = Lq diag(c),
 * Kd = R diag(e) and exp(gam_31) = c e, so
 *   S' = diag(c) S0;  P = Lk S', o = Lq S' + QK W;  S1 = diag(e) (S' + R^T W)
 * and the per-channel scalings are done on the state in registers. (Not
 * diag(c_next e) as one factor: it can underflow where diag(e) times the
 * state does not, at the lower bound: e^-160 against e^-80.)
 *
 * The state is kept transposed, S^T (V rows x K columns), as mma
 * accumulators: each V-warp owns 16 V rows and all 128 K columns. Then
 * S^T Kg^T, S^T Qg^T, the solve with T and the update W^T Kd all take their
 * A operand straight from accumulators (an accumulator pair of columns 2c,
 * 2c+1 serves as the A operand's columns c and c+4, the B operand's rows
 * permuted alike), so the V side's products need no shared memory of
 * their own. The K side (gates, norms, Lk, Lq, R, A, QK) is computed by
 * the block's first two warpgroups, a chunk ahead (see the kernel below).
 *
 * Shared-memory row strides are chosen so that each warp's fragment loads
 * hit 32 distinct banks: 4 mod 32 floats for scalar loads with rows
 * indexed by the lane group, 8 mod 32 for float2 loads.
 */
#include "kda/cuda/chunk.cuh"

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

/* The wgmma build (sm_90a, chunk_ops_g): the V side's bf16 products on the
 * warpgroup's tensor cores, all 64 V rows of its four warps in one product
 * (wgmma; A, this warp's 16 rows, from registers; B read by the tensor
 * cores from the swizzled operands): P^T, O^T += S' Lk^T, S' Lq^T as 64 x
 * 32 products over the 128 channels, and S' += W^T R as 64 x 64 products
 * over the 32 tokens (R's rows are tokens: B MN-major). Each operand row is
 * then read once a warpgroup instead of once a warp. */
template <typename OPS> /* chunk_ops_g (a template: unused below sm_90a) */
static __device__ __forceinline__ void state_products_g(float S[D / 8][4], int lane, const OPS &s,
                                                        float P[CT / 8][4], float O[CT / 8][4]) {
    scale_columns(S, s.c, 0, lane & 3, D / 8);
    const unsigned lk = sp_smem_addr_(s.lk), lq = sp_smem_addr_(s.lq);
    /* In two halves of the channels (64-channel blocks), so that only one
     * half's A fragments are held while the tensor cores read them. */
#pragma unroll
    for (int half = 0; half < 2; half++) {
        uint32_t a[D / 32][4];
#pragma unroll
        for (int k = 0; k < D / 32; k++)
            acc_pair_as_a(S[2 * (4 * half + k)], S[2 * (4 * half + k) + 1], a[k]);
        fence_fragments(a), fence_tiles<CT / 8>(P), fence_tiles<CT / 8>(O);
        sp_wgmma_fence_();
#pragma unroll
        for (int k = 0; k < D / 32; k++) {
            /* channels 64 half + 16 k ..: block `half`, 32-byte slice k of its rows */
            const unsigned off = half * (CT * 64 * 2) + k * 32;
            sp_wgmma_m64n32k16_<0>(&P[0][0], a[k], sp_gmma_desc_sw128_(lk + off, 16, 1024));
            sp_wgmma_m64n32k16_<0>(&O[0][0], a[k], sp_gmma_desc_sw128_(lq + off, 16, 1024));
        }
        sp_wgmma_commit_();
        sp_wgmma_wait_<0>();
    }
    fence_tiles<CT / 8>(P), fence_tiles<CT / 8>(O);
}

template <typename OPS>
static __device__ __forceinline__ void state_add_g(float S[D / 8][4], const float W[CT / 8][4],
                                                   const OPS &s) {
    uint32_t a[CT / 16][4];
#pragma unroll
    for (int kt = 0; kt < CT / 16; kt++) acc_pair_as_a(W[2 * kt], W[2 * kt + 1], a[kt]);
    const unsigned r = sp_smem_addr_(s.r);
    fence_fragments(a), fence_tiles<D / 8>(S);
    sp_wgmma_fence_();
    /* Tokens 16 kt ..: 8-token groups 2 kt, 2 kt + 1; channels in two
     * 64-channel blocks (64 x 64 products: 32 accumulators each). */
#pragma unroll
    for (int kt = 0; kt < CT / 16; kt++)
#pragma unroll
        for (int nb = 0; nb < 2; nb++)
            sp_wgmma_m64n64k16_<1>(&S[8 * nb][0], a[kt],
                                   sp_gmma_desc_sw128_(r + nb * 4096 + kt * 2048, 4096, 1024));
    sp_wgmma_commit_();
    sp_wgmma_wait_<0>();
    fence_tiles<D / 8>(S);
}

/* The rest, for this warp's 16 V rows (v_warp: the first, relative to the
 * block's columns): X^T = diag(b) (V - P)^T in place of P; W^T = X^T T^T;
 * o^T += W^T QK^T; S = diag(e) (S' + W^T R). */
template <int WG, typename OPS>
static __device__ void state_update(float S[D / 8][4], float P[4][4], float O[4][4],
                                    const uint16_t (*v)[SB], int v_warp, int lane,
                                    const OPS &s) {
    const int q = lane & 3;
    float W[CT / 8][4];
    solve_w(P, &v[0][0], SB, v_warp, s, lane, W);
    acc_times_m(W, s.qk, lane, O);
    if constexpr (WG) {
        state_add_g(S, W, s);
    } else {
#pragma unroll
        for (int kt = 0; kt < CT / 16; kt++) {
            uint32_t a[4];
            acc_pair_as_a(W[2 * kt], W[2 * kt + 1], a);
            state_add_wr(S, D / 8, 0, lane, s, kt, a);
        }
    }
    scale_columns(S, s.e, 0, q, D / 8);
}

/* ---- the kernel ------------------------------------------------------------ */

/* Warp specialization: the block's first two warpgroups (the K warps)
 * compute each chunk's K side (gates, norms, Lk, Lq, R, A and QK) into one of
 * the operand buffers while the other two warpgroups (the V warps, 16 V rows
 * each) run the previous chunk's V side from the other buffer, one of them
 * first solving for T while the others start the state's products; so the
 * serial walk over the chunks pays only the V side. The K warps also copy
 * in each chunk's k, q, g (their own two buffers) and v (three buffers: the
 * V warps may still read chunk c - 1's while chunk c + 1's arrives). Two
 * named barriers per operand buffer hand it over: FULL (the K warps arrive
 * once it is written, the V warps wait) and EMPTY (both wait: the V warps
 * once done with it, the K warps before writing it again). */
#define K_THREADS 256
#define V_WARPS 8
#define BLOCK (K_THREADS + 32 * V_WARPS)
#define V_SOLVER (V_WARPS - 1) /* the V warp that solves for T */
/* Two warpgroups of K warps and two of V warps: a 512-thread launch holds
 * 128 registers a thread, which the V side's state and products exceed.
 * On sm_90a the K warpgroups give up registers to the V warpgroups
 * (setmaxnreg): K_REGS a K thread, the rest of 256 a V thread, no spills
 * (at plain sm_90 the kernel spills some 88 bytes a thread). Eight K warps
 * with the registers moved took 1.987 ms at T = 16384, H = 96 against
 * 2.115 for four (docs/PERFORMANCE.md). */
#define K_REGS 96
/* The wgmma build: the K side at 104 (its swizzled stores), the V side at
 * 152 (wgmma's B operands take no registers). */
static __host__ __device__ constexpr int k_regs(int g) { return g ? 104 : K_REGS; }
/* Named barriers; FULL and EMPTY + the operand buffer. */
enum { BAR_K = 1, BAR_FULL = 2, BAR_EMPTY = 5, BAR_V = 8, BAR_O = 9 };

/* NB operand buffers: the K warps run up to NB - 1 chunks ahead of the V
 * warps. (Two did as well, 2.546 against 2.551 ms at T = 16384, H = 96:
 * the spare shared memory is there for the K side to grow into.) */
static constexpr int NB = 3;
template <typename OPS> struct fused_smem_of {
    raw_chunk raw[2];          /* k, q, g of this chunk and, arriving, the next one's */
    uint16_t v[NB + 1][CT][SB]; /* v, the block's columns first; rows padded (SB) so that
                                 the V warps' transposing loads of it are conflict-free */
    OPS ops[NB];
    chunk_work work[NB]; /* its A is read by the V warps' solver */
    alignas(16) uint16_t o[2][CT][SB]; /* o of a chunk, [token][the block's V columns] */
};
typedef fused_smem_of<chunk_ops> fused_smem;
/* The wgmma build's: its operands 1 KB aligned (the launch adds the slack to
 * align the dynamic shared memory's start). */
typedef fused_smem_of<chunk_ops_g> fused_smem_g;
/* The dynamic shared memory each build's launch asks for. */
static constexpr size_t SMEM_BYTES = sizeof(fused_smem), SMEM_BYTES_G = sizeof(fused_smem_g) + 1024;
static_assert(SMEM_BYTES_G <= 227 * 1024, "a block's shared memory on sm_90");

/* This warp's O^T (accumulator tiles: V rows v .. v + 15 of the block's,
 * tokens 8 nt8 + ...) into o[token][v ..], bf16. */
static __device__ __forceinline__ void stage_o(const float O[CT / 8][4], uint16_t (*o)[SB], int v,
                                               int lane) {
#if __CUDA_ARCH__ >= 900
    /* stmatrix.trans, four 8x8 tiles at a time: (V rows 0-7 | 8-15) x
     * (tokens 16j .. +7 | 16j + 8 .. +15); lanes 8m .. 8m + 7 address tile
     * m's 8 token rows. */
    const int m = lane >> 3;
#pragma unroll
    for (int j = 0; j < CT / 16; j++) {
        const uint32_t x[4] = {sp_bf16x2_(O[2 * j][0], O[2 * j][1]), sp_bf16x2_(O[2 * j][2], O[2 * j][3]),
                               sp_bf16x2_(O[2 * j + 1][0], O[2 * j + 1][1]),
                               sp_bf16x2_(O[2 * j + 1][2], O[2 * j + 1][3])};
        sp_stsm_x4_trans_(&o[16 * j + 8 * (m >> 1) + (lane & 7)][v + 8 * (m & 1)], x);
    }
#else
    const int r = lane >> 2, q = lane & 3;
#pragma unroll
    for (int nt8 = 0; nt8 < CT / 8; nt8++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            o[8 * nt8 + 2 * q + (e & 1)][v + r + 8 * (e >> 1)] = sp_bf16_rn_(O[nt8][e]);
#endif
}

/* PROBE (sp_kda_chunked_probe_): 0 the kernel; 1 and 2 timing probes,
 * only the V side's or only the K side's arithmetic (wrong results).
 * G_ASKED: the wgmma build, the V side's bf16 products by wgmma
 * (state_products_g; built below sm_90a, the same products by mma.sync on
 * the swizzled operands). */
template <int PROBE, int G_ASKED = 0>
static __global__ void __launch_bounds__(BLOCK, 1) kda_chunked_kernel(kda_params p, int splits) {
    constexpr int DO_K = PROBE != 1, DO_V = PROBE != 2;
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    constexpr int WG = G_ASKED;
#else
    constexpr int WG = 0;
#endif
    typedef typename std::conditional<G_ASKED != 0, fused_smem_g, fused_smem>::type smem_t;
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    /* The wgmma build's operands 1 KB aligned (SMEM_BYTES_G has the slack). */
    const unsigned align = G_ASKED ? (1024 - (sp_smem_addr_(smem_bytes) & 1023)) & 1023 : 0;
    smem_t &s = *(smem_t *)(smem_bytes + align);

    const int split = (int)(blockIdx.x % (unsigned)splits);
    const int64_t nh = blockIdx.x / (unsigned)splits, h = nh % p.H, n = nh / p.H;
    const int bv = D / splits, v0 = split * bv;
    /* w through a shuffle from lane 0: the compiler then knows it is the
     * same over the warp, so the products under branches on it are not in a
     * divergent path (where ptxas serializes wgmma: C7520). */
    const int tid = threadIdx.x, lane = tid & 31, w = __shfl_sync(SP_KDA_FULL_MASK, tid >> 5, 0);

    kda_seq sq;
    if (!kda_seq_of(p, n, h, &sq)) return;
    const int64_t L = sq.len, chunks = (L + CT - 1) / CT;

    if (w < K_THREADS / 32) { /* ---- the K warps ---- */
        sp_setmaxnreg_dec_<k_regs(G_ASKED)>();
        const float expA = expf(p.A_log[h]);
        const float2 bias = pair_bias(p, h, tid);
        float beta_logit = 0.0f;
        if (w == 0 && lane < L) beta_logit = sp_bf16_to_f32_(*kda_row(p.beta, sq.bos + lane, h));
        if (L > 0) {
            load_kqg<K_THREADS>(p, sq, h, 0, tid, s.raw[0]);
            load_v(p, sq, h, 0, v0, bv, tid, K_THREADS, &s.v[0][0][0], SB);
        }
        sp_cp_async_commit_();
        float gam[2][kside<K_THREADS>::SEG];
        for (int64_t ci = 0; ci < chunks; ci++) {
            const int b = (int)(ci % NB), rb = (int)(ci & 1);
            const int64_t c0 = ci * CT;
            const int nt = (int)(L - c0 < CT ? L - c0 : CT);
            if (ci >= NB) sp_bar_sync_(BAR_EMPTY + b, BLOCK); /* chunk ci - NB is done with */
            sp_cp_async_wait_<0>();
            sp_bar_sync_(BAR_K, K_THREADS); /* this chunk landed; the K warps are done with the last */
            if (c0 + CT < L) {
                load_kqg<K_THREADS>(p, sq, h, c0 + CT, tid, s.raw[rb ^ 1]);
                load_v(p, sq, h, c0 + CT, v0, bv, tid, K_THREADS, &s.v[(ci + 1) % (NB + 1)][0][0],
                       SB);
            }
            sp_cp_async_commit_();
            if (DO_K)
                gates_and_norms<K_THREADS>(p, s.raw[rb], nt, tid, expA, bias, beta_logit,
                                           s.work[b], s.ops[b], gam);
            if (w == 0 && c0 + CT + lane < L)
                beta_logit = sp_bf16_to_f32_(*kda_row(p.beta, sq.bos + c0 + CT + lane, h));
            sp_bar_sync_(BAR_K, K_THREADS);
            if (DO_K) operands<K_THREADS>(s.raw[rb], tid, s.work[b], gam, s.ops[b]);
            sp_bar_sync_(BAR_K, K_THREADS);
            if (DO_K) intra_products<K_THREADS>(w, lane, s.work[b], s.ops[b]);
            /* G: the V side's tensor cores read Lk, Lq, R through the async
             * proxy; this thread's stores are ordered before those reads. */
            if (WG) sp_fence_proxy_async_();
            sp_bar_arrive_(BAR_FULL + b, BLOCK);
        }
        sp_cp_async_wait_<0>();
        return;
    }

    /* ---- the V warps ---- */
    sp_setmaxnreg_inc_<256 - k_regs(G_ASKED)>();
    const int vw = w - K_THREADS / 32, r = lane >> 2, q = lane & 3;
    const int is_v = vw < bv / 16;
    /* WG: a warpgroup's products take all four of its warps; those without
     * V rows of the block (splits of 32 columns) compute rows never stored. */
    const int does_v = WG ? 16 * (vw & ~3) < bv : is_v;
    const int vrow = v0 + 16 * vw + r; /* this lane's first V row */
    float S[D / 8][4];
    /* A sequence without tokens leaves its slot as it was, bit for bit. */
    if (is_v && L > 0) state_load(p.state, p.state_bf16, sq.slot_base, vrow, 0, q, S, D / 8);
    if (WG && !is_v)
#pragma unroll
        for (int nd = 0; nd < D / 8; nd++) S[nd][0] = S[nd][1] = S[nd][2] = S[nd][3] = 0.0f;
    int64_t crow = sq.crow;
    /* o's pieces: bv / 8 (a power of two) to a token's row of the block's
     * columns. */
    const int o_lg = __ffs(bv / 8) - 1;
    uint16_t *const o_head = p.o + (sq.bos * p.H + h) * D + v0;
    const int64_t o_token = (int64_t)p.H * D;
    const int64_t chunks_per_ckpt = p.interval / CT;
    for (int64_t ci = 0; ci < chunks; ci++) {
        const int b = (int)(ci % NB);
        const int64_t c0 = ci * CT;
        const int nt = (int)(L - c0 < CT ? L - c0 : CT);
        sp_bar_sync_(BAR_FULL + b, BLOCK);
        /* T is needed from solve_w on; the other V warps start on the
         * state's products meanwhile. */
        if (DO_V && vw == V_SOLVER) solve_t(lane, s.work[b], s.ops[b]);
        float P[4][4] = {}, O[4][4] = {};
        if (DO_V && does_v) {
            if constexpr (WG)
                state_products_g(S, lane, s.ops[b], P, O);
            else
                state_products(S, D / 8, 0, lane, s.ops[b], P, O);
        }
        sp_bar_sync_(BAR_V, 32 * V_WARPS);
        if (DO_V && does_v) state_update<WG>(S, P, O, s.v[ci % (NB + 1)], 16 * vw, lane, s.ops[b]);
        if (DO_V && is_v) {
            stage_o(O, s.o[ci & 1], 16 * vw, lane);
            if (chunks_per_ckpt > 0 && nt == CT && (ci + 1) % chunks_per_ckpt == 0)
                state_store(p.ckpt, p.state_bf16, kda_ckpt_base(p, crow++, h), vrow, 0, q, S,
                            D / 8);
        }
        /* The chunk's o, staged by every V warp, out as 16-byte rows (2.551
         * against 2.640 ms for each lane's 2-byte stores from its
         * accumulators, T = 16384, H = 96). */
        sp_bar_sync_(BAR_O, 32 * V_WARPS);
        for (int piece = 32 * vw + lane; piece < CT << o_lg; piece += 32 * V_WARPS) {
            const int t = piece >> o_lg, col = (piece & ((1 << o_lg) - 1)) * 8;
            if (t < nt)
                *(uint4 *)(o_head + (c0 + t) * o_token + col) = *(const uint4 *)&s.o[ci & 1][t][col];
        }
        /* The K warps wait for this buffer only when a later chunk needs it.
         * A sync, not an arrive: the V warps then wait here rather than at
         * the next FULL, which the K warps arrive at just before (3.25
         * against 3.30 ms at T = 16384, H = 96: no cost). */
        if (ci + NB < chunks) sp_bar_sync_(BAR_EMPTY + b, BLOCK);
    }
    if (is_v && L > 0) state_store(p.state, p.state_bf16, sq.slot_base, vrow, 0, q, S, D / 8);
}

extern "C" size_t sp_kda_chunked_one_pass_smem_bytes_(void) {
    return SMEM_BYTES_G > SMEM_BYTES ? SMEM_BYTES_G : SMEM_BYTES;
}

static int probe; /* sp_kda_chunked_probe_ */

extern "C" void sp_kda_chunked_probe_(int side) { probe = side; }

extern "C" int sp_kda_chunked_has_wgmma_(int device) {
    /* The wgmma build's products are wgmma only in its sm_90a code (PTX
     * 9.0, which runs on compute capability 9.0 alone); elsewhere that
     * build would multiply its swizzled operands by mma.sync, a path no
     * test runs: the dispatcher then keeps to the mma.sync build. Asked
     * once a device (a race between first callers computes the same
     * answer twice). */
    static int known[64]; /* 0 unknown, 1 no, 2 yes */
    if (device < 0 || device >= 64) return 0;
    int v = __atomic_load_n(&known[device], __ATOMIC_ACQUIRE);
    if (v) return v == 2;
    cudaFuncAttributes a;
    if (cudaFuncGetAttributes(&a, (const void *)kda_chunked_kernel<0, 1>) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    v = a.ptxVersion == 90 && a.binaryVersion == 90 ? 2 : 1;
    __atomic_store_n(&known[device], v, __ATOMIC_RELEASE);
    return v == 2;
}

extern "C" cudaError_t sp_kda_launch_chunked_(const kda_params *p, int splits, int wgmma,
                                              cudaStream_t stream) {
    /* A probe overrides the dispatcher's build (kda_internal.h). */
    const int g = probe == SP_KDA_PROBE_MMA || probe == SP_KDA_PROBE_V || probe == SP_KDA_PROBE_K
                      ? 0
                  : probe >= SP_KDA_PROBE_WGMMA && probe <= SP_KDA_PROBE_WGMMA_K ? 1
                                                                                : wgmma;
    const int side = probe == SP_KDA_PROBE_V || probe == SP_KDA_PROBE_WGMMA_V   ? 1
                     : probe == SP_KDA_PROBE_K || probe == SP_KDA_PROBE_WGMMA_K ? 2
                                                                                 : 0;
    static const void *const kernels[2][3] = {
        {(const void *)kda_chunked_kernel<0>, (const void *)kda_chunked_kernel<1>,
         (const void *)kda_chunked_kernel<2>},
        {(const void *)kda_chunked_kernel<0, 1>, (const void *)kda_chunked_kernel<1, 1>,
         (const void *)kda_chunked_kernel<2, 1>}};
    const int smem = (int)(g ? SMEM_BYTES_G : SMEM_BYTES);
    const void *kernel = kernels[g][side];
    cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    if (e != cudaSuccess) return e;
    void *params[] = {(void *)p, &splits};
    return cudaLaunchKernel(kernel,
                            dim3((unsigned)(p->N * p->H * splits)), dim3(BLOCK), params,
                            (size_t)smem, stream);
}
