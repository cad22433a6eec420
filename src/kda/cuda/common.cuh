/*
 * common.cuh — what the CUDA KDA kernels share: the launch parameters (one
 * struct, filled once by the entry in prefill.cu), the per-sequence bounds
 * guard, and the launchers' prototypes. Every kernel takes a kda_params by
 * value; its launcher takes the call's plan (plan.h).
 */
#ifndef SP_KDA_CUDA_COMMON_CUH
#define SP_KDA_CUDA_COMMON_CUH

#include "cuda/device.h"
#include "kda/kda_internal.h"

#include <cuda_runtime.h>

#define SP_KDA_FULL_MASK 0xffffffffu

/* An input view [1, T, H, 128] or [1, T, H], bf16: element [0, t, h, d] at
 * at + t * ts + h * hs + d (sp_kda_reads_in_place holds for q, k, v, g). */
typedef struct kda_input {
    const uint16_t *at;
    int64_t ts, hs;
} kda_input;

/* Token t, head h of x: its row of 128 channels, or its beta logit. */
static __host__ __device__ __forceinline__ const uint16_t *kda_row(const kda_input &x,
                                                                   int64_t t, int64_t h) {
    return x.at + sp_kda_at_(x.ts, x.hs, t, h);
}

/* Element c of token t, head h of an input that may be f32 (g with the
 * log-decay gate, beta: f32 = 1): its bits as stored (sp_kda_bits_at_), and
 * as float. */
static __host__ __device__ __forceinline__ uint32_t kda_in_bits(const kda_input &x, int f32,
                                                                int64_t t, int64_t h, int c) {
    return sp_kda_bits_at_(x.at, f32, sp_kda_at_(x.ts, x.hs, t, h) + c);
}
static __host__ __device__ __forceinline__ float kda_in(const kda_input &x, int f32, int64_t t,
                                                        int64_t h, int c) {
    return sp_kda_bits_f32_(kda_in_bits(x, f32, t, h, c), f32);
}

typedef struct kda_params {
    kda_input q, k, v, g, beta; /* bf16, but g and beta where g_f32, beta_f32 */
    const float *A_log, *dt_bias;
    sp_kda_index_ ix;   /* the index arrays and their bounds */
    void *state, *ckpt; /* pools: element [., h, j, d] holds S[d][j] (V-first), or the
                           state's [., h, d, j] (state_k_first) */
    uint16_t *o;
    int64_t T, H, N, pitch, interval;
    int state_bf16, gate, beta_form;
    int state_k_first; /* the pool's states K-first (sp_kda_state_at_); checkpoints V-first */
    int g_f32, beta_f32; /* f32 inputs (every kernel but the chunked K3 builds) */
    int any_gate;        /* the plan's every_gate: the chunked kernels' every-gate
                            builds (chunk_k.cuh) */
    int longest_first;   /* the plan's: the one-pass kernel's block order */
    float lower_bound, scale;
} kda_params;

/* One sequence's place in the batch, for head h. */
typedef struct kda_seq {
    int64_t bos, len;  /* first token, token count */
    int64_t read_base; /* element offset of [read slot, h, 0, 0]; -1: start from zeros */
    int64_t slot_base; /* of [final slot, h, 0, 0]; -1 with a verify table */
    int64_t crow;      /* first checkpoint row (interval > 0) */
} kda_seq;

/* Element offset of [slot, h, 0, 0] in the pool. */
static __host__ __device__ __forceinline__ int64_t kda_slot_base(const kda_params &p,
                                                                 int64_t slot, int64_t h) {
    return slot * p.pitch + h * SP_KDA_D * SP_KDA_D;
}

/* Sequence n by the one rule of every backend (sp_kda_sequence_): 0 skips
 * it, writing nothing (padded, or its entries reach outside their tensors:
 * the arrays were not checked on the host). Uniform over a block, so no
 * thread is left at a barrier. Host code too (a kernel's emulation). */
