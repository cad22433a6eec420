/*
 * prefill.cu — the CUDA KDA prefill: one block per (sequence, head), the
 * 128x128 fp32 state in registers for the whole sequence.
 *
 * Thread layout (512 threads): thread (grp, j), j = tid % 128 the V column,
 * grp = tid / 128 one of 4 groups of 32 K rows; it holds S[32*grp .. +32][j].
 * A warp thus shares grp, so its reads of k^[d], q^[d], exp(g)[d] from
 * shared memory are broadcasts, and its partial sums land on 32 consecutive
 * banks.
 *
 * Tokens go in chunks of 16 (one per warp): each warp loads and normalizes
 * one token of the chunk into shared memory (sums of squares by a xor
 * butterfly, which leaves every lane the same bits), while the global loads
 * of the next chunk are already in flight during the 16 sequential steps.
 *
 * Per step: one pass decays S and reduces it against k^ and q^ (32 rows per
 * thread, two interleaved accumulators each); the 4 group partials go
 * through shared memory (double-buffered, so one __syncthreads per step)
 * and are summed in group order by every thread; then u, the rank-1 update,
 * and o = S'^T q^ + b (k^.q^) u from group 0. Every sum has a fixed order,
 * so reruns are bit-identical.
 */
#include "kda/kda_internal.h"

#include <cuda_runtime.h>

#define NG 4                 /* K-row groups */
#define RG (SP_KDA_D / NG)   /* K rows per thread: 32 */
#define THREADS (SP_KDA_D * NG)
#define CHUNK (THREADS / 32) /* tokens per chunk: one per warp */
#define PER_LANE (SP_KDA_D / 32)

typedef struct kda_params {
    const uint16_t *q, *k, *v, *g, *beta;
    const float *A_log, *dt_bias;
    const int64_t *cu_seqlens, *cu_starts;
    const int32_t *state_indices;
    void *state, *ckpt;
    uint16_t *o;
    int64_t T, H, slots, pitch, C, interval;
    int state_bf16, gate;
    float lower_bound, scale;
} kda_params;

/* One token's raw inputs, lane's share: d = lane + 32*e. */
typedef struct raw_token {
    uint16_t q[PER_LANE], k[PER_LANE], v[PER_LANE], g[PER_LANE];
    uint16_t beta;
} raw_token;

typedef struct chunk_smem {
    float k[CHUNK][SP_KDA_D], q[CHUNK][SP_KDA_D], dec[CHUNK][SP_KDA_D], v[CHUNK][SP_KDA_D];
    float b[CHUNK], kq[CHUNK];
} chunk_smem;

static __device__ float warp_sum(float x) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(0xffffffffu, x, off);
    return x;
}

static __device__ void load_token(const kda_params &p, int64_t t, int64_t h, int lane,
                                  raw_token &r) {
    const int64_t at = (t * p.H + h) * SP_KDA_D + lane;
#pragma unroll
    for (int e = 0; e < PER_LANE; e++) {
        r.q[e] = p.q[at + 32 * e];
        r.k[e] = p.k[at + 32 * e];
        r.v[e] = p.v[at + 32 * e];
        r.g[e] = p.g[at + 32 * e];
    }
    r.beta = p.beta[t * p.H + h];
}

/* Normalize q and k, gate, beta: the token-only work, one warp per token. */
static __device__ void prep_token(const kda_params &p, const raw_token &r, int w, int lane,
                                  float expA, const float *bias, chunk_smem &s) {
    float qf[PER_LANE], kf[PER_LANE], sq = 0.0f, sk = 0.0f;
#pragma unroll
    for (int e = 0; e < PER_LANE; e++) {
        qf[e] = sp_bf16_to_f32(r.q[e]);
        kf[e] = sp_bf16_to_f32(r.k[e]);
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
        s.v[w][d] = sp_bf16_to_f32(r.v[e]);
        const float x = sp_bf16_to_f32(r.g[e]) + bias[e];
        s.dec[w][d] = expf(sp_kda_gate_f32(p.gate, p.lower_bound, expA, x));
    }
    kq = warp_sum(kq);
    if (lane == 0) {
        s.kq[w] = kq;
        s.b[w] = 1.0f / (1.0f + expf(-sp_bf16_to_f32(r.beta)));
    }
}

