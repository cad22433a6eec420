/*
 * chunk.cuh — the pieces of a 32-token chunk that both chunked kernels
 * (chunked.cu, one pass; chunked_two_pass.cu) share: tensor-core helpers,
 * loading a chunk, its K side (gates, norms, the operands Lk, Lq, R, the
 * products A and QK, T = (I + A)^-1), and the state's fragments. The math
 * is described in chunked.cu. The K side's functions take NT, the number of
 * threads that run them together (threads 0 .. NT - 1 of the block, NT 128
 * or 256: see kside); the V side's are per warp.
 */
#ifndef SP_KDA_CUDA_CHUNK_CUH
#define SP_KDA_CUDA_CHUNK_CUH

#include "cuda/ptx.cuh"
#include "kda/cuda/common.cuh"

/* The chunked kernels' sizes: typed constants of these headers' users (the
 * two chunked .cu files), not macros. */
static constexpr int CT = SP_KDA_CHUNK; /* tokens per chunk (32) */
static constexpr int MID = 15;          /* reference token of the factorization */
static constexpr int D = SP_KDA_D;
static constexpr int SB = D + 8;  /* lk, lq, r (bf16): 272-byte rows, 8 ldmatrix rows on distinct banks */
static constexpr int SA = CT + 8; /* qk, t (fp32): 8 mod 32, for float2 fragment loads */
static constexpr int SAT = CT + 4; /* at (fp32): 4 mod 32, its transposed fragment stores conflict-free */

/* A chunk's k, q and g as they arrive (bf16); v comes separately, only the
 * columns a block owns. */
typedef struct raw_chunk {
    uint16_t k[CT][D], q[CT][D], g[CT][D];
} raw_chunk;

/* What the V side of a chunk needs: the chunk's operands. Also the record
 * the two-pass kernel keeps per chunk in its workspace (the same layout, so
 * that it is copied to and from shared memory as one block). */
typedef struct chunk_ops {
    uint16_t lk[CT][SB], lq[CT][SB], r[CT][SB]; /* bf16 */
    float qk[CT][SA], t[CT][SA];
    float b[CT];
    float c[D], e[D]; /* exp(gam_m), exp(gam_31 - gam_m) */
} chunk_ops;

/* The same for the V side's warpgroup products (wgmma, sm_90a: the
 * one-pass kernel's wgmma build): Lk, Lq, R as 32 x 128 bf16 in the
 * tensor cores' 128-byte swizzled layout (op_at): 8-token row groups of
 * 1 KB, 64 channels a 128-byte row, its 16-byte pieces permuted by the
 * token's row in the group; channels 64 .. 127 4 KB on. The rest as in
 * chunk_ops. */
typedef struct chunk_ops_g {
    alignas(1024) uint16_t lk[CT * D];
    alignas(1024) uint16_t lq[CT * D];
    alignas(1024) uint16_t r[CT * D];
    float qk[CT][SA], t[CT][SA];
    float b[CT];
    float c[D], e[D];
} chunk_ops_g;

/* Element (t, d) of an operand: row-major with padded rows (chunk_ops), or
 * swizzled (chunk_ops_g). Eight consecutive channels from a multiple of 8
 * stay 16 contiguous bytes either way. */
static __device__ __forceinline__ uint16_t *op_at(uint16_t (*x)[SB], int t, int d) {
    return &x[t][d];
}
static __device__ __forceinline__ const uint16_t *op_at(const uint16_t (*x)[SB], int t, int d) {
    return &x[t][d];
}
static __device__ __forceinline__ int swizzled(int t, int d) {
    const int row = t & 7;
    return (d >> 6) * (CT * 64) + (t >> 3) * 512 + row * 64 + ((((d >> 3) & 7) ^ row) << 3) + (d & 7);
}
static __device__ __forceinline__ uint16_t *op_at(uint16_t *x, int t, int d) {
    return x + swizzled(t, d);
}
static __device__ __forceinline__ const uint16_t *op_at(const uint16_t *x, int t, int d) {
    return x + swizzled(t, d);
}

/* The K side's intermediates (its operands go to a chunk_ops). */
typedef struct chunk_work {
    /* seg_end lives from gates_and_norms to operands, at from intra_products
     * on: one array. */
    union {
        float seg_end[4][D]; /* each segment's cumulative gate at its end (log2 units) */
        float at[CT][SAT]; /* A transposed: at[j][i] = A[i][j] (columns of A as rows, for solve_t) */
    };
    alignas(16) float rk[CT];
    alignas(16) float rq[CT];
} chunk_work;

/* ---- small device helpers ---------------------------------------------- */

