/*
 * test_kda_cpu.c — the KDA prefill on the CPU: the float64 reference against
 * an independent one-token computation written here, the fp32 CPU prefill
 * against the reference on varlen batches (every state dtype, gate and
 * checkpoint interval), the no-op cases, and every bad argument with its
 * error and nothing written.
 */
#include "check.h"
#include "kda_problem.h"

#include <math.h>
#include <string.h>

enum { D = SP_KDA_HEAD_DIM };

static double bf(const void *p, int64_t i) {
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* One token of one sequence, S0 from the pool, computed straight from the
 * formulas of the header (not from the library's code): checks layout
 * (V-first pool, [t,h,d] inputs), normalization, both gates, beta, scale. */
static void one_token_case(int32_t gate, float scale) {
    const int64_t len = 1;
    kda_problem p;
    kp_make(&p, 1, &len, 0, 2, SP_F32, gate, 0, 77 + (uint64_t)gate);
    p.scale = scale;
    void *b[KB_COUNT];
    kp_copy(&p, b);
    sp_kda_args a;
    kp_args(&p, b, sp_cpu(), &a);
    CHECK_OK(sp_kda_prefill_reference(&a));

    const int32_t slot = ((int32_t *)p.host[KB_IDX])[0];
    double o_num = 0, o_den = 0, s_num = 0, s_den = 0;
    for (int64_t h = 0; h < p.H; h++) {
        static double S[D][D];
        double q[D], k[D], u[D], sq = 0, sk = 0;
        const float *S0 = (const float *)p.host[KB_STATE] + slot * p.pitch + h * D * D;
        const double A = ((float *)p.host[KB_ALOG])[h];
        for (int d = 0; d < D; d++) {
            q[d] = bf(p.host[KB_Q], h * D + d);
            k[d] = bf(p.host[KB_K], h * D + d);
            sq += q[d] * q[d];
            sk += k[d] * k[d];
        }
        const double sc = scale != 0.0f ? scale : 1.0 / sqrt(128.0);
        for (int d = 0; d < D; d++) {
            q[d] *= sc / sqrt(sq + 1e-6);
            k[d] /= sqrt(sk + 1e-6);
            double x = bf(p.host[KB_G], h * D + d) + ((float *)p.host[KB_DTB])[h * D + d];
            double g = gate == SP_KDA_GATE_LOWER_BOUND
                           ? p.lower_bound * (1.0 / (1.0 + exp(-exp(A) * x)))
                           : -exp(A) * log(1.0 + exp(x));
            for (int j = 0; j < D; j++) S[d][j] = exp(g) * S0[j * D + d];
        }
        const double beta = 1.0 / (1.0 + exp(-bf(p.host[KB_BETA], h)));
        for (int j = 0; j < D; j++) {
            double acc = 0;
            for (int d = 0; d < D; d++) acc += S[d][j] * k[d];
            u[j] = bf(p.host[KB_V], h * D + j) - acc;
        }
        const float *S1 = (const float *)b[KB_STATE] + slot * p.pitch + h * D * D;
        for (int j = 0; j < D; j++) {
            double acc = 0;
            for (int d = 0; d < D; d++) {
                S[d][j] += beta * k[d] * u[j];
                acc += S[d][j] * q[d];
                s_num += (S1[j * D + d] - S[d][j]) * (S1[j * D + d] - S[d][j]);
                s_den += S[d][j] * S[d][j];
            }
            double got = bf(b[KB_O], h * D + j);
            o_num += (got - acc) * (got - acc);
            o_den += acc * acc;
        }
    }
    CHECKF(sqrt(o_num / o_den) < 4e-3, "gate %d scale %g: o err %.3g", gate, scale,
           sqrt(o_num / o_den));
    CHECKF(sqrt(s_num / s_den) < 1e-6, "gate %d scale %g: state err %.3g", gate, scale,
           sqrt(s_num / s_den));
    kp_free_copy(b);
    kp_free(&p);
}

/* fp32 CPU prefill vs the reference on one varlen batch. */
static void batch_case(sp_dtype sdt, int32_t gate, int64_t interval, const int64_t *lens, int N,
                       int64_t H) {
    kda_problem p;
    kp_make(&p, N, lens, 3, H, sdt, gate, interval,
            1000 + (uint64_t)sdt * 100 + (uint64_t)gate * 10 + (uint64_t)interval);
    void *ref[KB_COUNT], *got[KB_COUNT];
    kp_copy(&p, ref);
    kp_copy(&p, got);
    sp_kda_args a;
    kp_args(&p, ref, sp_cpu(), &a);
    CHECK_OK(sp_kda_prefill_reference(&a));
    kp_args(&p, got, sp_cpu(), &a);
    CHECK_OK(sp_kda_prefill(&a, NULL));

    int64_t stray, s1, s2;
    const double eo = kp_err_o(&p, got[KB_O], ref[KB_O], &s1);
    const double es = kp_err_state(&p, got[KB_STATE], ref[KB_STATE], &s2);
    const double ec = kp_err_ckpt(&p, got[KB_CKPT], ref[KB_CKPT], &stray);
    printf("cpu %-4s gate %d interval %2lld: o %.2e state %.2e ckpt %.2e\n", sp_dtype_name(sdt),
           gate, (long long)interval, eo, es, ec);
    double e = kp_err_o(&p, got[KB_O], ref[KB_O], &stray);
    CHECKF(e < 5e-3 && stray == 0, "%s gate %d interval %lld: o err %.3g, %lld stray",
           sp_dtype_name(sdt), gate, (long long)interval, e, (long long)stray);
    e = kp_err_state(&p, got[KB_STATE], ref[KB_STATE], &stray);
    CHECKF(e < kp_state_tol(&p) && stray == 0, "%s gate %d interval %lld: state err %.3g, %lld stray",
           sp_dtype_name(sdt), gate, (long long)interval, e, (long long)stray);
    e = kp_err_ckpt(&p, got[KB_CKPT], ref[KB_CKPT], &stray);
    CHECKF(e < kp_state_tol(&p) && stray == 0, "%s gate %d interval %lld: ckpt err %.3g, %lld stray",
           sp_dtype_name(sdt), gate, (long long)interval, e, (long long)stray);
    /* The reference itself wrote where it should: its state moved. */
    CHECK(memcmp(ref[KB_STATE], p.host[KB_STATE], p.bytes[KB_STATE]) != 0);

    /* A rerun is bit-identical (the CPU path is deterministic too). */
    void *again[KB_COUNT];
    kp_copy(&p, again);
    kp_args(&p, again, sp_cpu(), &a);
    CHECK_OK(sp_kda_prefill(&a, NULL));
    for (int k = KB_O; k < KB_COUNT; k++) CHECK(memcmp(again[k], got[k], p.bytes[k]) == 0);
    kp_free_copy(again);
    kp_free_copy(ref);
    kp_free_copy(got);
    kp_free(&p);
}

/* Buffers o, state, checkpoints equal the initial bytes. */
static int untouched(const kda_problem *p, void *const b[KB_COUNT]) {
    return memcmp(b[KB_O], p->host[KB_O], p->bytes[KB_O]) == 0 &&
           memcmp(b[KB_STATE], p->host[KB_STATE], p->bytes[KB_STATE]) == 0 &&
           memcmp(b[KB_CKPT], p->host[KB_CKPT], p->bytes[KB_CKPT]) == 0;
}

static void noop_cases(void) {
    /* T = 0: one empty sequence; N = 0 with tokens present. */
    const int64_t zero = 0;
    kda_problem p;
    kp_make(&p, 1, &zero, 0, 2, SP_BF16, SP_KDA_GATE_LOWER_BOUND, 8, 5);
    void *b[KB_COUNT];
    kp_copy(&p, b);
    sp_kda_args a;
    kp_args(&p, b, sp_cpu(), &a);
    CHECK(p.T == 0);
    CHECK_OK(sp_kda_prefill(&a, NULL));
    CHECK_OK(sp_kda_prefill_reference(&a));
    CHECK(untouched(&p, b));
    kp_free_copy(b);
    kp_free(&p);

    kp_make(&p, 0, NULL, 40, 2, SP_F32, SP_KDA_GATE_SOFTPLUS, 0, 6);
    kp_copy(&p, b);
    kp_args(&p, b, sp_cpu(), &a);
    CHECK(p.N == 0 && p.T == 40);
    CHECK_OK(sp_kda_prefill(&a, NULL));
    CHECK(untouched(&p, b));
    kp_free_copy(b);
    kp_free(&p);

    /* H = 0: tokens and sequences, but no head to run. */
    const int64_t five = 5;
    kp_make(&p, 1, &five, 0, 0, SP_F32, SP_KDA_GATE_LOWER_BOUND, 0, 7);
    kp_copy(&p, b);
    kp_args(&p, b, sp_cpu(), &a);
    CHECK_OK(sp_kda_prefill(&a, NULL));
    CHECK_OK(sp_kda_prefill_reference(&a));
    CHECK(untouched(&p, b));
    kp_free_copy(b);
    kp_free(&p);
}

/* A sequence of length 0 leaves its slot's bits as they are, in the prefill
 * and in the reference: a bf16 slot full of signalling NaNs (0x7f81, which a
 * read to fp32 and a rounding back would quiet to 0x7fc1) and other bit
 * patterns comes back byte for byte, while the sequences around it run. */
static void empty_sequence_case(sp_dtype sdt) {
    static const int64_t lens[] = {5, 0, 9};
    kda_problem p;
    kp_make(&p, 3, lens, 2, 2, sdt, SP_KDA_GATE_LOWER_BOUND, 4, 31 + (uint64_t)sdt);
    const int64_t slot = ((const int32_t *)p.host[KB_IDX])[1];
    const size_t es = sp_dtype_size(sdt), at = (size_t)(slot * p.pitch) * es;
    const size_t bytes = (size_t)(p.H * D * D) * es;
    unsigned char *s0 = (unsigned char *)p.host[KB_STATE] + at;
    static const uint16_t pat[] = {0x7f81, 0xff81, 0x7fbf, 0x0001, 0x8000, 0x7f80};
    for (size_t i = 0; i < bytes / 2; i++) memcpy(s0 + 2 * i, &pat[i % 6], 2);
    for (int run = 0; run < 2; run++) {
        void *b[KB_COUNT];
        kp_copy(&p, b);
        sp_kda_args a;
        kp_args(&p, b, sp_cpu(), &a);
        CHECK_OK(run ? sp_kda_prefill_reference(&a) : sp_kda_prefill(&a, NULL));
        const unsigned char *s1 = (const unsigned char *)b[KB_STATE] + at;
        size_t diff = 0;
        while (diff < bytes && s1[diff] == s0[diff]) diff++;
        CHECKF(diff == bytes, "%s, %s state: empty sequence's slot byte %zu changed (%02x -> %02x)",
               run ? "reference" : "prefill", sp_dtype_name(sdt), diff, s0[diff % bytes],
               s1[diff % bytes]);
        /* The other sequences did run: their slots moved. */
        const int64_t other = ((const int32_t *)p.host[KB_IDX])[2];
        CHECK(memcmp((const char *)b[KB_STATE] + (size_t)(other * p.pitch) * es,
                     (const char *)p.host[KB_STATE] + (size_t)(other * p.pitch) * es, bytes) != 0);
        kp_free_copy(b);
    }
    kp_free(&p);
}

/* Each mutation breaks one rule; the call must return its status and leave
 * o, the pool and the checkpoints as they were. */
typedef void (*mutate_fn)(sp_kda_args *a, void *const b[KB_COUNT], kda_problem *p);

#define MUT(name, ...)                                                            \
    static void name(sp_kda_args *a, void *const b[KB_COUNT], kda_problem *p) { \
        (void)a, (void)b, (void)p;                                                \
        __VA_ARGS__;                                                              \
    }

MUT(m_q_dtype, a->q.dtype = SP_F16)
MUT(m_k_T, a->k.shape[1] -= 1)
MUT(m_v_rank, a->v.ndim = 3)
MUT(m_headdim, {
    sp_tensor *t[5] = {&a->q, &a->k, &a->v, &a->g, &a->o};
    for (int i = 0; i < 5; i++) {
        t[i]->shape[3] = 64;
        t[i]->strides[2] = 64;
        t[i]->strides[1] = 64 * p->H;
        t[i]->strides[0] = 64 * p->H * p->T;
    }
})
MUT(m_batch2, a->q.shape[0] = 2)
/* Every other token of a buffer, rows 8 bytes off 16-byte alignment: not
 * read in place (a token stride of 2 rows would be). */
MUT(m_g_strided, {
    a->g.shape[1] = p->T / 2;
    a->g.strides[1] = 2 * a->g.strides[1] + 4;
    a->q.shape[1] = a->k.shape[1] = a->v.shape[1] = a->o.shape[1] = p->T / 2;
    a->beta.shape[1] = p->T / 2;
})
MUT(m_k_inner, a->k.strides[3] = 2)
MUT(m_beta_H, a->beta.shape[2] += 1)
MUT(m_beta_misaligned, a->beta.data = (char *)a->beta.data + 1)
MUT(m_beta_dtype, a->beta.dtype = SP_F32)
MUT(m_alog_dtype, a->A_log.dtype = SP_BF16)
MUT(m_alog_H, a->A_log.shape[0] += 1)
MUT(m_dtb_shape, a->dt_bias.shape[0] = 64 * p->H)
MUT(m_lb_zero, a->lower_bound = 0.0f)
MUT(m_lb_low, a->lower_bound = -5.5f)
MUT(m_lb_nan, a->lower_bound = NAN)
MUT(m_gate_enum, a->gate = 7)
MUT(m_scale_nan, a->scale = NAN)
MUT(m_scale_inf, a->scale = INFINITY)
MUT(m_cu_dtype, a->cu_seqlens.dtype = SP_I32)
MUT(m_cu_decreasing, ((int64_t *)b[KB_CU])[2] = ((int64_t *)b[KB_CU])[1] - 1)
MUT(m_cu_past_T, ((int64_t *)b[KB_CU])[p->N] = p->T + 1)
MUT(m_cu_negative, ((int64_t *)b[KB_CU])[0] = -1)
MUT(m_idx_range, ((int32_t *)b[KB_IDX])[1] = (int32_t)p->slots)
MUT(m_idx_negative, ((int32_t *)b[KB_IDX])[0] = -1)
MUT(m_idx_dup, ((int32_t *)b[KB_IDX])[2] = ((int32_t *)b[KB_IDX])[0])
MUT(m_idx_N, a->state_indices.shape[0] -= 1)
MUT(m_idx_dtype, a->state_indices.dtype = SP_I64)
MUT(m_state_pitch, a->state.strides[0] = p->H * D * D - 1)
MUT(m_state_inner, a->state.strides[2] = D + 1)
MUT(m_state_dtype, a->state.dtype = SP_F16)
MUT(m_state_H, a->state.shape[1] += 1)
MUT(m_state_misaligned, a->state.data = (char *)a->state.data + 2)
MUT(m_interval_neg, a->checkpoint_interval = -1)
MUT(m_interval_zero, a->checkpoint_interval = 0)
MUT(m_ckpt_missing, memset(&a->checkpoints, 0, sizeof a->checkpoints))
MUT(m_cks_missing, memset(&a->checkpoint_cu_starts, 0, sizeof a->checkpoint_cu_starts))
MUT(m_ckpt_dtype, a->checkpoints.dtype = SP_BF16)
MUT(m_ckpt_H, a->checkpoints.shape[1] += 1)
MUT(m_cks_short, ((int64_t *)b[KB_CKS])[3] = ((int64_t *)b[KB_CKS])[2])
MUT(m_cks_past_C, ((int64_t *)b[KB_CKS])[p->N] = p->C + 1)
MUT(m_o_overlaps_q, a->o.data = a->q.data)
MUT(m_state_overlaps_ckpt, a->checkpoints.data = a->state.data)
MUT(m_o_dense, a->o.strides[3] = 2)
MUT(m_device, a->A_log.device = sp_cuda(0))
MUT(m_device_type, a->q.device.type = 9)
MUT(m_q_null, a->q.data = NULL)

static void bad_argument_cases(void) {
    static const int64_t lens[] = {5, 17, 9, 40};
    static const struct {
        const char *what;
        mutate_fn f;
        sp_status want;
        const char *says; /* in the message, where given */
    } cases[] = {
        {"q dtype", m_q_dtype, SP_ERR_DTYPE_MISMATCH, NULL},
        {"k T", m_k_T, SP_ERR_SHAPE_MISMATCH, "differs from q [1, "},
        {"v rank", m_v_rank, SP_ERR_SHAPE_MISMATCH, NULL},
        {"head dim 64", m_headdim, SP_ERR_UNSUPPORTED, NULL},
        {"batch 2", m_batch2, SP_ERR_SHAPE_MISMATCH, NULL},
        {"g rows off alignment", m_g_strided, SP_ERR_INVALID_ARGUMENT, NULL},
        {"k inner stride 2", m_k_inner, SP_ERR_INVALID_ARGUMENT, NULL},
        {"beta H", m_beta_H, SP_ERR_SHAPE_MISMATCH, "(q's T, H)"},
        {"beta misaligned", m_beta_misaligned, SP_ERR_MISALIGNED, NULL},
        {"beta dtype", m_beta_dtype, SP_ERR_DTYPE_MISMATCH, NULL},
        {"A_log dtype", m_alog_dtype, SP_ERR_DTYPE_MISMATCH, NULL},
        {"A_log H", m_alog_H, SP_ERR_SHAPE_MISMATCH, "A_log: shape [3], expected [H] as q"},
        {"dt_bias shape", m_dtb_shape, SP_ERR_SHAPE_MISMATCH, "expected [H * 128] as q"},
        {"lower_bound 0", m_lb_zero, SP_ERR_INVALID_ARGUMENT, NULL},
        {"lower_bound -5.5", m_lb_low, SP_ERR_INVALID_ARGUMENT, NULL},
        {"lower_bound NaN", m_lb_nan, SP_ERR_INVALID_ARGUMENT, NULL},
        {"gate enum", m_gate_enum, SP_ERR_INVALID_ARGUMENT, NULL},
        {"scale NaN", m_scale_nan, SP_ERR_INVALID_ARGUMENT, NULL},
        {"scale inf", m_scale_inf, SP_ERR_INVALID_ARGUMENT, NULL},
        {"cu_seqlens dtype", m_cu_dtype, SP_ERR_DTYPE_MISMATCH, NULL},
        {"cu_seqlens decreasing", m_cu_decreasing, SP_ERR_INVALID_ARGUMENT, NULL},
        {"cu_seqlens past T", m_cu_past_T, SP_ERR_INVALID_ARGUMENT, NULL},
        {"cu_seqlens negative", m_cu_negative, SP_ERR_INVALID_ARGUMENT, NULL},
        {"state_indices range", m_idx_range, SP_ERR_INVALID_ARGUMENT, NULL},
        {"state_indices negative", m_idx_negative, SP_ERR_INVALID_ARGUMENT, NULL},
        {"state_indices duplicate", m_idx_dup, SP_ERR_INVALID_ARGUMENT, NULL},
        {"state_indices N", m_idx_N, SP_ERR_SHAPE_MISMATCH, "expected [N] (N + 1 = cu_seqlens' size)"},
        {"state_indices dtype", m_idx_dtype, SP_ERR_DTYPE_MISMATCH, NULL},
        {"state pitch", m_state_pitch, SP_ERR_INVALID_ARGUMENT, NULL},
        {"state inner strides", m_state_inner, SP_ERR_INVALID_ARGUMENT, NULL},
        {"state dtype", m_state_dtype, SP_ERR_DTYPE_MISMATCH, NULL},
        {"state H", m_state_H, SP_ERR_SHAPE_MISMATCH, "expected [slots, H, 128, 128] with H 2"},
        {"state misaligned", m_state_misaligned, SP_ERR_MISALIGNED, NULL},
        {"interval negative", m_interval_neg, SP_ERR_INVALID_ARGUMENT, NULL},
        {"interval 0 with checkpoints", m_interval_zero, SP_ERR_INVALID_ARGUMENT, NULL},
        {"checkpoints missing", m_ckpt_missing, SP_ERR_INVALID_ARGUMENT, NULL},
        {"cu_starts missing", m_cks_missing, SP_ERR_INVALID_ARGUMENT, NULL},
        {"checkpoints dtype", m_ckpt_dtype, SP_ERR_DTYPE_MISMATCH, NULL},
        {"checkpoints H", m_ckpt_H, SP_ERR_SHAPE_MISMATCH, "expected [C, H, 128, 128] with H 2"},
        {"cu_starts too few rows", m_cks_short, SP_ERR_INVALID_ARGUMENT, NULL},
        {"cu_starts past C", m_cks_past_C, SP_ERR_INVALID_ARGUMENT, NULL},
        {"o overlaps q", m_o_overlaps_q, SP_ERR_OVERLAP, NULL},
        {"state overlaps checkpoints", m_state_overlaps_ckpt, SP_ERR_OVERLAP, NULL},
        {"o not dense", m_o_dense, SP_ERR_INVALID_ARGUMENT, NULL},
        {"A_log on another device", m_device, SP_ERR_DEVICE_MISMATCH, NULL},
        {"unknown device type", m_device_type, SP_ERR_INVALID_ARGUMENT, NULL},
        {"q NULL", m_q_null, SP_ERR_INVALID_ARGUMENT, NULL},
    };
    kda_problem p;
    kp_make(&p, 4, lens, 2, 2, SP_F32, SP_KDA_GATE_LOWER_BOUND, 8, 9);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        void *b[KB_COUNT];
        kp_copy(&p, b);
        sp_kda_args a;
        kp_args(&p, b, sp_cpu(), &a);
        cases[c].f(&a, b, &p);
        sp_status s = sp_kda_prefill(&a, NULL);
        CHECKF(s == cases[c].want, "%s: got %s, want %s (%s)", cases[c].what,
               sp_status_string(s), sp_status_string(cases[c].want), sp_last_error());
        CHECKF(strlen(sp_last_error()) > 0, "%s: no message", cases[c].what);
        CHECKF(!cases[c].says || strstr(sp_last_error(), cases[c].says), "%s: message '%s'",
               cases[c].what, sp_last_error());
        CHECKF(untouched(&p, b), "%s: an output was written", cases[c].what);
        s = sp_kda_prefill_reference(&a);
        CHECKF(s == cases[c].want, "%s (reference): got %s", cases[c].what, sp_status_string(s));
        CHECKF(untouched(&p, b), "%s (reference): an output was written", cases[c].what);
        kp_free_copy(b);
    }
    /* The unmutated problem passes, so each failure above is the mutation's. */
    void *b[KB_COUNT];
    kp_copy(&p, b);
    sp_kda_args a;
    kp_args(&p, b, sp_cpu(), &a);
    CHECK_OK(sp_kda_prefill(&a, NULL));
    CHECK(!untouched(&p, b));
    CHECK_STATUS(sp_kda_prefill(NULL, NULL), SP_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(sp_kda_args_init(NULL), SP_ERR_INVALID_ARGUMENT);
    kp_free_copy(b);
    kp_free(&p);
}

int main(void) {
    one_token_case(SP_KDA_GATE_LOWER_BOUND, 0.0f);
    one_token_case(SP_KDA_GATE_SOFTPLUS, 0.3f);

    static const int64_t lens[] = {1, 63, 64, 65, 300};
    static const int64_t small[] = {1, 17, 40};
    const int N = ts_test_small() ? 3 : 5;
    const int64_t *L = ts_test_small() ? small : lens;
    static const sp_dtype dts[] = {SP_F32, SP_BF16};
    static const int32_t gates[] = {SP_KDA_GATE_LOWER_BOUND, SP_KDA_GATE_SOFTPLUS};
    static const int64_t intervals[] = {0, 1, 32, 64};
    for (int di = 0; di < 2; di++)
        for (int gi = 0; gi < 2; gi++)
            for (int ii = 0; ii < 4; ii++) batch_case(dts[di], gates[gi], intervals[ii], L, N, 2);
    noop_cases();
    empty_sequence_case(SP_BF16);
    empty_sequence_case(SP_F32);
    bad_argument_cases();
    return sp_test_finish("test_kda_cpu");
}
