/* test_support.c — see test_support.h. */
#define _POSIX_C_SOURCE 200809L
#include "test_support.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- random numbers ---------------------------------------------------- */

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void ts_rng_seed(ts_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t ts_rng_next(ts_rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

int64_t ts_rng_range(ts_rng *r, int64_t lo, int64_t hi) {
    uint64_t span = (uint64_t)(hi - lo) + 1;
    if (span == 0) return (int64_t)ts_rng_next(r);
    return lo + (int64_t)(ts_rng_next(r) % span);
}

double ts_rng_unit(ts_rng *r) { return (double)(ts_rng_next(r) >> 11) * 0x1.0p-53; }

void ts_fill_random(void *p, size_t bytes, ts_rng *r) {
    unsigned char *b = p;
    size_t i = 0;
    for (; i + 8 <= bytes; i += 8) {
        uint64_t x = ts_rng_next(r);
        memcpy(b + i, &x, 8);
    }
    if (i < bytes) {
        uint64_t x = ts_rng_next(r);
        memcpy(b + i, &x, bytes - i);
    }
}

/* ---- layouts -------------------------------------------------------------- */

int ts_shape_random(ts_rng *r, int max_ndim, int64_t max_size, int64_t max_numel,
                    int64_t *shape) {
    int ndim = (int)ts_rng_range(r, 0, max_ndim);
    int64_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        int64_t s;
        switch (ts_rng_range(r, 0, 7)) {
        case 0: s = 1; break;
        case 1: s = (ts_rng_range(r, 0, 5) == 0) ? 0 : 2; break;
        default: s = ts_rng_range(r, 1, max_size); break;
        }
        while (s > 1 && numel * s > max_numel) s /= 2;
        shape[d] = s;
        numel *= s > 0 ? s : 1;
    }
    return ndim;
}

void ts_layout_dense(sp_dtype dtype, int ndim, const int64_t *shape, ts_layout *out) {
    memset(out, 0, sizeof *out);
    out->dtype = dtype;
    out->ndim = ndim;
    int64_t running = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        out->shape[d] = shape[d];
        out->strides[d] = running;
        running *= shape[d];
    }
    out->buffer_elems = running;
}

void ts_layout_random(ts_rng *r, sp_dtype dtype, int ndim, const int64_t *shape, int flags,
                      ts_layout *out) {
    memset(out, 0, sizeof *out);
    out->dtype = dtype;
    out->ndim = ndim;
    int order[SP_MAX_DIMS]; /* order[0] is the innermost dim in memory */
    for (int i = 0; i < ndim; i++) order[i] = ndim - 1 - i;
    if (ndim > 1 && ts_rng_range(r, 0, 2) == 0) { /* transpose: shuffle */
        for (int i = ndim - 1; i > 0; i--) {
            int j = (int)ts_rng_range(r, 0, i);
            int t = order[i];
            order[i] = order[j];
            order[j] = t;
        }
    }
    int64_t running = ts_rng_range(r, 0, 5) == 0 ? ts_rng_range(r, 2, 3) : 1;
    for (int i = 0; i < ndim; i++) {
        int d = order[i];
        out->shape[d] = shape[d];
        int64_t st = running;
        if ((flags & TS_LAYOUT_ALLOW_ZERO_STRIDE) && ts_rng_range(r, 0, 7) == 0) st = 0;
        if (ts_rng_range(r, 0, 4) == 0) st = -st;
        out->strides[d] = st;
        int64_t pad = ts_rng_range(r, 0, 3) == 0 ? ts_rng_range(r, 1, 9) : 0;
        running = running * (shape[d] > 0 ? shape[d] : 1) + pad;
    }
    int64_t neg = 0, pos = 0;
    for (int d = 0; d < ndim; d++) {
        int64_t span = (shape[d] > 0 ? shape[d] - 1 : 0) * out->strides[d];
        if (span < 0) neg -= span; else pos += span;
    }
    out->offset = neg + ts_rng_range(r, 0, 7);
    out->buffer_elems = out->offset + pos + 1 + ts_rng_range(r, 0, 7);
}

sp_tensor ts_layout_tensor(const ts_layout *l, void *base, sp_device dev) {
    sp_tensor t;
    memset(&t, 0, sizeof t);
    t.data = (char *)base + l->offset * (int64_t)sp_dtype_size(l->dtype);
    t.dtype = l->dtype;
    t.ndim = l->ndim;
    for (int d = 0; d < l->ndim; d++) {
        t.shape[d] = l->shape[d];
        t.strides[d] = l->strides[d];
    }
    t.device = dev;
    return t;
}

/* ---- reference ------------------------------------------------------------- */

int64_t ts_numel_shape(int ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int d = 0; d < ndim; d++) n *= shape[d];
    return n;
}

int64_t ts_numel(const sp_tensor *t) { return ts_numel_shape(t->ndim, t->shape); }

int ts_ref_dense(const sp_tensor *t) {
    if (ts_numel(t) == 0) return 1;
    int64_t running = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] != 1 && t->strides[d] != running) return 0;
        running *= t->shape[d];
    }
    return 1;
}

/* Walk every index tuple of `shape` in row-major order, calling f on the
 * byte addresses of element idx in a and b. */
