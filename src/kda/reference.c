/*
 * reference.c — the float64 KDA prefill that the tests trust: the
 * recurrence of stridepack_kda.h written out step by step (decay, delta,
 * rank-1 update, output from the updated state), one (sequence, head) at a
 * time, no algebraic shortcuts. Results are rounded to their dtypes once.
 */
#include "kda/kda_internal.h"

#include <stdlib.h>

enum { D = SP_KDA_D };

typedef struct ref_scratch {
    double S[D][D]; /* S[d][j]: d indexes K, j indexes V */
    double q[D], k[D], v[D], g[D], u[D];
} ref_scratch;

static double read_state(const sp_kda_dims *dm, const void *p, int64_t at) {
    return dm->state_bf16 ? (double)sp_bf16_to_f32_(((const uint16_t *)p)[at])
                          : (double)((const float *)p)[at];
}

static void write_state(const sp_kda_dims *dm, void *p, int64_t at, double x) {
    if (dm->state_bf16)
        ((uint16_t *)p)[at] = sp_f64_to_bf16_(x);
    else
        ((float *)p)[at] = (float)x;
}

/* S[d][j] of head h at base + h*D*D + sp_kda_state_at_(k_first, d, j); `base`
 * addresses the slot or the checkpoint row (V-first). */
static void save(const sp_kda_dims *dm, void *p, int64_t base, int64_t h, int k_first,
                 const ref_scratch *w) {
    for (int j = 0; j < D; j++)
        for (int d = 0; d < D; d++)
            write_state(dm, p, base + h * D * D + sp_kda_state_at_(k_first, d, j), w->S[d][j]);
}

static double gate64(const sp_kda_args *a, double A_log, double x) {
    if (a->gate == SP_KDA_GATE_LOWER_BOUND)
        return (double)a->lower_bound / (1.0 + exp(-exp(A_log) * x));
    /* softplus(x) = log(1 + e^x), written so that neither branch overflows */
    double sp = x > 0 ? x + log1p(exp(-x)) : log1p(exp(x));
    return -exp(A_log) * sp;
}

/* Element d of token t, head h of an input view (bf16, or f32 for a
 * log-decay g). */
static double bf(const sp_tensor *x, int64_t t, int64_t h, int64_t d) {
    const int64_t at = sp_kda_at_(x->strides[1], x->strides[2], t, h) + d;
    if (x->dtype == SP_F32) return (double)((const float *)x->data)[at];
    return (double)sp_bf16_to_f32_(((const uint16_t *)x->data)[at]);
}

/* b_t from the beta input x, by sp_kda_beta. */
static double beta64(int form, double x) {
    if (form == SP_KDA_BETA_ACTIVATED) return x;
    return (form == SP_KDA_BETA_LOGITS_X2 ? 2.0 : 1.0) / (1.0 + exp(-x));
}

static void run(const sp_kda_args *a, const sp_kda_dims *dm, int64_t n, int64_t h,
                ref_scratch *w) {
    const sp_kda_index_ x = sp_kda_index_of_(a, dm);
    sp_kda_seq_ seq;
    const double A_log = ((const float *)a->A_log.data)[h];
    const float *bias = (const float *)a->dt_bias.data + h * D;
    const double scale = a->scale != 0.0f ? (double)a->scale : 1.0 / sqrt((double)D);
    /* A padded sequence is skipped: nothing read or written for it. An
     * empty one leaves its slot's bits as they are: a bf16 slot read and
     * rounded back would quiet a signalling NaN. */
    if (!sp_kda_sequence_(&x, n, &seq) || seq.len == 0) return;
    int64_t crow = seq.crow;

    for (int j = 0; j < D; j++)
        for (int d = 0; d < D; d++)
            w->S[d][j] = seq.read < 0 ? 0.0
                                     : read_state(dm, a->state.data,
                                                  seq.read * dm->pitch + h * D * D +
                                                      sp_kda_state_at_(dm->state_k_first, d, j));

    for (int64_t t = seq.bos; t < seq.bos + seq.len; t++) {
        const int64_t at = (t * dm->H + h) * D;
        double sq = 0, sk = 0;
        for (int d = 0; d < D; d++) {
            w->q[d] = bf(&a->q, t, h, d);
            w->k[d] = bf(&a->k, t, h, d);
            w->v[d] = bf(&a->v, t, h, d);
            w->g[d] = a->gate == SP_KDA_GATE_LOG_DECAY
                          ? bf(&a->g, t, h, d)
                          : gate64(a, A_log, bf(&a->g, t, h, d) + (double)bias[d]);
            sq += w->q[d] * w->q[d];
            sk += w->k[d] * w->k[d];
        }
        const double nq = sqrt(sq + SP_KDA_EPS), nk = sqrt(sk + SP_KDA_EPS);
        for (int d = 0; d < D; d++) {
            w->q[d] = scale * w->q[d] / nq;
            w->k[d] = w->k[d] / nk;
        }
        const double b = beta64(a->beta_form, bf(&a->beta, t, h, 0));

        /* S <- diag(exp(g)) S */
        for (int d = 0; d < D; d++) {
            const double e = exp(w->g[d]);
            for (int j = 0; j < D; j++) w->S[d][j] *= e;
        }
        /* u = v - S^T k^ */
        for (int j = 0; j < D; j++) {
            double acc = 0;
            for (int d = 0; d < D; d++) acc += w->S[d][j] * w->k[d];
            w->u[j] = w->v[j] - acc;
        }
        /* S <- S + b k^ u^T */
        for (int d = 0; d < D; d++)
            for (int j = 0; j < D; j++) w->S[d][j] += b * w->k[d] * w->u[j];
        /* o = S^T q^ */
        uint16_t *o = (uint16_t *)a->o.data + at;
        for (int j = 0; j < D; j++) {
            double acc = 0;
            for (int d = 0; d < D; d++) acc += w->S[d][j] * w->q[d];
            o[j] = sp_f64_to_bf16_(acc);
        }
        if (dm->interval > 0 && (t - seq.bos + 1) % dm->interval == 0)
            save(dm, a->checkpoints.data, (crow++) * dm->H * D * D, h, 0, w);
        const int64_t to = dm->width > 0 ? sp_kda_token_slot_(&x, n, t - seq.bos) : -1;
        if (to >= 0) save(dm, a->state.data, to * dm->pitch, h, dm->state_k_first, w);
    }
    if (seq.write >= 0) save(dm, a->state.data, seq.write * dm->pitch, h, dm->state_k_first, w);
}

sp_status sp_kda_prefill_ref_(const sp_kda_args *a, const sp_kda_dims *dm) {
    ref_scratch *w = malloc(sizeof *w);
    SP_REQUIRE(w, SP_ERR_OUT_OF_MEMORY, "sp_kda_prefill_reference: no memory for %zu bytes",
               sizeof *w);
    for (int64_t n = 0; n < dm->N; n++)
        for (int64_t h = 0; h < dm->H; h++) run(a, dm, n, h, w);
    free(w);
    return SP_OK;
}
