/* demo_kda.c — the end-to-end part of `stridepack demo`: strided K3 inputs
 * go through the KDA input boundary (the prefill reads them in place) into
 * the prefill, and the output, final states and checkpoints are compared
 * bit for bit with the prefill run on dense copies made element by
 * element. */
#define _POSIX_C_SOURCE 200809L
#include "demo.h"

#include "k3_problem.h"
#include "stridepack_kda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int demo_upload_all(const demo_mem *m, const kda_problem *p, void **dev) {
    for (int i = 0; i < KB_COUNT; i++) {
        dev[i] = p->bytes[i] ? m->alloc(p->bytes[i]) : NULL;
        if (p->bytes[i] && (!dev[i] || m->upload(dev[i], p->host[i], p->bytes[i]))) return -1;
    }
    return 0;
}

int64_t demo_diff_bytes(const demo_mem *m, const void *a, const void *b, size_t n,
                        int64_t *first) {
    unsigned char *x = malloc(n + 1), *y = malloc(n + 1);
    int64_t diff = -1;
    *first = -1;
    if (x && y && !m->download(x, a, n) && !m->download(y, b, n)) {
        diff = 0;
        for (size_t i = 0; i < n; i++)
            if (x[i] != y[i] && diff++ == 0) *first = (int64_t)i;
    }
    free(x);
    free(y);
    return diff;
}

const char *demo_compare(const demo_mem *m, const void *a, const void *b, size_t n,
                         const char *what) {
    int64_t first, diff = demo_diff_bytes(m, a, b, n, &first);
    if (diff == 0) return "bit-equal";
    if (diff < 0)
        demo_fail("%s: could not be read back to compare", what);
    else
        demo_fail("%s: %lld of %zu bytes differ, the first at byte %lld", what, (long long)diff,
                  n, (long long)first);
    return "DIFFER";
}

void demo_problem(int64_t T, int64_t H, int beta_kind, uint64_t seed, kda_problem *p,
                  k3_bufs *kb, ts_rng *r) {
    int64_t lens[4] = {T / 2, T / 4, T / 8, 0};
    lens[3] = T - lens[0] - lens[1] - lens[2];
    kp_make_ex(p, 4, lens, 0, H, SP_F32, SP_KDA_GATE_LOWER_BOUND, 64, seed, 0);
    ts_rng_seed(r, seed + 1);
    k3_make(kb, T, H, beta_kind, r);
}

