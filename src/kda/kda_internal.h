/*
 * kda_internal.h — what the KDA files share: the gate formula, the
 * validated dimensions of a call and its plan (plan.h), the contract check
 * that the prefill and the boundary both run, and the backend entry points.
 * Included by C and by CUDA sources.
 */
#ifndef SP_KDA_INTERNAL_H
#define SP_KDA_INTERNAL_H

#include "bf16.h"
#include "index.h"
#include "internal.h"
#include "kda/plan.h"
#include "stridepack_kda.h"

#include <math.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- the gate, in float (CPU and CUDA use this one formula) -------------- */

/* g for x = g_raw + dt_bias, with expA = exp(A_log[h]). softplus switches to
 * the identity above 20, as torch's softplus does (the difference is below
 * float resolution there). */
static inline SP_HD float sp_kda_gate_f32_(int gate, float lower_bound, float expA, float x) {
    if (gate == SP_KDA_GATE_LOWER_BOUND) return lower_bound / (1.0f + expf(-expA * x));
    float sp = x > 20.0f ? x : log1pf(expf(x));
    return -expA * sp;
}

/* The log-decay of a channel from its g input x and dt_bias b: by the gate
 * formula, or x itself (SP_KDA_GATE_LOG_DECAY, where b is not read). */
static inline SP_HD float sp_kda_log_decay_f32_(int gate, float lower_bound, float expA, float x,
                                               float b) {
    return gate == SP_KDA_GATE_LOG_DECAY ? x : sp_kda_gate_f32_(gate, lower_bound, expA, x + b);
}

/* Element `at` of an input that is bf16, or f32 where f32 (g with the
 * log-decay gate, beta): its bits as stored (bf16 in the low half), those
 * bits as float, and both at once. */
static inline SP_HD uint32_t sp_kda_bits_at_(const void *data, int f32, int64_t at) {
    return f32 ? ((const uint32_t *)data)[at] : ((const uint16_t *)data)[at];
}
static inline SP_HD float sp_kda_bits_f32_(uint32_t bits, int f32) {
    return f32 ? sp_bits_f32_(bits) : sp_bf16_to_f32_((uint16_t)bits);
}
static inline SP_HD float sp_kda_float_at_(const void *data, int f32, int64_t at) {
    return sp_kda_bits_f32_(sp_kda_bits_at_(data, f32, at), f32);
}

/* b_t from the beta input x, by sp_kda_beta (CPU and CUDA use this one rule). */
static inline SP_HD float sp_kda_beta_f32_(int form, float x) {
    if (form == SP_KDA_BETA_ACTIVATED) return x;
    const float s = 1.0f / (1.0f + expf(-x));
    return form == SP_KDA_BETA_LOGITS_X2 ? 2.0f * s : s;
}

/* ---- the validated call ------------------------------------------------- */

#define SP_KDA_D SP_KDA_HEAD_DIM
#define SP_KDA_EPS 1e-6
#define SP_KDA_CHUNK 32 /* tokens per chunk of the chunked kernels */
/* The two-pass kernel's record per (chunk, head): its operands, Lk, Lq and
 * R in bf16, the rest in fp32 (chunked_two_pass.cu checks the size against
 * its struct). */
#define SP_KDA_TWO_PASS_RECORD_BYTES 37504
/* State-pass blocks of the two-pass kernel a (sequence, head) pair: one per
 * 16 of its 128 V rows (chunked_two_pass.cu checks it against its traits). */
#define SP_KDA_TWO_PASS_BLOCKS_PER_PAIR 8

/* Record slots of the two-pass kernel for T tokens in N sequences. */
static inline SP_HD int64_t sp_kda_two_pass_slots_(int64_t T, int64_t N) {
    return T / SP_KDA_CHUNK + N;
}

typedef struct sp_kda_dims {
    int64_t T, H, N;      /* tokens, heads, sequences */
    int64_t width;        /* 0: state_indices [N]; W: a verify table [N, W] */
    int64_t slots, pitch; /* state pool slots and slot pitch in elements */
    int64_t C;            /* checkpoint rows; 0 without checkpoints */
    int64_t interval;     /* checkpoint interval; 0 = none */
    int state_bf16;       /* 1: bf16 pool and checkpoints; 0: f32 */
    int state_k_first;    /* 1: the pool's states K-first (sp_kda_state_at_) */
    float scale;          /* resolved (the default substituted for 0) */
    sp_device dev;
    sp_kda_plan plan;     /* how it runs (plan.c) */
} sp_kda_dims;

