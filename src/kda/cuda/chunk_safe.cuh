/*
 * chunk_safe.cuh — the K side of a chunk in the safe form (chunk.cuh has
 * the math), for the every-gate builds' chunks whose decays leave the
 * factored form's bound (chunk_k.cuh, out_of_range): A and QK element by
 * element, the V side's operands referred to the chunk's ends. Three steps
 * with a barrier of the caller's between each: safe_sums, safe_products,
 * then safe_store and safe_operands. Host-device, as chunk_k.cuh's operand
 * functions, for the emulation (chunk_emulate.cu).
 */
#ifndef SP_KDA_CUDA_CHUNK_SAFE_CUH
#define SP_KDA_CUDA_CHUNK_SAFE_CUH

#include "kda/cuda/chunk_k.cuh"

/* The chunk's running gate sums, fp32 [token][channel] in log2 units from
 * the chunk's start, for the element-wise products: kept where Lk and Lq
 * go, which the safe form writes only after those products. */
template <typename OPS> static SP_HD __forceinline__ float (*safe_gam(OPS &ops))[DIM] {
    static_assert(offsetof(OPS, lq) == offsetof(OPS, lk) + sizeof(OPS::lk) &&
                      sizeof(OPS::lk) + sizeof(OPS::lq) >= sizeof(float[CHUNK][DIM]) &&
                      offsetof(OPS, lk) % 16 == 0,
                  "Lk and Lq hold a chunk's fp32 sums");
    return reinterpret_cast<float (*)[DIM]>(reinterpret_cast<char *>(&ops) + offsetof(OPS, lk));
}

/* Step 1, after the gates' barrier: thread (c, seg) puts its tokens' sums
 * into safe_gam, and keeps its pair_sums for step 3. */
template <int NT, typename OPS>
static SP_HD __forceinline__ pair_sums safe_sums(int tid, const chunk_work &s,
                                                 const float gam[2][kside<NT>::SEG],
                                                 OPS &ops) {
    constexpr int SEG = kside<NT>::SEG;
    const int d = 2 * (tid % (DIM / 2)), t0 = tid / (DIM / 2) * SEG;
    pair_sums m = {{0.0f, 0.0f}, {0.0f, 0.0f}, {0.0f, 0.0f}};
    segment_sums<NT>(tid, s, m.base, m.gmid, m.glast);
    float (*g)[DIM] = safe_gam(ops);
    SP_HD_UNROLL
    for (int j = 0; j < SEG; j++)
        *(float2 *)&g[t0 + j][d] = make_float2(gam[0][j] + m.base[0], gam[1][j] + m.base[1]);
    return m;
}

/* The element-wise products go by pairs (i, j), j <= i: pair p = i (i + 1)
 * / 2 + j is thread p % NT's, its (p / NT)-th. */
template <int NT> struct safe_pairs {
    static constexpr int PAIRS = CHUNK * (CHUNK + 1) / 2;
    static constexpr int EACH = (PAIRS + NT - 1) / NT;
};
static SP_HD __forceinline__ int2 pair_at(int p) {
    int i = (int)((sqrtf(8.0f * (float)p + 1.0f) - 1.0f) * 0.5f);
    if ((i + 1) * (i + 2) / 2 <= p) i++;
    if (i * (i + 1) / 2 > p) i--;
    return make_int2(i, p - i * (i + 1) / 2);
}

/* Step 2, after a barrier: this thread's pairs, ka = sum_d k_i k_j 2^(gam_i -
 * gam_j) and qa = sum_d q_i k_j 2^(gam_i - gam_j) over the raw k and q. A
 * pair's channels go in an order set by p alone (so a record has the same
 * bits whichever kernel wrote it), four at a time from 4 ((p + s) % 32):
 * the lanes of a warp on distinct banks. */
