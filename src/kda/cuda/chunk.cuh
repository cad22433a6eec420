/*
 * chunk.cuh — what both chunked KDA kernels (chunked.cu, one pass;
 * chunked_two_pass.cu) share of a 32-token chunk: its sizes, the layouts of
 * its operands in shared memory (one swizzle), and the tensor-core fragment
 * helpers. The K side of a chunk (loading, gates, norms, the operands, the
 * products A and QK, T = (I + A)^-1) is chunk_k.cuh, its safe form
 * chunk_safe.cuh; the V side (the
 * state's fragments and products) chunk_v.cuh.
 *
 * The math, per (sequence, head), a chunk of CHUNK = 32 tokens at a time
 * with the fp32 state S0 (K x V) in registers (the WY form of the gated
 * delta rule with a per-channel gate; k and q already normalized, q
 * scaled):
 *
 *   gam_i  = sum of g_t over t <= i in the chunk   (per channel, fp32)
 *   A[i,j] = b_i sum_d k_i[d] k_j[d] exp(gam_i - gam_j)[d]   j < i
 *   QK[i,j] =    sum_d q_i[d] k_j[d] exp(gam_i - gam_j)[d]   j <= i
 *   T      = (I + A)^-1     (16 x 16 blocks: forward substitution in fp32, T21 by tf32 products)
 *   W      = T diag(b) (V - Kg S0)             Kg row i = k_i exp(gam_i)
 *   o      = Qg S0 + QK W                      Qg row i = q_i exp(gam_i)
 *   S1     = diag(exp(gam_31)) S0 + Kd^T W     Kd row j = k_j exp(gam_31 - gam_j)
 *
 * The products need exp(gam_i - gam_j) split into a row factor and a column
 * factor around a reference token m (REF_TOKEN, the 16th): Lk row i = k_i
 * exp(gam_i - gam_m), Lq likewise from q, R row j = k_j exp(gam_m - gam_j);
 * then A = b (Lk R^T), QK = Lq R^T. Each factor stays within
 * e^(+-16 |g|max): with the lower-bound gate (|g| <= 5) within e^80, which
 * fp32 represents, while the true products are at most 1. So the kernels
 * take this factored form only where each channel's decay over each half of
 * the chunk is at most that: always at the lower-bound gate, and in the
 * every-gate builds wherever a chunk's gates allow (chunk_k.cuh,
 * out_of_range). The same three operands serve the
 * state: with c = exp(gam_m) and e = exp(gam_31 - gam_m) per channel,
 * Kg = Lk diag(c), Qg = Lq diag(c), Kd = R diag(e) and exp(gam_31) = c e, so
 *   S' = diag(c) S0;  P = Lk S', o = Lq S' + QK W;  S1 = diag(e) (S' + R^T W)
 * and the per-channel scalings are done on the state in registers. (Not
 * diag(c_next e) as one factor: it can underflow where diag(e) times the
 * state does not, at the lower bound: e^-160 against e^-80.)
 *
 * The safe form, for the other chunks (the every-gate builds only): A and
 * QK element by element in fp32, sum_d k_i k_j exp(gam_i - gam_j) with
 * exponents <= 0, and the V side's operands referred to the chunk's ends:
 * Lk = Kg, Lq = Qg, R = Kd (factors <= 1), c = 1, e = exp(gam_31), and
 *   P = Kg S0, o = Qg S0 + QK W;  S1 = diag(e) S0 + Kd^T W
 * (the state scaled before the product is added, not after). A factor that
 * underflows stands for a decay fp32 cannot tell from total.
 *
 * Operands: Lk, Lq, R are bf16 (rounded once, by the K side), their
 * products over the 128 channels bf16 with fp32 accumulation (mma.sync, or
 * wgmma in the one-pass kernel's wgmma build); T and QK are fp32 and their
 * 32 x 32 products tf32. The state is kept transposed, S^T (V rows x K
 * columns), as mma accumulators, so that its products take their A operand
 * straight from accumulators (acc_pair_as_a, acc_as_a).
 */
#ifndef SP_KDA_CUDA_CHUNK_CUH
#define SP_KDA_CUDA_CHUNK_CUH

#include "cuda/ptx.cuh"
#include "kda/cuda/common.cuh"

/* A chunk's sizes (typed constants; every chunked kernel's own sizes are in
 * its traits struct). Shared-memory row pitches are chosen so that each
 * warp's fragment loads hit 32 distinct banks. */
static constexpr int CHUNK = SP_KDA_CHUNK;  /* tokens per chunk (32) */
static constexpr int REF_TOKEN = 15;        /* reference token of the factorization */
static constexpr int DIM = SP_KDA_D;        /* channels of q, k (K) and of v (V): 128 */
static constexpr int OP_PITCH = DIM + 8;    /* lk, lq, r (bf16): 272-byte rows, 8 ldmatrix rows
                                               on distinct banks */
static constexpr int MAT_PITCH = CHUNK + 8; /* qk, t (fp32): 8 mod 32, for float2 fragment loads */
static constexpr int AT_PITCH = CHUNK + 4;  /* at (fp32): 4 mod 32, its transposed fragment
                                               stores conflict-free */

/* A chunk's k, q and g as they arrive (bf16); v comes separately, only the
 * columns a block owns. */