/* fp32 -> tf32 bits, rounded to nearest (ties away from zero): what the
 * tensor cores read of an operand is its top 19 bits. */
static __device__ __forceinline__ uint32_t to_tf32(float x) {
    return (__float_as_uint(x) + 0x1000u) & 0xffffe000u;
}

/* The K side's factors stay within e^(+-80) (16 tokens at the lower bound
 * -5): the ftz exp2 and reciprocal of ptx.cuh never flush one of them. */

static __device__ __forceinline__ float tf32_round(float x) { return __uint_as_float(to_tf32(x)); }

/* Where lane `lane` points sp_ldsm_x4_ for the fragments of a row-major bf16
 * array X (rows x0 .., columns k0 ..), as offsets (row, column) from there:
 *  - a_at: the A operand of rows x0 .. +15, k-step columns k0 .. +15;
 *  - b_at: the B operands of two n8 tiles, rows x0 .. +7 and x0 + 8 .. +15
 *    as n, columns k0 .. +15 as k (x[0], x[1]: the first; x[2], x[3]);
 *  - bt_at (with TRANS): the B operands of two n8 tiles when X's rows are
 *    k (x0 .. +15) and its columns n (k0 .. +7 and k0 + 8 .. +15). */
static __device__ __forceinline__ int2 a_at(int lane) {
    return make_int2((lane & 7) + 8 * ((lane >> 3) & 1), 8 * (lane >> 4));
}
static __device__ __forceinline__ int2 b_at(int lane) {
    return make_int2((lane & 7) + 8 * (lane >> 4), 8 * ((lane >> 3) & 1));
}
static __device__ __forceinline__ int2 bt_at(int lane) { return a_at(lane); }

/* Accumulator tiles c0, c1 (rows r, r + 8; columns 2q, 2q + 1 of two
 * adjacent n8 tiles) are the A operand of a k16 step, rounded to bf16. */
static __device__ __forceinline__ void acc_pair_as_a(const float c0[4], const float c1[4],
                                                     uint32_t a[4]) {
    a[0] = sp_bf16x2_(c0[0], c0[1]);
    a[1] = sp_bf16x2_(c0[2], c0[3]);
    a[2] = sp_bf16x2_(c1[0], c1[1]);
    a[3] = sp_bf16x2_(c1[2], c1[3]);
}

/* Fragments with a permuted k index: k-step columns q and q + 4 of an
 * operand are its physical columns 2q and 2q + 1 (the same permutation on
 * both operands leaves the product unchanged). Then an accumulator tile
 * (rows r, r+8; columns 2q, 2q+1) is directly the A operand of the next
 * product, and shared-memory operands load as float2. */
static __device__ __forceinline__ void acc_as_a(const float c[4], uint32_t a[4]) {
    a[0] = to_tf32(c[0]);
    a[1] = to_tf32(c[2]);
    a[2] = to_tf32(c[1]);
    a[3] = to_tf32(c[3]);
}

/* Two adjacent (already tf32) floats: b0, b1 of a B fragment, or a0, a2
 * (a1, a3) of an A fragment. */
static __device__ __forceinline__ void pair(const float *at, uint32_t *x0, uint32_t *x1) {
    const float2 x = *(const float2 *)at;
    *x0 = __float_as_uint(x.x);
    *x1 = __float_as_uint(x.y);
}

/* ---- loading a chunk --------------------------------------------------------- */

/* Start copying 16-byte pieces of `rows` rows of one input, NT / 16 rows
 * apart from the thread's first, row `first_row` of the chunk: the piece
 * at column col of each row (src: that row of the sequence's token c0 +
 * first_row) into shared memory from dst (NT / 16 rows of D elements
 * apart). Rows past the sequence's end are zero-filled, read from the
 * sequence's first row (no byte of which the copy reads). */
template <int NT, int ROWS>
static __device__ __forceinline__ void load_pieces(const kda_input &x, const kda_seq &sq, int64_t h,
                                                   int64_t c0, int first_row, int col,
                                                   int64_t left, unsigned dst) {
    const uint16_t *first = kda_row(x, sq.bos, h) + col;
    const uint16_t *row = first + (c0 + first_row) * x.ts;
#pragma unroll
    for (int i = 0; i < ROWS; i++) {
        const int ok = (NT / 16) * i < left;
        sp_cp_async16_fill_to_(dst + i * (NT / 16) * D * 2, ok ? row + i * (NT / 16) * x.ts : first,
                               ok ? 16 : 0);
    }
}

