/*
 * chunk_v.cuh — the V side of a chunk (chunk.cuh has the math): the state's
 * fragments in registers (S^T: each warp 16 V rows over some K columns),
 * loaded from and stored to a pool, and its products with the chunk's
 * operands. Per warp.
 */
#ifndef SP_KDA_CUDA_CHUNK_V_CUH
#define SP_KDA_CUDA_CHUNK_V_CUH

#include "kda/cuda/chunk.cuh"

/* This warp's part of S^T to (STORE) or from a pool (V-first: element
 * [j][d] at j*128+d; k_first: at d*128+j, sp_kda_state_at_): V rows vrow,
 * vrow + 8; K columns d0 + 8nd + 2q, +1 for nd < nds. A bf16 pool is read
 * to fp32 and rounded once when written. */
template <int STORE>
static __device__ __forceinline__ void state_io(void *pool, int bf16, int k_first, int64_t base,
                                                int vrow, int d0, int q, float S[][4], int nds) {
#pragma unroll
    for (int nd = 0; nd < nds; nd++)
#pragma unroll
        for (int hf = 0; hf < 2; hf++) {
            const int j = vrow + 8 * hf, d = d0 + 8 * nd + 2 * q;
            float *x = &S[nd][2 * hf];
            if (k_first) { /* the pair's two elements a row apart */
                const int64_t at = base + sp_kda_state_at_(1, d, j);
#pragma unroll
                for (int e = 0; e < 2; e++) {
                    const int64_t ae = at + e * DIM;
                    if (bf16 && STORE) ((uint16_t *)pool)[ae] = sp_f32_to_bf16_(x[e]);
                    else if (bf16) x[e] = sp_bf16_to_f32_(((const uint16_t *)pool)[ae]);
                    else if (STORE) ((float *)pool)[ae] = x[e];
                    else x[e] = ((const float *)pool)[ae];
                }
                continue;
            }
            const int64_t at = base + sp_kda_state_at_(0, d, j);
            if (bf16 && STORE) {
                *(uint32_t *)((uint16_t *)pool + at) =
                    (uint32_t)sp_f32_to_bf16_(x[0]) | ((uint32_t)sp_f32_to_bf16_(x[1]) << 16);
            } else if (bf16) {
                const uint32_t u = *(const uint32_t *)((const uint16_t *)pool + at);
                x[0] = sp_bf16_to_f32_((uint16_t)u);
                x[1] = sp_bf16_to_f32_((uint16_t)(u >> 16));
            } else if (STORE) {
                *(float2 *)((float *)pool + at) = make_float2(x[0], x[1]);
            } else {
                const float2 f = *(const float2 *)((const float *)pool + at);
                x[0] = f.x;
                x[1] = f.y;
            }
        }
}
/* base < 0: the state starts from zeros (has_initial_state false). */
static __device__ __forceinline__ void state_load(const void *pool, int bf16, int k_first,
                                                  int64_t base, int vrow, int d0, int q,
                                                  float S[][4], int nds) {
    if (base >= 0) {
        state_io<0>(const_cast<void *>(pool), bf16, k_first, base, vrow, d0, q, S, nds);
        return;
    }
#pragma unroll
    for (int nd = 0; nd < nds; nd++)
#pragma unroll
        for (int e = 0; e < 4; e++) S[nd][e] = 0.0f;
}
static __device__ __forceinline__ void state_store(void *pool, int bf16, int k_first, int64_t base,
                                                   int vrow, int d0, int q, const float S[][4],
                                                   int nds) {
    state_io<1>(pool, bf16, k_first, base, vrow, d0, q, const_cast<float (*)[4]>(S), nds);
}

/* S^T's columns d0 + ... times a per-channel factor (c or e) where on; by 1
 * (unchanged: a product with 1 is exact) where not. A compile-time on is
 * folded away; a chunk's form (the every-gate build) chooses by a select on
 * each factor, not a branch (docs/TUNING.md, "CHUNKED_EVERY_GATE"). */
static __device__ __forceinline__ void scale_columns_if(float S[][4], const float *f, int d0, int q,
                                                        int nds, bool on) {
#pragma unroll
    for (int nd = 0; nd < nds; nd++) {
        const float2 x = *(const float2 *)&f[d0 + 8 * nd + 2 * q];
        const float a = on ? x.x : 1.0f, b = on ? x.y : 1.0f;
        S[nd][0] *= a;
        S[nd][1] *= b;
        S[nd][2] *= a;
        S[nd][3] *= b;
    }
}
static __device__ __forceinline__ void scale_columns(float S[][4], const float *f, int d0, int q,
                                                     int nds) {
    scale_columns_if(S, f, d0, q, nds, true);
}

/* The V side's products over the K columns d0 .. d0 + 8 nds - 1 that S
 * holds (all of them in the one-pass kernel, a range in the two-pass
 * state pass): S' = S diag(c), then P^T += S' Lk^T and O^T += S' Lq^T (the
 * inter-chunk part of o^T). */
template <typename OPS>
static __device__ __forceinline__ void state_products(float S[][4], int nds, int d0, int lane,
                                                      const OPS &s, float P[CHUNK / 8][4],
                                                      float O[CHUNK / 8][4]) {
    scale_columns(S, s.c, d0, lane & 3, nds);
    const int2 lb = b_at(lane);
#pragma unroll
    for (int kk = 0; kk < nds / 2; kk++) {
        uint32_t a[4];
        acc_pair_as_a(S[2 * kk], S[2 * kk + 1], a);
        const int col = d0 + 16 * kk + lb.y;
#pragma unroll
        for (int t16 = 0; t16 < CHUNK / 16; t16++) {
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
static __device__ __forceinline__ void acc_times_m(const float X[CHUNK / 8][4], const float (*M)[MAT_PITCH],
                                                   int lane, float C[CHUNK / 8][4]) {
    const int r = lane >> 2, q = lane & 3;
#pragma unroll
    for (int kt = 0; kt < CHUNK / 8; kt++) {
        uint32_t a[4];
        acc_as_a(X[kt], a);
#pragma unroll
        for (int t8 = 0; t8 < CHUNK / 8; t8++) {
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
static __device__ __forceinline__ void solve_w(float P[CHUNK / 8][4], const uint16_t *v, int pitch,
                                               int v_warp, const OPS &s, int lane,
                                               float W[CHUNK / 8][4]) {
    const int q = lane & 3, m = lane >> 3;
    uint32_t vt[CHUNK / 8][2]; /* [t8][hf]: tokens 8 t8 + 2q, +1 of column v_warp + 8 hf + r */
#pragma unroll
    for (int j = 0; j < CHUNK / 16; j++) {
        uint32_t x[4];
        sp_ldsm_x4_<1>(v + (16 * j + 8 * (m >> 1) + (lane & 7)) * pitch + v_warp + 8 * (m & 1), x);
        vt[2 * j][0] = x[0], vt[2 * j][1] = x[1], vt[2 * j + 1][0] = x[2], vt[2 * j + 1][1] = x[3];
    }
#pragma unroll
    for (int t8 = 0; t8 < CHUNK / 8; t8++)
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

#endif /* SP_KDA_CUDA_CHUNK_V_CUH */
