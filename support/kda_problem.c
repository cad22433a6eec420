/* kda_problem.c — see kda_problem.h. */
#include "kda_problem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { D = SP_KDA_HEAD_DIM, DD = D * D };

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort(); /* a test, not the library */
    return p;
}

/* bf16 by truncation is fine for inputs: any bf16 value is a valid input. */
static uint16_t bf16_of(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)(u >> 16);
}

static float unif(ts_rng *r, double lo, double hi) {
    return (float)(lo + (hi - lo) * ts_rng_unit(r));
}

/* Uniform bf16 in [lo, hi): a 4096-entry table drawn afresh per call,
 * indexed by 12 random bits, so that filling the gigabyte-sized buffers of
 * the K3 layout takes about a second. */
void kp_fill_bf16(void *x, size_t n, ts_rng *r, double lo, double hi) {
    uint16_t table[4096], *y = x;
    for (int i = 0; i < 4096; i++) table[i] = bf16_of(unif(r, lo, hi));
    size_t i = 0;
    while (i < n) {
        uint64_t bits = ts_rng_next(r);
        for (int k = 0; k < 5 && i < n; k++, bits >>= 12) y[i++] = table[bits & 4095];
    }
}

static void fill_bf16(void *x, int64_t n, ts_rng *r, double lo, double hi) {
    kp_fill_bf16(x, (size_t)n, r, lo, hi);
}

void kp_make(kda_problem *p, int N, const int64_t *lens, int64_t tail, int64_t H,
             sp_dtype state_dtype, int32_t gate, int64_t interval, uint64_t seed) {
    kp_make_ex(p, N, lens, tail, H, state_dtype, gate, interval, seed, 1);
}

void kp_make_ex(kda_problem *p, int N, const int64_t *lens, int64_t tail, int64_t H,
                sp_dtype state_dtype, int32_t gate, int64_t interval, uint64_t seed,
                int with_inputs) {
    ts_rng r;
    ts_rng_seed(&r, seed);
    memset(p, 0, sizeof *p);
    p->N = N;
    p->H = H;
    p->tail = tail;
    for (int n = 0; n < N; n++) {
        p->lens[n] = lens[n];
        p->T += lens[n];
    }
    p->T += tail;
    p->slots = N + 3;
    p->pitch = H * DD + 96;
    p->interval = interval;
    p->state_dtype = state_dtype;
    p->gate = gate;
    p->g_dtype = SP_BF16;
    p->beta_dtype = SP_BF16;
    p->beta_form = SP_KDA_BETA_LOGITS;
    p->lower_bound = gate == SP_KDA_GATE_LOWER_BOUND ? -5.0f + 4.0f * (float)ts_rng_unit(&r) : -5.0f;
    p->scale = 0.0f;
    const size_t ssz = sp_dtype_size(state_dtype);
    const int64_t TH = p->T * H;
    for (int n = 0; n < N && interval > 0; n++) p->C += lens[n] / interval + 1;

    p->bytes[KB_Q] = p->bytes[KB_K] = p->bytes[KB_V] = p->bytes[KB_G] = p->bytes[KB_O] =
        (size_t)(TH * D) * 2;
    p->bytes[KB_BETA] = (size_t)TH * 2;
    p->bytes[KB_ALOG] = (size_t)H * 4;
    p->bytes[KB_DTB] = (size_t)(H * D) * 4;
    p->bytes[KB_CU] = (size_t)(N + 1) * 8;
    p->bytes[KB_IDX] = (size_t)N * 4;
    p->bytes[KB_CKS] = interval > 0 ? (size_t)(N + 1) * 8 : 0;
    p->bytes[KB_STATE] = (size_t)(p->slots * p->pitch) * ssz;
    p->bytes[KB_CKPT] = (size_t)(p->C * H * DD) * ssz;
    for (int b = 0; b < KB_COUNT; b++) p->host[b] = xmalloc(p->bytes[b]);

    if (with_inputs) {
        fill_bf16(p->host[KB_Q], TH * D, &r, KP_QKV_LO, KP_QKV_HI);
        fill_bf16(p->host[KB_K], TH * D, &r, KP_QKV_LO, KP_QKV_HI);
        fill_bf16(p->host[KB_V], TH * D, &r, KP_QKV_LO, KP_QKV_HI);
        fill_bf16(p->host[KB_G], TH * D, &r, KP_G_LO, KP_G_HI);
        fill_bf16(p->host[KB_BETA], TH, &r, KP_BETA_LO, KP_BETA_HI);
    }
    float *A_log = p->host[KB_ALOG], *dtb = p->host[KB_DTB];
    for (int64_t h = 0; h < H; h++) A_log[h] = unif(&r, -1.5, 0.5);
    for (int64_t i = 0; i < H * D; i++) dtb[i] = unif(&r, -1, 1);

    int64_t *cu = p->host[KB_CU];
    cu[0] = 0;
    for (int n = 0; n < N; n++) cu[n + 1] = cu[n] + lens[n];
    /* Slots out of order: a random permutation of 0..slots-1, first N. */
    int32_t perm[KP_MAX_SEQ + 3];
    for (int i = 0; i < p->slots; i++) perm[i] = i;
    for (int i = (int)p->slots - 1; i > 0; i--) {
        int k = (int)ts_rng_range(&r, 0, i);
        int32_t t = perm[i];
        perm[i] = perm[k];
        perm[k] = t;
    }
    memcpy(p->host[KB_IDX], perm, (size_t)N * 4);
    if (interval > 0) {
        int64_t *cs = p->host[KB_CKS];
        cs[0] = 0;
        for (int n = 0; n < N; n++) cs[n + 1] = cs[n] + lens[n] / interval + 1;
    }

    /* Poison everything, then give the used slots real initial states. */
    ts_fill_random(p->host[KB_O], p->bytes[KB_O], &r);
    ts_fill_random(p->host[KB_STATE], p->bytes[KB_STATE], &r);
    ts_fill_random(p->host[KB_CKPT], p->bytes[KB_CKPT], &r);
    for (int n = 0; n < N; n++) {
        int64_t base = perm[n] * p->pitch;
        for (int64_t i = 0; i < H * DD; i++) {
            float x = unif(&r, -0.5, 0.5);
            if (state_dtype == SP_BF16)
                ((uint16_t *)p->host[KB_STATE])[base + i] = bf16_of(x);
            else
                ((float *)p->host[KB_STATE])[base + i] = x;
        }
    }
}