#define SP_FOR_EACH_INDEX(a, b, BODY)                                                  \
    do {                                                                               \
        int64_t idx_[SP_MAX_DIMS] = {0};                                               \
        int64_t n_ = ts_numel(a);                                                      \
        size_t es_ = sp_dtype_size((sp_dtype)(a)->dtype);                              \
        for (int64_t lin_ = 0; lin_ < n_; lin_++) {                                    \
            int64_t oa_ = 0, ob_ = 0;                                                  \
            for (int d_ = 0; d_ < (a)->ndim; d_++) {                                   \
                oa_ += idx_[d_] * (a)->strides[d_];                                    \
                ob_ += idx_[d_] * (b)->strides[d_];                                    \
            }                                                                          \
            const char *pa_ = (const char *)(a)->data + oa_ * (int64_t)es_;            \
            char *pb_ = (char *)(b)->data + ob_ * (int64_t)es_;                        \
            BODY;                                                                      \
            for (int d_ = (a)->ndim - 1; d_ >= 0; d_--) {                              \
                if (++idx_[d_] < (a)->shape[d_]) break;                                \
                idx_[d_] = 0;                                                          \
            }                                                                          \
        }                                                                              \
    } while (0)

void ts_ref_copy(const sp_tensor *src, const sp_tensor *dst) {
    SP_FOR_EACH_INDEX(src, dst, memcpy(pb_, pa_, es_));
}

int64_t ts_ref_compare(const sp_tensor *a, const sp_tensor *b, int64_t *first) {
    int64_t bad = 0;
    if (first) *first = -1;
    SP_FOR_EACH_INDEX(a, b, {
        if (memcmp(pa_, pb_, es_) != 0) {
            if (bad == 0 && first) *first = lin_;
            bad++;
        }
    });
    return bad;
}

void ts_print_tensor(FILE *f, const char *name, const sp_tensor *t) {
    fprintf(f, "  %s: %s ndim %d shape [", name, sp_dtype_name((sp_dtype)t->dtype), t->ndim);
    for (int d = 0; d < t->ndim; d++) fprintf(f, "%s%lld", d ? "," : "", (long long)t->shape[d]);
    fprintf(f, "] strides [");
    for (int d = 0; d < t->ndim; d++) fprintf(f, "%s%lld", d ? "," : "", (long long)t->strides[d]);
    fprintf(f, "] data %p\n", t->data);
}

/* ---- bit patterns ---------------------------------------------------------- */

const ts_bit_patterns ts_float_patterns[4] = {
    {SP_BF16,
     {0x7f81, 0xff81, 0x7fbf, 0xffa5, 0x7fc0, 0xffc0, 0x7fd3, 0xffff, 0x7f80, 0xff80, 0x0001,
      0x807f, 0x0040, 0x0000, 0x8000, 0x3f80}},
    {SP_F16,
     {0x7c01, 0xfc01, 0x7dff, 0xfd55, 0x7e00, 0xfe00, 0x7e5a, 0xffff, 0x7c00, 0xfc00, 0x0001,
      0x83ff, 0x0200, 0x0000, 0x8000, 0x3c00}},
    {SP_F32,
     {0x7f800001, 0xff800001, 0x7fbfffff, 0xffa5a5a5, 0x7fc00000, 0xffc00000, 0x7fd23456,
      0xffffffff, 0x7f800000, 0xff800000, 0x00000001, 0x807fffff, 0x00400000, 0x00000000,
      0x80000000, 0x3f800000}},
    {SP_F64,
     {0x7ff0000000000001ull, 0xfff0000000000001ull, 0x7ff7ffffffffffffull, 0xfff5a5a5a5a5a5a5ull,
      0x7ff8000000000000ull, 0xfff8000000000000ull, 0x7ff8deadbeef0001ull, 0xffffffffffffffffull,
      0x7ff0000000000000ull, 0xfff0000000000000ull, 0x0000000000000001ull, 0x800fffffffffffffull,
      0x0008000000000000ull, 0x0000000000000000ull, 0x8000000000000000ull,
      0x3ff0000000000000ull}},
};

/* ---- K3 layouts ------------------------------------------------------------- */

void ts_k3_init(ts_k3 *k, int64_t T, int64_t H, int beta_kind) {
    memset(k, 0, sizeof *k);
    k->T = T;
    k->H = H;
    k->P = H * 128;
    k->beta_kind = beta_kind;
    if (beta_kind == TS_K3_BETA_FA) {
        k->width = 128 + H;
        k->beta_col = 128;
    } else {
        k->width = 4 * k->P + 128 + H;
        k->beta_col = 4 * k->P + 128;
    }
    k->g_rows = T;
    size_t T_ = (size_t)(T > 0 ? T : 0);
    k->qkv_bytes = T_ * 3 * (size_t)k->P * 2;
    k->proj_bytes = T_ * (size_t)k->width * 2;
    k->g_bytes = (size_t)k->g_rows * (size_t)k->P * 2;
    k->dense_bytes = T_ * (size_t)(4 * k->P + H) * 2;
}

void ts_k3_views(const ts_k3 *k, void *qkv, void *proj, void *g, sp_device dev,
                 sp_tensor out[5]) {
    int64_t T = k->T, H = k->H, P = k->P;
    int64_t shape4[4] = {1, T, H, 128};
    int64_t qkv_strides[4] = {T * 3 * P, 3 * P, 128, 1};
    for (int i = 0; i < 3; i++)
        sp_tensor_view(&out[i], qkv, i * P, SP_BF16, 4, shape4, qkv_strides, dev);
    sp_tensor_dense(&out[3], g, SP_BF16, 4, shape4, dev);
    int64_t shape3[3] = {1, T, H};
    int64_t beta_strides[3] = {T * k->width, k->width, 1};
    sp_tensor_view(&out[4], proj, k->beta_col, SP_BF16, 3, shape3, beta_strides, dev);
}

const char *ts_k3_beta_name(int beta_kind) {
    return beta_kind == TS_K3_BETA_FA ? "beta[T,128+H]" : "beta[T,4P+128+H]";
}

/* ---- timing ----------------------------------------------------------------- */

double ts_now_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ts_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double ts_median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, ts_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

int ts_test_small(void) {
    const char *s = getenv("SP_TEST_SMALL");
    return s && s[0] && s[0] != '0';
}
