/*
 * test_kda.c — the KDA prefill against its float64 reference, one body over
 * the memory backends (ts_mem.h): built as test_kda (host memory: the CPU
 * prefill) and test_kda_gpu (CUDA device memory: each CUDA kernel forced;
 * it exits 77 without a usable device).
 *
 * On every backend: varlen batches against the reference (both state
 * dtypes, both gates, checkpoint intervals), bit-identical reruns, the
 * no-op cases, an empty sequence's slot left bit for bit, and every bad
 * argument with its status and nothing written. On the host only: the
 * reference against an independent one-token computation written here, the
 * reference's own refusals, and the checks of index arrays' contents (the
 * host reads index arrays only when they are CPU tensors). On the device
 * only: the chunked kernels at their edges (every length modulo the chunk,
 * a long sequence, gates at their extremes), the kernels' guard against bad
 * index arrays, and the plan's rules. SP_TEST_SMALL=1 shrinks it for
 * compute-sanitizer.
 */
#include "check.h"
#include "kda_problem.h"

#include "cuda/device.h"        /* sp_cuda_device_: which builds the device has */
#include "kda/kda_internal.h" /* sp_kda_prefill_planned_, the plan's rules */

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { D = SP_KDA_HEAD_DIM };

static const ts_mem *M; /* the backend of this build */

static int on_device(void) { return M->device.type == SP_DEVICE_CUDA; }

static const char *kernel_name(int32_t k) {
    return on_device() ? sp_kda_kernel_name((sp_kda_kernel)k) : "cpu";
}
static int is_chunked(int32_t k) {
    return on_device() && (k == SP_KDA_KERNEL_CHUNKED || k == SP_KDA_KERNEL_CHUNKED_TWO_PASS);
}

/* What this test changes of the library's plan of each chunked call (a
 * test's own state: the library keeps none): the one-pass kernel's build
 * (-1: the plan's; 0 mma.sync; 1 wgmma), the two-pass kernel's records in
 * flight (0: the plan's) and thousandths of its record slots prepared
 * before its state pass (0: the plan's; 1000: two kernels); every_gate 1:
 * the every-gate builds for K3's forms too; the one-pass kernel's block
 * order (longest_first -1: the plan's; 0 batch order; 1 longest first). */
static struct {
    int wgmma, records, head_permille, every_gate, longest_first;
} forced = {-1, 0, 0, 0, -1};

/* The library's plan for a, with `forced` applied. */
static sp_kda_plan plan_of(const sp_kda_args *a, const kda_problem *p) {
    sp_kda_plan plan;
    CHECK_OK(sp_kda_prefill_plan_(a, &plan));
    if (plan.kernel == SP_KDA_KERNEL_CHUNKED && forced.wgmma >= 0) plan.wgmma = forced.wgmma;
    if (forced.every_gate) sp_kda_plan_every_gate_(&plan);
    if (plan.kernel == SP_KDA_KERNEL_CHUNKED && forced.longest_first >= 0)
        plan.longest_first = forced.longest_first;
    if (plan.kernel == SP_KDA_KERNEL_CHUNKED_TWO_PASS) {
        const int64_t slots = sp_kda_two_pass_slots_(p->T, p->N);
        if (forced.records) plan.records = forced.records;
        if (forced.head_permille) {
            const int64_t h = slots * forced.head_permille / 1000;
            plan.head_slots = h < 1 ? 1 : h;
        }
    }
    return plan;
}

/* Run the prefill on the backend from the initial buffers `init`; the
 * outputs into out, by the library's plan with `forced` applied. The
 * two-pass kernel gets a workspace of the size the library asks for, filled
 * with NaN garbage (every record it reads it writes first). */
static sp_status run_backend(const kda_problem *p, void *const init[KB_COUNT],
                             void *out[KB_COUNT]) {
    void *buf[KB_COUNT], *ws = NULL;
    kp_upload(M, p, init, 0, buf);
    sp_kda_args a;
    kp_args(p, buf, M->device, &a);
    if (p->kernel == SP_KDA_KERNEL_CHUNKED_TWO_PASS) {
        size_t bytes = 0;
        CHECK_OK(sp_kda_prefill_workspace_bytes(&a, &bytes));
        CHECK(bytes > 0);
        ws = M->alloc(bytes);
        unsigned char *garbage = malloc(bytes);
        CHECK(garbage != NULL);
        memset(garbage, 0xff, bytes);
        M->upload(ws, garbage, bytes);
        free(garbage);
        a.workspace = ws;
        a.workspace_bytes = bytes;
    }
    sp_status s;
    if (on_device() && is_chunked(p->kernel)) {
        const sp_kda_plan plan = plan_of(&a, p);
        s = sp_kda_prefill_planned_(&a, &plan, NULL);
    } else {
        s = sp_kda_prefill(&a, NULL);
    }
    kp_download(M, p, buf, out);
    kp_release(M, buf);
    if (ws) M->release(ws);
    return s;
}

/* Run p (already made, p->kernel set) on the backend twice and once on the
 * reference; compare. */
static void check_problem(kda_problem *p, const char *what) {
    void *ref[KB_COUNT], *g1[KB_COUNT], *g2[KB_COUNT];
    kp_copy(p, ref);
    kp_copy(p, g1);
    kp_copy(p, g2);
    sp_kda_args a;
    kp_args(p, ref, sp_cpu(), &a);
    CHECK_OK(sp_kda_prefill_reference(&a));
    int real = 0; /* a sequence with tokens and a slot: the reference's state moves */
    for (int64_t n = 0; n < p->N; n++) real |= p->lens[n] > 0 && ((int32_t *)p->host[KB_IDX])[n] >= 0;
    if (real && p->H > 0) CHECK(memcmp(ref[KB_STATE], p->host[KB_STATE], p->bytes[KB_STATE]) != 0);
    CHECK_OK(run_backend(p, p->host, g1));
    CHECK_OK(run_backend(p, p->host, g2));
    int64_t so, ss, sc;
    const double eo = kp_err_o(p, g1[KB_O], ref[KB_O], &so);
    const double es = kp_err_state(p, g1[KB_STATE], ref[KB_STATE], &ss);
    const double ec = kp_err_ckpt(p, g1[KB_CKPT], ref[KB_CKPT], &sc);
    printf("%-16s %-36s: o %.2e state %.2e ckpt %.2e\n", kernel_name(p->kernel), what, eo, es, ec);
    CHECKF(eo < kp_o_tol(p) && so == 0, "%s: o err %.3g, %lld stray", what, eo, (long long)so);
    CHECKF(es < kp_state_tol(p) && ss == 0, "%s: state err %.3g, %lld stray", what, es,
           (long long)ss);
    CHECKF(ec < kp_state_tol(p) && sc == 0, "%s: ckpt err %.3g, %lld stray", what, ec,
           (long long)sc);
    CHECKF(kp_outputs_equal(p, g1, g2), "%s: two runs differ", what);
    kp_free_copy(ref);
    kp_free_copy(g1);
    kp_free_copy(g2);
}

static void batch_case(int32_t kernel, sp_dtype sdt, int32_t gate, int64_t interval,
                       const int64_t *lens, int N, int64_t H) {
    kda_problem p;
    kp_make(&p, N, lens, 3, H, sdt, gate, interval,
            2000 + (uint64_t)sdt * 100 + (uint64_t)gate * 10 + (uint64_t)interval);
    p.kernel = kernel;
    char what[96];
    snprintf(what, sizeof what, "%s gate %d interval %lld N %d", sp_dtype_name(sdt), gate,
             (long long)interval, N);
    check_problem(&p, what);
    kp_free(&p);
}

/* ---- the host only ------------------------------------------------------------ */

