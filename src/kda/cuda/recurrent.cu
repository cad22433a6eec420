/*
 * recurrent.cu — the recurrent CUDA KDA prefill: one block per (sequence,
 * head) steps through the sequence token by token, the 128x128 fp32 state in
 * registers for the whole sequence. Exact to fp32 rounding: the oracle the
 * chunked kernel is tested against, and the kernel for the shapes the chunked
 * one does not serve (see plan.c).
 *
 * The V columns of the recurrence are independent of each other once the
 * token's k^, q^, exp(g), b are known: column j needs only sums over the K
 * rows of its own column. So each warp owns 8 columns and all 128 rows of
 * them, and runs its token steps without waiting for any other warp. Lane
 * l holds a tile of 8 rows x 4 columns: rows 4r..4r+3 and 64+4r..64+4r+3
 * (r = l % 16; two float4 loads from shared memory, conflict-free), columns
 * 8w + 4(l / 16) + 0..3.
 *
 * Why this shape: a warp's shared-memory load returns at most one register
 * per lane per cycle, so a layout that makes every thread read the token's
 * vectors for many rows of one column (the obvious one) is bound by those
 * reads. Here each vector element read serves 4 columns, and the sums over
 * rows finish inside the warp by shuffles: recursive halving over the 16
 * lanes of a column group (8 partial sums -> 1 per lane in 4 + 2 + 1 + 1
 * exchanges), then the delta of each column is broadcast from its lane.
 *
 * Tokens go in groups of 16 (one per warp): each warp loads and normalizes
 * one token of the group into shared memory (sums of squares by a xor
 * butterfly, which leaves every lane the same bits), while the global loads
 * of the next group are in flight during the group's 16 steps. Two
 * __syncthreads per group, none per step.
 *
 * Per step: decay S and reduce it against k^ and q^ in one pass; u and
 * b*u per column; o = S'^T q^ + b (k^.q^) u (the same value as S_new^T q^);
 * the rank-1 update. Every sum has a fixed order, so reruns are
 * bit-identical.
 */
#include "kda/cuda/common.cuh"

#define THREADS 512
#define WARPS (THREADS / 32)
#define GROUP WARPS              /* tokens prepared together: one per warp */
#define COLS_PER_WARP (SP_KDA_D / WARPS) /* 8 */
#define PER_LANE (SP_KDA_D / 32) /* prep: elements per lane of a token */
#define FULL SP_KDA_FULL_MASK

/* One token's raw inputs, lane's share: d = lane + 32*e (g and beta as
 * floats: they may be f32). */
typedef struct raw_token {
    uint16_t q[PER_LANE], k[PER_LANE], v[PER_LANE];
    float g[PER_LANE], beta;
} raw_token;

typedef struct group_smem {
    float k[GROUP][SP_KDA_D], q[GROUP][SP_KDA_D], dec[GROUP][SP_KDA_D], v[GROUP][SP_KDA_D];
    float b[GROUP], kq[GROUP];
} group_smem;

static __device__ float warp_sum(float x) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(FULL, x, off);
    return x;
}

static __device__ void load_token(const kda_params &p, int64_t t, int64_t h, int lane,
                                  raw_token &r) {
    const uint16_t *q = kda_row(p.q, t, h) + lane, *k = kda_row(p.k, t, h) + lane;
    const uint16_t *v = kda_row(p.v, t, h) + lane;
#pragma unroll
    for (int e = 0; e < PER_LANE; e++) {
        r.q[e] = q[32 * e];
        r.k[e] = k[32 * e];
        r.v[e] = v[32 * e];
        r.g[e] = kda_in(p.g, p.g_f32, t, h, lane + 32 * e);
    }
    r.beta = kda_in(p.beta, p.beta_f32, t, h, 0);
}

/* Normalize q and k, gate, beta: the token-only work, one warp per token. */
static __device__ void prep_token(const kda_params &p, const raw_token &r, int w, int lane,
                                  float expA, const float *bias, group_smem &s) {
    float qf[PER_LANE], kf[PER_LANE], sq = 0.0f, sk = 0.0f;
#pragma unroll
    for (int e = 0; e < PER_LANE; e++) {
        qf[e] = sp_bf16_to_f32_(r.q[e]);
        kf[e] = sp_bf16_to_f32_(r.k[e]);
        sq = fmaf(qf[e], qf[e], sq);
        sk = fmaf(kf[e], kf[e], sk);
    }
    sq = warp_sum(sq);
    sk = warp_sum(sk);
    const float rq = p.scale / sqrtf(sq + (float)SP_KDA_EPS);
    const float rk = 1.0f / sqrtf(sk + (float)SP_KDA_EPS);
    float kq = 0.0f;
#pragma unroll
    for (int e = 0; e < PER_LANE; e++) {
        const int d = lane + 32 * e;
        const float qn = qf[e] * rq, kn = kf[e] * rk;
        kq = fmaf(kn, qn, kq);
        s.q[w][d] = qn;
        s.k[w][d] = kn;
        s.v[w][d] = sp_bf16_to_f32_(r.v[e]);
        s.dec[w][d] = expf(sp_kda_log_decay_f32_(p.gate, p.lower_bound, expA, r.g[e], bias[e]));
    }
    kq = warp_sum(kq);
    if (lane == 0) {
        s.kq[w] = kq;
        s.b[w] = sp_kda_beta_f32_(p.beta_form, r.beta);
    }
}