void kp_free(kda_problem *p) {
    for (int b = 0; b < KB_COUNT; b++) free(p->host[b]);
    memset(p, 0, sizeof *p);
}

void kp_copy(const kda_problem *p, void *out[KB_COUNT]) {
    for (int b = 0; b < KB_COUNT; b++) {
        out[b] = xmalloc(p->bytes[b]);
        memcpy(out[b], p->host[b], p->bytes[b]);
    }
}

void kp_free_copy(void *bufs[KB_COUNT]) {
    for (int b = 0; b < KB_COUNT; b++) {
        free(bufs[b]);
        bufs[b] = NULL;
    }
}

void kp_upload(const ts_mem *m, const kda_problem *p, void *const host[KB_COUNT], int first,
               void *buf[KB_COUNT]) {
    for (int b = 0; b < KB_COUNT; b++) {
        buf[b] = m->alloc(p->bytes[b] + 256);
        if (b >= first && p->bytes[b] > 0) m->upload(buf[b], host[b], p->bytes[b]);
    }
}

void kp_download(const ts_mem *m, const kda_problem *p, void *const buf[KB_COUNT],
                 void *host[KB_COUNT]) {
    for (int b = KB_O; b < KB_COUNT; b++)
        if (p->bytes[b] > 0) m->download(host[b], buf[b], p->bytes[b]);
}

int kp_untouched(const ts_mem *m, const kda_problem *p, void *const buf[KB_COUNT]) {
    void *got[KB_COUNT];
    kp_copy(p, got);
    kp_download(m, p, buf, got);
    const int same = kp_outputs_equal(p, got, p->host);
    kp_free_copy(got);
    return same;
}

void kp_release(const ts_mem *m, void *buf[KB_COUNT]) {
    for (int b = 0; b < KB_COUNT; b++) {
        m->release(buf[b]);
        buf[b] = NULL;
    }
}