static double bf(const void *p, int64_t i) {
    uint32_t u = (uint32_t)((const uint16_t *)p)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* One token of one sequence, S0 from the pool, computed straight from the
 * formulas of the header (not from the library's code): checks layout
 * (V-first pool, [t,h,d] inputs), normalization, both gates, beta, scale. */
static void one_token_case(int32_t gate, float scale, int32_t beta_form, sp_dtype gdt) {
    const int64_t len = 1;
    kda_problem p;
    const uint64_t seed = 77 + (uint64_t)gate + 10 * (uint64_t)beta_form;
    kp_make(&p, 1, &len, 0, 2, SP_F32, gate == SP_KDA_GATE_LOG_DECAY ? 0 : gate, 0, seed);
    if (gate == SP_KDA_GATE_LOG_DECAY) kp_log_decay(&p, gdt, seed);
    kp_beta_form(&p, beta_form, seed);
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
            const double graw = p.g_dtype == SP_F32 ? ((float *)p.host[KB_G])[h * D + d]
                                                     : bf(p.host[KB_G], h * D + d);
            double x = graw + ((float *)p.host[KB_DTB])[h * D + d];
            double g = gate == SP_KDA_GATE_LOG_DECAY  ? graw
                       : gate == SP_KDA_GATE_LOWER_BOUND ? p.lower_bound * (1.0 / (1.0 + exp(-exp(A) * x)))
                                                          : -exp(A) * log(1.0 + exp(x));
            for (int j = 0; j < D; j++) S[d][j] = exp(g) * S0[j * D + d];
        }
        const double braw = bf(p.host[KB_BETA], h);
        const double beta = beta_form == SP_KDA_BETA_ACTIVATED ? braw
                            : (beta_form == SP_KDA_BETA_LOGITS_X2 ? 2.0 : 1.0) / (1.0 + exp(-braw));
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
    CHECKF(sqrt(o_num / o_den) < 4e-3, "gate %d beta %d scale %g: o err %.3g", gate, beta_form,
           scale, sqrt(o_num / o_den));
    CHECKF(sqrt(s_num / s_den) < 1e-6, "gate %d beta %d scale %g: state err %.3g", gate,
           beta_form, scale, sqrt(s_num / s_den));
    kp_free_copy(b);
    kp_free(&p);
}

/* ---- every backend -------------------------------------------------------------- */

/* T = 0 (one empty sequence), N = 0 with tokens present, H = 0: nothing is
 * written, on the backend and (host) by the reference. */
static void noop_cases(void) {
    const int64_t zero = 0, five = 5;
    for (int c = 0; c < 3; c++) {
        kda_problem p;
        if (c == 0) kp_make(&p, 1, &zero, 0, 2, SP_BF16, SP_KDA_GATE_LOWER_BOUND, 8, 5);
        if (c == 1) kp_make(&p, 0, NULL, 40, 2, SP_F32, SP_KDA_GATE_SOFTPLUS, 0, 6);
        if (c == 2) kp_make(&p, 1, &five, 0, 0, SP_F32, SP_KDA_GATE_LOWER_BOUND, 0, 7);
        void *b[KB_COUNT];
        kp_copy(&p, b);
        CHECKF(run_backend(&p, p.host, b) == SP_OK, "no-op case %d: %s", c, sp_last_error());
        CHECKF(kp_outputs_equal(&p, b, p.host), "no-op case %d: an output was written", c);
        if (!on_device()) {
            sp_kda_args a;
            kp_args(&p, b, sp_cpu(), &a);
            CHECK_OK(sp_kda_prefill_reference(&a));
            CHECKF(kp_outputs_equal(&p, b, p.host), "no-op case %d: the reference wrote", c);
        }
        kp_free_copy(b);
        kp_free(&p);
    }
}

/* Sequences of length 0 leave their slots' bits as they are: slots of the
 * pool holding signalling NaNs (0x7f81, which a read to fp32 and a rounding
 * back would quiet to 0x7fc1) and other bit patterns come back byte for
 * byte, while the sequences around them run; on the host the reference is
 * held to the same. */
static void empty_sequence_case(int32_t kernel, sp_dtype sdt) {
    static const int64_t lens[] = {0, 40, 0, 9};
    kda_problem p;
    kp_make(&p, 4, lens, 2, 2, sdt, SP_KDA_GATE_LOWER_BOUND, 0, 31 + (uint64_t)sdt);
    p.kernel = kernel;
    const int32_t *idx = (const int32_t *)p.host[KB_IDX];
    const size_t es = sp_dtype_size(sdt), bytes = (size_t)(p.H * D * D) * es;
    static const uint16_t pat[] = {0x7f81, 0xff81, 0x7fbf, 0x0001, 0x8000, 0x7f80};
    for (int n = 0; n < 4; n += 2) {
        unsigned char *s0 = (unsigned char *)p.host[KB_STATE] + (size_t)(idx[n] * p.pitch) * es;
        for (size_t i = 0; i < bytes / 2; i++) memcpy(s0 + 2 * i, &pat[i % 6], 2);
    }
    for (int run = 0; run < (on_device() ? 1 : 2); run++) {
        void *b[KB_COUNT];
        kp_copy(&p, b);
        if (run) {
            sp_kda_args a;
            kp_args(&p, b, sp_cpu(), &a);
            CHECK_OK(sp_kda_prefill_reference(&a));
        } else {
            CHECK_OK(run_backend(&p, p.host, b));
        }
        const char *who = run ? "reference" : kernel_name(kernel);
        for (int n = 0; n < 4; n++) {
            const size_t at = (size_t)(idx[n] * p.pitch) * es;
            const int same = memcmp((char *)b[KB_STATE] + at, (char *)p.host[KB_STATE] + at, bytes) == 0;
            if (lens[n] == 0)
                CHECKF(same, "%s, %s state: the empty sequence %d's slot changed", who,
                       sp_dtype_name(sdt), n);
            else
                CHECKF(!same, "%s, %s state: sequence %d's slot was not written", who,
                       sp_dtype_name(sdt), n);
        }
        kp_free_copy(b);
    }
    kp_free(&p);
}

/* Every gate and beta form (g and beta bf16 or f32), on the backend's kernel `kernel`:
 * a varlen batch against the reference, checkpoints where the kernel
 * writes them, the log-decay g with decays near 0, down to -60 and -inf,
 * beta activated in [0, 2) and as logits times 2. */
static void forms_cases(int32_t kernel) {
    static const int64_t lens[] = {37, 0, 70, 5};
    static const sp_dtype pools[] = {SP_F32, SP_BF16};
    static const struct {
        int32_t gate, beta;
        sp_dtype gdt, bdt;
    } forms[] = {{SP_KDA_GATE_LOG_DECAY, SP_KDA_BETA_LOGITS, SP_BF16, SP_BF16},
                 {SP_KDA_GATE_LOG_DECAY, SP_KDA_BETA_ACTIVATED, SP_F32, SP_F32},
                 {SP_KDA_GATE_LOG_DECAY, SP_KDA_BETA_LOGITS_X2, SP_F32, SP_BF16},
                 {SP_KDA_GATE_LOWER_BOUND, SP_KDA_BETA_ACTIVATED, SP_BF16, SP_BF16},
                 {SP_KDA_GATE_SOFTPLUS, SP_KDA_BETA_LOGITS_X2, SP_BF16, SP_F32},
                 {SP_KDA_GATE_SOFTPLUS, SP_KDA_BETA_LOGITS, SP_BF16, SP_BF16}};
    const int64_t interval = kernel == SP_KDA_KERNEL_DECODE ? 0 : 32;
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++)
        for (int di = 0; di < 2; di++) {
            kda_problem p;
            const uint64_t seed = 5200 + 10 * (uint64_t)i + (uint64_t)di;
            kp_make(&p, 4, lens, 3, 2, pools[di],
                    forms[i].gate == SP_KDA_GATE_LOG_DECAY ? 0 : forms[i].gate, interval, seed);
            if (forms[i].gate == SP_KDA_GATE_LOG_DECAY) kp_log_decay(&p, forms[i].gdt, seed);
            kp_beta_form(&p, forms[i].beta, seed);
            if (forms[i].bdt == SP_F32) kp_beta_f32(&p);
            p.kernel = kernel;
            char what[96];
            snprintf(what, sizeof what, "%s gate %d beta %d g %s beta %s", sp_dtype_name(pools[di]),
                     (int)forms[i].gate, (int)forms[i].beta, sp_dtype_name(forms[i].gdt),
                     sp_dtype_name(forms[i].bdt));
            check_problem(&p, what);
            kp_free(&p);
        }
}

/* A plan of the caller's on CPU tensors: only the recurrent form runs
 * there, so a chunked plan is refused (UNSUPPORTED) and a kernel that does
 * not run (AUTO, 7) named as the plan's field (INVALID_ARGUMENT), nothing
 * written; the recurrent plan runs as sp_kda_prefill does. */
static void host_plan_cases(void) {
    static const int64_t lens[] = {20, 9};
    kda_problem p;
    kp_make(&p, 2, lens, 1, 2, SP_F32, SP_KDA_GATE_LOWER_BOUND, 0, 91);
    void *b[KB_COUNT], *want[KB_COUNT];
    kp_copy(&p, b);
    kp_copy(&p, want);
    sp_kda_args a;
    kp_args(&p, b, sp_cpu(), &a);
    static const struct {
        int32_t kernel;
        sp_status status;
    } bad[] = {{SP_KDA_KERNEL_CHUNKED, SP_ERR_UNSUPPORTED},
               {SP_KDA_KERNEL_CHUNKED_TWO_PASS, SP_ERR_UNSUPPORTED},
               {SP_KDA_KERNEL_AUTO, SP_ERR_INVALID_ARGUMENT},
               {7, SP_ERR_INVALID_ARGUMENT}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        const sp_kda_plan plan = {.kernel = bad[i].kernel, .splits = 1, .records = 2,
                                  .head_slots = 1, .decode_rows_per_warp = 16};
        CHECK_STATUS(sp_kda_prefill_planned_(&a, &plan, NULL), bad[i].status);
        if (bad[i].status == SP_ERR_INVALID_ARGUMENT)
            CHECKF(strncmp(sp_last_error(), "plan: kernel", 12) == 0, "%s", sp_last_error());
        CHECK(kp_outputs_equal(&p, b, p.host));
    }
    sp_kda_plan plan;
    CHECK_OK(sp_kda_prefill_plan_(&a, &plan));
    CHECK(plan.kernel == SP_KDA_KERNEL_RECURRENT);
    CHECK_OK(sp_kda_prefill_planned_(&a, &plan, NULL));
    sp_kda_args w;
    kp_args(&p, want, sp_cpu(), &w);
    CHECK_OK(sp_kda_prefill(&w, NULL));
    CHECK(kp_outputs_equal(&p, b, want));
    kp_free_copy(b);
    kp_free_copy(want);
    kp_free(&p);
}

/* A case's checkpoint interval: none for the decode kernel, which writes
 * none. */
static int64_t every(int32_t kernel, int64_t interval) {
    return kernel == SP_KDA_KERNEL_DECODE ? 0 : interval;
}