/* Write this thread's 32 entries S[r0 + i][j] to pool element
 * [., h, j, r0 + i] at `base`: 32 consecutive elements. */
static __device__ void store_rows(void *pool, int bf16, int64_t base, const float *S) {
    if (bf16) {
        uint16_t *dst = (uint16_t *)pool + base;
#pragma unroll
        for (int i = 0; i < RG; i++) dst[i] = sp_f32_to_bf16(S[i]);
    } else {
        float *dst = (float *)pool + base;
#pragma unroll
        for (int i = 0; i < RG; i++) dst[i] = S[i];
    }
}

static __global__ void __launch_bounds__(THREADS, 1) kda_prefill_kernel(kda_params p) {
    __shared__ __align__(16) chunk_smem s;
    __shared__ float part[2][2][NG][SP_KDA_D]; /* [parity][k^ or q^][group][j] */

    const int64_t h = blockIdx.x % p.H, n = blockIdx.x / p.H;
    const int tid = threadIdx.x, j = tid % SP_KDA_D, grp = tid / SP_KDA_D;
    const int lane = tid % 32, w = tid / 32, r0 = grp * RG;

    /* Indices were not checked on the host (they live here): skip, writing
     * nothing, a sequence that would reach outside its tensors. The test is
     * uniform over the block, so no thread is left at a barrier. */
    const int64_t bos = p.cu_seqlens[n], eos = p.cu_seqlens[n + 1];
    const int64_t slot = p.state_indices[n];
    if (bos < 0 || eos < bos || eos > p.T || slot < 0 || slot >= p.slots) return;
    const int64_t L = eos - bos;
    int64_t crow = 0;
    if (p.interval > 0) {
        crow = p.cu_starts[n];
        if (crow < 0 || crow > p.C || L / p.interval > p.C - crow) return;
    }

    const float expA = expf(p.A_log[h]);
    float bias[PER_LANE];
#pragma unroll
    for (int e = 0; e < PER_LANE; e++) bias[e] = p.dt_bias[h * SP_KDA_D + lane + 32 * e];

    const int64_t my_rows = (h * SP_KDA_D + j) * SP_KDA_D + r0; /* [., h, j, r0] */
    const int64_t slot_base = slot * p.pitch + my_rows;
    float S[RG];
#pragma unroll
    for (int i = 0; i < RG; i++)
        S[i] = p.state_bf16 ? sp_bf16_to_f32(((const uint16_t *)p.state)[slot_base + i])
                            : ((const float *)p.state)[slot_base + i];

    raw_token r;
    if (w < L) load_token(p, bos + w, h, lane, r);
    int64_t since = 0;
    for (int64_t c0 = 0; c0 < L; c0 += CHUNK) {
        const int nt = (int)(L - c0 < CHUNK ? L - c0 : CHUNK);
        __syncthreads(); /* the previous chunk's steps are done with s */
        if (w < nt) prep_token(p, r, w, lane, expA, bias, s);
        __syncthreads();
        if (c0 + CHUNK + w < L) load_token(p, bos + c0 + CHUNK + w, h, lane, r);

        for (int i = 0; i < nt; i++) {
            const float4 *k4 = (const float4 *)&s.k[i][r0];
            const float4 *q4 = (const float4 *)&s.q[i][r0];
            const float4 *d4 = (const float4 *)&s.dec[i][r0];
            float ka = 0.0f, kb = 0.0f, qa = 0.0f, qb = 0.0f;
#pragma unroll
            for (int x = 0; x < RG / 4; x++) {
                const float4 kk = k4[x], qq = q4[x], dd = d4[x];
                S[4 * x + 0] *= dd.x;
                S[4 * x + 1] *= dd.y;
                S[4 * x + 2] *= dd.z;
                S[4 * x + 3] *= dd.w;
                ka = fmaf(S[4 * x + 0], kk.x, ka);
                kb = fmaf(S[4 * x + 1], kk.y, kb);
                qa = fmaf(S[4 * x + 0], qq.x, qa);
                qb = fmaf(S[4 * x + 1], qq.y, qb);
                ka = fmaf(S[4 * x + 2], kk.z, ka);
                kb = fmaf(S[4 * x + 3], kk.w, kb);
                qa = fmaf(S[4 * x + 2], qq.z, qa);
                qb = fmaf(S[4 * x + 3], qq.w, qb);
            }
            const int par = i & 1;
            part[par][0][grp][j] = ka + kb;
            part[par][1][grp][j] = qa + qb;
            __syncthreads();
            float kS = part[par][0][0][j];
#pragma unroll
            for (int g2 = 1; g2 < NG; g2++) kS += part[par][0][g2][j];
            const float bu = s.b[i] * (s.v[i][j] - kS);
#pragma unroll
            for (int x = 0; x < RG / 4; x++) {
                const float4 kk = k4[x];
                S[4 * x + 0] = fmaf(kk.x, bu, S[4 * x + 0]);
                S[4 * x + 1] = fmaf(kk.y, bu, S[4 * x + 1]);
                S[4 * x + 2] = fmaf(kk.z, bu, S[4 * x + 2]);
                S[4 * x + 3] = fmaf(kk.w, bu, S[4 * x + 3]);
            }
            if (grp == 0) {
                float qS = part[par][1][0][j];
#pragma unroll
                for (int g2 = 1; g2 < NG; g2++) qS += part[par][1][g2][j];
                p.o[((bos + c0 + i) * p.H + h) * SP_KDA_D + j] =
                    sp_f32_to_bf16(fmaf(bu, s.kq[i], qS));
            }
            if (p.interval > 0 && ++since == p.interval) {
                store_rows(p.ckpt, p.state_bf16, crow * p.H * SP_KDA_D * SP_KDA_D + my_rows, S);
                crow++;
                since = 0;
            }
        }
    }
    store_rows(p.state, p.state_bf16, slot_base, S);
}

