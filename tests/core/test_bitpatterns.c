/*
 * test_bitpatterns.c — floating-point bit patterns that a value copy would
 * change: NaNs of both signs, quiet and signalling, with payloads; ±inf;
 * subnormals; ±0. For bf16, f16, f32 and f64 they go through every copy
 * path (one run, padded rows, gathers, reversed, transposed, broadcast,
 * scalars, narrow-aligned and strided destinations, sp_pack), and must come
 * out as the same bytes. On one memory backend (ts_mem.h): built as
 * test_bitpatterns (host memory) and test_bitpatterns_gpu (device memory).
 */
#include "check.h"
#include "test_support.h"
#include "ts_mem.h"

#include <string.h>

static const ts_mem *M;

enum { NPAT = TS_NPATTERNS };

/* Store pattern k (little-endian low bytes) at p. */
static void put(void *p, const ts_bit_patterns *pt, int64_t k, size_t es) {
    uint64_t v = pt->bits[k % NPAT];
    uint16_t h = (uint16_t)v;
    uint32_t w = (uint32_t)v;
    if (es == 2) memcpy(p, &h, 2);
    if (es == 4) memcpy(p, &w, 4);
    if (es == 8) memcpy(p, &v, 8);
}

/* Visit every element of t in row-major order: write pattern k there
 * (fill), or count elements whose bytes are not pattern k (check). */
static int64_t walk(const sp_tensor *t, const ts_bit_patterns *pt, int fill) {
    size_t es = sp_dtype_size((sp_dtype)t->dtype);
    int64_t idx[SP_MAX_DIMS] = {0}, n = 1, bad = 0;
    for (int d = 0; d < t->ndim; d++) n *= t->shape[d];
    for (int64_t k = 0; k < n; k++) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
        unsigned char *p = (unsigned char *)t->data + off * (int64_t)es, want[8];
        if (fill)
            put(p, pt, k, es);
        else {
            put(want, pt, k, es);
            bad += memcmp(p, want, es) != 0;
        }
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
    return bad;
}

typedef struct layout {
    const char *name;
    int ndim;
    int64_t shape[2], strides[2], offset; /* offset in elements from the payload */
    int broadcast;                        /* elements alias: check against the reference only */
} layout;

#define M NPAT
static const layout kSources[] = {
    {"one run", 1, {4 * M}, {1}, 0, 0},
    {"padded rows", 2, {4, M}, {M + 3, 1}, 0, 0},
    {"gather stride 3", 1, {4 * M}, {3}, 0, 0},
    {"reversed", 1, {4 * M}, {-1}, 4 * M - 1, 0},
    {"transposed", 2, {M, 4}, {1, M}, 0, 0},
    {"reversed rows", 2, {4, M}, {-(M + 1), -1}, 4 * (M + 1), 0},
    {"broadcast", 2, {3, M}, {0, 1}, 0, 1},
};
static const layout kDests[] = {
    {"dense", 1, {0}, {0}, 0, 0},   /* shape filled in from the source */
    {"shifted", 1, {0}, {0}, 1, 0}, /* one element past 16: narrow moves */
    {"strided", 1, {0}, {0}, 0, 0}, /* every other element, reversed */
};
#undef M

static sp_tensor on(const layout *l, unsigned char *payload, sp_dtype dt) {
    sp_tensor t;
    CHECK_OK(sp_tensor_view(&t, payload, l->offset, dt, l->ndim, l->shape, l->strides, M->device));
    return t;
}

/* The same view on what the arena held at its last download. */
static sp_tensor on_got(const ts_arena *a, sp_tensor t) {
    t.data = a->got + ((unsigned char *)t.data - a->base);
    t.device = sp_cpu();
    return t;
}

enum { NSRC = sizeof kSources / sizeof kSources[0], NDST = sizeof kDests / sizeof kDests[0] };

/* Every source layout, filled with the patterns, into every destination
 * layout in one batch; then each source through sp_pack. */