/* Padded sequences (a negative slot, as engines mark the rows that pad a
 * CUDA-graph batch) are skipped on the backend and in the reference alike:
 * check_problem finds any byte written in their o rows, their checkpoint
 * rows or a slot no real sequence owns (support/kda_problem.c: live_*),
 * and compares the rest with the reference. The first, the last, two in the
 * middle with the same -1, every one. */

static void padded_case(int32_t kernel) {
    static const int64_t lens[] = {37, 20, 64, 5, 33};
    static const unsigned masks[] = {1u << 0, 1u << 4, 1u << 1 | 1u << 3, 0x1f};
    for (size_t m = 0; m < sizeof masks / sizeof masks[0]; m++) {
        kda_problem p;
        kp_make(&p, 5, lens, 2, 2, SP_F32, SP_KDA_GATE_LOWER_BOUND, every(kernel, 32),
                4100 + (uint64_t)m);
        p.kernel = kernel;
        int32_t *idx = (int32_t *)p.host[KB_IDX];
        for (int n = 0; n < 5; n++)
            if (masks[m] >> n & 1) idx[n] = -1;
        char what[64];
        snprintf(what, sizeof what, "padded sequences (mask 0x%x)", masks[m]);
        check_problem(&p, what);
        kp_free(&p);
    }
}

/* Each mutation breaks one rule; the call must return its status and leave
 * o, the pool and the checkpoints as they were. */
typedef void (*mutate_fn)(sp_kda_args *a, void *const b[KB_COUNT], kda_problem *p);

#define MUT(name, ...)                                                            \
    static void name(sp_kda_args *a, void *const b[KB_COUNT], kda_problem *p) { \
        (void)a, (void)b, (void)p;                                                \
        __VA_ARGS__;                                                              \
    }

/* The other kind of device than the backend's. */
static sp_device other_device(void) { return on_device() ? sp_cpu() : sp_cuda(0); }

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
MUT(m_beta_dtype, a->beta.dtype = SP_F16)
MUT(m_alog_dtype, a->A_log.dtype = SP_BF16)
MUT(m_alog_H, a->A_log.shape[0] += 1)
MUT(m_dtb_shape, a->dt_bias.shape[0] = 64 * p->H)
MUT(m_lb_zero, a->lower_bound = 0.0f)
MUT(m_lb_positive, a->lower_bound = 1.0f)
MUT(m_lb_low, a->lower_bound = -5.5f)
MUT(m_lb_nan, a->lower_bound = NAN)
MUT(m_gate_enum, a->gate = 7)
MUT(m_beta_form_enum, a->beta_form = 7)
MUT(m_g_f32_not_log_decay, a->g.dtype = SP_F32)
MUT(m_scale_nan, a->scale = NAN)
MUT(m_scale_inf, a->scale = INFINITY)
MUT(m_cu_dtype, a->cu_seqlens.dtype = SP_F32)
MUT(m_cu_decreasing, ((int64_t *)b[KB_CU])[2] = ((int64_t *)b[KB_CU])[1] - 1)
MUT(m_cu_past_T, ((int64_t *)b[KB_CU])[p->N] = p->T + 1)
MUT(m_cu_negative, ((int64_t *)b[KB_CU])[0] = -1)
MUT(m_idx_range, ((int32_t *)b[KB_IDX])[1] = (int32_t)p->slots)
MUT(m_idx_dup, ((int32_t *)b[KB_IDX])[2] = ((int32_t *)b[KB_IDX])[0])
MUT(m_idx_N, a->state_indices.shape[0] -= 1)
MUT(m_idx_dtype, a->state_indices.dtype = SP_U8)
MUT(m_state_pitch, a->state.strides[0] = p->H * D * D - 1)
MUT(m_state_inner, a->state.strides[2] = D + 1)
MUT(m_state_k_first_pitch, a->state.strides[2] = 1; a->state.strides[3] = D + 1)
MUT(m_state_dtype, a->state.dtype = SP_F16)
MUT(m_state_H, a->state.shape[1] += 1)
MUT(m_state_misaligned, a->state.data = (char *)a->state.data + 2)
MUT(m_interval_neg, a->checkpoint_interval = -1)
MUT(m_interval_zero, a->checkpoint_interval = 0)
MUT(m_ckpt_missing, memset(&a->checkpoints, 0, sizeof a->checkpoints))
MUT(m_cks_missing, memset(&a->checkpoint_cu_starts, 0, sizeof a->checkpoint_cu_starts))
MUT(m_ckpt_dtype, a->checkpoints.dtype = SP_BF16)
MUT(m_ckpt_H, a->checkpoints.shape[1] += 1)
MUT(m_ckpt_k_first, a->checkpoints.strides[2] = 1; a->checkpoints.strides[3] = D)
MUT(m_cks_short, ((int64_t *)b[KB_CKS])[3] = ((int64_t *)b[KB_CKS])[2])
MUT(m_cks_past_C, ((int64_t *)b[KB_CKS])[p->N] = p->C + 1)
MUT(m_o_overlaps_q, a->o.data = a->q.data)
MUT(m_o_overlaps_k, a->o.data = a->k.data)
MUT(m_state_overlaps_ckpt, a->checkpoints.data = a->state.data)
MUT(m_o_dense, a->o.strides[3] = 2)
MUT(m_alog_device, a->A_log.device = other_device())
MUT(m_cu_device, a->cu_seqlens.device = other_device())
MUT(m_device_type, a->q.device.type = 9)
MUT(m_q_null, a->q.data = NULL)