template <int NT, typename OPS>
static SP_HD __forceinline__ void safe_products(int tid, const raw_chunk &raw, OPS &ops,
                                                float ka[safe_pairs<NT>::EACH],
                                                float qa[safe_pairs<NT>::EACH]) {
    const float (*g)[DIM] = safe_gam(ops);
    SP_HD_UNROLL
    for (int m = 0; m < safe_pairs<NT>::EACH; m++) {
        const int p = tid + NT * m;
        float a = 0.0f, b = 0.0f;
        if (p < safe_pairs<NT>::PAIRS) {
            const int2 ij = pair_at(p);
            const float *gi = g[ij.x], *gj = g[ij.y];
            const uint16_t *ki = raw.k[ij.x], *kj = raw.k[ij.y], *qi = raw.q[ij.x];
            SP_HD_UNROLL_4
            for (int s4 = 0; s4 < DIM / 4; s4++) {
                const int c = 4 * ((p + s4) & (DIM / 4 - 1));
                const float4 x = *(const float4 *)&gi[c], y = *(const float4 *)&gj[c];
                const uint2 k1 = *(const uint2 *)&ki[c], k2 = *(const uint2 *)&kj[c];
                const uint2 q1 = *(const uint2 *)&qi[c];
                const float f[4] = {sp_ex2_ftz_(x.x - y.x), sp_ex2_ftz_(x.y - y.y),
                                    sp_ex2_ftz_(x.z - y.z), sp_ex2_ftz_(x.w - y.w)};
                const float kI[4] = {sp_bf16x2_lo_(k1.x), sp_bf16x2_hi_(k1.x), sp_bf16x2_lo_(k1.y),
                                     sp_bf16x2_hi_(k1.y)};
                const float kJ[4] = {sp_bf16x2_lo_(k2.x), sp_bf16x2_hi_(k2.x), sp_bf16x2_lo_(k2.y),
                                     sp_bf16x2_hi_(k2.y)};
                const float qI[4] = {sp_bf16x2_lo_(q1.x), sp_bf16x2_hi_(q1.x), sp_bf16x2_lo_(q1.y),
                                     sp_bf16x2_hi_(q1.y)};
                SP_HD_UNROLL
                for (int e = 0; e < 4; e++) {
                    const float kf = kJ[e] * f[e];
                    a = fmaf(kI[e], kf, a);
                    b = fmaf(qI[e], kf, b);
                }
            }
        }
        ka[m] = a, qa[m] = b;
    }
}

/* Step 3, after a barrier: A (transposed, into s.at: rows scaled by beta,
 * strictly lower) and QK (lower, tf32) from this thread's pairs, both
 * normalized here, and the zeros above their diagonals. */
template <int NT, typename OPS>
static SP_HD __forceinline__ void safe_store(int tid, const float ka[safe_pairs<NT>::EACH],
                                             const float qa[safe_pairs<NT>::EACH],
                                             chunk_work &s, OPS &ops) {
    SP_HD_UNROLL
    for (int m = 0; m < safe_pairs<NT>::EACH; m++) {
        const int p = tid + NT * m;
        if (p < safe_pairs<NT>::PAIRS) {
            const int2 ij = pair_at(p);
            const int i = ij.x, j = ij.y;
            const float rkj = s.rk[j];
            ops.qk[i][j] = tf32_round(qa[m] * s.rq[i] * rkj);
            s.at[j][i] = j < i ? ops.b[i] * (ka[m] * s.rk[i] * rkj) : 0.0f;
        }
    }
    for (int e = tid; e < CHUNK * CHUNK; e += NT) {
        const int i = e / CHUNK, j = e % CHUNK;
        if (j > i) ops.qk[i][j] = 0.0f, s.at[j][i] = 0.0f;
    }
}

/* And, thread (c, seg) with step 1's sums: the V side's operands referred
 * to the chunk's ends, c = 1 and e = 2^glast. */
template <int NT, typename OPS>
static SP_HD __forceinline__ void safe_operands(const raw_chunk &raw, int tid,
                                                const chunk_work &s,
                                                const float gam[2][kside<NT>::SEG],
                                                const pair_sums &m, OPS &ops) {
    const int d = 2 * (tid % (DIM / 2)), seg = tid / (DIM / 2);
    if (seg == 0) {
        *(float2 *)&ops.c[d] = make_float2(1.0f, 1.0f);
        *(float2 *)&ops.e[d] = make_float2(sp_ex2_ftz_(m.glast[0]), sp_ex2_ftz_(m.glast[1]));
    }
    write_operands<NT, 1>(raw, tid, s, gam, m.base, m.glast, ops);
}

#endif /* SP_KDA_CUDA_CHUNK_SAFE_CUH */