/* Start copying tokens c0 .. c0+31 of k, q and g (each row of 128 read in
 * place: 16-byte aligned wherever the tensor's strides put it) into dst: thread tid the
 * 16-byte piece tid % 16 of rows tid / 16, tid / 16 + NT / 16, ... Rows past
 * the sequence's end are zero-filled (the copy reads no byte for them). */
template <int NT>
static __device__ __forceinline__ void load_kqg(const kda_params &p, const kda_seq &sq, int64_t h,
                                                int64_t c0, int tid, raw_chunk &dst) {
    const int row0 = tid >> 4, col = (tid & 15) * 8;
    const int64_t left = sq.len - c0 - row0; /* this thread's rows before the end */
    constexpr int ROWS = CT * 16 / NT;
    load_pieces<NT, ROWS>(p.k, sq, h, c0, row0, col, left, sp_smem_addr_(&dst.k[row0][col]));
    load_pieces<NT, ROWS>(p.q, sq, h, c0, row0, col, left, sp_smem_addr_(&dst.q[row0][col]));
    load_pieces<NT, ROWS>(p.g, sq, h, c0, row0, col, left, sp_smem_addr_(&dst.g[row0][col]));
}

/* Start copying columns v0 .. v0+bv-1 of v's tokens c0 .. c0+31 into
 * dst[t][0 .. bv) (row pitch `pitch` elements), zero-filled past the end;
 * `threads` threads (a multiple of bv / 8), each every threads-th 16-byte
 * piece: a fixed column, rows threads / (bv / 8) apart. */
static __device__ __forceinline__ void load_v(const kda_params &p, const kda_seq &sq, int64_t h,
                                              int64_t c0, int v0, int bv, int tid, int threads,
                                              uint16_t *dst, int pitch) {
    const int lg = __ffs(bv / 8) - 1; /* bv / 8 pieces a row, a power of two */
    const int t0 = tid >> lg, col = (tid & ((1 << lg) - 1)) * 8, dt = threads >> lg;
    const uint16_t *first = kda_row(p.v, sq.bos, h) + v0 + col;
    const uint16_t *row = first + (c0 + t0) * p.v.ts;
    const int64_t step = dt * p.v.ts, left = sq.len - c0;
    unsigned to = sp_smem_addr_(dst + t0 * pitch + col);
    for (int t = t0; t < CT; t += dt, row += step, to += dt * pitch * 2) {
        const int ok = t < left;
        sp_cp_async16_fill_to_(to, ok ? row : first, ok ? 16 : 0);
    }
}

/* Sums of N values over a warp at once (N a power of two up to 32): each
 * exchange step (lane bit OFF) halves the values a lane holds, keeping the
 * half its lane bit selects plus the partner's, so N - 1 + log2(32 / N)
 * shuffles instead of 5 N; then v[0] of lanes (32 / N) m .. + 32 / N - 1
 * is the sum of value m. */
template <int N, int OFF>
static __device__ __forceinline__ void warp_sums(float *v, int lane) {
    if constexpr (OFF > 0) {
        if constexpr (N > 1) {
            const int upper = lane & OFF;
#pragma unroll
            for (int j = 0; j < N / 2; j++) {
                const float lo = v[j], hi = v[N / 2 + j];
                v[j] = (upper ? hi : lo) + __shfl_xor_sync(SP_KDA_FULL_MASK, upper ? lo : hi, OFF);
            }
            warp_sums<N / 2, OFF / 2>(v, lane);
        } else {
            v[0] += __shfl_xor_sync(SP_KDA_FULL_MASK, v[0], OFF);
            warp_sums<1, OFF / 2>(v, lane);
        }
    }
}

/* ---- the K side of a chunk (every warp) ---------------------------------------- */

/* The K side's threads work on channel pairs: thread tid of NT takes
 * channels 2c, 2c + 1 (c = tid % 64) over the tokens of segment tid / 64,
 * one of NSEG segments of SEG tokens; the reference token ends one of
 * them. */
template <int NT> struct kside {
    static constexpr int NSEG = NT / (D / 2), SEG = CT / NSEG, MIDSEG = MID / SEG;
    static_assert(NSEG * SEG == CT && (MID + 1) % SEG == 0 && NSEG <= 4,
                  "segments tile the chunk and one ends at the reference token");
};

/* The dt_bias of thread tid's two channels, head h. */
static __device__ __forceinline__ float2 pair_bias(const kda_params &p, int64_t h, int tid) {
    const float *b = p.dt_bias + h * D + 2 * (tid % (D / 2));
    return make_float2(b[0], b[1]);
}

/* The running sums of two channels' gates over SEG tokens (raw bf16 pairs
 * graw), those from token `valid` on taken as 0; FULL: all valid (no
 * select per token). */