static void bad_argument_cases(void) {
    static const int64_t lens[] = {5, 17, 9, 40};
    static const struct {
        const char *what;
        mutate_fn f;
        sp_status want;
        const char *says; /* in the message, where given */
        int host_reads;   /* changes an index array's contents: checked on the host only */
    } cases[] = {
        {"q dtype", m_q_dtype, SP_ERR_DTYPE_MISMATCH, NULL, 0},
        {"k T", m_k_T, SP_ERR_SHAPE_MISMATCH, "differs from q [1, ", 0},
        {"v rank", m_v_rank, SP_ERR_SHAPE_MISMATCH, NULL, 0},
        {"head dim 64", m_headdim, SP_ERR_UNSUPPORTED, NULL, 0},
        {"batch 2", m_batch2, SP_ERR_SHAPE_MISMATCH, NULL, 0},
        {"g rows off alignment", m_g_strided, SP_ERR_INVALID_ARGUMENT, NULL, 0},
        {"k inner stride 2", m_k_inner, SP_ERR_INVALID_ARGUMENT, NULL, 0},
        {"beta H", m_beta_H, SP_ERR_SHAPE_MISMATCH, "(q's T, H)", 0},
        {"beta misaligned", m_beta_misaligned, SP_ERR_MISALIGNED, NULL, 0},
        {"beta dtype", m_beta_dtype, SP_ERR_DTYPE_MISMATCH, NULL, 0},
        {"A_log dtype", m_alog_dtype, SP_ERR_DTYPE_MISMATCH, NULL, 0},
        {"A_log H", m_alog_H, SP_ERR_SHAPE_MISMATCH, "A_log: shape [3], expected [H] as q", 0},
        {"dt_bias shape", m_dtb_shape, SP_ERR_SHAPE_MISMATCH, "expected [H * 128] as q", 0},
        {"lower_bound 0", m_lb_zero, SP_ERR_INVALID_ARGUMENT, NULL, 0},
        {"lower_bound 1", m_lb_positive, SP_ERR_INVALID_ARGUMENT, NULL, 0},
        {"lower_bound -5.5", m_lb_low, SP_ERR_INVALID_ARGUMENT, NULL, 0},
        {"lower_bound NaN", m_lb_nan, SP_ERR_INVALID_ARGUMENT, NULL, 0},
        {"gate enum", m_gate_enum, SP_ERR_INVALID_ARGUMENT, NULL, 0},
        {"beta_form enum", m_beta_form_enum, SP_ERR_INVALID_ARGUMENT, "beta_form: 7", 0},
        {"g f32 with a computed gate", m_g_f32_not_log_decay, SP_ERR_DTYPE_MISMATCH, "g:", 0},
        {"scale NaN", m_scale_nan, SP_ERR_INVALID_ARGUMENT, NULL, 0},
        {"scale inf", m_scale_inf, SP_ERR_INVALID_ARGUMENT, NULL, 0},
        {"cu_seqlens dtype", m_cu_dtype, SP_ERR_DTYPE_MISMATCH, NULL, 0},
        {"cu_seqlens decreasing", m_cu_decreasing, SP_ERR_INVALID_ARGUMENT, NULL, 1},
        {"cu_seqlens past T", m_cu_past_T, SP_ERR_INVALID_ARGUMENT, NULL, 1},
        {"cu_seqlens negative", m_cu_negative, SP_ERR_INVALID_ARGUMENT, NULL, 1},
        {"state_indices range", m_idx_range, SP_ERR_INVALID_ARGUMENT, NULL, 1},
        {"state_indices duplicate", m_idx_dup, SP_ERR_INVALID_ARGUMENT, NULL, 1},
        {"state_indices N", m_idx_N, SP_ERR_SHAPE_MISMATCH, "expected [N] or a verify table [N, W] (N + 1 = cu_seqlens' size)", 0},
        {"state_indices dtype", m_idx_dtype, SP_ERR_DTYPE_MISMATCH, NULL, 0},
        {"state pitch", m_state_pitch, SP_ERR_INVALID_ARGUMENT, NULL, 0},
        {"state inner strides", m_state_inner, SP_ERR_INVALID_ARGUMENT, NULL, 0},
        {"state K-first, rows padded", m_state_k_first_pitch, SP_ERR_INVALID_ARGUMENT,
         "or (16384, 1, 128): a K-first pool's transpose", 0},
        {"state dtype", m_state_dtype, SP_ERR_DTYPE_MISMATCH, NULL, 0},
        {"state H", m_state_H, SP_ERR_SHAPE_MISMATCH, "expected [slots, H, 128, 128] with H 2", 0},
        {"state misaligned", m_state_misaligned, SP_ERR_MISALIGNED, NULL, 0},
        {"interval negative", m_interval_neg, SP_ERR_INVALID_ARGUMENT, NULL, 0},
        {"interval 0 with checkpoints", m_interval_zero, SP_ERR_INVALID_ARGUMENT, NULL, 0},
        {"checkpoints missing", m_ckpt_missing, SP_ERR_INVALID_ARGUMENT, NULL, 0},
        {"cu_starts missing", m_cks_missing, SP_ERR_INVALID_ARGUMENT, NULL, 0},
        {"checkpoints dtype", m_ckpt_dtype, SP_ERR_DTYPE_MISMATCH, NULL, 0},
        {"checkpoints H", m_ckpt_H, SP_ERR_SHAPE_MISMATCH, "expected [C, H, 128, 128] with H 2", 0},
        {"checkpoints K-first", m_ckpt_k_first, SP_ERR_INVALID_ARGUMENT,
         "checkpoints: strides of dims 1..3", 0},
        {"cu_starts too few rows", m_cks_short, SP_ERR_INVALID_ARGUMENT, NULL, 1},
        {"cu_starts past C", m_cks_past_C, SP_ERR_INVALID_ARGUMENT, NULL, 1},
        {"o overlaps q", m_o_overlaps_q, SP_ERR_OVERLAP, NULL, 0},
        {"o overlaps k", m_o_overlaps_k, SP_ERR_OVERLAP, NULL, 0},
        {"state overlaps checkpoints", m_state_overlaps_ckpt, SP_ERR_OVERLAP, NULL, 0},
        {"o not dense", m_o_dense, SP_ERR_INVALID_ARGUMENT, NULL, 0},
        {"A_log on another device", m_alog_device, SP_ERR_DEVICE_MISMATCH, NULL, 0},
        {"cu_seqlens on another device", m_cu_device, SP_ERR_DEVICE_MISMATCH, NULL, 0},
        {"unknown device type", m_device_type, SP_ERR_INVALID_ARGUMENT, NULL, 0},
        {"q NULL", m_q_null, SP_ERR_INVALID_ARGUMENT, NULL, 0},
    };
    kda_problem p;
    kp_make(&p, 4, lens, 2, 2, SP_F32, SP_KDA_GATE_LOWER_BOUND, 8, 9);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        if (cases[c].host_reads && on_device()) continue; /* device_guard_cases */
        void *b[KB_COUNT];
        kp_upload(M, &p, p.host, 0, b);
        sp_kda_args a;
        kp_args(&p, b, M->device, &a);
        cases[c].f(&a, b, &p);
        sp_status s = sp_kda_prefill(&a, NULL);
        CHECKF(s == cases[c].want, "%s: got %s, want %s (%s)", cases[c].what,
               sp_status_string(s), sp_status_string(cases[c].want), sp_last_error());
        CHECKF(strlen(sp_last_error()) > 0, "%s: no message", cases[c].what);
        CHECKF(!cases[c].says || strstr(sp_last_error(), cases[c].says), "%s: message '%s'",
               cases[c].what, sp_last_error());
        CHECKF(kp_untouched(M, &p, b), "%s: an output was written", cases[c].what);
        if (!on_device()) {
            s = sp_kda_prefill_reference(&a);
            CHECKF(s == cases[c].want, "%s (reference): got %s", cases[c].what,
                   sp_status_string(s));
            CHECKF(kp_untouched(M, &p, b), "%s (reference): an output was written", cases[c].what);
        }
        kp_release(M, b);
    }
    /* The unmutated problem passes, so each failure above is the mutation's. */
    void *b[KB_COUNT];
    kp_upload(M, &p, p.host, 0, b);
    sp_kda_args a;
    kp_args(&p, b, M->device, &a);
    CHECK_OK(sp_kda_prefill(&a, NULL));
    CHECK(!kp_untouched(M, &p, b));
    if (on_device()) /* the reference runs on the CPU only */
        CHECK_STATUS(sp_kda_prefill_reference(&a), SP_ERR_UNSUPPORTED);
    CHECK_STATUS(sp_kda_prefill(NULL, NULL), SP_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(sp_kda_args_init(NULL), SP_ERR_INVALID_ARGUMENT);
    kp_release(M, b);
    kp_free(&p);
}

/* ---- the device only ---------------------------------------------------------- */

/* The chunked kernels at their edges: every length modulo the chunk (two
 * batches of 16 sequences, 32k + m tokens for m = 0..31), a long sequence,
 * gates pinned at the lower bound or at ~0 and beta logits of +-10. */
/* Sixteen lengths 32k + m, m = 16 half .. 16 half + 15. */
static void residue_lens(int half, int64_t lens[16]) {
    for (int i = 0; i < 16; i++) {
        const int m = 16 * half + i;
        lens[i] = m + 32 * (m % 3);
    }
}

static void chunked_edge_cases(int32_t kernel, int small) {
    int64_t lens[16];
    for (int half = 0; half < 2; half++) {
        residue_lens(half, lens);
        kda_problem p;
        /* 48 pairs (16 when small), then 32: on 132 multiprocessors the two-pass kernel's
         * state pass then takes blocks of 16 and 32 V rows. */
        kp_make(&p, 16, lens, 5, half ? 2 : small ? 1 : 3, half ? SP_BF16 : SP_F32,
                SP_KDA_GATE_LOWER_BOUND, half ? 64 : 32, 3100 + (uint64_t)half);
        p.kernel = kernel;
        check_problem(&p, half ? "lengths 16..31 mod 32" : "lengths 0..15 mod 32");
        kp_free(&p);
    }
    {
        /* 24 pairs, fp32 state: the two-pass kernel's state pass with two
         * records in flight, two blocks a multiprocessor (on 132
         * multiprocessors; plan.c). */
        for (int i = 0; i < 12; i++) lens[i] = i + 32 * (i % 3);
        kda_problem p;
        kp_make(&p, 12, lens, 7, 2, SP_F32, SP_KDA_GATE_LOWER_BOUND, 0, 3150);
        p.kernel = kernel;
        check_problem(&p, "24 pairs, lengths 0..11 mod 32");
        kp_free(&p);
    }
    const int64_t extreme_lens[3] = {small ? 70 : 700, 33, small ? 90 : 1000};
    for (int k = 0; k < 2; k++) {
        kda_problem p;
        kp_make(&p, 3, extreme_lens, 0, 2, SP_F32, SP_KDA_GATE_LOWER_BOUND, 32, 3200);
        kp_extreme_gates(&p, 3201);
        p.kernel = k ? kernel : SP_KDA_KERNEL_RECURRENT;
        check_problem(&p, "gates at -5 and ~0, beta +-10");
        kp_free(&p);
    }
    if (small) return;
    const int64_t long_len = 8200; /* not a multiple of the chunk */
    kda_problem p;
    kp_make(&p, 1, &long_len, 0, 2, SP_F32, SP_KDA_GATE_LOWER_BOUND, 1024, 3300);
    p.kernel = kernel;
    check_problem(&p, "one sequence of 8200 tokens");
    kp_free(&p);
}

/* The chunked kernels' every-gate builds at their edges: every length
 * modulo the chunk with the log-decay gate (decays near 0, down to -60 and
 * -inf: most chunks in the safe form) and beta activated in [0, 2); the
 * two forms in turn within each sequence (kp_mixed_decays); the
 * softplus gate with A_log 3 on head 0 (decays up to tens of nats a token:
 * safe chunks) and as drawn on head 1 (factored chunks), beta 2 sigmoid;
 * the softplus gate's input across its cut-over to x (15 .. 40), and at
 * +-60 .. 100 (whole channels forgotten within a token, or decays of ~0)
 * with beta logits of +-10 at 2 sigmoid. */
