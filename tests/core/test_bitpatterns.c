/*
 * test_bitpatterns.c — floating-point bit patterns that a value copy would
 * change: NaNs of both signs, quiet and signalling, with payloads; ±inf;
 * subnormals; ±0. For bf16, f16, f32 and f64 they go through every copy
 * path (one run, padded rows, gathers, reversed, transposed, broadcast,
 * scalars, narrow-aligned and strided destinations, sp_pack), and must come
 * out as the same bytes.
 */
#include "check.h"
#include "guarded.h"
#include "test_support.h"

#include <string.h>

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
    CHECK_OK(sp_tensor_view(&t, payload, l->offset, dt, l->ndim, l->shape, l->strides, sp_cpu()));
    return t;
}

static void test_paths(ts_rng *r, const ts_bit_patterns *pt) {
    size_t es = sp_dtype_size(pt->dtype);
    const char *dn = sp_dtype_name(pt->dtype);
    for (size_t si = 0; si < sizeof kSources / sizeof kSources[0]; si++) {
        const layout *ls = &kSources[si];
        gbuf sb = gb_alloc(8 * NPAT * NPAT * es, 0, r);
        sp_tensor s = on(ls, sb.p, pt->dtype);
        walk(&s, pt, 1);
        gb_sync(&sb);
        for (int di = 0; di < 3; di++) {
            layout ld = kDests[di];
            ld.ndim = s.ndim;
            int64_t running = di == 2 ? 2 : 1;
            for (int d = s.ndim - 1; d >= 0; d--) {
                ld.shape[d] = s.shape[d];
                ld.strides[d] = di == 2 ? -running : running;
                running *= s.shape[d];
            }
            if (di == 2) ld.offset = running - 2;
            gbuf db = gb_alloc((size_t)(running + 1) * es, 0, r);
            sp_copy_pair p = {s, on(&ld, db.p, pt->dtype)};
            sp_tensor de = gb_on_expect(&db, p.dst);
            ts_ref_copy(&p.src, &de);
            CHECK_OK(sp_copy_batch(&p, 1, NULL));
            long diff = gb_first_diff(&db);
            int64_t wrong = ls->broadcast ? 0 : walk(&p.dst, pt, 0);
            CHECKF(diff < 0 && wrong == 0, "%s %s -> %s: byte %ld differs, %lld wrong patterns",
                   dn, ls->name, ld.name, diff, (long long)wrong);
            CHECK(gb_first_diff(&sb) < 0);
            gb_free(&db);
        }
        /* sp_pack of the same source (dense ones come back as themselves). */
        size_t wsb;
        CHECK_OK(sp_pack_workspace_bytes(&s, 1, &wsb));
        gbuf ws = gb_alloc(wsb + 1, 0, r);
        sp_tensor out;
        size_t copied;
        CHECK_OK(sp_pack(&s, 1, ws.p, wsb, &out, &copied, NULL));
        CHECK(copied == (si == 0 ? 0u : 1u));
        int64_t wrong = ls->broadcast ? 0 : walk(&out, pt, 0);
        CHECKF(wrong == 0 && ts_ref_compare(&s, &out, NULL) == 0, "%s %s through sp_pack", dn,
               ls->name);
        gb_free(&ws);
        gb_free(&sb);
    }

    /* Each pattern as a scalar, all of them in one batch. */
    gbuf sb = gb_alloc(NPAT * es, 0, r), db = gb_alloc(NPAT * 2 * es, 0, r);
    sp_copy_pair p[NPAT];
    for (int k = 0; k < NPAT; k++) {
        CHECK_OK(sp_tensor_dense(&p[k].src, sb.p + (size_t)k * es, pt->dtype, 0, NULL, sp_cpu()));
        CHECK_OK(sp_tensor_dense(&p[k].dst, db.p + (size_t)(2 * NPAT - 1 - 2 * k) * es,
                                 pt->dtype, 0, NULL, sp_cpu()));
        put(p[k].src.data, pt, k, es);
        put(db.expect + ((unsigned char *)p[k].dst.data - db.raw), pt, k, es);
    }
    CHECK_OK(sp_copy_batch(p, NPAT, NULL));
    CHECKF(gb_first_diff(&db) < 0, "%s scalars: byte %ld differs", dn, gb_first_diff(&db));
    gb_free(&sb);
    gb_free(&db);
}

int main(void) {
    ts_rng r;
    ts_rng_seed(&r, 0xb175ull);
    for (int i = 0; i < 4; i++) test_paths(&r, &ts_float_patterns[i]);
    return sp_test_finish("test_bitpatterns");
}