/* The shapes of the inputs in[] = q, k, v, g, beta: q [1, T, H, 128], k,
 * v, g as q, beta [1, T, H]; T and H from q. The one statement of that rule,
 * for the prefill's check and for the inputs boundary (sp_kda_inputs). */
sp_status sp_kda_check_inputs_(const sp_tensor *const in[5], int64_t *T, int64_t *H);

/* For our own prefill (the boundary, sp_kda_boundary_run): out[i] = in[i]
 * for beta and for each of q, k, v, g that the prefill reads in place
 * (sp_kda_reads_in_place), a dense copy in p's workspace for the others,
 * with one sp_pack (none when all are read in place). The inputs must have
 * passed sp_kda_check_ and fit p's capacity: nothing is checked again.
 * Writes *n_copied. */
sp_status sp_kda_inputs_pack_unreadable_(sp_kda_inputs *p, const sp_tensor in[5],
                                         sp_tensor out[5], size_t *n_copied,
                                         struct CUstream_st *stream);

/* The whole contract of sp_kda_prefill, in a fixed order, each violation
 * its own error naming the argument. inputs_direct = 1 requires q, k, v, g
 * to be views the prefill reads in place (sp_kda_reads_in_place); 0 lets
 * them be any strided views (the boundary packs those that are not).
 * Index arrays are read only for CPU tensors. Writes nothing but *dims. */
sp_status sp_kda_check_(const sp_kda_args *a, int inputs_direct, sp_kda_dims *dims);


/* ---- sequences: the index arrays, read by one rule on every backend ----- */

/* A call's index arrays (index.h: i32 or i64 each) and the bounds their
 * entries must keep. */
typedef struct sp_kda_index_ {
    sp_index_ cu;            /* cu_seqlens [N + 1] */
    sp_index_ slot;          /* state_indices [N], or the verify table [N, width] */
    sp_index_ accepted;      /* num_accepted_tokens [N]; absent: 1 each */
    sp_index_ cu_starts;     /* checkpoint_cu_starts [N + 1]; absent: no checkpoints */
    const uint8_t *has_init; /* has_initial_state [N]; NULL: every sequence reads */
    int64_t width;           /* 0: one slot a sequence; else the verify table's row */
    int64_t T, slots, C, interval;
} sp_kda_index_;

/* The index arrays of a checked call (check.c). */
sp_kda_index_ sp_kda_index_of_(const sp_kda_args *a, const sp_kda_dims *d);

/* One sequence as a backend runs it. */
typedef struct sp_kda_seq_ {
    int64_t bos, len; /* first token, token count */
    int64_t read;     /* the slot its initial state is read from; -1: zeros */
    int64_t write;    /* the slot its final state goes to; -1 with a verify table,
                         where token t's state goes to sp_kda_token_slot_ */
    int64_t crow;     /* first checkpoint row (interval > 0) */
} sp_kda_seq_;

/* Sequence n: 1 to run it as *s says; 0 to skip it, reading and writing
 * nothing. Skipped: a padded sequence (its slot entry, the first of its
 * table row, negative) and one whose entries reach outside their tensors —
 * which the check refuses for CPU tensors and which on CUDA, where the
 * arrays are not read on the host, is the documented device rule. */
static inline SP_HD int sp_kda_sequence_(const sp_kda_index_ *x, int64_t n, sp_kda_seq_ *s) {
    const int64_t bos = sp_index_at_(x->cu, n), eos = sp_index_at_(x->cu, n + 1);
    if (bos < 0 || eos < bos || eos > x->T) return 0;
    s->bos = bos;
    s->len = eos - bos;
    const int64_t row = n * (x->width > 0 ? x->width : 1);
    const int64_t first = sp_index_at_(x->slot, row);
    if (first < 0) return 0; /* padded */
    if (x->width == 0) {
        if (first >= x->slots) return 0;
        s->read = s->write = first;
    } else {
        const int64_t acc = x->accepted.at ? sp_index_at_(x->accepted, n) : 1;
        if (acc < 1 || acc > x->width || s->len > x->width) return 0;
        s->read = sp_index_at_(x->slot, row + acc - 1);
        if (s->read < 0 || s->read >= x->slots) return 0;
        for (int64_t t = 0; t < s->len; t++)
            if (sp_index_at_(x->slot, row + t) >= x->slots) return 0;
        s->write = -1;
    }
    if (x->has_init && !x->has_init[n]) s->read = -1;
    s->crow = 0;
    if (x->interval > 0) {
        s->crow = sp_index_at_(x->cu_starts, n);
        if (s->crow < 0 || s->crow > x->C || s->len / x->interval > x->C - s->crow) return 0;
    }
    return 1;
}