static void every_gate_edge_cases(int32_t kernel) {
    int64_t lens[16];
    for (int half = 0; half < 2; half++)
        for (int g32 = 0; g32 < 2; g32++) { /* g bf16, then f32 (copied apart: chunk_k.cuh) */
            residue_lens(half, lens);
            kda_problem p;
            const uint64_t seed = 3500 + (uint64_t)half + 400 * (uint64_t)g32;
            kp_make(&p, 16, lens, 5, 2, half ? SP_BF16 : SP_F32, SP_KDA_GATE_LOWER_BOUND,
                    every(kernel, 32), seed);
            kp_log_decay(&p, g32 ? SP_F32 : SP_BF16, seed + 10);
            kp_beta_form(&p, SP_KDA_BETA_ACTIVATED, seed + 20);
            p.kernel = kernel;
            char what[64];
            snprintf(what, sizeof what, "log-decay (g %s), lengths %s mod 32", g32 ? "f32" : "bf16",
                     half ? "16..31" : "0..15");
            check_problem(&p, what);
            kp_free(&p);
        }
    {
        /* Safe and factored chunks alternating in each sequence (every
         * stage buffer holding both forms in turn), a factored chunk at the
         * bound's edge. */
        static const int64_t mixed_lens[] = {200, 161, 97};
        kda_problem p;
        kp_make(&p, 3, mixed_lens, 0, 2, SP_F32, SP_KDA_GATE_LOWER_BOUND, every(kernel, 64), 3540);
        kp_mixed_decays(&p, 3541);
        p.kernel = kernel;
        check_problem(&p, "log-decay, safe and factored chunks in turn");
        kp_free(&p);
    }
    static const int64_t sp_lens[] = {100, 33, 64};
    kda_problem p;
    kp_make(&p, 3, sp_lens, 0, 2, SP_F32, SP_KDA_GATE_SOFTPLUS, every(kernel, 32), 3530);
    ((float *)p.host[KB_ALOG])[0] = 3.0f;
    kp_beta_form(&p, SP_KDA_BETA_LOGITS_X2, 3531);
    p.kernel = kernel;
    check_problem(&p, "softplus, A_log 3 on head 0");
    kp_free(&p);
    for (int e = 0; e < 2; e++) {
        kda_problem q;
        kp_make(&q, 3, sp_lens, 0, 2, SP_F32, SP_KDA_GATE_SOFTPLUS, every(kernel, 32), 3550 + (uint64_t)e);
        if (e) {
            kp_extreme_gates(&q, 3560); /* g +-60 .. 100, beta +-10 */
        } else {
            ts_rng r;
            ts_rng_seed(&r, 3561);
            kp_fill_bf16(q.host[KB_G], (size_t)(q.T * q.H * SP_KDA_HEAD_DIM), &r, 15, 40);
            ((float *)q.host[KB_ALOG])[1] = -2.0f; /* 2 .. 5.4 nats a token on head 1 */
        }
        kp_beta_form(&q, SP_KDA_BETA_LOGITS_X2, 3562);
        q.kernel = kernel;
        check_problem(&q, e ? "softplus of +-60 .. 100, beta logits +-10 at 2 sigmoid"
                            : "softplus of 15 .. 40 (its cut-over)");
        kp_free(&q);
    }
}

/* Two sequences of 100 and 40 tokens, 2 heads, fp32 state, checkpoints
 * every 32, on the backend: the problem, its buffers and its arguments. */
static void two_sequences(kda_problem *p, uint64_t seed, void *dev[KB_COUNT], sp_kda_args *a) {
    static const int64_t lens[] = {100, 40};
    kp_make(p, 2, lens, 0, 2, SP_F32, SP_KDA_GATE_LOWER_BOUND, 32, seed);
    kp_upload(M, p, p->host, 0, dev);
    kp_args(p, dev, M->device, a);
}

#ifdef TS_MEM_IS_CUDA
static int wgmma_available(void) {
    const sp_cuda_device *d;
    return sp_cuda_device_((int)M->device.ordinal, SP_CUDA_PART_KDA, &d) == SP_OK && d->kda_wgmma;
}

/* A plan of the caller's that does not serve the call: refused, naming the
 * field, with nothing written. */
static void bad_plan_cases(void) {
    kda_problem p;
    void *dev[KB_COUNT];
    sp_kda_args a;
    two_sequences(&p, 77, dev, &a);
    size_t need = 0;
    CHECK_OK(sp_kda_prefill_workspace_bytes(&a, &need));
    void *ws = M->alloc(need);
    a.workspace = ws;
    a.workspace_bytes = need;
    sp_kda_plan good;
    CHECK_OK(sp_kda_prefill_plan_(&a, &good));
    CHECK(good.kernel == SP_KDA_KERNEL_CHUNKED_TWO_PASS && good.workspace_bytes == need);
    const int64_t slots = sp_kda_two_pass_slots_(p.T, p.N);
    struct {
        int32_t kernel, splits, records;
        int64_t head_slots;
        sp_status want;
    } bad[] = {{SP_KDA_KERNEL_AUTO, 0, 0, 0, SP_ERR_INVALID_ARGUMENT},
               {SP_KDA_KERNEL_CHUNKED, 3, 0, 0, SP_ERR_INVALID_ARGUMENT},
               {SP_KDA_KERNEL_CHUNKED, 16, 0, 0, SP_ERR_INVALID_ARGUMENT},
               {SP_KDA_KERNEL_CHUNKED_TWO_PASS, 0, 3, slots, SP_ERR_INVALID_ARGUMENT},
               {SP_KDA_KERNEL_CHUNKED_TWO_PASS, 0, 2, 0, SP_ERR_INVALID_ARGUMENT},
               {SP_KDA_KERNEL_CHUNKED_TWO_PASS, 0, 4, slots + 1, SP_ERR_INVALID_ARGUMENT},
               {7, 0, 0, 0, SP_ERR_INVALID_ARGUMENT}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sp_kda_plan plan = good;
        plan.kernel = bad[i].kernel, plan.splits = bad[i].splits, plan.records = bad[i].records;
        plan.head_slots = bad[i].head_slots;
        CHECKF(sp_kda_prefill_planned_(&a, &plan, NULL) == bad[i].want, "bad plan %zu: %s", i,
               sp_last_error());
    }
    { /* longest_first is 0 or 1 (the one-pass kernel's) */
        sp_kda_plan plan = good;
        plan.kernel = SP_KDA_KERNEL_CHUNKED, plan.splits = 1, plan.longest_first = 2;
        CHECK_STATUS(sp_kda_prefill_planned_(&a, &plan, NULL), SP_ERR_INVALID_ARGUMENT);
        CHECKF(strstr(sp_last_error(), "longest_first") != NULL, "%s", sp_last_error());
    }
    { /* the decode kernel's rows a warp are 16 or 32, its order 0 or 1 (a
       * call it serves: no checkpoints) */
        kda_problem q;
        void *qd[KB_COUNT];
        sp_kda_args qa;
        static const int64_t lens[] = {3, 1};
        kp_make(&q, 2, lens, 0, 2, SP_F32, SP_KDA_GATE_LOWER_BOUND, 0, 78);
        kp_upload(M, &q, q.host, 0, qd);
        kp_args(&q, qd, M->device, &qa);
        qa.kernel = SP_KDA_KERNEL_DECODE;
        sp_kda_plan plan;
        CHECK_OK(sp_kda_prefill_plan_(&qa, &plan));
        CHECK(plan.kernel == SP_KDA_KERNEL_DECODE && plan.decode_tokens_outer == 1 &&
              plan.decode_rows_per_warp == 16);
        plan.decode_rows_per_warp = 24;
        CHECK_STATUS(sp_kda_prefill_planned_(&qa, &plan, NULL), SP_ERR_INVALID_ARGUMENT);
        CHECKF(strstr(sp_last_error(), "decode_rows_per_warp") != NULL, "%s", sp_last_error());
        plan.decode_rows_per_warp = 16, plan.decode_tokens_outer = 2;
        CHECK_STATUS(sp_kda_prefill_planned_(&qa, &plan, NULL), SP_ERR_INVALID_ARGUMENT);
        CHECKF(strstr(sp_last_error(), "decode_tokens_outer") != NULL, "%s", sp_last_error());
        /* The stream form: a count of pairs, groups outer, 32 rows a warp. */
        plan.decode_tokens_outer = 1, plan.decode_pairs_a_block = -1;
        CHECK_STATUS(sp_kda_prefill_planned_(&qa, &plan, NULL), SP_ERR_INVALID_ARGUMENT);
        CHECKF(strstr(sp_last_error(), "decode_pairs_a_block") != NULL, "%s", sp_last_error());
        plan.decode_pairs_a_block = 2;
        CHECK_STATUS(sp_kda_prefill_planned_(&qa, &plan, NULL), SP_ERR_UNSUPPORTED);
        CHECKF(strstr(sp_last_error(), "groups outer") != NULL, "%s", sp_last_error());
        plan.decode_tokens_outer = 0;
        CHECK_STATUS(sp_kda_prefill_planned_(&qa, &plan, NULL), SP_ERR_UNSUPPORTED);
        CHECKF(strstr(sp_last_error(), "rows a warp") != NULL, "%s", sp_last_error());
        CHECKF(kp_untouched(M, &q, qd), "a refused decode plan wrote");
        kp_release(M, qd);
        kp_free(&q);
    }
    { /* every_gate is 0 or 1, and the K3 build serves no other gate form */
        sp_kda_plan plan = good;
        plan.every_gate = 2;
        CHECK_STATUS(sp_kda_prefill_planned_(&a, &plan, NULL), SP_ERR_INVALID_ARGUMENT);
        sp_kda_args sp_args = a;
        sp_args.gate = SP_KDA_GATE_SOFTPLUS;
        plan.every_gate = 0;
        CHECK_STATUS(sp_kda_prefill_planned_(&sp_args, &plan, NULL), SP_ERR_UNSUPPORTED);
        CHECKF(strstr(sp_last_error(), "every_gate 0") != NULL, "%s", sp_last_error());
    }
    CHECKF(kp_untouched(M, &p, dev), "a refused plan wrote");
    M->release(ws);
    kp_release(M, dev);
    kp_free(&p);
}

/* Whether p's outputs are the same bits with the plan knob *knob 0 and 1
 * (left 0), and were written; what = the knob, for the message. */