static void test_paths(ts_rng *r, ts_arena *a, const ts_bit_patterns *pt) {
    const size_t es = sp_dtype_size(pt->dtype);
    const char *dn = sp_dtype_name(pt->dtype);
    sp_tensor src[NSRC];
    sp_copy_pair p[NSRC * NDST];
    unsigned char *ws[NSRC];
    size_t wsb[NSRC];
    ts_arena_reset(a);
    for (int si = 0; si < NSRC; si++) {
        src[si] = on(&kSources[si], ts_arena_take(a, 8 * NPAT * NPAT * es, 0), pt->dtype);
        for (int di = 0; di < NDST; di++) {
            layout ld = kDests[di];
            ld.ndim = src[si].ndim;
            int64_t running = di == 2 ? 2 : 1;
            for (int d = src[si].ndim - 1; d >= 0; d--) {
                ld.shape[d] = src[si].shape[d];
                ld.strides[d] = di == 2 ? -running : running;
                running *= src[si].shape[d];
            }
            if (di == 2) ld.offset = running - 2;
            p[si * NDST + di].src = src[si];
            unsigned char *dbase = ts_arena_take(a, (size_t)(running + 1) * es, 0);
            p[si * NDST + di].dst = on(&ld, dbase, pt->dtype);
        }
        CHECK_OK(sp_pack_workspace_bytes(&src[si], 1, &wsb[si]));
        ws[si] = ts_arena_take(a, wsb[si] + 1, 0);
    }
    ts_arena_poison(a, r);
    for (int si = 0; si < NSRC; si++) {
        sp_tensor hs = ts_arena_on_image(a, src[si]);
        walk(&hs, pt, 1);
    }
    ts_arena_upload(a, a->base, a->used);
    for (int i = 0; i < NSRC * NDST; i++) {
        sp_tensor hs = ts_arena_on_image(a, p[i].src), hd = ts_arena_on_image(a, p[i].dst);
        ts_ref_copy(&hs, &hd);
    }
    CHECK_OK(sp_copy_batch(p, NSRC * NDST, NULL));
    long diff = ts_arena_first_diff(a);
    CHECKF(diff < 0, "%s: arena byte %ld differs after the batch", dn, diff);
    for (int i = 0; i < NSRC * NDST; i++) {
        const layout *ls = &kSources[i / NDST];
        sp_tensor got = on_got(a, p[i].dst);
        int64_t wrong = ls->broadcast ? 0 : walk(&got, pt, 0);
        CHECKF(wrong == 0, "%s %s -> %s: %lld wrong patterns", dn, ls->name,
               kDests[i % NDST].name, (long long)wrong);
    }

    /* sp_pack of each source (dense ones come back as themselves). */
    for (int si = 0; si < NSRC; si++) {
        const layout *ls = &kSources[si];
        sp_tensor out;
        size_t copied;
        CHECK_OK(sp_pack(&src[si], 1, ws[si], wsb[si], &out, &copied, NULL));
        CHECK(copied == (si == 0 ? 0u : 1u));
        if (copied) {
            sp_tensor hs = ts_arena_on_image(a, src[si]), ho = ts_arena_on_image(a, out);
            ts_ref_copy(&hs, &ho);
        }
        diff = ts_arena_first_diff(a);
        sp_tensor got = on_got(a, out);
        int64_t wrong = ls->broadcast ? 0 : walk(&got, pt, 0);
        CHECKF(diff < 0 && wrong == 0, "%s %s through sp_pack: byte %ld differs, %lld wrong "
               "patterns", dn, ls->name, diff, (long long)wrong);
    }
}

/* Each pattern as a scalar, all of them in one batch. */
static void test_scalars(ts_rng *r, ts_arena *a, const ts_bit_patterns *pt) {
    const size_t es = sp_dtype_size(pt->dtype);
    ts_arena_reset(a);
    unsigned char *sb = ts_arena_take(a, NPAT * es, 0), *db = ts_arena_take(a, NPAT * 2 * es, 0);
    ts_arena_poison(a, r);
    sp_copy_pair p[NPAT];
    for (int k = 0; k < NPAT; k++) {
        CHECK_OK(sp_tensor_dense(&p[k].src, sb + (size_t)k * es, pt->dtype, 0, NULL, M->device));
        CHECK_OK(sp_tensor_dense(&p[k].dst, db + (size_t)(2 * NPAT - 1 - 2 * k) * es, pt->dtype, 0,
                                 NULL, M->device));
        put(ts_arena_image(a, p[k].src.data), pt, k, es);
        put(ts_arena_image(a, p[k].dst.data), pt, k, es);
    }
    ts_arena_upload(a, sb, NPAT * es);
    CHECK_OK(sp_copy_batch(p, NPAT, NULL));
    long diff = ts_arena_first_diff(a);
    CHECKF(diff < 0, "%s scalars: byte %ld differs", sp_dtype_name(pt->dtype), diff);
}

int main(void) {
    M = ts_mem_or_skip(TS_MEM_BACKEND);
    ts_rng r;
    ts_rng_seed(&r, 0xb175ull);
    ts_arena a;
    ts_arena_init(&a, M, (size_t)4 << 20);
    for (int i = 0; i < 4; i++) {
        test_paths(&r, &a, &ts_float_patterns[i]);
        test_scalars(&r, &a, &ts_float_patterns[i]);
    }
    ts_arena_free(&a);
    return sp_test_finish(ts_mem_test_name(M, "test_bitpatterns"));
}
