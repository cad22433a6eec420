/*
 * prefill_cpu.c — the fp32 CPU prefill: one OpenMP task per (sequence,
 * head), each running the token recurrence on a private 128x128 state.
 *
 * The state is kept K-first here (S[d][j], row d contiguous over j) so that
 * every pass over it is a loop over j with d fixed: the decay, both
 * reductions over d (accumulated per j, in d order) and the rank-1 update
 * all vectorize without reassociating a sum.
 *
 * One pass decays S and reduces it against k^ and q^ at once; the output
 * then follows from o = S'^T q^ + b (k^.q^) u, the same value as S_new^T q^
 * (S_new = S' + b k^ u^T) without a third pass. The CUDA kernel uses the
 * same algebra.
 */
#include "kda/kda_internal.h"

#include <omp.h>
#include <stdlib.h>

enum { D = SP_KDA_D };

typedef struct scratch {
    float S[D * D];                /* S[d*D + j] */
    float q[D], k[D], v[D], dec[D]; /* the token, preprocessed */
    float ks[D], qs[D], bu[D];
} scratch;

/* Pool element S[d][j] of head h lives at base + h*D*D + sp_kda_state_at_(.., d, j). */
static void load_state(const sp_kda_dims *dm, const void *pool, int64_t base, int64_t h,
                       float *S) {
    base += h * D * D;
    for (int j = 0; j < D; j++)
        for (int d = 0; d < D; d++) {
            const int64_t at = base + sp_kda_state_at_(dm->state_k_first, d, j);
            S[d * D + j] = dm->state_bf16 ? sp_bf16_to_f32_(((const uint16_t *)pool)[at])
                                          : ((const float *)pool)[at];
        }
}

static void store_state(const sp_kda_dims *dm, void *pool, int64_t base, int64_t h, int k_first,
                        const float *S) {
    base += h * D * D;
    for (int j = 0; j < D; j++)
        for (int d = 0; d < D; d++) {
            const int64_t at = base + sp_kda_state_at_(k_first, d, j);
            if (dm->state_bf16)
                ((uint16_t *)pool)[at] = sp_f32_to_bf16_(S[d * D + j]);
            else
                ((float *)pool)[at] = S[d * D + j];
        }
}

/* Token t, head h of an input view. */
static const uint16_t *row(const sp_tensor *x, int64_t t, int64_t h) {
    return (const uint16_t *)x->data + sp_kda_at_(x->strides[1], x->strides[2], t, h);
}

/* Normalized q^, k^, v, exp(g) of token t into w; returns b, sets *kq. */
static float prep_token(const sp_kda_args *a, const sp_kda_dims *dm, int64_t t, int64_t h,
                        float expA, scratch *w, float *kq) {
    const uint16_t *q = row(&a->q, t, h), *k = row(&a->k, t, h);
    const uint16_t *v = row(&a->v, t, h);
    const int64_t g_at = sp_kda_at_(a->g.strides[1], a->g.strides[2], t, h);
    const float *bias = (const float *)a->dt_bias.data + h * D;
    float sq = 0.0f, sk = 0.0f;
    for (int d = 0; d < D; d++) {
        float qf = sp_bf16_to_f32_(q[d]), kf = sp_bf16_to_f32_(k[d]);
        sq += qf * qf;
        sk += kf * kf;
        w->q[d] = qf;
        w->k[d] = kf;
    }
    const float rq = dm->scale / sqrtf(sq + (float)SP_KDA_EPS);
    const float rk = 1.0f / sqrtf(sk + (float)SP_KDA_EPS);
    float dot = 0.0f;
    for (int d = 0; d < D; d++) {
        w->q[d] *= rq;
        w->k[d] *= rk;
        dot += w->k[d] * w->q[d];
        w->v[d] = sp_bf16_to_f32_(v[d]);
        const float x = sp_kda_float_at_(a->g.data, a->g.dtype == SP_F32, g_at + d);
        w->dec[d] = expf(sp_kda_log_decay_f32_(a->gate, a->lower_bound, expA, x, bias[d]));
    }
    *kq = dot;
    const int64_t b_at = sp_kda_at_(a->beta.strides[1], a->beta.strides[2], t, h);
    return sp_kda_beta_f32_(a->beta_form, sp_kda_float_at_(a->beta.data, a->beta.dtype == SP_F32,
                                                           b_at));
}