static void knob_moves_no_bit(kda_problem *p, int *knob, const char *what) {
    void *off[KB_COUNT], *on[KB_COUNT];
    kp_copy(p, off);
    kp_copy(p, on);
    *knob = 0;
    CHECK_OK(run_backend(p, p->host, off));
    *knob = 1;
    CHECK_OK(run_backend(p, p->host, on));
    *knob = 0;
    CHECKF(kp_outputs_equal(p, off, on), "%s (gate %d, H %lld, build %d) changed the outputs", what,
           (int)p->gate, (long long)p->H, forced.wgmma);
    CHECK(!kp_outputs_equal(p, on, p->host));
    kp_free_copy(off);
    kp_free_copy(on);
}

/* The one-pass kernel's block order moves no arithmetic: longest first,
 * its outputs are batch order's bits, for unequal lengths (ties, an empty
 * and a padded sequence among them), several V-column splits, K3's build
 * and (softplus) the every-gate one. */
static void longest_first_identical(void) {
    static const int64_t lens[] = {33, 300, 0, 95, 300, 7, 161, 64};
    for (int small = 0; small < 2; small++) {
        kda_problem p;
        kp_make(&p, 8, lens, 3, small ? 1 : 12, SP_F32,
                small ? SP_KDA_GATE_SOFTPLUS : SP_KDA_GATE_LOWER_BOUND, 32,
                3700 + (uint64_t)small);
        ((int32_t *)p.host[KB_IDX])[5] = -1; /* a padded sequence */
        p.kernel = SP_KDA_KERNEL_CHUNKED;
        knob_moves_no_bit(&p, &forced.longest_first, "the longest-first order");
        forced.longest_first = -1;
        kp_free(&p);
    }
}

/* The two-pass kernel's plans (records in flight; the share of records
 * prepared before the state pass, the rest beside it in one kernel) only
 * move bytes differently: every plan's o, final state and checkpoints are
 * the bytes of the first plan's, over sequences of every length mod 32 (and
 * an empty one), with checkpoints, in 16 (sequence, head) pairs (so that
 * every plan's one kernel fits the device); for K3's gate (its build), the
 * softplus gate and an f32 log-decay with safe chunks (the every-gate
 * build: records of its prepare kernel's instances and of the one kernel's
 * blocks that read the form at run time). */
static void two_pass_plans_identical(const int (*plans)[2], size_t n, sp_kda_gate gate) {
    int64_t lens[8];
    for (int i = 0; i < 8; i++) lens[i] = i == 5 ? 0 : 9 * i + 32 * (i % 4) + 1;
    kda_problem p;
    kp_make(&p, 8, lens, 3, 2, SP_F32,
            gate == SP_KDA_GATE_LOG_DECAY ? SP_KDA_GATE_LOWER_BOUND : gate, 32, 3400);
    if (gate == SP_KDA_GATE_LOG_DECAY) kp_log_decay(&p, SP_F32, 3401);
    p.kernel = SP_KDA_KERNEL_CHUNKED_TWO_PASS;
    void *first[KB_COUNT], *other[KB_COUNT];
    kp_copy(&p, first);
    kp_copy(&p, other);
    forced.records = plans[0][0], forced.head_permille = plans[0][1];
    CHECK_OK(run_backend(&p, p.host, first));
    for (size_t i = 1; i < n; i++) {
        forced.records = plans[i][0], forced.head_permille = plans[i][1];
        CHECK_OK(run_backend(&p, p.host, other));
        CHECKF(kp_outputs_equal(&p, first, other),
               "two-pass plan %d.%d, gate %d: outputs differ from %d.%d", plans[i][0],
               plans[i][1], (int)gate, plans[0][0], plans[0][1]);
    }
    forced.records = forced.head_permille = 0;
    kp_free_copy(first);
    kp_free_copy(other);
    kp_free(&p);
}
#endif

/* The plan's rules as functions of their inputs (plan.h). The head share
 * (sp_kda_two_pass_head_slots_): two kernels
 * with four records in flight, with no block slot free, and where few are
 * (32 pairs on 132 multiprocessors: 8); with two, the best shares measured
 * on the H200, a little above (0.12 at 20 pairs, 0.49 at 24, 0.76 at 28);
 * never no slot. */
static void plan_rules_cases(void) {
    CHECK(sp_kda_two_pass_head_slots_(12, 132, 4, 1000) == 1000);
    CHECK(sp_kda_two_pass_head_slots_(32, 132, 2, 1000) == 1000);
    CHECK(sp_kda_two_pass_head_slots_(33, 132, 2, 1000) == 1000);
    CHECK(sp_kda_two_pass_head_slots_(40, 132, 2, 1000) == 1000);
    const int64_t h20 = sp_kda_two_pass_head_slots_(20, 132, 2, 1000),
                  h24 = sp_kda_two_pass_head_slots_(24, 132, 2, 1000),
                  h28 = sp_kda_two_pass_head_slots_(28, 132, 2, 1000);
    CHECKF(h20 >= 80 && h20 <= 160, "20 pairs: %lld head slots of 1000", (long long)h20);
    CHECKF(h24 >= 440 && h24 <= 540, "24 pairs: %lld head slots of 1000", (long long)h24);
    CHECKF(h28 >= 700 && h28 <= 800, "28 pairs: %lld head slots of 1000", (long long)h28);
    CHECK(sp_kda_two_pass_head_slots_(17, 132, 2, 10) == 1);
    /* Records in flight: two where that makes one wave of state-pass blocks
     * out of more (17 to 33 pairs on 132), four elsewhere. */
    CHECK(sp_kda_two_pass_records_(12, 132) == 4 && sp_kda_two_pass_records_(16, 132) == 4);
    CHECK(sp_kda_two_pass_records_(17, 132) == 2 && sp_kda_two_pass_records_(33, 132) == 2);
    CHECK(sp_kda_two_pass_records_(34, 132) == 4);
    /* The one-pass kernel: the most V-column splits that keep one wave of
     * blocks; the wgmma build where a block owns all 128 columns. */
    CHECK(sp_kda_chunked_splits_(96, 132) == 1 && sp_kda_chunked_splits_(66, 132) == 2);
    CHECK(sp_kda_chunked_splits_(33, 132) == 4 && sp_kda_chunked_splits_(1, 132) == 8);
    CHECK(sp_kda_chunked_wgmma_(1) && !sp_kda_chunked_wgmma_(2));
    /* Longest sequence first (docs/TUNING.md, "ONE_PASS_LONGEST_FIRST"):
     * where the blocks make more than one wave and the sequences average
     * 1,024 tokens or more, as 16384 tokens in 8 sequences at 96 and 32
     * heads; not at 512 tokens a sequence (16384 in 32, 4096 in 8), nor in
     * one wave (4 sequences at 32 heads), nor for one sequence or more than
     * the order ranks. */
    CHECK(sp_kda_chunked_longest_first_(16384, 8, 768, 132));
    CHECK(sp_kda_chunked_longest_first_(16384, 8, 256, 132));
    CHECK(sp_kda_chunked_longest_first_(8192, 8, 133, 132));
    CHECK(!sp_kda_chunked_longest_first_(8192, 8, 132, 132));
    CHECK(!sp_kda_chunked_longest_first_(8192, 4, 128, 132));
    CHECK(!sp_kda_chunked_longest_first_(16384, 32, 3072, 132));
    CHECK(!sp_kda_chunked_longest_first_(4096, 8, 768, 132));
    CHECK(sp_kda_chunked_longest_first_(8192, 8, 768, 132) &&
          !sp_kda_chunked_longest_first_(8191, 8, 768, 132));
    CHECK(!sp_kda_chunked_longest_first_(16384, 1, 768, 132));
    CHECK(sp_kda_chunked_longest_first_(65536, 64, 6144, 132) &&
          !sp_kda_chunked_longest_first_(66560, 65, 6240, 132));
    /* The decode kernel's rows a warp (docs/TUNING.md,
     * "DECODE_ROWS_PER_WARP"): a bf16 pool's step (groups outer) 32, every
     * other call 16. */
    CHECK(sp_kda_decode_rows_per_warp_(1, 0) == 32);
    CHECK(sp_kda_decode_rows_per_warp_(1, 1) == 16);
    CHECK(sp_kda_decode_rows_per_warp_(0, 0) == 16);
    CHECK(sp_kda_decode_rows_per_warp_(0, 1) == 16);
    /* The stream form's pairs a block (docs/TUNING.md, "DECODE_STREAM"):
     * one wave, as few pairs a block as that takes. */
    CHECK(sp_kda_decode_pairs_a_block_(768, 528) == 2);
    CHECK(sp_kda_decode_pairs_a_block_(528, 528) == 1 && sp_kda_decode_pairs_a_block_(1, 528) == 1);
    CHECK(sp_kda_decode_pairs_a_block_(529, 528) == 2);
    CHECK(sp_kda_decode_pairs_a_block_(49152, 528) == 94);
    CHECK(sp_kda_decode_pairs_a_block_(768, 0) == 0 && sp_kda_decode_pairs_a_block_(0, 528) == 0);
}

/* Which kernel AUTO picks, and forced kernels that cannot serve a call:
 * SP_ERR_UNSUPPORTED (or INVALID_ARGUMENT for no kernel at all), nothing
 * written. */