template <int SEG, bool FULL>
static __device__ __forceinline__ void gate_sums(const uint32_t graw[SEG], int valid, float nl,
                                                 const float nlb[2], float lb2, float gam[2][SEG],
                                                 float sum[2]) {
#pragma unroll
    for (int j = 0; j < SEG; j++) {
        const float x[2] = {sp_bf16x2_lo_(graw[j]), sp_bf16x2_hi_(graw[j])};
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const float g = lb2 * sp_rcp_ftz_(1.0f + sp_ex2_ftz_(fmaf(x[h], nl, nlb[h])));
            sum[h] += FULL || j < valid ? g : 0.0f;
            gam[h][j] = sum[h];
        }
    }
}

/* Thread (c, seg): the gates of its two channels over its segment's tokens
 * and their running sums from the segment's start, in log2 units (times
 * log2(e), for ex2), in gam (registers: operands() takes them on); the
 * sums at the segment's end also go to s.seg_end. Tokens past the end get
 * gate 0 (no decay). bias: the two channels' dt_bias. Then warp w: the
 * norms of k and q of its CT / (NT / 32) tokens, and warp 0 the beta gates
 * (lane t holds token t's logit, loaded a chunk ahead). */
template <int NT, typename OPS>
static __device__ __forceinline__ void gates_and_norms(const kda_params &p, const raw_chunk &raw,
                                                       int nt, int tid, float expA, float2 bias,
                                                       float beta_logit, chunk_work &s,
                                                       OPS &ops,
                                                       float gam[2][kside<NT>::SEG]) {
    constexpr int SEG = kside<NT>::SEG, TPW = CT / (NT / 32);
    const int d = 2 * (tid % (D / 2)), seg = tid / (D / 2), t0 = seg * SEG;
    /* In log2 units: g log2(e) = lb2 / (1 + 2^(nl (graw + bias))), lb2 =
     * lower_bound log2(e), nl = -expA log2(e); nl bias folded in. */
    const float nl = -expA * SP_LOG2E, lb2 = p.lower_bound * SP_LOG2E;
    const float nlb[2] = {nl * bias.x, nl * bias.y};
    float sum[2] = {0.0f, 0.0f};
    /* All the segment's gates loaded before the first is used (the
     * compiler kept only two loads in flight). */
    uint32_t graw[SEG];
#pragma unroll
    for (int j = 0; j < SEG; j++) graw[j] = *(const uint32_t *)&raw.g[t0 + j][d];
    if (t0 + SEG <= nt)
        gate_sums<SEG, true>(graw, SEG, nl, nlb, lb2, gam, sum);
    else
        gate_sums<SEG, false>(graw, nt - t0, nl, nlb, lb2, gam, sum);
    *(float2 *)&s.seg_end[seg][d] = make_float2(sum[0], sum[1]);
    const int w = tid >> 5, lane = tid & 31;
    float sk[TPW], sq[TPW];
#pragma unroll
    for (int i = 0; i < TPW; i++) {
        const int t = TPW * w + i;
        const uint2 kk = *(const uint2 *)&raw.k[t][4 * lane];
        const uint2 qq = *(const uint2 *)&raw.q[t][4 * lane];
        const float k0 = sp_bf16x2_lo_(kk.x), k1 = sp_bf16x2_hi_(kk.x);
        const float k2 = sp_bf16x2_lo_(kk.y), k3 = sp_bf16x2_hi_(kk.y);
        const float q0 = sp_bf16x2_lo_(qq.x), q1 = sp_bf16x2_hi_(qq.x);
        const float q2 = sp_bf16x2_lo_(qq.y), q3 = sp_bf16x2_hi_(qq.y);
        sk[i] = fmaf(k0, k0, fmaf(k1, k1, fmaf(k2, k2, k3 * k3)));
        sq[i] = fmaf(q0, q0, fmaf(q1, q1, fmaf(q2, q2, q3 * q3)));
    }
    /* The 2 TPW sums over the warp at once (warp_sums): lanes LPV m .. LPV m
     * + LPV - 1 end with sum m. */
    constexpr int NV = 2 * TPW, LPV = 32 / NV;
    float v[NV];
#pragma unroll
    for (int i = 0; i < TPW; i++) v[i] = sk[i], v[TPW + i] = sq[i];
    warp_sums<NV, 16>(v, lane);
    if (lane % LPV == 0) {
        const int m = lane / LPV;
        if (m < TPW)
            s.rk[TPW * w + m] = rsqrtf(v[0] + (float)SP_KDA_EPS);
        else
            s.rq[TPW * w + m - TPW] = p.scale * rsqrtf(v[0] + (float)SP_KDA_EPS);
    }
    if (w == 0) ops.b[lane] = lane < nt ? 1.0f / (1.0f + __expf(-beta_logit)) : 0.0f;
}