/* One token step on S; writes o's row. restrict: the state and the
 * accumulators are disjoint, which lets the j loops vectorize. */
static void step(scratch *w, float b, float kq, uint16_t *o_row) {
    float *restrict S = w->S, *restrict ks = w->ks, *restrict qs = w->qs, *restrict bus = w->bu;
    for (int j = 0; j < D; j++) ks[j] = qs[j] = 0.0f;
    for (int d = 0; d < D; d++) {
        const float e = w->dec[d], kd = w->k[d], qd = w->q[d];
        float *restrict row = S + d * D;
        for (int j = 0; j < D; j++) {
            float s = row[j] * e;
            row[j] = s;
            ks[j] += s * kd;
            qs[j] += s * qd;
        }
    }
    for (int j = 0; j < D; j++) {
        float bu = b * (w->v[j] - ks[j]);
        bus[j] = bu;
        o_row[j] = sp_f32_to_bf16_(qs[j] + bu * kq);
    }
    for (int d = 0; d < D; d++) {
        const float kd = w->k[d];
        float *restrict row = S + d * D;
        for (int j = 0; j < D; j++) row[j] += kd * bus[j];
    }
}

static void run_task(const sp_kda_args *a, const sp_kda_dims *dm, const sp_kda_index_ *x,
                     int64_t n, int64_t h, scratch *w) {
    const float expA = expf(((const float *)a->A_log.data)[h]);
    const int64_t hd = dm->H * D * D; /* checkpoint row pitch (dense) */
    sp_kda_seq_ sq;
    /* A padded sequence is skipped: nothing read or written for it. An
     * empty one leaves its slot's bits as they are. */
    if (!sp_kda_sequence_(x, n, &sq) || sq.len == 0) return;
    if (sq.read >= 0) load_state(dm, a->state.data, sq.read * dm->pitch, h, w->S);
    else memset(w->S, 0, sizeof w->S);
    int64_t crow = sq.crow, since = 0;
    for (int64_t i = 0; i < sq.len; i++) {
        const int64_t t = sq.bos + i;
        float kq;
        float b = prep_token(a, dm, t, h, expA, w, &kq);
        step(w, b, kq, (uint16_t *)a->o.data + (t * dm->H + h) * D);
        if (dm->interval > 0 && ++since == dm->interval) {
            store_state(dm, a->checkpoints.data, crow * hd, h, 0, w->S);
            crow++;
            since = 0;
        }
        const int64_t to = dm->width > 0 ? sp_kda_token_slot_(x, n, i) : -1;
        if (to >= 0) store_state(dm, a->state.data, to * dm->pitch, h, dm->state_k_first, w->S);
    }
    if (sq.write >= 0)
        store_state(dm, a->state.data, sq.write * dm->pitch, h, dm->state_k_first, w->S);
}

sp_status sp_kda_prefill_cpu_(const sp_kda_args *a, const sp_kda_dims *dm) {
    const int nthreads = omp_get_max_threads();
    scratch *ws = malloc((size_t)nthreads * sizeof *ws);
    SP_REQUIRE(ws, SP_ERR_OUT_OF_MEMORY, "sp_kda_prefill: no memory for %d x %zu bytes of scratch",
               nthreads, sizeof *ws);
    const int64_t tasks = dm->N * dm->H;
    const sp_kda_index_ x = sp_kda_index_of_(a, dm);
    /* Tasks differ in length (varlen): hand them out one at a time. */
#pragma omp parallel for schedule(dynamic, 1) num_threads(nthreads)
    for (int64_t i = 0; i < tasks; i++)
        run_task(a, dm, &x, i / dm->H, i % dm->H, &ws[omp_get_thread_num()]);
    free(ws);
    return SP_OK;
}
