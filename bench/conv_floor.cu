/*
 * conv_floor.cu — yardsticks for the prefill convolution at one-wave
 * shapes (bench_conv --floor). Not the library: each kernel keeps one part
 * of what sp_conv_prefill does, so that the time of the rest shows.
 *
 *   copy  the convolution's access pattern alone: a thread takes one
 *         16-byte vector of 8 channels of x and a tile of consecutive
 *         tokens, rows in flight through an 8-row cp.async ring in shared
 *         memory (as src/conv/conv.cu), and writes each row unchanged to
 *         q, k or v (the split outputs) — no arithmetic, no sequences.
 *   core  the same with the convolution's arithmetic on every token: the
 *         window of the 3 previous inputs in fp32 (loaded from x before the
 *         tile, as a tile's halo), 4 FMAs with bf16 weights, SiLU (exp2 and
 *         reciprocal of the special-function unit) or none, outputs rounded
 *         to bf16 two at a time. No sequences, no state pool, no bias: every
 *         tile is one stretch of one sequence. Timing only: nothing checks
 *         its outputs.
 * W = 4 and a dense [T, C] x, C = 3P, q/k/v dense [T, P], weights dense
 * [C, 4] bf16; tiles of `tile` tokens, the grid one thread per (vector,
 * tile) as in the library. core comes in two register budgets: 3 blocks of
 * 128 threads a multiprocessor (the library's) and 4.
 */
#include "conv_floor.h"

#include "bf16.h"
#include "cuda/ptx.cuh"

#include <cuda_bf16.h>

#define THREADS BENCH_FLOOR_THREADS
#define RING 8

typedef struct floor_params {
    const uint4 *x;
    uint4 *out[3];      /* q, k, v */
    const uint4 *w;     /* 4 vectors (32 bf16) per vector of 8 channels */
    long long T, P8, C8; /* tokens; vectors of a q/k/v row; of an x row */
    long long tile;
} floor_params;

/* Element i (0..7) of a 16-byte vector of bf16, as fp32. */
static __device__ __forceinline__ float elem(const uint4 &v, int i) {
    const uint32_t w = (i >> 1) == 0 ? v.x : (i >> 1) == 1 ? v.y : (i >> 1) == 2 ? v.z : v.w;
    return (i & 1) ? sp_bf16x2_hi_(w) : sp_bf16x2_lo_(w);
}

/* This thread's vector and tile, its output at row t0; false past the
 * grid's work. */
static __device__ __forceinline__ bool my_work(const floor_params &p, long long *vi, long long *t0,
                                               long long *t1, uint4 **o) {
    const long long g = (long long)blockIdx.x * THREADS + threadIdx.x;
    const long long item = g / p.C8;
    *vi = g - item * p.C8;
    *t0 = item * p.tile;
    if (*t0 >= p.T) return false;
    *t1 = *t0 + p.tile < p.T ? *t0 + p.tile : p.T;
    const long long seg = *vi / p.P8;
    *o = (seg == 0 ? p.out[0] : seg == 1 ? p.out[1] : p.out[2]) + *t0 * p.P8 + (*vi - seg * p.P8);
    return true;
}

/* A thread's rows of x in flight: slot u holds the next row used. */
typedef struct floor_ring {
    const uint4 *next; /* the next row to copy in */
    long long left;    /* rows still to copy in */
    int u;
} floor_ring;

/* Rows [t0, t1) of vector vi: the first RING copied in. */
static __device__ __forceinline__ floor_ring ring_start(uint4 (*ring)[THREADS],
                                                        const floor_params &p, long long vi,
                                                        long long t0, long long t1) {
    floor_ring r = {p.x + t0 * p.C8 + vi, t1 - t0, 0};
#pragma unroll
    for (int u = 0; u < RING; u++) {
        if (r.left > 0) sp_cp_async16_(&ring[u][threadIdx.x], r.next);
        sp_cp_async_commit_();
        r.next += p.C8;
        r.left--;
    }
    return r;
}

/* The next row's vector; its slot refilled with the row RING ahead. */
static __device__ __forceinline__ uint4 ring_take(uint4 (*ring)[THREADS], floor_ring &r,
                                                  long long C8) {
    sp_cp_async_wait_<RING - 1>();
    const uint4 v = ring[r.u][threadIdx.x];
    if (r.left > 0) sp_cp_async16_(&ring[r.u][threadIdx.x], r.next);
    sp_cp_async_commit_();
    r.next += C8;
    r.left--;
    r.u = r.u == RING - 1 ? 0 : r.u + 1;
    return v;
}