/* After gates_and_norms and a barrier, the same thread (c, seg): Lk, Lq, R
 * for its tokens and two channels (rounded to bf16 once here, stored as
 * pairs) from its gam, and the threads of segment 0 their channels' two
 * state scalings. */
template <int NT, typename OPS>
static __device__ __forceinline__ void operands(const raw_chunk &raw, int tid, const chunk_work &s,
                                                const float gam[2][kside<NT>::SEG],
                                                OPS &ops) {
    constexpr int NSEG = kside<NT>::NSEG, SEG = kside<NT>::SEG, MIDSEG = kside<NT>::MIDSEG;
    const int d = 2 * (tid % (D / 2)), seg = tid / (D / 2), t0 = seg * SEG;
    /* gam is relative to the segment's start: token t's offset from the
     * reference is gam + (the earlier segments' sums) - gmid. */
    float gmid[2] = {0.0f, 0.0f}, glast[2] = {0.0f, 0.0f}, base[2] = {0.0f, 0.0f};
#pragma unroll
    for (int k = 0; k < NSEG; k++) {
        const float2 e = *(const float2 *)&s.seg_end[k][d];
        if (k == seg) base[0] = glast[0], base[1] = glast[1];
        glast[0] += e.x, glast[1] += e.y;
        if (k == MIDSEG) gmid[0] = glast[0], gmid[1] = glast[1];
    }
    base[0] -= gmid[0], base[1] -= gmid[1];
    if (seg == 0) {
        *(float2 *)&ops.c[d] = make_float2(sp_ex2_ftz_(gmid[0]), sp_ex2_ftz_(gmid[1]));
        *(float2 *)&ops.e[d] =
            make_float2(sp_ex2_ftz_(glast[0] - gmid[0]), sp_ex2_ftz_(glast[1] - gmid[1]));
    }
    /* Eight tokens at a time, every load before the first store: the
     * compiler may not move a shared-memory load above a store that might
     * alias it, and one warp per scheduler has no other work to hide the
     * latencies with. */
#pragma unroll
    for (int i0 = 0; i0 < SEG; i0 += 8) {
        const int t = t0 + i0;
        const float4 rk0 = *(const float4 *)&s.rk[t], rk1 = *(const float4 *)&s.rk[t + 4];
        const float4 rq0 = *(const float4 *)&s.rq[t], rq1 = *(const float4 *)&s.rq[t + 4];
        const float rk[8] = {rk0.x, rk0.y, rk0.z, rk0.w, rk1.x, rk1.y, rk1.z, rk1.w};
        const float rq[8] = {rq0.x, rq0.y, rq0.z, rq0.w, rq1.x, rq1.y, rq1.z, rq1.w};
        uint32_t kk[8], qq[8];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            kk[j] = *(const uint32_t *)&raw.k[t + j][d];
            qq[j] = *(const uint32_t *)&raw.q[t + j][d];
        }
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const float kh[2] = {sp_bf16x2_lo_(kk[j]) * rk[j], sp_bf16x2_hi_(kk[j]) * rk[j]};
            const float qh[2] = {sp_bf16x2_lo_(qq[j]) * rq[j], sp_bf16x2_hi_(qq[j]) * rq[j]};
            float to_mid[2], from_mid[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                to_mid[h] = sp_ex2_ftz_(gam[h][i0 + j] + base[h]);
                from_mid[h] = sp_rcp_ftz_(to_mid[h]);
            }
            *(uint32_t *)op_at(ops.lk, t + j, d) = sp_bf16x2_(kh[0] * to_mid[0], kh[1] * to_mid[1]);
            *(uint32_t *)op_at(ops.lq, t + j, d) = sp_bf16x2_(qh[0] * to_mid[0], qh[1] * to_mid[1]);
            *(uint32_t *)op_at(ops.r, t + j, d) = sp_bf16x2_(kh[0] * from_mid[0], kh[1] * from_mid[1]);
        }
    }
}

/* The 16x8 tile pairs of A (strictly lower, rows scaled by beta) and QK
 * (lower): four tile-pair positions (mi, nb), warp w taking position w % 4
 * of A (w < 4) or QK (w >= 4) with eight warps, or both of position w with
 * four (they share the R operand, and four independent accumulations hide
 * the tensor cores' latency better than two). The pair right of the
 * diagonal block of rows 0..15 is zero: written without multiplying. */