void kp_args(const kda_problem *p, void *const ptr[KB_COUNT], sp_device dev, sp_kda_args *a) {
    sp_kda_args_init(a);
    const int64_t x4[4] = {1, p->T, p->H, D}, x3[3] = {1, p->T, p->H};
    const int64_t nh = p->H, nhd = p->H * D, n1 = p->N + 1, n = p->N;
    sp_tensor_dense(&a->q, ptr[KB_Q], SP_BF16, 4, x4, dev);
    sp_tensor_dense(&a->k, ptr[KB_K], SP_BF16, 4, x4, dev);
    sp_tensor_dense(&a->v, ptr[KB_V], SP_BF16, 4, x4, dev);
    sp_tensor_dense(&a->g, ptr[KB_G], p->g_dtype, 4, x4, dev);
    sp_tensor_dense(&a->beta, ptr[KB_BETA], p->beta_dtype, 3, x3, dev);
    sp_tensor_dense(&a->A_log, ptr[KB_ALOG], SP_F32, 1, &nh, dev);
    sp_tensor_dense(&a->dt_bias, ptr[KB_DTB], SP_F32, 1, &nhd, dev);
    sp_tensor_dense(&a->cu_seqlens, ptr[KB_CU], SP_I64, 1, &n1, dev);
    sp_tensor_dense(&a->state_indices, ptr[KB_IDX], SP_I32, 1, &n, dev);
    sp_tensor_dense(&a->o, ptr[KB_O], SP_BF16, 4, x4, dev);
    const int64_t ss[4] = {p->slots, p->H, D, D}, st[4] = {p->pitch, DD, D, 1};
    sp_tensor_view(&a->state, ptr[KB_STATE], 0, p->state_dtype, 4, ss, st, dev);
    a->gate = p->gate;
    a->beta_form = p->beta_form;
    a->lower_bound = p->lower_bound;
    a->scale = p->scale;
    a->kernel = p->kernel;
    if (p->interval > 0) {
        a->checkpoint_interval = p->interval;
        sp_tensor_dense(&a->checkpoint_cu_starts, ptr[KB_CKS], SP_I64, 1, &n1, dev);
        const int64_t cs[4] = {p->C, p->H, D, D};
        sp_tensor_dense(&a->checkpoints, ptr[KB_CKPT], p->state_dtype, 4, cs, dev);
    }
}

void kp_log_decay(kda_problem *p, sp_dtype gdt, uint64_t seed) {
    ts_rng r;
    ts_rng_seed(&r, seed);
    const int64_t n = p->T * p->H * D;
    free(p->host[KB_G]);
    p->bytes[KB_G] = (size_t)n * sp_dtype_size(gdt);
    p->host[KB_G] = xmalloc(p->bytes[KB_G]);
    for (int64_t i = 0; i < n; i++) {
        const double u = ts_rng_unit(&r);
        const float x = u < 0.02   ? -INFINITY
                        : u < 0.05 ? (float)unif(&r, -60, -20)
                        : u < 0.35 ? (float)unif(&r, -1e-3, 0)
                                   : (float)unif(&r, -8, 0);
        if (gdt == SP_F32)
            ((float *)p->host[KB_G])[i] = x;
        else
            ((uint16_t *)p->host[KB_G])[i] = bf16_of(x);
    }
    p->gate = SP_KDA_GATE_LOG_DECAY;
    p->g_dtype = gdt;
}

void kp_mixed_decays(kda_problem *p, uint64_t seed) {
    kp_log_decay(p, SP_BF16, seed);
    ts_rng r;
    ts_rng_seed(&r, seed + 1);
    uint16_t *g = p->host[KB_G];
    for (int64_t i = 0; i < p->T * p->H * D; i++) g[i] = bf16_of((float)unif(&r, -1e-3, 0));
    int64_t bos = 0;
    for (int n = 0; n < p->N; n++) {
        for (int64_t j = 0; j < p->lens[n]; j++) {
            const int64_t c = j / 32, at = j % 32;
            for (int64_t h = 0; h < p->H; h++) {
                uint16_t *row = g + ((bos + j) * p->H + h) * D;
                if (c % 2 == 1 && at == 5) row[(7 + c) % D] = bf16_of(-INFINITY);
                if (c % 2 == 0 && at == 3) row[(9 + c) % D] = bf16_of(-39.0f);
            }
        }
        bos += p->lens[n];
    }
}

void kp_beta_form(kda_problem *p, int32_t form, uint64_t seed) {
    ts_rng r;
    ts_rng_seed(&r, seed);
    p->beta_form = form;
    if (form != SP_KDA_BETA_ACTIVATED) return;
    uint16_t *beta = p->host[KB_BETA];
    for (int64_t i = 0; i < p->T * p->H; i++) beta[i] = bf16_of((float)unif(&r, 0, 1.98));
}

static double val(sp_dtype t, const void *b, int64_t i);

void kp_beta_f32(kda_problem *p) {
    const int64_t n = p->T * p->H;
    float *f = xmalloc((size_t)n * 4);
    for (int64_t i = 0; i < n; i++) f[i] = (float)val(SP_BF16, p->host[KB_BETA], i);
    free(p->host[KB_BETA]);
    p->host[KB_BETA] = f;
    p->bytes[KB_BETA] = (size_t)n * 4;
    p->beta_dtype = SP_F32;
}

