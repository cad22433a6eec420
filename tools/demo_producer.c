/* demo_producer.c — the producer part of `stridepack demo`: the causal
 * short convolution makes q, k, v from a projection x [T, 3P], either
 * token-major (the prefill reads the column slices in place) or split into
 * three dense tensors; each is followed
 * by the boundary and the prefill, and the two layer outputs, final states
 * and checkpoints are compared bit for bit. */
#define _POSIX_C_SOURCE 200809L
#include "demo.h"

#include "k3_problem.h"
#include "stridepack_conv.h"
#include "stridepack_kda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CONV_W = 4 };

/* One arm: its conv arguments and KDA arguments, its buffers. */
typedef struct arm {
    sp_conv_args conv;
    sp_kda_args kda;
    void *bufs[KB_COUNT]; /* the KDA arguments' buffers (q, k, v, o, ...) */
    void *conv_state;
    double *ms;
    size_t copied;
} arm;

/* Reset the arm's pools (conv state to zeros, KDA state to the problem's
 * initial one), then run conv + boundary once, timed. 0 on success. */
static int run_arm(const demo_mem *m, const kda_problem *p, sp_kda_boundary *b, arm *a,
                   const void *zeros, size_t conv_state_bytes, int rep) {
    if (m->upload(a->conv_state, zeros, conv_state_bytes) ||
        m->upload(a->bufs[KB_STATE], p->host[KB_STATE], p->bytes[KB_STATE])) {
        demo_fail("producer: resetting the state pools failed");
        return 1;
    }
    m->timer_start();
    sp_status s = sp_conv_prefill(&a->conv, NULL);
    if (s == SP_OK) s = sp_kda_boundary_run(b, &a->kda, NULL);
    a->ms[rep] = m->timer_stop_ms();
    if (s == SP_OK) s = sp_kda_boundary_last_copied(b, &a->copied);
    if (s != SP_OK) {
        demo_fail("producer: %s: %s", sp_status_string(s), sp_last_error());
        return 1;
    }
    return 0;
}