template <int NT, typename OPS>
static __device__ void intra_products(int w, int lane, chunk_work &s, OPS &ops) {
    constexpr int BOTH = NT / 32 == 4;
    static_assert(NT / 32 == 4 || NT / 32 == 8, "four or eight warps");
    const int r = lane >> 2, q = lane & 3, pos = w & 3, mi = pos >> 1, nb = (pos & 1) * 2;
    const int zero_only = mi == 0 && nb == 2;
    const int first = BOTH ? 0 : w >> 2; /* 0: A, 1: QK */
    float acc[2][2][4] = {};             /* [A or QK (BOTH) / the one][tile] */
    if (!zero_only) {
        const int2 la = a_at(lane), lb = b_at(lane);
#pragma unroll 4
        for (int ks = 0; ks < D / 16; ks++) {
            uint32_t b[4];
            sp_ldsm_x4_<0>(op_at(ops.r, 8 * nb + lb.x, 16 * ks + lb.y), b);
#pragma unroll
            for (int m = 0; m < 1 + BOTH; m++) {
                uint32_t a[4];
                sp_ldsm_x4_<0>(op_at((first + m) ? ops.lq : ops.lk, 16 * mi + la.x, 16 * ks + la.y), a);
                sp_mma_bf16_(acc[m][0], a, b[0], b[1]);
                sp_mma_bf16_(acc[m][1], a, b[2], b[3]);
            }
        }
    }
#pragma unroll
    for (int m = 0; m < 1 + BOTH; m++) {
        const int is_qk = first + m;
#pragma unroll
        for (int j = 0; j < 2; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int i = 16 * mi + r + 8 * (e >> 1), jj = 8 * (nb + j) + 2 * q + (e & 1);
                float x = 0.0f;
                if (!zero_only && (jj < i || (is_qk && jj == i)))
                    x = is_qk ? tf32_round(acc[m][j][e]) : ops.b[i] * acc[m][j][e];
                if (is_qk)
                    ops.qk[i][jj] = x;
                else
                    s.at[jj][i] = x;
            }
    }
}

/* One warp: T = (I + A)^-1 (A strictly lower) by 16 x 16 blocks. The
 * diagonal blocks in fp32: lanes 0-15 solve column `lane` of T11 = (I +
 * A11)^-1 and lanes 16-31 column lane - 16 of T22 = (I + A22)^-1, by
 * column-oriented forward substitution (once x_k is final, every later row
 * takes its term A[i][k] x_k: one FMA per row on the dependency chain, with
 * A's columns read as float4 rows of at). Then T21 = -T22 A21 T11 on the
 * tensor cores (tf32, fp32 accumulation), as T21^T = -(T11^T A21^T) T22^T so
 * that the first product's accumulators are the second's A operand. T12 = 0. */
template <typename OPS>
static __device__ void solve_t(int lane, const chunk_work &s, OPS &ops) {
    constexpr int B = CT / 2;
    const int j = lane & (B - 1), base = lane & B;
    float x[B];
#pragma unroll
    for (int i = 0; i < B; i++) x[i] = i == j ? 1.0f : 0.0f;
#pragma unroll
    for (int k = 0; k < B - 1; k++) {
        const float *col = &s.at[base + k][base]; /* column k of the block: A[base + i][base + k] */
#pragma unroll
        for (int i4 = (k + 1) & ~3; i4 < B; i4 += 4) {
            const float4 a4 = *(const float4 *)&col[i4];
            const float a[4] = {a4.x, a4.y, a4.z, a4.w};
#pragma unroll
            for (int e = 0; e < 4; e++)
                if (i4 + e > k) x[i4 + e] = fmaf(-a[e], x[k], x[i4 + e]);
        }
    }
#pragma unroll
    for (int i = 0; i < B; i++) {
        ops.t[base + i][base + j] = tf32_round(x[i]);
        if (base == 0) ops.t[i][B + j] = 0.0f;
    }
    __syncwarp();
    /* C1 = T11^T A21^T (16 x 16: two n8 tiles), k permuted as in acc_as_a:
     * k-step columns q, q + 4 are physical columns 2q, 2q + 1. */
    const int r = lane >> 2, q = lane & 3;
    float c1[2][4] = {}, c2[2][4] = {};
#pragma unroll
    for (int ks = 0; ks < 2; ks++) {
        const int k0 = 8 * ks + 2 * q;
        const uint32_t a[4] = {__float_as_uint(ops.t[k0][r]), __float_as_uint(ops.t[k0][r + 8]),
                               __float_as_uint(ops.t[k0 + 1][r]),
                               __float_as_uint(ops.t[k0 + 1][r + 8])};
#pragma unroll
        for (int nt = 0; nt < 2; nt++)
            sp_mma_tf32_(c1[nt], a, to_tf32(s.at[k0][B + 8 * nt + r]),
                         to_tf32(s.at[k0 + 1][B + 8 * nt + r]));
    }
    /* C2 = C1 T22^T; T21[n][m] = -C2[m][n]. */
#pragma unroll
    for (int kt = 0; kt < 2; kt++) {
        uint32_t a[4];
        acc_as_a(c1[kt], a);
#pragma unroll
        for (int nt = 0; nt < 2; nt++) {
            uint32_t b0, b1;
            pair(&ops.t[B + 8 * nt + r][B + 8 * kt + 2 * q], &b0, &b1);
            sp_mma_tf32_(c2[nt], a, b0, b1);
        }
    }
#pragma unroll
    for (int nt = 0; nt < 2; nt++)
#pragma unroll
        for (int e = 0; e < 4; e++)
            ops.t[B + 8 * nt + 2 * q + (e & 1)][r + 8 * (e >> 1)] = tf32_round(-c2[nt][e]);
}