/* With a verify table: the slot the state after token t (0-based) of
 * sequence n goes to; negative: that state is not written. */
static inline SP_HD int64_t sp_kda_token_slot_(const sp_kda_index_ *x, int64_t n, int64_t t) {
    return sp_index_at_(x->slot, n * x->width + t);
}

/* Element offset of token t, head h in an input view (q, k, v, g, beta):
 * every backend addresses its inputs through this. */
static inline SP_HD int64_t sp_kda_at_(int64_t t_stride, int64_t h_stride, int64_t t,
                                       int64_t h) {
    return t * t_stride + h * h_stride;
}

/* Element offset of S[d][j] in one head's 128 x 128 state: V-first
 * (element [j][d], the pool's default) or K-first (element [d][j]: a
 * [slots, H, K, V] pool, seen by the call through its transpose). Every
 * backend addresses the pool's states through this; checkpoints are
 * V-first. */
static inline SP_HD int64_t sp_kda_state_at_(int k_first, int64_t d, int64_t j) {
    return k_first ? d * SP_KDA_D + j : j * SP_KDA_D + d;
}

/* Run a checked call on its backend by its plan d->plan (no check again):
 * what sp_kda_prefill and the boundary do after sp_kda_check_. */
sp_status sp_kda_run_(const sp_kda_args *a, const sp_kda_dims *d, struct CUstream_st *stream);

/* Backends, called after the check with T, N and H > 0. */
sp_status sp_kda_prefill_cpu_(const sp_kda_args *a, const sp_kda_dims *d);
sp_status sp_kda_prefill_ref_(const sp_kda_args *a, const sp_kda_dims *d);
/* CUDA builds: the decode kernel (decode.cu; decode_emulate.cu) with `rows_per_warp` (16 or
 * 32) and `tokens_outer` (0 or 1; -1: the plan's rule) as sp_kda_plan's
 * fields, run on the host, lane by lane, on CPU tensors: the call's check,
 * then the kernel's arithmetic and indexing, for tests on machines without
 * a GPU. */
sp_status sp_kda_decode_emulate_(const sp_kda_args *a, int rows_per_warp, int tokens_outer);
/* CUDA builds: the chunked kernels' every-gate K side for one chunk of nt
 * tokens (chunk_k.cuh's gates and their sums, the operands and products
 * of the factored or the safe form) run on the host, thread by thread as
 * the one-pass kernel's 256 K threads run it between their barriers
 * (chunk_emulate.cu), for tests without a GPU. In: k, q bf16 [32][128]
 * (rows from nt on zero), g the g inputs [32][128] as floats (rows from nt
 * on not read) of gate form `gate` (sp_kda_gate; lower_bound, A_log of
 * the head, dt_bias [128]), b [32], scale (q's norm factor); form 0
 * factored, 1 safe, -1 as the kernels choose; swizzled 1: the wgmma
 * build's operand layout. Out: A [32][32] (row i, column j), QK [32][32],
 * Lk, Lq, R [32][128] as floats, c, e [128]. Returns the form taken (0 or
 * 1), or -1 with no memory. */
int sp_kda_chunk_emulate_(const uint16_t *k, const uint16_t *q, const float *g, int nt, int gate,
                          float lower_bound, float A_log, const float *dt_bias, const float *b,
                          float scale, int form, int swizzled, float *A, float *QK, float *lk,
                          float *lq, float *r, float *c, float *e);
/* CUDA builds: the one-pass kernel's longest-first block order on the host
 * (kda_length_rank, chunk_emulate.cu): order[r] = the sequence of rank r
 * among len[0 .. n - 1]. */
void sp_kda_longest_first_order_(const int64_t *len, int64_t n, int64_t *order);
/* CUDA builds: prefill.cu; otherwise src/cuda/none.c returns SP_ERR_NO_DEVICE. */
sp_status sp_kda_prefill_cuda_(const sp_kda_args *a, const sp_kda_dims *d,
                               struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif /* SP_KDA_INTERNAL_H */
