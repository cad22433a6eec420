/*
 * kda_problem.h — random KDA prefill problems for the kda and boundary
 * tests: host buffers for every argument (outputs, unused state slots, slot
 * padding and spare checkpoint rows filled with random poison), sp_kda_args
 * over any copy of those buffers, and the comparisons the tests make
 * (norm ratio against a reference where values are written, byte equality
 * with the initial poison everywhere else).
 */
#ifndef TS_KDA_PROBLEM_H
#define TS_KDA_PROBLEM_H

#include "test_support.h"
#include "ts_mem.h"
#include "stridepack_kda.h"

#include <stddef.h>
#include <stdint.h>

/* One buffer per argument; outputs last. */
enum {
    KB_Q, KB_K, KB_V, KB_G, KB_BETA, KB_ALOG, KB_DTB, KB_CU, KB_IDX, KB_CKS,
    KB_O, KB_STATE, KB_CKPT, KB_COUNT
};

#define KP_MAX_SEQ 16

typedef struct kda_problem {
    int64_t T, H, N;
    int64_t lens[KP_MAX_SEQ];
    int64_t tail;         /* tokens after the last sequence: o rows never written */
    int64_t slots, pitch; /* pitch padded past H*128*128 */
    int64_t interval, C;  /* C includes one spare row after each sequence */
    sp_dtype state_dtype;
    int32_t gate;
    float lower_bound, scale;
    int32_t kernel; /* sp_kda_kernel for kp_args (0: AUTO) */
    int32_t beta_form; /* sp_kda_beta for kp_args (0: logits) */
    sp_dtype g_dtype;  /* bf16, or f32 for a log-decay g (kp_log_decay) */
    sp_dtype beta_dtype; /* bf16, or f32 (kp_beta_f32) */
    size_t bytes[KB_COUNT];
    void *host[KB_COUNT]; /* the initial contents */
} kda_problem;

/* A random problem: N sequences of lengths lens (N <= KP_MAX_SEQ), `tail`
 * extra tokens, H heads, slots chosen out of order among N + 3, the given
 * state dtype, gate and checkpoint interval (0: none). */
void kp_make(kda_problem *p, int N, const int64_t *lens, int64_t tail, int64_t H,
             sp_dtype state_dtype, int32_t gate, int64_t interval, uint64_t seed);
/* The same; with_inputs = 0 leaves q, k, v, g, beta allocated but unfilled
 * (for callers that fill them from strided layouts). */
void kp_make_ex(kda_problem *p, int N, const int64_t *lens, int64_t tail, int64_t H,
                sp_dtype state_dtype, int32_t gate, int64_t interval, uint64_t seed,
                int with_inputs);
void kp_free(kda_problem *p);

/* Value ranges of the random inputs. g_raw is skewed negative so that many
 * decays sit close to 1 and the state keeps a long memory (errors get the
 * chance to accumulate). */
#define KP_QKV_LO -1.0
#define KP_QKV_HI 1.0
#define KP_G_LO -4.0
#define KP_G_HI 1.5
#define KP_BETA_LO -3.0
#define KP_BETA_HI 3.0

/* n bf16 values uniform in [lo, hi) (from a per-call table of 4096). */
void kp_fill_bf16(void *x, size_t n, ts_rng *r, double lo, double hi);

/* Extreme gates and betas: each g_raw is drawn either far positive (the
 * lower-bound gate then sits at its bound, -5 with lower_bound -5) or far
 * negative (the gate is then about 0: no decay), each beta logit is -10 or
 * +10; lower_bound becomes -5. */
void kp_extreme_gates(kda_problem *p, uint64_t seed);

/* Host copies of the initial buffers (each malloc'ed; kp_free_copy). */
void kp_copy(const kda_problem *p, void *out[KB_COUNT]);
void kp_free_copy(void *bufs[KB_COUNT]);

/* A problem's buffers in a memory backend's memory (ts_mem.h), each 256
 * bytes longer than the problem's; those from `first` on get host[]
 * uploaded (q .. beta before it are left for the caller to fill). */
void kp_upload(const ts_mem *m, const kda_problem *p, void *const host[KB_COUNT], int first,
               void *buf[KB_COUNT]);
/* Make p's g the log-decay itself (SP_KDA_GATE_LOG_DECAY), of dtype gdt
 * (bf16 or f32): values in [-8, 0) with decays near 0, some down to -60 and
 * some -inf (whole channels forgotten within a token). */
void kp_log_decay(kda_problem *p, sp_dtype gdt, uint64_t seed);
/* Make p's g a bf16 log-decay (SP_KDA_GATE_LOG_DECAY) that switches the
 * chunked kernels' every-gate builds between their forms from chunk to
 * chunk of each sequence: every decay near 0, but in odd chunks one channel
 * forgotten (-inf) at the chunk's token 5 (a safe chunk), in even ones
 * -39 nats at token 3 on one channel (just inside the factored form's
 * bound of 40 nats over 8 tokens). */
void kp_mixed_decays(kda_problem *p, uint64_t seed);
/* Make p's beta of the form `form` (sp_kda_beta): for ACTIVATED, values in
 * [0, 2); logits stay as they are. */
void kp_beta_form(kda_problem *p, int32_t form, uint64_t seed);
/* Make p's beta f32, each value its bf16 value (call after kp_beta_form). */
void kp_beta_f32(kda_problem *p);

/* The outputs (o, state pool, checkpoints) back into host[], after the
 * work queued on the device. */
void kp_download(const ts_mem *m, const kda_problem *p, void *const buf[KB_COUNT],
                 void *host[KB_COUNT]);
void kp_release(const ts_mem *m, void *buf[KB_COUNT]);
/* 1 when the outputs in buf (m's memory) still hold the problem's initial
 * bytes. */
int kp_untouched(const ts_mem *m, const kda_problem *p, void *const buf[KB_COUNT]);

/* The prefill arguments over buffers ptr (host or device) on dev. */
void kp_args(const kda_problem *p, void *const ptr[KB_COUNT], sp_device dev, sp_kda_args *a);

/* ||x - ref|| / ||ref|| over the o rows inside sequences; *stray counts
 * bytes outside them that differ from the initial poison. */
double kp_err_o(const kda_problem *p, const void *o, const void *ref, int64_t *stray);
/* The same for the state pool (slots in use) and the checkpoints (rows
 * written); elsewhere the initial bytes must remain. */
double kp_err_state(const kda_problem *p, const void *s, const void *ref, int64_t *stray);
double kp_err_ckpt(const kda_problem *p, const void *c, const void *ref, int64_t *stray);

/* 1 when the output buffers (o, state pool, checkpoints) of x and y hold
 * the same bytes. */
int kp_outputs_equal(const kda_problem *p, void *const x[KB_COUNT], void *const y[KB_COUNT]);

/* Accuracy bounds against the float64 reference (relative L2), one
 * statement for every KDA test, by p->kernel: the CPU prefill and the
 * recurrent and decode kernels are fp32 throughout: o within 5e-4 (its bf16
 * rounding, about 1e-4 measured on the CPU), an f32 state within 1e-5; the
 * chunked kernels' 16-bit products: o 4e-3, an f32 state 3e-3; a bf16 pool
 * its own rounding, 5e-3. */
double kp_o_tol(const kda_problem *p);
double kp_state_tol(const kda_problem *p);


#endif /* TS_KDA_PROBLEM_H */