/* Row of tile row m (0..7) for lane group r: 4r..4r+3, then 64+4r..+3. */
static __device__ __forceinline__ int tile_row(int r, int m) {
    return (m < 4 ? 4 * r : 64 + 4 * r - 4) + m;
}

/* This lane's tile of S in a pool at `base`, the offset of pool element
 * [., h, 0, 0]: S[d][j] at sp_kda_state_at_(k_first, d, j) from there. */
static __device__ __forceinline__ int64_t tile_at(int64_t base, int k_first, int r, int j0, int c,
                                                  int m) {
    return base + sp_kda_state_at_(k_first, tile_row(r, m), j0 + c);
}

/* base < 0: the state starts from zeros (has_initial_state false). */
static __device__ void tile_load(const void *pool, int bf16, int k_first, int64_t base, int r,
                                 int j0, float S[8][4]) {
#pragma unroll
    for (int c = 0; c < 4; c++)
#pragma unroll
        for (int m = 0; m < 8; m++) {
            const int64_t at = tile_at(base, k_first, r, j0, c, m);
            S[m][c] = base < 0  ? 0.0f
                      : bf16    ? sp_bf16_to_f32_(((const uint16_t *)pool)[at])
                                : ((const float *)pool)[at];
        }
}

static __device__ void tile_store(void *pool, int bf16, int k_first, int64_t base, int r, int j0,
                                  const float S[8][4]) {
#pragma unroll
    for (int c = 0; c < 4; c++)
#pragma unroll
        for (int m = 0; m < 8; m++) {
            const int64_t at = tile_at(base, k_first, r, j0, c, m);
            if (bf16)
                ((uint16_t *)pool)[at] = sp_f32_to_bf16_(S[m][c]);
            else
                ((float *)pool)[at] = S[m][c];
        }
}

/* Sum x[0..7] over the 16 lanes of this half-warp by recursive halving: at
 * each level a lane keeps half of its values and adds the partner's copy of
 * that half. Lane l ends with the full sum of x[index], index =
 * 4*bit3 + 2*bit2 + bit1 of l; lanes l and l^1 both hold it (the last
 * level adds a + b on one lane and b + a on the other: the same bits). */
static __device__ __forceinline__ float halving_sum(const float x[8], int lane) {
    const int b3 = (lane >> 3) & 1, b2 = (lane >> 2) & 1, b1 = (lane >> 1) & 1;
    float y[4], z[2];
#pragma unroll
    for (int t = 0; t < 4; t++) {
        const float keep = b3 ? x[4 + t] : x[t], give = b3 ? x[t] : x[4 + t];
        y[t] = keep + __shfl_xor_sync(FULL, give, 8);
    }
#pragma unroll
    for (int t = 0; t < 2; t++) {
        const float keep = b2 ? y[2 + t] : y[t], give = b2 ? y[t] : y[2 + t];
        z[t] = keep + __shfl_xor_sync(FULL, give, 4);
    }
    const float keep = b1 ? z[1] : z[0], give = b1 ? z[0] : z[1];
    const float w = keep + __shfl_xor_sync(FULL, give, 2);
    return w + __shfl_xor_sync(FULL, w, 1);
}