static __global__ void __launch_bounds__(THREADS, 3) floor_copy(const floor_params p) {
    __shared__ uint4 ring[RING][THREADS];
    long long vi, t0, t1;
    uint4 *o;
    if (!my_work(p, &vi, &t0, &t1, &o)) return;
    floor_ring r = ring_start(ring, p, vi, t0, t1);
#pragma unroll 4
    for (long long t = t0; t < t1; t++, o += p.P8) *o = ring_take(ring, r, p.C8);
    sp_cp_async_wait_<0>();
}

template <int SILU, int BLOCKS>
static __global__ void __launch_bounds__(THREADS, BLOCKS) floor_core(const floor_params p) {
    __shared__ uint4 ring[RING][THREADS];
    long long vi, t0, t1;
    uint4 *o;
    if (!my_work(p, &vi, &t0, &t1, &o)) return;
    float w[8][4], z[3][8];
#pragma unroll
    for (int r = 0; r < 4; r++) { /* channel (8r + q) / 4, tap (8r + q) % 4 */
        const uint4 v = __ldg(p.w + vi * 4 + r);
#pragma unroll
        for (int q = 0; q < 8; q++) w[(8 * r + q) / 4][(8 * r + q) % 4] = elem(v, q);
    }
#pragma unroll
    for (int j = 0; j < 3; j++) {
        const long long t = t0 - 3 + j;
        const uint4 v = t >= 0 ? __ldg(p.x + t * p.C8 + vi) : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int i = 0; i < 8; i++) z[j][i] = elem(v, i);
    }
    floor_ring r = ring_start(ring, p, vi, t0, t1);
#pragma unroll 4
    for (long long t = t0; t < t1; t++, o += p.P8) {
        const uint4 xv = ring_take(ring, r, p.C8);
        float y[8];
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const float xi = elem(xv, i);
            float acc = 0.0f;
            acc = fmaf(w[i][0], z[0][i], acc);
            acc = fmaf(w[i][1], z[1][i], acc);
            acc = fmaf(w[i][2], z[2][i], acc);
            acc = fmaf(w[i][3], xi, acc);
            if (SILU) acc *= sp_rcp_ftz_(1.0f + sp_ex2_ftz_(acc * -SP_LOG2E));
            y[i] = acc;
            z[0][i] = z[1][i];
            z[1][i] = z[2][i];
            z[2][i] = xi;
        }
        uint32_t ow[4];
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const __nv_bfloat162 h = __floats2bfloat162_rn(y[2 * k], y[2 * k + 1]);
            ow[k] = *(const uint32_t *)&h;
        }
        *o = make_uint4(ow[0], ow[1], ow[2], ow[3]);
    }
    sp_cp_async_wait_<0>();
}

extern "C" int bench_conv_floor_blocks(int which) {
    int per_sm = 0;
    const void *k = which == BENCH_FLOOR_COPY          ? (const void *)floor_copy
                    : which == BENCH_FLOOR_CORE_LINEAR ? (const void *)floor_core<0, 3>
                    : which == BENCH_FLOOR_CORE_SILU   ? (const void *)floor_core<1, 3>
                                                       : (const void *)floor_core<1, 4>;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, k, THREADS, 0) != cudaSuccess)
        return 0;
    return per_sm;
}

extern "C" cudaError_t bench_conv_floor(int which, const void *x, void *q, void *k, void *v,
                                        const void *w, long long T, long long P, long long tile,
                                        cudaStream_t stream) {
    floor_params p;
    p.x = (const uint4 *)x;
    p.out[0] = (uint4 *)q;
    p.out[1] = (uint4 *)k;
    p.out[2] = (uint4 *)v;
    p.w = (const uint4 *)w;
    p.T = T;
    p.P8 = P / 8;
    p.C8 = 3 * P / 8;
    p.tile = tile;
    const long long items = (T + tile - 1) / tile;
    const unsigned blocks = (unsigned)((items * p.C8 + THREADS - 1) / THREADS);
    if (which == BENCH_FLOOR_COPY)
        floor_copy<<<blocks, THREADS, 0, stream>>>(p);
    else if (which == BENCH_FLOOR_CORE_LINEAR)
        floor_core<0, 3><<<blocks, THREADS, 0, stream>>>(p);
    else if (which == BENCH_FLOOR_CORE_SILU)
        floor_core<1, 3><<<blocks, THREADS, 0, stream>>>(p);
    else
        floor_core<1, 4><<<blocks, THREADS, 0, stream>>>(p);
    return cudaGetLastError();
}