/* ---- the V side of a chunk (each V-warp: 16 V rows, registers only) ---------- */

/* This warp's part of S^T from a pool (V-first: element [j][d] at j*128+d):
 * V rows vrow, vrow + 8; K columns d0 + 8nd + 2q, +1 for nd < nds. */
static __device__ __forceinline__ void state_load(const void *pool, int bf16, int64_t base,
                                                  int vrow, int d0, int q, float S[][4],
                                                  int nds) {
#pragma unroll
    for (int nd = 0; nd < nds; nd++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int64_t at = base + (int64_t)(vrow + 8 * hf) * D + d0 + 8 * nd + 2 * q;
            if (bf16) {
                const uint32_t u = *(const uint32_t *)((const uint16_t *)pool + at);
                S[nd][2 * hf] = sp_bf16_to_f32_((uint16_t)u);
                S[nd][2 * hf + 1] = sp_bf16_to_f32_((uint16_t)(u >> 16));
            } else {
                const float2 f = *(const float2 *)((const float *)pool + at);
                S[nd][2 * hf] = f.x;
                S[nd][2 * hf + 1] = f.y;
            }
        }
}

static __device__ __forceinline__ void state_store(void *pool, int bf16, int64_t base, int vrow,
                                                   int d0, int q, const float S[][4], int nds) {
#pragma unroll
    for (int nd = 0; nd < nds; nd++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int64_t at = base + (int64_t)(vrow + 8 * hf) * D + d0 + 8 * nd + 2 * q;
            if (bf16) {
                const uint32_t u = (uint32_t)sp_f32_to_bf16_(S[nd][2 * hf]) |
                                   ((uint32_t)sp_f32_to_bf16_(S[nd][2 * hf + 1]) << 16);
                *(uint32_t *)((uint16_t *)pool + at) = u;
            } else {
                *(float2 *)((float *)pool + at) = make_float2(S[nd][2 * hf], S[nd][2 * hf + 1]);
            }
        }
}

/* S^T's columns d0 + ... times a per-channel factor (c or e). */
static __device__ __forceinline__ void scale_columns(float S[][4], const float *f, int d0, int q,
                                                     int nds) {
#pragma unroll
    for (int nd = 0; nd < nds; nd++) {
        const float2 x = *(const float2 *)&f[d0 + 8 * nd + 2 * q];
        S[nd][0] *= x.x;
        S[nd][1] *= x.y;
        S[nd][2] *= x.x;
        S[nd][3] *= x.y;
    }
}

/* The V side's products over the K columns d0 .. d0 + 8 nds - 1 that S
 * holds (all of them in the one-pass kernel, a range in the two-pass
 * state pass): S' = S diag(c), then P^T += S' Lk^T and O^T += S' Lq^T (the
 * inter-chunk part of o^T). */
template <typename OPS>
static __device__ __forceinline__ void state_products(float S[][4], int nds, int d0, int lane,
                                                      const OPS &s, float P[CT / 8][4],
                                                      float O[CT / 8][4]) {
    scale_columns(S, s.c, d0, lane & 3, nds);
    const int2 lb = b_at(lane);
#pragma unroll
    for (int kk = 0; kk < nds / 2; kk++) {
        uint32_t a[4];
        acc_pair_as_a(S[2 * kk], S[2 * kk + 1], a);
        const int col = d0 + 16 * kk + lb.y;
#pragma unroll
        for (int t16 = 0; t16 < CT / 16; t16++) {
            uint32_t b[4];
            sp_ldsm_x4_<0>(op_at(s.lk, 16 * t16 + lb.x, col), b);
            sp_mma_bf16_(P[2 * t16], a, b[0], b[1]);
            sp_mma_bf16_(P[2 * t16 + 1], a, b[2], b[3]);
            sp_ldsm_x4_<0>(op_at(s.lq, 16 * t16 + lb.x, col), b);
            sp_mma_bf16_(O[2 * t16], a, b[0], b[1]);
            sp_mma_bf16_(O[2 * t16 + 1], a, b[2], b[3]);
        }
    }
}

