/*
 * sp_support.h — shared by the tests, the CLI and the benchmarks; not part of
 * the library. A seeded generator, random strided layouts, the naive
 * element-by-element reference copy, bit comparison, and the K3 layouts of
 * the KDA input boundary.
 */
#ifndef SP_SUPPORT_H
#define SP_SUPPORT_H

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
typedef struct sp_rng {
    uint64_t s[4];
} sp_rng;

void sp_rng_seed(sp_rng *r, uint64_t seed);
uint64_t sp_rng_next(sp_rng *r);
/* Uniform integer in [lo, hi] (inclusive). */
int64_t sp_rng_range(sp_rng *r, int64_t lo, int64_t hi);
/* Uniform double in [0, 1). */
double sp_rng_unit(sp_rng *r);
void sp_fill_random(void *p, size_t bytes, sp_rng *r);

/* ---- random strided layouts ---------------------------------------------- */
/* A view described without memory: put it on any buffer of buffer_elems
 * elements (aligned to 16 bytes) with sp_layout_tensor. */
typedef struct sp_layout {
    sp_dtype dtype;
    int ndim;
    int64_t shape[SP_MAX_DIMS];
    int64_t strides[SP_MAX_DIMS];
    int64_t offset;       /* elements from buffer start to element [0,...,0] */
    int64_t buffer_elems; /* elements the buffer must hold */
} sp_layout;

enum {
    SP_LAYOUT_ALLOW_ZERO_STRIDE = 1, /* broadcast dims (valid for sources only) */
};

/* Draw a random layout for `shape`: dims permuted (transposed), padded,
 * reversed (negative strides), zero strides if allowed, random element
 * offset. Elements never alias unless a zero stride was drawn. */
void sp_layout_random(sp_rng *r, sp_dtype dtype, int ndim, const int64_t *shape, int flags,
                      sp_layout *out);
/* Draw a random shape: rank 0..max_ndim, sizes 0..max_size (sizes 0 and 1
 * favoured), numel at most max_numel. */
int sp_shape_random(sp_rng *r, int max_ndim, int64_t max_size, int64_t max_numel,
                    int64_t *shape);
/* The view of `l` on a buffer starting at `base`. */
sp_tensor sp_layout_tensor(const sp_layout *l, void *base, sp_device dev);
/* A dense layout of `shape`. */
void sp_layout_dense(sp_dtype dtype, int ndim, const int64_t *shape, sp_layout *out);

/* ---- reference and comparison (host memory only) -------------------------- */
/* Element-by-element copy, one index tuple at a time, using nothing but the
 * sp_tensor definition. Shapes and dtypes must agree. */
void sp_ref_copy(const sp_tensor *src, const sp_tensor *dst);
/* Compare two views element by element, bit for bit. @return the number of
 * differing elements; *first (may be NULL) gets the first one's linear
 * index, or -1. */
int64_t sp_ref_compare(const sp_tensor *a, const sp_tensor *b, int64_t *first);

/* Print a view's layout ("  name: bf16 ndim 2 shape [..] strides [..] data
 * 0x.."), for failure messages. */
void sp_print_tensor(FILE *f, const char *name, const sp_tensor *t);

/* ---- floating-point bit patterns a value copy would change ---------------- */
#define SP_NPATTERNS 16
typedef struct sp_bit_patterns {
    sp_dtype dtype;
    uint64_t bits[SP_NPATTERNS]; /* the low 8 * element-size bits are the pattern */
} sp_bit_patterns;
/* For bf16, f16, f32, f64: +sNaN (smallest payload), -sNaN, sNaN largest
 * payload, -sNaN odd payload, +qNaN, -qNaN, qNaN payload, -qNaN all ones,
 * +inf, -inf, smallest subnormal, -largest subnormal, a mid subnormal, +0,
 * -0, 1.0. */
extern const sp_bit_patterns sp_float_patterns[4];

/* ---- the K3 layouts (DESIGN: the KDA input boundary) ----------------------- */
enum { SP_K3_BETA_FA = 0, SP_K3_BETA_INPROJ = 1 };

typedef struct sp_k3 {
    int64_t T, H, P;      /* P = H * 128 */
    int beta_kind;        /* SP_K3_BETA_FA: W = 128 + H, beta at column 128;
                             SP_K3_BETA_INPROJ: W = 4P + 128 + H, at 4P + 128 */
    int64_t width, beta_col;
    int64_t g_rows;       /* rows of the g buffer (>= T) */
    size_t qkv_bytes, proj_bytes, g_bytes, dense_bytes; /* dense_bytes: q,k,v,g,beta */
} sp_k3;

void sp_k3_init(sp_k3 *k, int64_t T, int64_t H, int beta_kind);
/* Views of q, k, v, g, beta (in that order) over the three bf16 buffers:
 * qkv [T, 3P], proj [T, W], g [g_rows, P] (g dense). */
void sp_k3_views(const sp_k3 *k, void *qkv, void *proj, void *g, sp_device dev,
                 sp_tensor out[5]);
const char *sp_k3_beta_name(int beta_kind);

/* ---- timing ---------------------------------------------------------------- */
double sp_now_seconds(void); /* monotonic */
/* 1 when SP_TEST_SMALL is set (and not "0"): tests shrink their sizes
 * (compute-sanitizer runs). The one switch for every test. */
int sp_test_small(void);
int sp_cmp_double(const void *a, const void *b);
double sp_median(double *v, int n); /* sorts v */

#ifdef __cplusplus
}
#endif

#endif /* SP_SUPPORT_H */