static __global__ void __launch_bounds__(THREADS, 1) kda_recurrent_kernel(kda_params p) {
    __shared__ __align__(16) group_smem s;

    const int64_t h = blockIdx.x % p.H, n = blockIdx.x / p.H;
    const int tid = threadIdx.x, lane = tid % 32, w = tid / 32;
    const int r = lane % 16;                                   /* row group */
    const int j0 = w * COLS_PER_WARP + 4 * (lane / 16);         /* first column */
    const int kq_lane = (lane >> 3) & 1;                       /* holds a q^ sum */
    const int col = ((lane >> 2) & 1) * 2 + ((lane >> 1) & 1); /* its sum's column */

    kda_seq sq;
    if (!kda_seq_of(p, n, h, &sq)) return;
    const int64_t bos = sq.bos, L = sq.len;
    int64_t crow = sq.crow;

    const float expA = expf(p.A_log[h]);
    float bias[PER_LANE];
#pragma unroll
    for (int e = 0; e < PER_LANE; e++) bias[e] = p.dt_bias[h * SP_KDA_D + lane + 32 * e];

    float S[8][4];
    /* A sequence without tokens leaves its slot as it was, bit for bit. */
    if (L > 0) tile_load(p.state, p.state_bf16, p.state_k_first, sq.read_base, r, j0, S);

    raw_token raw;
    if (w < L) load_token(p, bos + w, h, lane, raw);
    int64_t since = 0;
    for (int64_t c0 = 0; c0 < L; c0 += GROUP) {
        const int nt = (int)(L - c0 < GROUP ? L - c0 : GROUP);
        __syncthreads(); /* every warp is done with the previous group */
        if (w < nt) prep_token(p, raw, w, lane, expA, bias, s);
        __syncthreads();
        if (c0 + GROUP + w < L) load_token(p, bos + c0 + GROUP + w, h, lane, raw);

        for (int i = 0; i < nt; i++) {
            const float4 ka4 = *(const float4 *)&s.k[i][4 * r];
            const float4 kb4 = *(const float4 *)&s.k[i][64 + 4 * r];
            const float4 qa4 = *(const float4 *)&s.q[i][4 * r];
            const float4 qb4 = *(const float4 *)&s.q[i][64 + 4 * r];
            const float4 ea4 = *(const float4 *)&s.dec[i][4 * r];
            const float4 eb4 = *(const float4 *)&s.dec[i][64 + 4 * r];
            const float k[8] = {ka4.x, ka4.y, ka4.z, ka4.w, kb4.x, kb4.y, kb4.z, kb4.w};
            const float q[8] = {qa4.x, qa4.y, qa4.z, qa4.w, qb4.x, qb4.y, qb4.z, qb4.w};
            const float e[8] = {ea4.x, ea4.y, ea4.z, ea4.w, eb4.x, eb4.y, eb4.z, eb4.w};
            float sums[8] = {0, 0, 0, 0, 0, 0, 0, 0}; /* S'^T k^ for 4 columns, then S'^T q^ */
#pragma unroll
            for (int m = 0; m < 8; m++)
#pragma unroll
                for (int c = 0; c < 4; c++) {
                    S[m][c] *= e[m];
                    sums[c] = fmaf(S[m][c], k[m], sums[c]);
                    sums[4 + c] = fmaf(S[m][c], q[m], sums[4 + c]);
                }
            const float total = halving_sum(sums, lane);
            /* Lanes with a k^ sum own the delta of their column. */
            const float mine = s.b[i] * (s.v[i][j0 + col] - total);
            float bu[4];
#pragma unroll
            for (int c = 0; c < 4; c++)
                bu[c] = __shfl_sync(FULL, mine, (lane & 16) | ((c >> 1) << 2) | ((c & 1) << 1));
            const float bu_col = __shfl_xor_sync(FULL, mine, 8);
            if (kq_lane && !(lane & 1))
                p.o[((bos + c0 + i) * p.H + h) * SP_KDA_D + j0 + col] =
                    sp_f32_to_bf16_(fmaf(bu_col, s.kq[i], total));
#pragma unroll
            for (int m = 0; m < 8; m++)
#pragma unroll
                for (int c = 0; c < 4; c++) S[m][c] = fmaf(k[m], bu[c], S[m][c]);
            if (p.interval > 0 && ++since == p.interval) {
                tile_store(p.ckpt, p.state_bf16, 0, kda_ckpt_base(p, crow, h), r, j0, S);
                crow++;
                since = 0;
            }
            /* A verify table: every token's state to its column's slot. */
            if (p.ix.width > 0) {
                const int64_t to = sp_kda_token_slot_(&p.ix, n, c0 + i);
                if (to >= 0)
                    tile_store(p.state, p.state_bf16, p.state_k_first, kda_slot_base(p, to, h), r,
                               j0, S);
            }
        }
    }
    if (L > 0 && sq.slot_base >= 0)
        tile_store(p.state, p.state_bf16, p.state_k_first, sq.slot_base, r, j0, S);
}

extern "C" cudaError_t sp_kda_launch_recurrent_(const kda_params *p, cudaStream_t stream) {
    void *params[] = {(void *)p};
    return cudaLaunchKernel((const void *)kda_recurrent_kernel, dim3((unsigned)(p->N * p->H)),
                            dim3(THREADS), params, 0, stream);
}