static void dispatch_cases(void) {
    kda_problem p;
    void *dev[KB_COUNT];
    sp_kda_args a;
    two_sequences(&p, 51, dev, &a);
    sp_kda_kernel k = SP_KDA_KERNEL_AUTO;
    CHECK_OK(sp_kda_prefill_kernel(&a, &k));
    CHECKF(k == SP_KDA_KERNEL_CHUNKED, "AUTO on 70 tokens a sequence chose %d", (int)k);
    a.kernel = SP_KDA_KERNEL_RECURRENT;
    CHECK_OK(sp_kda_prefill_kernel(&a, &k));
    CHECK(k == SP_KDA_KERNEL_RECURRENT);
    /* Gate and beta forms other than K3's: AUTO takes the chunked kernels'
     * every-gate builds (plan.c, CHUNKED_EVERY_GATE_AUTO), the one-pass
     * kernel here without a workspace (the two-pass kernel's is reported). */
    a.kernel = SP_KDA_KERNEL_AUTO;
    const size_t two_pass_need = (size_t)(p.T / 32 + p.N) * (size_t)p.H * (37504 + 4);
    void *g32 = M->alloc(p.bytes[KB_G] * 2); /* an f32 g of its own (twice the bf16 g's bytes) */
    for (int f = 0; f < 4; f++) {
        sp_kda_args o = a;
        if (f == 0) o.gate = SP_KDA_GATE_SOFTPLUS;
        if (f == 1) o.gate = SP_KDA_GATE_LOG_DECAY;
        if (f == 2) o.beta_form = SP_KDA_BETA_ACTIVATED;
        if (f == 3) o.gate = SP_KDA_GATE_LOG_DECAY, o.g.dtype = SP_F32, o.g.data = g32;
        CHECK_OK(sp_kda_prefill_kernel(&o, &k));
        CHECKF(k == SP_KDA_KERNEL_CHUNKED, "form %d: AUTO chose %s", f, kernel_name(k));
        size_t need = 1;
        CHECK_OK(sp_kda_prefill_workspace_bytes(&o, &need));
        CHECKF(need == two_pass_need, "form %d: workspace %zu", f, need);
    }
    M->release(g32);
    size_t need = 0;

    /* With a large enough workspace, AUTO takes the two-pass kernel for
     * these 4 (sequence, head) pairs; one byte less and it does not. */
    kp_args(&p, dev, M->device, &a);
    CHECK_OK(sp_kda_prefill_workspace_bytes(&a, &need));
    const size_t want_need = (size_t)(p.T / 32 + p.N) * (size_t)p.H * (37504 + 4);
    CHECKF(need == want_need, "workspace %zu, want %zu", need, want_need);
    void *ws = M->alloc(need + 256);
    a.workspace = ws;
    a.workspace_bytes = need;
    CHECK_OK(sp_kda_prefill_kernel(&a, &k));
    CHECKF(k == SP_KDA_KERNEL_CHUNKED_TWO_PASS, "AUTO with a workspace chose %d", (int)k);
    a.workspace_bytes = need - 1;
    CHECK_OK(sp_kda_prefill_kernel(&a, &k));
    CHECK(k == SP_KDA_KERNEL_CHUNKED);
    a.kernel = SP_KDA_KERNEL_CHUNKED_TWO_PASS;
    CHECK_STATUS(sp_kda_prefill(&a, NULL), SP_ERR_WORKSPACE_TOO_SMALL);
    a.workspace_bytes = need;
    a.workspace = (char *)ws + 8;
    CHECK_STATUS(sp_kda_prefill(&a, NULL), SP_ERR_MISALIGNED);
    a.workspace = NULL;
    CHECK_STATUS(sp_kda_prefill(&a, NULL), SP_ERR_INVALID_ARGUMENT);
    a.workspace = a.o.data; /* the output's memory */
    CHECK_STATUS(sp_kda_prefill(&a, NULL), SP_ERR_OVERLAP);
    a.workspace = ws;
    a.workspace_bytes = 0;
    CHECK_STATUS(sp_kda_prefill(&a, NULL), SP_ERR_INVALID_ARGUMENT); /* a pointer, no size */
    M->release(ws);
    CHECK(kp_untouched(M, &p, dev)); /* every refusal above wrote nothing */
    for (int c = 1; c < 7; c++) {
        kp_args(&p, dev, M->device, &a);
        a.kernel = c == 5 || c == 6 ? SP_KDA_KERNEL_CHUNKED_TWO_PASS : SP_KDA_KERNEL_CHUNKED;
        sp_status want = SP_ERR_UNSUPPORTED;
        const char *needle = NULL;
        switch (c) {
        case 1:
            a.checkpoint_interval = 16;
            needle = "multiple of 32";
            break;
        case 2: /* a dense q 2 bytes off 16-byte alignment: k's buffer, shifted */
            a.q.data = (char *)a.k.data + 2;
            a.q.shape[1] -= 1;
            a.k.shape[1] -= 1, a.v.shape[1] -= 1, a.g.shape[1] -= 1, a.o.shape[1] -= 1;
            a.beta.shape[1] -= 1;
            needle = "16-byte aligned";
            break;
        case 3: a.kernel = 7; want = SP_ERR_INVALID_ARGUMENT; needle = "kernel"; break;
        case 4: a.kernel = -1; want = SP_ERR_INVALID_ARGUMENT; needle = "kernel"; break;
        case 5: want = SP_ERR_WORKSPACE_TOO_SMALL; needle = "sp_kda_prefill_workspace_bytes"; break;
        case 6: /* o 2 bytes off 16-byte alignment (its outputs are 16-byte stores) */
            a.o.data = (char *)a.o.data + 2;
            a.q.shape[1] -= 1, a.k.shape[1] -= 1, a.v.shape[1] -= 1, a.g.shape[1] -= 1;
            a.o.shape[1] -= 1, a.beta.shape[1] -= 1;
            needle = "16-byte aligned";
            break;
        }
        sp_status s = sp_kda_prefill(&a, NULL);
        CHECKF(s == want, "dispatch case %d: got %s, want %s (%s)", c, sp_status_string(s),
               sp_status_string(want), sp_last_error());
        CHECKF(strstr(sp_last_error(), needle) != NULL, "dispatch case %d: message '%s'", c,
               sp_last_error());
        CHECK_STATUS(sp_kda_prefill_kernel(&a, &k), want);
        CHECKF(kp_untouched(M, &p, dev), "dispatch case %d: an output was written", c);
    }
    kp_release(M, dev);
    kp_free(&p);
}

/* Where AUTO stops choosing the two-pass kernel, given the workspace it
 * asks for: 32 (sequence, head) pairs take it, 33 the one-pass kernel
 * (SP_KDA_TWO_PASS_MAX_PAIRS). */
static void dispatch_pairs_cases(void) {
    static const int64_t lens[] = {64};
    for (int64_t H = 32; H <= 33; H++) {
        kda_problem p;
        kp_make(&p, 1, lens, 0, H, SP_F32, SP_KDA_GATE_LOWER_BOUND, 0, 52);
        void *dev[KB_COUNT];
        kp_upload(M, &p, p.host, 0, dev);
        sp_kda_args a;
        kp_args(&p, dev, M->device, &a);
        size_t need = 0;
        CHECK_OK(sp_kda_prefill_workspace_bytes(&a, &need));
        void *ws = M->alloc(need + 256);
        a.workspace = ws;
        a.workspace_bytes = need;
        sp_kda_kernel k = SP_KDA_KERNEL_AUTO;
        CHECK_OK(sp_kda_prefill_kernel(&a, &k));
        const sp_kda_kernel want = H <= 32 ? SP_KDA_KERNEL_CHUNKED_TWO_PASS : SP_KDA_KERNEL_CHUNKED;
        CHECKF(k == want, "AUTO at %lld pairs chose %s", (long long)H, kernel_name(k));
        M->release(ws);
        kp_release(M, dev);
        kp_free(&p);
    }
}

/* Index arrays live on the device: the kernel skips a sequence whose slot
 * or token range is out of bounds, writing nothing for it, and runs the
 * others exactly as usual. */
static void device_guard_cases(int32_t kernel) {
    static const int64_t lens[] = {20, 33, 17};
    kda_problem p;
    kp_make(&p, 3, lens, 0, 2, SP_F32, SP_KDA_GATE_LOWER_BOUND, every(kernel, 32), 31);
    p.kernel = kernel;
    void *good[KB_COUNT], *bad[KB_COUNT], *init[KB_COUNT];
    kp_copy(&p, good);
    kp_copy(&p, bad);
    kp_copy(&p, init);
    CHECK_OK(run_backend(&p, p.host, good));
    const size_t row = (size_t)p.H * SP_KDA_HEAD_DIM * 2;
    const int32_t *idx = p.host[KB_IDX];
    const size_t slot_bytes = (size_t)p.pitch * 4;

    ((int32_t *)init[KB_IDX])[1] = (int32_t)p.slots; /* sequence 1: slot out of range */
    CHECK_OK(run_backend(&p, init, bad));
    const char *go = good[KB_O], *bo = bad[KB_O], *po = p.host[KB_O];
    CHECK(memcmp(bo + 20 * row, po + 20 * row, 33 * row) == 0);           /* skipped */
    CHECK(memcmp(bo, go, 20 * row) == 0);                                  /* others */
    CHECK(memcmp(bo + 53 * row, go + 53 * row, 17 * row) == 0);
    CHECK(memcmp((char *)bad[KB_STATE] + idx[0] * slot_bytes,
                 (char *)good[KB_STATE] + idx[0] * slot_bytes, slot_bytes) == 0);

    memcpy(init[KB_IDX], p.host[KB_IDX], p.bytes[KB_IDX]);
    ((int64_t *)init[KB_CU])[3] = p.T + 5; /* sequence 2 reaches past T */
    CHECK_OK(run_backend(&p, init, bad));
    CHECK(memcmp(bo + 53 * row, po + 53 * row, 17 * row) == 0);
    CHECK(memcmp(bo, go, 53 * row) == 0);
    CHECK(memcmp((char *)bad[KB_STATE] + idx[2] * slot_bytes,
                 (char *)p.host[KB_STATE] + idx[2] * slot_bytes, slot_bytes) == 0);
    kp_free_copy(good);
    kp_free_copy(bad);
    kp_free_copy(init);
    kp_free(&p);
}