typedef struct raw_chunk {
    uint16_t k[CHUNK][DIM], q[CHUNK][DIM], g[CHUNK][DIM];
} raw_chunk;

/* What the V side of a chunk needs: the chunk's operands. Also the record
 * the two-pass kernel keeps per chunk in its workspace (the same layout, so
 * that it is copied to and from shared memory as one block). */
typedef struct chunk_ops {
    uint16_t lk[CHUNK][OP_PITCH], lq[CHUNK][OP_PITCH], r[CHUNK][OP_PITCH]; /* bf16 */
    float qk[CHUNK][MAT_PITCH], t[CHUNK][MAT_PITCH];
    float b[CHUNK];
    float c[DIM], e[DIM]; /* exp(gam_m), exp(gam_31 - gam_m) */
} chunk_ops;

/* The same for the V side's warpgroup products (wgmma, sm_90a: the
 * one-pass kernel's wgmma build): Lk, Lq, R as 32 x 128 bf16 in the
 * tensor cores' 128-byte swizzled layout (op_at): 8-token row groups of
 * 1 KB, 64 channels a 128-byte row, its 16-byte pieces permuted by the
 * token's row in the group; channels 64 .. 127 4 KB on. The rest as in
 * chunk_ops. */
typedef struct chunk_ops_sw {
    alignas(1024) uint16_t lk[CHUNK * DIM];
    alignas(1024) uint16_t lq[CHUNK * DIM];
    alignas(1024) uint16_t r[CHUNK * DIM];
    float qk[CHUNK][MAT_PITCH], t[CHUNK][MAT_PITCH];
    float b[CHUNK];
    float c[DIM], e[DIM];
} chunk_ops_sw;

/* A chunk's form, in the every-gate builds: factored (0) or safe (1). Kept
 * in the spare column of QK's first row (MAT_PITCH > CHUNK: a column no
 * product reads), so that a chunk_ops record keeps its size and layout. */
template <typename OPS> static SP_HD __forceinline__ float &chunk_form(OPS &ops) {
    static_assert(MAT_PITCH > CHUNK, "QK's rows have a spare column");
    return ops.qk[0][CHUNK];
}
template <typename OPS> static SP_HD __forceinline__ int chunk_is_safe(const OPS &ops) {
    return ops.qk[0][CHUNK] != 0.0f;
}

/* Element (t, d) of an operand: row-major with padded rows (chunk_ops), or
 * swizzled (chunk_ops_sw). Eight consecutive channels from a multiple of 8
 * stay 16 contiguous bytes either way. */
static SP_HD __forceinline__ uint16_t *op_at(uint16_t (*x)[OP_PITCH], int t, int d) {
    return &x[t][d];
}
static SP_HD __forceinline__ const uint16_t *op_at(const uint16_t (*x)[OP_PITCH], int t,
                                                   int d) {
    return &x[t][d];
}
/* The one statement of the 128-byte swizzle: the element offset of (t, d)
 * in a swizzled operand. sw128_bytes(t, d) is the same in bytes, for the
 * wgmma descriptors' start addresses (at t a multiple of 8, d of 8). */
static __host__ __device__ __forceinline__ constexpr int swizzled(int t, int d) {
    const int row = t & 7;
    return (d >> 6) * (CHUNK * 64) + (t >> 3) * 512 + row * 64 + ((((d >> 3) & 7) ^ row) << 3) +
           (d & 7);
}
static __host__ __device__ __forceinline__ constexpr unsigned sw128_bytes(int t, int d) {
    return 2u * (unsigned)swizzled(t, d);
}
static_assert(sw128_bytes(0, 64) == CHUNK * 128 && sw128_bytes(8, 0) == 1024 &&
                  sw128_bytes(0, 16) == 32,
              "channel blocks CHUNK x 128 bytes apart, 8-token row groups of 1 KB");
static SP_HD __forceinline__ uint16_t *op_at(uint16_t *x, int t, int d) {
    return x + swizzled(t, d);
}
static SP_HD __forceinline__ const uint16_t *op_at(const uint16_t *x, int t, int d) {
    return x + swizzled(t, d);
}

/* The K side's intermediates (its operands go to a chunk_ops). */
typedef struct chunk_work {
    /* seg_end lives from gates_and_norms to operands, at from intra_products
     * on: one array. */
    union {
        float seg_end[4][DIM]; /* each segment's cumulative gate at its end (log2 units) */
        float at[CHUNK][AT_PITCH]; /* A transposed: at[j][i] = A[i][j] (columns of A as rows, for solve_t) */
    };
    alignas(16) float rk[CHUNK];
    alignas(16) float rq[CHUNK];
} chunk_work;

/* ---- small device helpers ---------------------------------------------- */

/* fp32 -> tf32 bits, rounded to nearest (ties away from zero): what the
 * tensor cores read of an operand is its top 19 bits. */
static SP_HD __forceinline__ uint32_t to_tf32(float x) {
    return (sp_f32_bits_(x) + 0x1000u) & 0xffffe000u;
}

/* The K side's factors stay within e^(+-80) (16 tokens at the lower bound
 * -5): the ftz exp2 and reciprocal of ptx.cuh never flush one of them. */

static SP_HD __forceinline__ float tf32_round(float x) { return sp_bits_f32_(to_tf32(x)); }

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


#endif /* SP_KDA_CUDA_CHUNK_CUH */
