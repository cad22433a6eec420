/*
 * plan.h — how a KDA call runs: the kernel and its launch configuration as
 * one value, computed once from the call's checked dimensions and the
 * device table (plan.c, the only place that decides), then consumed by the
 * launchers, which only do. Tests and benchmarks run a plan of their own
 * through sp_kda_prefill_planned_; nothing they do changes how the library
 * plans another call.
 */
#ifndef SP_KDA_PLAN_H
#define SP_KDA_PLAN_H

#include "stridepack_kda.h"

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct sp_kda_dims;

typedef struct sp_kda_plan {
    int32_t kernel; /* sp_kda_kernel that runs (never AUTO) */
    /* CHUNKED (one pass): */
    int32_t splits; /* blocks per (sequence, head), each 128 / splits V columns: 1, 2, 4 or 8 */
    int32_t wgmma;  /* 1: the build whose V side's products are wgmma (sm_90a) */
    int32_t longest_first; /* 1: the blocks of the longest sequences first (at most
                              SP_KDA_LONGEST_FIRST_MAX_N sequences) */
    /* CHUNKED_TWO_PASS: */
    int32_t records;    /* records in flight per state-pass block: 2 or 4 */
    int64_t head_slots; /* record slots prepared before the state pass starts, in
                           [1, slots]; the rest are prepared beside it in one kernel,
                           where the device holds both (slots: two kernels) */
    size_t workspace_bytes; /* the two-pass kernel's need; 0 for the others */
    /* DECODE: V rows a warp: 16 or 32 (a block a (sequence, head) pair) */
    int32_t decode_rows_per_warp;
    /* DECODE: 1, a sequence's tokens outer, each prepared once a block,
     * the rows fp32 in shared memory between them; 0, groups of rows outer,
     * each through every token (the same bits either way) */
    int32_t decode_tokens_outer;
    /* DECODE, groups outer on a V-first pool: 0, a block a pair, its rows
     * copied in by the lanes; P > 0, the stream form: a block walks P pairs,
     * each warp's rows through a ring of bulk copies, the next pair's in
     * flight while one computes (the same bits either way) */
    int64_t decode_pairs_a_block;
    /* Both chunked kernels: 1 their every-gate build (chunk_k.cuh), which
     * every call takes whose forms are not K3's (sp_kda_k3_forms_); a plan
     * of a test's or a benchmark's may take it for K3's forms too, to
     * measure what the build itself costs. */
    int32_t every_gate;
} sp_kda_plan;

/* The most sequences a call may have for the one-pass kernel's
 * longest-first block order (each block ranks them, one thread a sequence). */
#define SP_KDA_LONGEST_FIRST_MAX_N 64

/* The V rows a warp of the decode kernel's stream form
 * (decode_pairs_a_block > 0). */
#define SP_KDA_DECODE_STREAM_ROWS 32

/* Calls with at most this many (sequence, head) pairs go to the two-pass
 * kernel when a large enough workspace is given; the boundary sizes its own
 * workspace by it (docs/TUNING.md, "TWO_PASS_MAX_PAIRS"). */
#define SP_KDA_TWO_PASS_MAX_PAIRS 32

/* The decode kernel's order for a call of T tokens and N sequences: tokens
 * outer where there are more tokens than sequences (plan.c). */
int sp_kda_decode_tokens_outer_(int64_t T, int64_t N);

/* The plan of a checked call: args->kernel when it can serve the call
 * (SP_ERR_UNSUPPORTED naming why when forced and it cannot;
 * SP_ERR_WORKSPACE_TOO_SMALL for a forced two-pass kernel without its
 * workspace), else the plan's own choice; then that kernel's configuration
 * for the call's device. Called by sp_kda_check_. */
sp_status sp_kda_plan_(const sp_kda_args *a, const struct sp_kda_dims *d, sp_kda_plan *plan);

/* 1 when the chunked kernels can serve the checked call (whatever its
 * kernel and workspace fields say). */
int sp_kda_chunked_can_serve_(const sp_kda_args *a, const struct sp_kda_dims *d);
/* Why the decode kernel's layout rules (its vector accesses, no
 * checkpoints) refuse the checked call, or NULL: the device aside, for its
 * emulation too. */
const char *sp_kda_decode_layout_unsupported_(const sp_kda_args *a, const struct sp_kda_dims *d);

/* The plan's rules as functions of their inputs alone (tests check them):
 * V-column splits of the one-pass kernel for `pairs` (sequence, head) pairs
 * on `sms` multiprocessors; whether a launch with `splits` takes the wgmma
 * build (where the device has it); records in flight of the two-pass
 * kernel; of its `slots` record slots, those prepared before its state pass
 * (`slots`: two kernels). */
int sp_kda_chunked_splits_(int64_t pairs, int sms);
/* Whether the one-pass kernel's `blocks` for T tokens in N sequences start
 * longest sequence first. */
int sp_kda_chunked_longest_first_(int64_t T, int64_t N, int64_t blocks, int sms);
int sp_kda_chunked_wgmma_(int splits);
/* The decode kernel's V rows a warp for a call with a bf16 pool or not, in
 * the order `tokens_outer`. */
int sp_kda_decode_rows_per_warp_(int state_bf16, int tokens_outer);
/* The decode kernel's stream form: the pairs a block walks so that the
 * call's `pairs` make one wave of blocks where a device holds `slots` of
 * them at once (multiprocessors x blocks a multiprocessor, the device
 * table's kda_decode_stream_per_sm); 0 for no slots. */
int64_t sp_kda_decode_pairs_a_block_(int64_t pairs, int64_t slots);
int sp_kda_two_pass_records_(int64_t pairs, int sms);
/* 1 when the call is in K3's forms (the lower-bound gate, beta bf16
 * logits): the chunked kernels' K3 build; else their every-gate build. */
int sp_kda_k3_forms_(const sp_kda_args *a);
int64_t sp_kda_two_pass_head_slots_(int64_t pairs, int sms, int records, int64_t slots);

/* The two-pass kernel's workspace for T tokens, N sequences, H heads;
 * SP_ERR_OVERFLOW when the count does not fit a size_t. */
sp_status sp_kda_two_pass_bytes_(int64_t T, int64_t N, int64_t H, size_t *bytes);

/* For tests and benchmarks. sp_kda_prefill_plan_: the plan sp_kda_prefill
 * would run for `args` (its kernel field forcing the kernel as there).
 * sp_kda_prefill_planned_: sp_kda_prefill, with `plan` in place of the
 * library's, after the same checks and a check that `plan` serves the call
 * (SP_ERR_INVALID_ARGUMENT naming the plan's field, SP_ERR_UNSUPPORTED when
 * its kernel cannot serve the call, SP_ERR_WORKSPACE_TOO_SMALL for a
 * two-pass plan without its workspace; args->kernel is ignored). */
sp_status sp_kda_prefill_plan_(const sp_kda_args *args, sp_kda_plan *plan);
/* A chunked kernel's plan switched to the every-gate build (K3's forms
 * too); other kernels' plans as they are. */
void sp_kda_plan_every_gate_(sp_kda_plan *plan);
sp_status sp_kda_prefill_planned_(const sp_kda_args *args, const sp_kda_plan *plan,
                                  struct CUstream_st *stream);

#ifdef __cplusplus
}
#endif

#endif /* SP_KDA_PLAN_H */