/* The batches main and chunked_cases run: sequence lengths (SP_TEST_SMALL:
 * small), a batch with an empty sequence inside, both state dtypes. */
static const int64_t batch_lens[] = {1, 63, 64, 65, 300}, small_lens[] = {1, 17, 40};
static const int64_t extra_lens[] = {0, 130, 2};
static const sp_dtype state_dts[] = {SP_F32, SP_BF16};

/* The one-pass kernel's cases (and the two-pass kernel's: kernel TP);
 * forms: also every gate and beta form and the every-gate builds' edges
 * (once a kernel and build: they do not depend on the two-pass plans). */
static void chunked_cases(int32_t kernel, int sm, int forms) {
    if (sm) {
        batch_case(kernel, SP_F32, SP_KDA_GATE_LOWER_BOUND, 32, small_lens, 3, 2);
        batch_case(kernel, SP_BF16, SP_KDA_GATE_LOWER_BOUND, 0, small_lens, 3, 1);
    } else {
        for (int di = 0; di < 2; di++)
            for (int ii = 0; ii < 3; ii++)
                batch_case(kernel, state_dts[di], SP_KDA_GATE_LOWER_BOUND, 32 * ii, batch_lens, 5,
                           3);
        batch_case(kernel, SP_F32, SP_KDA_GATE_LOWER_BOUND, 64, extra_lens, 3, 4);
    }
    chunked_edge_cases(kernel, sm);
    if (forms) {
        forms_cases(kernel);
        every_gate_edge_cases(kernel);
    }
    for (int di = 0; di < 2; di++) empty_sequence_case(kernel, state_dts[di]);
    padded_case(kernel);
    device_guard_cases(kernel);
}

int main(void) {
    M = ts_mem_or_skip(TS_MEM_BACKEND);
    static const int32_t gates[] = {SP_KDA_GATE_LOWER_BOUND, SP_KDA_GATE_SOFTPLUS};
    static const int64_t intervals[] = {0, 1, 32, 64};
    const int32_t R = SP_KDA_KERNEL_RECURRENT, CH = SP_KDA_KERNEL_CHUNKED,
                  TP = SP_KDA_KERNEL_CHUNKED_TWO_PASS;
    const int sm = ts_test_small();
    if (!on_device()) { /* the CPU prefill: one path, AUTO */
        one_token_case(SP_KDA_GATE_LOWER_BOUND, 0.0f, SP_KDA_BETA_LOGITS, SP_BF16);
        one_token_case(SP_KDA_GATE_SOFTPLUS, 0.3f, SP_KDA_BETA_LOGITS, SP_BF16);
        one_token_case(SP_KDA_GATE_LOG_DECAY, 0.0f, SP_KDA_BETA_LOGITS, SP_BF16);
        one_token_case(SP_KDA_GATE_LOG_DECAY, 0.0f, SP_KDA_BETA_ACTIVATED, SP_F32);
        one_token_case(SP_KDA_GATE_SOFTPLUS, 0.0f, SP_KDA_BETA_LOGITS_X2, SP_BF16);
        forms_cases(SP_KDA_KERNEL_AUTO);
        for (int di = 0; di < 2; di++)
            for (int gi = 0; gi < 2; gi++)
                for (int ii = 0; ii < 4; ii++)
                    batch_case(SP_KDA_KERNEL_AUTO, state_dts[di], gates[gi], intervals[ii],
                               sm ? small_lens : batch_lens, sm ? 3 : 5, 2);
        batch_case(SP_KDA_KERNEL_AUTO, SP_F32, SP_KDA_GATE_SOFTPLUS, 64, extra_lens, 3, 2);
        /* The chunked kernels' edge cases (lengths of every residue, extreme
         * gates and betas, every gate form's edges) on the CPU backend too. */
        chunked_edge_cases(SP_KDA_KERNEL_AUTO, 1);
        every_gate_edge_cases(SP_KDA_KERNEL_AUTO);
        for (int di = 0; di < 2; di++) empty_sequence_case(SP_KDA_KERNEL_AUTO, state_dts[di]);
        padded_case(SP_KDA_KERNEL_AUTO);
        host_plan_cases();
    } else {
        if (sm) {
            batch_case(R, SP_F32, SP_KDA_GATE_LOWER_BOUND, 16, small_lens, 3, 2);
            batch_case(R, SP_BF16, SP_KDA_GATE_SOFTPLUS, 1, small_lens, 3, 1);
        } else {
            for (int di = 0; di < 2; di++)
                for (int gi = 0; gi < 2; gi++)
                    for (int ii = 0; ii < 4; ii++)
                        batch_case(R, state_dts[di], gates[gi], intervals[ii], batch_lens, 5, 3);
            batch_case(R, SP_F32, SP_KDA_GATE_SOFTPLUS, 64, extra_lens, 3, 4);
        }
        for (int di = 0; di < 2; di++) empty_sequence_case(R, state_dts[di]);
        padded_case(R);
        device_guard_cases(R);
        /* The decode kernel: what the recurrent kernel serves, checkpoints aside;
         * sequences of up to 300 tokens (its tokens go in chunks of 8). */
        const int32_t DEC = SP_KDA_KERNEL_DECODE;
        for (int di = 0; di < 2; di++)
            for (int gi = 0; gi < 2; gi++)
                batch_case(DEC, state_dts[di], gates[gi], 0, sm ? small_lens : batch_lens,
                           sm ? 3 : 5, 3);
        for (int di = 0; di < 2; di++) empty_sequence_case(DEC, state_dts[di]);
        padded_case(DEC);
        device_guard_cases(DEC);
        forms_cases(R);
        forms_cases(DEC);
        every_gate_edge_cases(R);
        every_gate_edge_cases(DEC);
#ifdef TS_MEM_IS_CUDA
        /* The one-pass kernel's builds, each forced where the device has it:
         * the wgmma build and the mma.sync build; or the one SP_TEST_KDA_BUILD
         * names (0 mma.sync, 1 wgmma). */
        const char *only = getenv("SP_TEST_KDA_BUILD");
        const int has_wgmma = wgmma_available();
        for (int b = 0; b < 2; b++) {
            if (only ? b != atoi(only) : b && !has_wgmma) continue;
            forced.wgmma = b;
            chunked_cases(CH, sm, 1);
        }
        forced.wgmma = -1;
#else
        chunked_cases(CH, sm, 1);
#endif
#ifdef TS_MEM_IS_CUDA
        /* The two-pass kernel's plans (R records in flight, P thousandths
         * prepared first: 1000 two kernels), each forced, then the
         * library's; or the one SP_TEST_KDA_TWO_PASS names ("R.P"). */
        static const int plans[][2] = {{2, 1000}, {4, 1000}, {2, 300}, {4, 500}, {2, 1}, {0, 0}};
        const char *plan = getenv("SP_TEST_KDA_TWO_PASS");
        for (size_t i = 0; i < sizeof plans / sizeof plans[0]; i++) {
            int r = plans[i][0], c = plans[i][1];
            if (plan && sscanf(plan, "%d.%d", &r, &c) != 2) {
                fprintf(stderr, "SP_TEST_KDA_TWO_PASS: %s is not R.P\n", plan);
                return 2;
            }
            if (plan && i > 0) break;
            forced.records = r, forced.head_permille = c;
            chunked_cases(TP, sm, r == 0 || plan != NULL); /* the library's plan, or the one named */
        }
        forced.records = forced.head_permille = 0;
        two_pass_plans_identical(plans, sizeof plans / sizeof plans[0], SP_KDA_GATE_LOWER_BOUND);
        two_pass_plans_identical(plans, sizeof plans / sizeof plans[0], SP_KDA_GATE_SOFTPLUS);
        two_pass_plans_identical(plans, sizeof plans / sizeof plans[0], SP_KDA_GATE_LOG_DECAY);
#else
        chunked_cases(TP, sm, 1);
#endif
        /* The every-gate builds on K3's forms too (the lower-bound gate at its
         * bound: chunks of either form), the plan's build and records. */
        forced.every_gate = 1;
        chunked_cases(CH, sm, 0);
        chunked_cases(TP, sm, 0);
        forced.every_gate = 0;
        dispatch_cases();
        dispatch_pairs_cases();
#ifdef TS_MEM_IS_CUDA
        bad_plan_cases();
        longest_first_identical();
#endif
    }
    plan_rules_cases();
    noop_cases();
    bad_argument_cases();
    return sp_test_finish(ts_mem_test_name(M, "test_kda"));
}
