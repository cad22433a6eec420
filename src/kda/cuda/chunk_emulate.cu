/*
 * chunk_emulate.cu — the chunked kernels' every-gate K side for one chunk,
 * run on the host (sp_kda_chunk_emulate_, kda_internal.h): chunk_k.cuh's
 * own functions called thread by thread, in the order the one-pass
 * kernel's K threads run them between barriers: the gates and their
 * running sums (chunk_gate, gate_sums, out_of_range: the f32 g path), the
 * factored form's operands, the safe form's sums, element-wise products,
 * A, QK and operands. The norms are the kernel's arithmetic restated
 * (their warp sums have no host form), and so are the factored form's A
 * and QK (the kernel's are tensor-core products): tests check them
 * against the float64 reference. Also the one-pass kernel's longest-first
 * block order (sp_kda_longest_first_order_).
 */
#include "kda/cuda/chunk_safe.cuh"

#include <math.h>
#include <string.h>

#include <new>

namespace {

constexpr int NT = 256; /* the one-pass kernel's K threads */
constexpr int SEG = kside<NT>::SEG;

template <typename OPS> struct chunk_state {
    raw_chunk raw;
    chunk_work work;
    OPS ops;
    float gam[NT][2][SEG]; /* each thread's registers */
    pair_sums sums[NT];
    float ka[NT][safe_pairs<NT>::EACH], qa[NT][safe_pairs<NT>::EACH];
};

/* The call's inputs, as run() reads them. */
typedef struct chunk_in {
    const uint16_t *k, *q;
    const float *g, *dt_bias, *b;
    int nt, gate;
    float lower_bound, A_log, scale;
} chunk_in;

template <typename OPS>
int run(chunk_state<OPS> &m, const chunk_in &in, int form, float *A, float *QK, float *lk,
        float *lq, float *r, float *c, float *e) {
    memset(&m.raw, 0, sizeof m.raw);
    memset(&m.work, 0, sizeof m.work);
    memset(&m.ops, 0, sizeof m.ops);
    memcpy(m.raw.k, in.k, sizeof m.raw.k);
    memcpy(m.raw.q, in.q, sizeof m.raw.q);
    kda_params p;
    memset(&p, 0, sizeof p);
    p.gate = in.gate;
    p.lower_bound = in.lower_bound;
    const float expA = expf(in.A_log);
    /* gates_and_norms: each thread's gates and running sums over its
     * segment (the f32 path's: g as float pairs), the segments' ends,
     * whether it leaves the factored form's bound */
    int far = 0;
    for (int tid = 0; tid < NT; tid++) {
        const int d = 2 * (tid % (DIM / 2)), seg = tid / (DIM / 2), t0 = seg * SEG;
        const chunk_gate<1> gate(p, expA, make_float2(in.dt_bias[d], in.dt_bias[d + 1]));
        float2 g2[SEG];
        for (int j = 0; j < SEG; j++)
            g2[j] = t0 + j < in.nt ? make_float2(in.g[(t0 + j) * DIM + d], in.g[(t0 + j) * DIM + d + 1])
                                   : make_float2(0.0f, 0.0f);
        float sum[2] = {0.0f, 0.0f};
        gate_sums<SEG, false>(g2, in.nt - t0, gate, m.gam[tid], sum); /* the every-gate build's one form */
        m.work.seg_end[seg][d] = sum[0], m.work.seg_end[seg][d + 1] = sum[1];
        far |= out_of_range<SEG>(sum);
    }
    for (int t = 0; t < CHUNK; t++) {
        float sk = 0.0f, sq = 0.0f;
        for (int d = 0; d < DIM; d++) {
            const float x = sp_bf16_to_f32_(m.raw.k[t][d]), y = sp_bf16_to_f32_(m.raw.q[t][d]);
            sk = fmaf(x, x, sk), sq = fmaf(y, y, sq);
        }
        m.work.rk[t] = 1.0f / sqrtf(sk + (float)SP_KDA_EPS);
        m.work.rq[t] = in.scale / sqrtf(sq + (float)SP_KDA_EPS);
        m.ops.b[t] = in.b[t];
    }
    const int safe = form < 0 ? far : form;
    if (!safe) {
        for (int tid = 0; tid < NT; tid++) operands<NT>(m.raw, tid, m.work, m.gam[tid], m.ops);
    } else {
        for (int tid = 0; tid < NT; tid++)
            m.sums[tid] = safe_sums<NT>(tid, m.work, m.gam[tid], m.ops);
        for (int tid = 0; tid < NT; tid++) safe_products<NT>(tid, m.raw, m.ops, m.ka[tid], m.qa[tid]);
        for (int tid = 0; tid < NT; tid++) safe_store<NT>(tid, m.ka[tid], m.qa[tid], m.work, m.ops);
        for (int tid = 0; tid < NT; tid++)
            safe_operands<NT>(m.raw, tid, m.work, m.gam[tid], m.sums[tid], m.ops);
    }
    for (int t = 0; t < CHUNK; t++)
        for (int d = 0; d < DIM; d++) {
            lk[t * DIM + d] = sp_bf16_to_f32_(*op_at(m.ops.lk, t, d));
            lq[t * DIM + d] = sp_bf16_to_f32_(*op_at(m.ops.lq, t, d));
            r[t * DIM + d] = sp_bf16_to_f32_(*op_at(m.ops.r, t, d));
        }
    for (int d = 0; d < DIM; d++) c[d] = m.ops.c[d], e[d] = m.ops.e[d];
    for (int i = 0; i < CHUNK; i++)
        for (int j = 0; j < CHUNK; j++) {
            if (safe) {
                A[i * CHUNK + j] = m.work.at[j][i];
                QK[i * CHUNK + j] = m.ops.qk[i][j];
                continue;
            }
            /* intra_products: bf16 operands, fp32 sums */
            float a = 0.0f, x = 0.0f;
            for (int d = 0; d < DIM; d++) {
                a = fmaf(lk[i * DIM + d], r[j * DIM + d], a);
                x = fmaf(lq[i * DIM + d], r[j * DIM + d], x);
            }
            A[i * CHUNK + j] = j < i ? m.ops.b[i] * a : 0.0f;
            QK[i * CHUNK + j] = j <= i ? tf32_round(x) : 0.0f;
        }
    return safe;
}

template <typename OPS>
int emulate(const chunk_in &in, int form, float *A, float *QK, float *lk, float *lq, float *r,
            float *c, float *e) {
    chunk_state<OPS> *m = new (std::nothrow) chunk_state<OPS>;
    if (!m) return -1;
    const int safe = run(*m, in, form, A, QK, lk, lq, r, c, e);
    delete m;
    return safe;
}

} // namespace

extern "C" int sp_kda_chunk_emulate_(const uint16_t *k, const uint16_t *q, const float *g, int nt,
                                     int gate, float lower_bound, float A_log,
                                     const float *dt_bias, const float *b, float scale, int form,
                                     int swizzled, float *A, float *QK, float *lk, float *lq,
                                     float *r, float *c, float *e) {
    const chunk_in in = {k, q, g, dt_bias, b, nt, gate, lower_bound, A_log, scale};
    return swizzled ? emulate<chunk_ops_sw>(in, form, A, QK, lk, lq, r, c, e)
                    : emulate<chunk_ops>(in, form, A, QK, lk, lq, r, c, e);
}

extern "C" void sp_kda_longest_first_order_(const int64_t *len, int64_t n, int64_t *order) {
    for (int64_t t = 0; t < n; t++) order[kda_length_rank(len, n, t)] = t;
}