int demo_kda(const demo_mem *m, int64_t T, int64_t H, int beta_kind, int reps, uint64_t seed,
             demo_kda_times *t) {
    memset(t, 0, sizeof *t);
    kda_problem p;
    k3_bufs kb;
    ts_rng r;
    demo_problem(T, H, beta_kind, seed, &p, &kb, &r);
    k3_dense_copies(&kb, &p); /* the dense path's inputs, element by element */

    void *dense[KB_COUNT] = {0}, *strided[KB_COUNT] = {0};
    void *qkv = m->alloc(kb.k.qkv_bytes), *proj = m->alloc(kb.k.proj_bytes),
         *g = m->alloc(kb.k.g_bytes);
    sp_kda_boundary *b = NULL;
    int rc = 1;
    double *ms = malloc(sizeof(double) * 2 * (size_t)reps); /* boundary, then prefill */
    if (!ms || demo_upload_all(m, &p, dense) || demo_upload_all(m, &p, strided) || !qkv || !proj || !g ||
        m->upload(qkv, kb.qkv, kb.k.qkv_bytes) || m->upload(proj, kb.proj, kb.k.proj_bytes) ||
        m->upload(g, kb.g, kb.k.g_bytes)) {
        demo_fail("end to end: out of %s memory for T=%lld H=%lld", m->name, (long long)T,
                  (long long)H);
        goto out;
    }
    sp_kda_args ad, as;
    kp_args(&p, dense, m->dev, &ad);
    kp_args(&p, strided, m->dev, &as);
    sp_tensor views[5];
    ts_k3_views(&kb.k, qkv, proj, g, m->dev, views);
    as.q = views[0];
    as.k = views[1];
    as.v = views[2];
    as.g = views[3];
    as.beta = views[4];

    /* Each run reads and writes the state pool: both arms start every run
     * from the initial states (restored outside the timing), so the last
     * run of each is the one compared. */
    sp_status s = sp_kda_boundary_create(&b, m->dev, T, H);
    uint64_t passes = 0;
    size_t copied = 0;
    for (int i = 0; i < reps && s == SP_OK; i++) {
        if (m->upload(strided[KB_STATE], p.host[KB_STATE], p.bytes[KB_STATE]) ||
            m->upload(dense[KB_STATE], p.host[KB_STATE], p.bytes[KB_STATE])) {
            demo_fail("end to end: resetting the states failed");
            goto out;
        }
        uint64_t before = sp_copy_pass_count();
        m->timer_start();
        s = sp_kda_boundary_run(b, &as, NULL);
        ms[i] = m->timer_stop_ms();
        passes = sp_copy_pass_count() - before;
        if (s == SP_OK) s = sp_kda_boundary_last_copied(b, &copied);
        m->timer_start();
        if (s == SP_OK) s = sp_kda_prefill(&ad, NULL);
        ms[reps + i] = m->timer_stop_ms();
    }
    if (s != SP_OK) {
        demo_fail("end to end, %s: %s: %s", ts_k3_beta_name(beta_kind), sp_status_string(s),
                  sp_last_error());
        goto out;
    }
    /* What the boundary must copy: the inputs the prefill does not read in
     * place (none in the K3 layouts: rows of 128 at 16-byte aligned
     * addresses; beta is always read in place). */
    static const char *const names[4] = {"q", "k", "v", "g"};
    char strided_names[64];
    const int expect =
        demo_to_copy(views, names, 4, sp_kda_reads_in_place, strided_names, sizeof strided_names);
    char what[3][96];
    const char *parts[3] = {"output", "final states", "checkpoints"};
    for (int i = 0; i < 3; i++)
        snprintf(what[i], sizeof what[i], "end to end, %s: the %s against the prefill on dense copies",
                 ts_k3_beta_name(beta_kind), parts[i]);
    const char *o_ok = demo_compare(m, dense[KB_O], strided[KB_O], p.bytes[KB_O], what[0]);
    const char *s_ok = demo_compare(m, dense[KB_STATE], strided[KB_STATE], p.bytes[KB_STATE], what[1]);
    const char *c_ok = demo_compare(m, dense[KB_CKPT], strided[KB_CKPT], p.bytes[KB_CKPT], what[2]);
    t->spread_ms = 0;
    for (int a = 0; a < 2; a++) {
        double lo = ms[a * reps], hi = lo;
        for (int i = 1; i < reps; i++) {
            double v = ms[a * reps + i];
            lo = v < lo ? v : lo;
            hi = v > hi ? v : hi;
        }
        t->spread_ms = hi - lo > t->spread_ms ? hi - lo : t->spread_ms;
    }
    t->boundary_ms = ts_median(ms, reps);
    t->prefill_ms = ts_median(ms + reps, reps);
    t->copied = copied;
    printf(KDA_ROW, ts_k3_beta_name(beta_kind), copied, (unsigned long long)passes,
           t->boundary_ms, t->prefill_ms, o_ok, s_ok, c_ok);
    rc = strcmp(o_ok, "bit-equal") || strcmp(s_ok, "bit-equal") || strcmp(c_ok, "bit-equal");
    if (copied != (size_t)expect) {
        demo_fail("end to end, %s: the boundary copied %zu inputs, expected %d (%s)",
                  ts_k3_beta_name(beta_kind), copied, expect,
                  expect ? strided_names : "every input is read in place");
        rc = 1;
    }
    if (passes != (expect > 0 ? 1u : 0u)) {
        demo_fail("end to end, %s: the boundary took %llu copy passes, expected %d",
                  ts_k3_beta_name(beta_kind), (unsigned long long)passes, expect > 0);
        rc = 1;
    }
out:
    sp_kda_boundary_destroy(b);
    for (int i = 0; i < KB_COUNT; i++) {
        m->release(dense[i]);
        m->release(strided[i]);
    }
    m->release(qkv);
    m->release(proj);
    m->release(g);
    k3_free(&kb);
    kp_free(&p);
    free(ms);
    return rc;
}