static __host__ __device__ __forceinline__ int kda_seq_of(const kda_params &p, int64_t n,
                                                          int64_t h, kda_seq *s) {
    sp_kda_seq_ q;
    if (!sp_kda_sequence_(&p.ix, n, &q)) return 0;
    s->bos = q.bos;
    s->len = q.len;
    s->read_base = q.read < 0 ? -1 : kda_slot_base(p, q.read, h);
    s->slot_base = q.write < 0 ? -1 : kda_slot_base(p, q.write, h);
    s->crow = q.crow;
    return 1;
}

/* Sequence t's rank among n lengths ordered longest first, ties by index:
 * a strict total order, so the ranks of 0 .. n - 1 are a permutation
 * whatever the lengths (negative ones from bad cu_seqlens too). */
static __host__ __device__ __forceinline__ int64_t kda_length_rank(const int64_t *len, int64_t n,
                                                                   int64_t t) {
    const int64_t mine = len[t];
    int64_t rank = 0;
    for (int64_t j = 0; j < n; j++) rank += len[j] > mine || (len[j] == mine && j < t);
    return rank;
}

/* The sequence of rank r when the call's sequences are ordered longest
 * first (ties by index: kda_length_rank), by every thread of a block of at least N threads
 * (N at most SP_KDA_LONGEST_FIRST_MAX_N): the lengths from cu_seqlens as
 * they are (a sequence kda_seq_of skips still takes its rank) into
 * len[N], shared scratch, then thread t ranks sequence t; *found (shared)
 * passes the one of rank r to every thread. Both are free again when it
 * returns. */
static __device__ __forceinline__ int64_t kda_seq_of_rank(const kda_params &p, int64_t r, int tid,
                                                          int64_t *len, int *found) {
    if (tid < p.N) len[tid] = sp_index_at_(p.ix.cu, tid + 1) - sp_index_at_(p.ix.cu, tid);
    __syncthreads();
    if (tid < p.N && kda_length_rank(len, p.N, tid) == r) *found = tid;
    __syncthreads();
    const int64_t n = *found;
    __syncthreads();
    return n;
}

/* Offset of checkpoint row `row`, head h, element [0, 0]. */
static __device__ __forceinline__ int64_t kda_ckpt_base(const kda_params &p, int64_t row,
                                                        int64_t h) {
    return (row * p.H + h) * SP_KDA_D * SP_KDA_D;
}

#ifdef __cplusplus
extern "C" {
#endif

/* The launch parameters of a checked call (prefill.cu). */
kda_params sp_kda_cuda_params_(const sp_kda_args *a, const sp_kda_dims *d);

/* Launchers: enqueue the plan's kernels on `stream` (the current device
 * must be the tensors'); return the launch's own error. */
cudaError_t sp_kda_launch_recurrent_(const kda_params *p, cudaStream_t stream);
cudaError_t sp_kda_launch_decode_(const kda_params *p, const sp_kda_plan *plan,
                                  cudaStream_t stream);
cudaError_t sp_kda_launch_chunked_(const kda_params *p, const sp_kda_plan *plan,
                                   cudaStream_t stream);
/* workspace: plan->workspace_bytes of it; dev: the device's row (whether
 * the one-kernel form fits beside the pass). */
cudaError_t sp_kda_launch_chunked_two_pass_(const kda_params *p, const sp_kda_plan *plan,
                                            void *workspace, const sp_cuda_device *dev,
                                            cudaStream_t stream);

/* The most shared memory a block of the chunked kernels asks for (of the
 * one-pass kernel alone, of all). */
size_t sp_kda_chunked_one_pass_smem_bytes_(void);
size_t sp_kda_chunked_smem_bytes_(void);

/* Each chunked kernel's facts for the device table (sp_kda_cuda_device_facts_). */
sp_status sp_kda_one_pass_device_facts_(sp_cuda_device *d);
/* The decode kernel's facts (its stream form's blocks a multiprocessor). */
void sp_kda_decode_device_facts_(sp_cuda_device *d);
sp_status sp_kda_two_pass_device_facts_(sp_cuda_device *d);

#ifdef __cplusplus
}
#endif

#endif /* SP_KDA_CUDA_COMMON_CUH */