extern "C" sp_status sp_kda_prefill_cuda_(const sp_kda_args *a, const sp_kda_dims *d,
                                          struct CUstream_st *stream) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || d->dev.ordinal < 0 ||
        d->dev.ordinal >= count) {
        cudaGetLastError();
        return sp_set_error(SP_ERR_NO_DEVICE, "q: CUDA device %d is not available",
                            (int)d->dev.ordinal);
    }
    SP_REQUIRE(d->N <= INT32_MAX / d->H, SP_ERR_UNSUPPORTED,
               "cu_seqlens: N * H = %lld * %lld blocks exceed one launch", (long long)d->N,
               (long long)d->H);
    kda_params p;
    p.q = (const uint16_t *)a->q.data;
    p.k = (const uint16_t *)a->k.data;
    p.v = (const uint16_t *)a->v.data;
    p.g = (const uint16_t *)a->g.data;
    p.beta = (const uint16_t *)a->beta.data;
    p.A_log = (const float *)a->A_log.data;
    p.dt_bias = (const float *)a->dt_bias.data;
    p.cu_seqlens = (const int64_t *)a->cu_seqlens.data;
    p.cu_starts = d->interval > 0 ? (const int64_t *)a->checkpoint_cu_starts.data : NULL;
    p.state_indices = (const int32_t *)a->state_indices.data;
    p.state = a->state.data;
    p.ckpt = d->interval > 0 ? a->checkpoints.data : NULL;
    p.o = (uint16_t *)a->o.data;
    p.T = d->T;
    p.H = d->H;
    p.slots = d->slots;
    p.pitch = d->pitch;
    p.C = d->C;
    p.interval = d->interval;
    p.state_bf16 = d->state_bf16;
    p.gate = a->gate;
    p.lower_bound = a->lower_bound;
    p.scale = d->scale;

    int prev = 0;
    cudaError_t e = cudaGetDevice(&prev);
    if (e == cudaSuccess && prev != d->dev.ordinal) e = cudaSetDevice(d->dev.ordinal);
    if (e == cudaSuccess) {
        kda_prefill_kernel<<<(unsigned)(d->N * d->H), THREADS, 0, (cudaStream_t)stream>>>(p);
        e = cudaGetLastError();
        if (prev != d->dev.ordinal) cudaSetDevice(prev);
    }
    SP_REQUIRE(e == cudaSuccess, SP_ERR_CUDA, "sp_kda_prefill: kernel launch failed: %s",
               cudaGetErrorString(e));
    return SP_OK;
}
