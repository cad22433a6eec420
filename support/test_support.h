/*
 * test_support.h — shared by the tests, the CLI and the benchmarks; not part of
 * the library. A seeded generator, random strided layouts, the naive
 * element-by-element reference copy, bit comparison, and the K3 layouts of
 * the KDA input boundary.
 */
#ifndef TEST_SUPPORT_H
#define TEST_SUPPORT_H

/* Its users count passes with the test hooks (stridepack.h, SP_EXPERIMENTAL). */
#ifndef SP_EXPERIMENTAL
#define SP_EXPERIMENTAL
#endif
#include "stridepack.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- random numbers (xoshiro-style, seeded, same sequence everywhere) ---- */
typedef struct ts_rng {
    uint64_t s[4];
} ts_rng;

void ts_rng_seed(ts_rng *r, uint64_t seed);
uint64_t ts_rng_next(ts_rng *r);
/* Uniform integer in [lo, hi] (inclusive). */
int64_t ts_rng_range(ts_rng *r, int64_t lo, int64_t hi);
/* Uniform double in [0, 1). */
double ts_rng_unit(ts_rng *r);
void ts_fill_random(void *p, size_t bytes, ts_rng *r);

/* ---- random strided layouts ---------------------------------------------- */
/* A view described without memory: put it on any buffer of buffer_elems
 * elements (aligned to 16 bytes) with ts_layout_tensor. */
typedef struct ts_layout {
    sp_dtype dtype;
    int ndim;
    int64_t shape[SP_MAX_DIMS];
    int64_t strides[SP_MAX_DIMS];
    int64_t offset;       /* elements from buffer start to element [0,...,0] */
    int64_t buffer_elems; /* elements the buffer must hold */
} ts_layout;

enum {
    TS_LAYOUT_ALLOW_ZERO_STRIDE = 1, /* broadcast dims (valid for sources only) */
};

/* Draw a random layout for `shape`: dims permuted (transposed), padded,
 * reversed (negative strides), zero strides if allowed, random element
 * offset. Elements never alias unless a zero stride was drawn. */
void ts_layout_random(ts_rng *r, sp_dtype dtype, int ndim, const int64_t *shape, int flags,
                      ts_layout *out);
/* Draw a random shape: rank 0..max_ndim, sizes 0..max_size (sizes 0 and 1
 * favoured), numel at most max_numel. */
int ts_shape_random(ts_rng *r, int max_ndim, int64_t max_size, int64_t max_numel,
                    int64_t *shape);
/* The view of `l` on a buffer starting at `base`. */
sp_tensor ts_layout_tensor(const ts_layout *l, void *base, sp_device dev);
/* A dense layout of `shape`. */
void ts_layout_dense(sp_dtype dtype, int ndim, const int64_t *shape, ts_layout *out);

/* ---- reference and comparison (host memory only) -------------------------- */
/* Element-by-element copy, one index tuple at a time, using nothing but the
 * sp_tensor definition. Shapes and dtypes must agree. */
void ts_ref_copy(const sp_tensor *src, const sp_tensor *dst);
/* Compare two views element by element, bit for bit. @return the number of
 * differing elements; *first (may be NULL) gets the first one's linear
 * index, or -1. */
int64_t ts_ref_compare(const sp_tensor *a, const sp_tensor *b, int64_t *first);

/* Print a view's layout ("  name: bf16 ndim 2 shape [..] strides [..] data
 * 0x.."), for failure messages. */
void ts_print_tensor(FILE *f, const char *name, const sp_tensor *t);

/* ---- floating-point bit patterns a value copy would change ---------------- */
#define TS_NPATTERNS 16
typedef struct ts_bit_patterns {
    sp_dtype dtype;
    uint64_t bits[TS_NPATTERNS]; /* the low 8 * element-size bits are the pattern */
} ts_bit_patterns;
/* For bf16, f16, f32, f64: +sNaN (smallest payload), -sNaN, sNaN largest
 * payload, -sNaN odd payload, +qNaN, -qNaN, qNaN payload, -qNaN all ones,
 * +inf, -inf, smallest subnormal, -largest subnormal, a mid subnormal, +0,
 * -0, 1.0. */
extern const ts_bit_patterns ts_float_patterns[4];

/* ---- the K3 layouts (DESIGN: the KDA input boundary) ----------------------- */
enum { TS_K3_BETA_FA = 0, TS_K3_BETA_INPROJ = 1 };

typedef struct ts_k3 {
    int64_t T, H, P;      /* P = H * 128 */
    int beta_kind;        /* TS_K3_BETA_FA: W = 128 + H, beta at column 128;
                             TS_K3_BETA_INPROJ: W = 4P + 128 + H, at 4P + 128 */
    int64_t width, beta_col;
    int64_t g_rows;       /* rows of the g buffer (>= T) */
    size_t qkv_bytes, proj_bytes, g_bytes, dense_bytes; /* dense_bytes: q,k,v,g,beta */
} ts_k3;

void ts_k3_init(ts_k3 *k, int64_t T, int64_t H, int beta_kind);
/* Views of q, k, v, g, beta (in that order) over the three bf16 buffers:
 * qkv [T, 3P], proj [T, W], g [g_rows, P] (g dense). */
void ts_k3_views(const ts_k3 *k, void *qkv, void *proj, void *g, sp_device dev,
                 sp_tensor out[5]);
const char *ts_k3_beta_name(int beta_kind);

/* ---- timing ---------------------------------------------------------------- */
/* Elements of `shape` (ndim dims), and of a view: the product of the
 * sizes, computed here independently of the library. */
int64_t ts_numel_shape(int ndim, const int64_t *shape);
int64_t ts_numel(const sp_tensor *t);
/* Density decided independently of the library: empty, or every dim of
 * size > 1 has the row-major stride. */
int ts_ref_dense(const sp_tensor *t);

double ts_now_seconds(void); /* monotonic */
/* 1 when SP_TEST_SMALL is set (and not "0"): tests shrink their sizes
 * (compute-sanitizer runs). The one switch for every test. */
int ts_test_small(void);
int ts_cmp_double(const void *a, const void *b);
double ts_median(double *v, int n); /* sorts v */

#ifdef __cplusplus
}
#endif

#endif /* TEST_SUPPORT_H */