/* S' += W^T R over the same K columns, for the k16 step kt (tokens 16 kt ..
 * + 15) of W^T, given as the A fragment a. */
template <typename OPS>
static __device__ __forceinline__ void state_add_wr(float S[][4], int nds, int d0, int lane,
                                                    const OPS &s, int kt, const uint32_t a[4]) {
    const int2 lt = bt_at(lane);
#pragma unroll
    for (int nd = 0; nd < nds; nd += 2) {
        uint32_t b[4];
        sp_ldsm_x4_<1>(op_at(s.r, 16 * kt + lt.x, d0 + 8 * nd + lt.y), b);
        sp_mma_bf16_(S[nd], a, b[0], b[1]);
        sp_mma_bf16_(S[nd + 1], a, b[2], b[3]);
    }
}

/* C^T += X^T M^T for this warp's 16 V rows: X^T as accumulator tiles over
 * the chunk's 32 tokens, M a 32 x 32 tf32 operand (T or QK) whose rows are
 * C's tokens. Both are zero right of their two diagonal 16 x 16 blocks
 * (tokens 0 .. 15 of C, 16 .. 31 of X): those products are skipped. */
static __device__ __forceinline__ void acc_times_m(const float X[CT / 8][4], const float (*M)[SA],
                                                   int lane, float C[CT / 8][4]) {
    const int r = lane >> 2, q = lane & 3;
#pragma unroll
    for (int kt = 0; kt < CT / 8; kt++) {
        uint32_t a[4];
        acc_as_a(X[kt], a);
#pragma unroll
        for (int t8 = 0; t8 < CT / 8; t8++) {
            if (t8 < 2 && kt >= 2) continue;
            uint32_t b0, b1;
            pair(&M[8 * t8 + r][8 * kt + 2 * q], &b0, &b1);
            sp_mma_tf32_(C[t8], a, b0, b1);
        }
    }
}

/* For this warp's 16 V rows (P^T = S' Lk^T summed over K, as accumulator
 * tiles): X^T = diag(b) (V - P)^T in place of P, then W^T = X^T T^T. v
 * holds the chunk's V rows (token t at v + t * pitch, 16-byte aligned
 * rows), this warp's first column at v_warp. V^T comes in the accumulators'
 * layout by transposing loads: 8x8 tiles (tokens 8 t8 .., columns v_warp
 * + 8 hf ..), whose transpose gives lane (r, q) tokens 2q, 2q + 1 of
 * column r. */
template <typename OPS>
static __device__ __forceinline__ void solve_w(float P[CT / 8][4], const uint16_t *v, int pitch,
                                               int v_warp, const OPS &s, int lane,
                                               float W[CT / 8][4]) {
    const int q = lane & 3, m = lane >> 3;
    uint32_t vt[CT / 8][2]; /* [t8][hf]: tokens 8 t8 + 2q, +1 of column v_warp + 8 hf + r */
#pragma unroll
    for (int j = 0; j < CT / 16; j++) {
        uint32_t x[4];
        sp_ldsm_x4_<1>(v + (16 * j + 8 * (m >> 1) + (lane & 7)) * pitch + v_warp + 8 * (m & 1), x);
        vt[2 * j][0] = x[0], vt[2 * j][1] = x[1], vt[2 * j + 1][0] = x[2], vt[2 * j + 1][1] = x[3];
    }
#pragma unroll
    for (int t8 = 0; t8 < CT / 8; t8++)
#pragma unroll
        for (int e = 0; e < 4; e++) {
            const int t = 8 * t8 + 2 * q + (e & 1);
            const uint32_t two = vt[t8][e >> 1];
            const float x = e & 1 ? sp_bf16x2_hi_(two) : sp_bf16x2_lo_(two);
            P[t8][e] = s.b[t] * (x - P[t8][e]);
            W[t8][e] = 0.0f;
        }
    acc_times_m(P, s.t, lane, W);
}

#endif /* SP_KDA_CUDA_CHUNK_CUH */