int demo_producer(const demo_mem *m, int64_t T, int64_t H, int reps, uint64_t seed) {
    kda_problem p;
    k3_bufs kb; /* its proj (beta) and g; its qkv becomes the conv's output */
    ts_rng r;
    demo_problem(T, H, DEMO_BETA_FA, seed, &p, &kb, &r);
    const int64_t P = H * 128, C = 3 * P;
    const size_t x_bytes = (size_t)(T * C) * 2, w_bytes = (size_t)(C * CONV_W) * 4;
    const size_t cs_bytes = (size_t)(p.slots * C * (CONV_W - 1)) * 2;
    uint16_t *x_host = malloc(x_bytes + 1);
    float *w_host = malloc(w_bytes);
    void *zeros = calloc(1, cs_bytes + 1);
    arm arms[2];
    memset(arms, 0, sizeof arms);
    void *x = NULL, *w = NULL, *qkv = NULL, *proj = NULL, *g = NULL;
    sp_kda_boundary *b = NULL;
    int rc = 1;
    if (!x_host || !w_host || !zeros) goto oom;
    kp_fill_bf16(x_host, (size_t)(T * C), &r, -1, 1);
    for (int64_t i = 0; i < C * CONV_W; i++) w_host[i] = 0.25f - 0.05f * (float)(i % 11);
    x = m->alloc(x_bytes);
    w = m->alloc(w_bytes);
    qkv = m->alloc(kb.k.qkv_bytes);
    proj = m->alloc(kb.k.proj_bytes);
    g = m->alloc(kb.k.g_bytes);
    if (!x || !w || !qkv || !proj || !g || m->upload(x, x_host, x_bytes) ||
        m->upload(w, w_host, w_bytes) || m->upload(proj, kb.proj, kb.k.proj_bytes) ||
        m->upload(g, kb.g, kb.k.g_bytes))
        goto oom;
    for (int i = 0; i < 2; i++) {
        arms[i].conv_state = m->alloc(cs_bytes);
        arms[i].ms = malloc(sizeof(double) * (size_t)reps);
        if (!arms[i].conv_state || !arms[i].ms || demo_upload_all(m, &p, arms[i].bufs)) goto oom;
    }

    /* The views: K3 slices over qkv (token-major) and the dense q, k, v of
     * arm 1 (split); g dense and beta a column slice in both. */
    sp_tensor views[5];
    ts_k3_views(&kb.k, qkv, proj, g, m->dev, views);
    const int64_t xs[2] = {T, C}, ws[2] = {C, CONV_W}, ss[3] = {p.slots, C, CONV_W - 1},
                  qs[2] = {T, P}, n = p.N;
    for (int i = 0; i < 2; i++) {
        arm *a = &arms[i];
        kp_args(&p, a->bufs, m->dev, &a->kda);
        a->kda.g = views[3];
        a->kda.beta = views[4];
        sp_conv_args *c = &a->conv;
        sp_conv_args_init(c);
        sp_tensor_dense(&c->x, x, SP_BF16, 2, xs, m->dev);
        sp_tensor_dense(&c->weight, w, SP_F32, 2, ws, m->dev);
        c->silu = 1;
        c->cu_seqlens = a->kda.cu_seqlens;
        sp_tensor_dense(&c->state, a->conv_state, SP_BF16, 3, ss, m->dev);
        sp_tensor_dense(&c->state_indices, a->bufs[KB_IDX], SP_I32, 1, &n, m->dev);
    }
    sp_tensor_dense(&arms[0].conv.out, qkv, SP_BF16, 2, xs, m->dev);
    arms[0].kda.q = views[0];
    arms[0].kda.k = views[1];
    arms[0].kda.v = views[2];
    sp_tensor_dense(&arms[1].conv.q, arms[1].bufs[KB_Q], SP_BF16, 2, qs, m->dev);
    sp_tensor_dense(&arms[1].conv.k, arms[1].bufs[KB_K], SP_BF16, 2, qs, m->dev);
    sp_tensor_dense(&arms[1].conv.v, arms[1].bufs[KB_V], SP_BF16, 2, qs, m->dev);

    sp_status s = sp_kda_boundary_create(&b, m->dev, T, H);
    if (s != SP_OK) {
        demo_fail("producer: %s: %s", sp_status_string(s), sp_last_error());
        goto out;
    }
    for (int i = 0; i < reps; i++)
        for (int k = 0; k < 2; k++)
            if (run_arm(m, &p, b, &arms[k], zeros, cs_bytes, i)) goto out;
    static const char *names[2] = {"token-major", "split"};
    const char *what[3] = {"producer: the split layout's output against token-major",
                           "producer: the split layout's final states against token-major",
                           "producer: the split layout's checkpoints against token-major"};
    const char *o_ok = demo_compare(m, arms[0].bufs[KB_O], arms[1].bufs[KB_O], p.bytes[KB_O], what[0]);
    const char *s_ok =
        demo_compare(m, arms[0].bufs[KB_STATE], arms[1].bufs[KB_STATE], p.bytes[KB_STATE], what[1]);
    const char *c_ok =
        demo_compare(m, arms[0].bufs[KB_CKPT], arms[1].bufs[KB_CKPT], p.bytes[KB_CKPT], what[2]);
    for (int k = 0; k < 2; k++)
        printf(PRODUCER_ROW, names[k], arms[k].copied, ts_median(arms[k].ms, reps),
               k == 0 ? "-" : o_ok, k == 0 ? "-" : s_ok, k == 0 ? "-" : c_ok);
    rc = strcmp(o_ok, "bit-equal") || strcmp(s_ok, "bit-equal") || strcmp(c_ok, "bit-equal");
    /* What the boundary must copy in each arm: its inputs that the prefill
     * does not read in place (none in either: the token-major slices are
     * rows of 128 at 16-byte aligned addresses, and beta is always read). */
    static const char *const in_names[4] = {"q", "k", "v", "g"};
    for (int k = 0; k < 2; k++) {
        const sp_tensor in[4] = {arms[k].kda.q, arms[k].kda.k, arms[k].kda.v, arms[k].kda.g};
        char strided[64];
        const int expect = demo_to_copy(in, in_names, 4, sp_kda_reads_in_place, strided, sizeof strided);
        if (arms[k].copied != (size_t)expect) {
            demo_fail("producer, %s: the boundary copied %zu inputs, expected %d (%s)", names[k],
                      arms[k].copied, expect, expect ? strided : "every input is read in place");
            rc = 1;
        }
    }
    goto out;
oom:
    demo_fail("producer: out of %s memory for T=%lld H=%lld", m->name, (long long)T, (long long)H);
out:
    sp_kda_boundary_destroy(b);
    for (int i = 0; i < 2; i++) {
        for (int k = 0; k < KB_COUNT; k++) m->release(arms[i].bufs[k]);
        m->release(arms[i].conv_state);
        free(arms[i].ms);
    }
    m->release(x);
    m->release(w);
    m->release(qkv);
    m->release(proj);
    m->release(g);
    free(x_host);
    free(w_host);
    free(zeros);
    k3_free(&kb);
    kp_free(&p);
    return rc;
}