void kp_extreme_gates(kda_problem *p, uint64_t seed) {
    ts_rng r;
    ts_rng_seed(&r, seed);
    const int64_t n = p->T * p->H * D;
    uint16_t *g = p->host[KB_G], *beta = p->host[KB_BETA];
    for (int64_t i = 0; i < n; i++)
        g[i] = bf16_of(ts_rng_unit(&r) < 0.5 ? unif(&r, 60, 100) : unif(&r, -100, -60));
    for (int64_t i = 0; i < p->T * p->H; i++) beta[i] = bf16_of(ts_rng_unit(&r) < 0.5 ? -10.0f : 10.0f);
    p->lower_bound = -5.0f;
}

static double val(sp_dtype t, const void *b, int64_t i) {
    if (t == SP_F32) return ((const float *)b)[i];
    uint32_t u = (uint32_t)((const uint16_t *)b)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Norm ratio over elements where live(i); byte equality with init elsewhere. */
typedef int (*live_fn)(const kda_problem *p, int64_t i);

static double compare(const kda_problem *p, sp_dtype t, const void *x, const void *ref,
                      const void *init, int64_t n, live_fn live, int64_t *stray) {
    double num = 0, den = 0;
    size_t es = sp_dtype_size(t);
    *stray = 0;
    for (int64_t i = 0; i < n; i++) {
        if (live(p, i)) {
            double a = val(t, x, i), b = val(t, ref, i);
            num += (a - b) * (a - b);
            den += b * b;
        } else if (memcmp((const char *)x + i * es, (const char *)init + i * es, es) != 0) {
            (*stray)++;
        }
    }
    if (num != num) return INFINITY; /* NaN where a value belongs */
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Row t of o is written when a sequence that is not padded (a negative
 * slot) holds it. */
static int live_o(const kda_problem *p, int64_t i) {
    const int32_t *idx = p->host[KB_IDX];
    const int64_t t = i / (p->H * D);
    int64_t bos = 0;
    for (int64_t n = 0; n < p->N; bos += p->lens[n++])
        if (t < bos + p->lens[n]) return t >= bos && idx[n] >= 0;
    return 0;
}

static int live_state(const kda_problem *p, int64_t i) {
    const int32_t *idx = p->host[KB_IDX];
    int64_t slot = i / p->pitch, off = i % p->pitch;
    if (off >= p->H * DD) return 0;
    for (int64_t n = 0; n < p->N; n++)
        if (idx[n] == slot) return 1;
    return 0;
}

static int live_ckpt(const kda_problem *p, int64_t i) {
    const int64_t *cs = p->host[KB_CKS];
    const int32_t *idx = p->host[KB_IDX];
    int64_t row = i / (p->H * DD);
    for (int64_t n = 0; n < p->N; n++)
        if (idx[n] >= 0 && row >= cs[n] && row < cs[n] + p->lens[n] / p->interval) return 1;
    return 0;
}

double kp_err_o(const kda_problem *p, const void *o, const void *ref, int64_t *stray) {
    return compare(p, SP_BF16, o, ref, p->host[KB_O], p->T * p->H * D, live_o, stray);
}

double kp_err_state(const kda_problem *p, const void *s, const void *ref, int64_t *stray) {
    return compare(p, p->state_dtype, s, ref, p->host[KB_STATE], p->slots * p->pitch,
                   live_state, stray);
}

double kp_err_ckpt(const kda_problem *p, const void *c, const void *ref, int64_t *stray) {
    if (p->interval == 0) {
        *stray = 0;
        return 0;
    }
    return compare(p, p->state_dtype, c, ref, p->host[KB_CKPT], p->C * p->H * DD, live_ckpt,
                   stray);
}

static int chunked(const kda_problem *p) {
    return p->kernel == SP_KDA_KERNEL_CHUNKED || p->kernel == SP_KDA_KERNEL_CHUNKED_TWO_PASS;
}

double kp_o_tol(const kda_problem *p) { return chunked(p) ? 4e-3 : 5e-4; }

double kp_state_tol(const kda_problem *p) {
    if (p->state_dtype != SP_F32) return 5e-3;
    return chunked(p) ? 3e-3 : 1e-5;
}


int kp_outputs_equal(const kda_problem *p, void *const x[KB_COUNT], void *const y[KB_COUNT]) {
    for (int b = KB_O; b < KB_COUNT; b++)
        if (memcmp(x[b], y[b], p->bytes[b]) != 0) return 0;
    return 1;
}
