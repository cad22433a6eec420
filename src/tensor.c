/* tensor.c — layer 1, tensor views: all view math lives here.
 * Sizes, strides and offsets are int64 elements; every product that could
 * overflow is checked once, in sp_tensor_check_, so the helpers after it can
 * compute freely. */
#include "internal.h"

#include <stdio.h>
#include "view_import.h"

#include <string.h>

static int mul_ovf(int64_t a, int64_t b, int64_t *out) { return __builtin_mul_overflow(a, b, out); }
static int add_ovf(int64_t a, int64_t b, int64_t *out) { return __builtin_add_overflow(a, b, out); }

/* Byte offsets, relative to data, of the start of t's lowest element (*neg,
 * <= 0) and of the end of its highest (*pos, >= es); t has elements and
 * valid sizes. Size-1 dims add nothing, whatever their stride. 0 on
 * success; 1 when the total span es + sum(|stride| * (size - 1) * es)
 * overflows int64, with the dim in *bad. */
static int byte_reach(const sp_tensor *t, int64_t es, int64_t *neg, int64_t *pos, int *bad) {
    int64_t lo = 0, hi = es, span = es;
    for (int d = 0; d < t->ndim; d++) {
        int64_t s = t->strides[d], part;
        if (t->shape[d] == 1) continue;
        if (s == INT64_MIN || mul_ovf(sp_abs64_(s), t->shape[d] - 1, &part) ||
            mul_ovf(part, es, &part) || add_ovf(span, part, &span)) {
            *bad = d;
            return 1;
        }
        if (s < 0) lo -= part;
        else hi += part;
    }
    *neg = lo;
    *pos = hi;
    return 0;
}

/* The structural checks; `placed` adds those on where the view lies (its
 * device, its data pointer, its bytes in the address space), in the order
 * the messages have always come in. */
static sp_status check_view(const sp_tensor *t, const char *name, int placed) {
    SP_REQUIRE(t != NULL, SP_ERR_INVALID_ARGUMENT, "%s: tensor pointer is NULL", name);
    SP_REQUIRE(t->ndim >= 0 && t->ndim <= SP_MAX_DIMS, SP_ERR_INVALID_ARGUMENT,
               "%s: ndim %d is outside 0..%d", name, (int)t->ndim, SP_MAX_DIMS);
    size_t es = sp_dtype_size((sp_dtype)t->dtype);
    SP_REQUIRE(es != 0, SP_ERR_INVALID_ARGUMENT, "%s: unknown dtype %d", name, (int)t->dtype);
    if (placed) {
        SP_REQUIRE(t->device.type == SP_DEVICE_CPU || t->device.type == SP_DEVICE_CUDA,
                   SP_ERR_INVALID_ARGUMENT, "%s: unknown device type %d", name,
                   (int)t->device.type);
        SP_REQUIRE(t->device.ordinal >= 0, SP_ERR_INVALID_ARGUMENT,
                   "%s: device ordinal %d is negative", name, (int)t->device.ordinal);
    }
    int empty = 0;
    for (int d = 0; d < t->ndim; d++) {
        SP_REQUIRE(t->shape[d] >= 0, SP_ERR_INVALID_ARGUMENT, "%s: shape[%d] = %lld is negative",
                   name, d, (long long)t->shape[d]);
        empty |= t->shape[d] == 0;
    }
    if (empty) return SP_OK; /* no element: nothing can overflow or be read */
    int64_t numel = 1, neg, pos;
    for (int d = 0; d < t->ndim; d++)
        SP_REQUIRE(!mul_ovf(numel, t->shape[d], &numel), SP_ERR_OVERFLOW,
                   "%s: element count overflows int64 at dim %d", name, d);
    int bad = 0;
    SP_REQUIRE(!byte_reach(t, (int64_t)es, &neg, &pos, &bad), SP_ERR_OVERFLOW,
               "%s: byte offsets overflow int64 at dim %d (stride %lld)", name, bad,
               (long long)t->strides[bad]);
    if (!placed) return SP_OK;
    SP_REQUIRE(t->data != NULL, SP_ERR_INVALID_ARGUMENT,
               "%s: data is NULL for a tensor of %lld elements", name, (long long)numel);
    /* [data + neg, data + pos) must be addresses: no wrap below 0 or past
     * the top (the end itself must be representable). */
    const uint64_t base = (uint64_t)(uintptr_t)t->data;
    SP_REQUIRE(base >= (uint64_t)-neg && (uint64_t)pos <= (uint64_t)UINTPTR_MAX - base,
               SP_ERR_OVERFLOW,
               "%s: bytes [%p - %lld, %p + %lld) do not fit the address space", name, t->data,
               (long long)-neg, t->data, (long long)pos);
    return SP_OK;
}

sp_status sp_tensor_check_(const sp_tensor *t, const char *name) { return check_view(t, name, 1); }

sp_status sp_tensor_check_layout_(const sp_tensor *t, const char *name) {
    return check_view(t, name, 0);
}

sp_status sp_tensor_check_aligned_(const sp_tensor *t, const char *name) {
    SP_FORWARD(sp_tensor_check_(t, name));
    size_t es = sp_dtype_size((sp_dtype)t->dtype);
    SP_REQUIRE(sp_numel_(t) == 0 || (uintptr_t)t->data % es == 0, SP_ERR_MISALIGNED,
               "%s: base address %p is not %zu-byte aligned (%s)", name, t->data, es,
               sp_dtype_name((sp_dtype)t->dtype));
    return SP_OK;
}

int64_t sp_numel_(const sp_tensor *t) {
    if (!t || t->ndim < 0 || t->ndim > SP_MAX_DIMS) return -1;
    int64_t n = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0) return -1;
        if (t->shape[d] == 0) n = 0;
    }
    for (int d = 0; n && d < t->ndim; d++)
        if (mul_ovf(n, t->shape[d], &n)) return -1;
    return n;
}

sp_status sp_tensor_numel(const sp_tensor *t, int64_t *numel) {
    SP_REQUIRE(numel != NULL, SP_ERR_INVALID_ARGUMENT, "numel: output pointer is NULL");
    SP_FORWARD(sp_tensor_check_(t, "tensor"));
    *numel = sp_numel_(t);
    return SP_OK;
}

int sp_tensor_is_dense(const sp_tensor *t) {
    int64_t n = sp_numel_(t);
    if (n < 0 || sp_dtype_size((sp_dtype)t->dtype) == 0) return 0;
    if (n == 0) return 1;
    return sp_dims_dense_(t->ndim, t->shape, t->strides, 1);
}

int sp_dims_dense_(int ndim, const int64_t *shape, const int64_t *strides, int64_t unit) {
    int64_t expect = unit;
    int past = 0; /* expect overflowed: no stride can match it */
    for (int d = ndim - 1; d >= 0; d--) {
        if (shape[d] == 1) continue;
        if (past || strides[d] != expect) return 0;
        past = mul_ovf(expect, shape[d], &expect);
    }
    return 1;
}

static sp_status tensor_fill(sp_tensor *t, void *data, sp_dtype dtype, int ndim,
                             const int64_t *shape, const int64_t *strides, sp_device device) {
    SP_REQUIRE(t != NULL, SP_ERR_INVALID_ARGUMENT, "tensor: output pointer is NULL");
    SP_REQUIRE(ndim >= 0 && ndim <= SP_MAX_DIMS, SP_ERR_INVALID_ARGUMENT,
               "tensor: ndim %d is outside 0..%d", ndim, SP_MAX_DIMS);
    SP_REQUIRE(ndim == 0 || shape != NULL, SP_ERR_INVALID_ARGUMENT, "tensor: shape is NULL");
    sp_tensor v;
    memset(&v, 0, sizeof v);
    v.data = data;
    v.dtype = (int32_t)dtype;
    v.ndim = ndim;
    v.device = device;
    int64_t running = 1;
    for (int d = ndim - 1; d >= 0; d--) {
        v.shape[d] = shape[d];
        v.strides[d] = strides ? strides[d] : running;
        if (shape[d] > 0 && running <= INT64_MAX / shape[d]) running *= shape[d];
    }
    SP_FORWARD(sp_tensor_check_(&v, "tensor"));
    *t = v;
    return SP_OK;
}

sp_status sp_tensor_dense(sp_tensor *t, void *data, sp_dtype dtype, int ndim,
                          const int64_t *shape, sp_device device) {
    return tensor_fill(t, data, dtype, ndim, shape, NULL, device);
}

sp_status sp_tensor_view(sp_tensor *t, void *base, int64_t offset, sp_dtype dtype, int ndim,
                         const int64_t *shape, const int64_t *strides, sp_device device) {
    SP_REQUIRE(ndim == 0 || strides != NULL, SP_ERR_INVALID_ARGUMENT, "tensor: strides is NULL");
    size_t es = sp_dtype_size(dtype);
    SP_REQUIRE(es != 0, SP_ERR_INVALID_ARGUMENT, "tensor: unknown dtype %d", (int)dtype);
    int64_t off_bytes;
    SP_REQUIRE(!mul_ovf(offset, (int64_t)es, &off_bytes), SP_ERR_OVERFLOW,
               "tensor: offset %lld elements overflows in bytes", (long long)offset);
    const uint64_t b = (uint64_t)(uintptr_t)base, mag = off_bytes < 0 ? 0 - (uint64_t)off_bytes
                                                                     : (uint64_t)off_bytes;
    SP_REQUIRE(!base || (off_bytes < 0 ? mag <= b : mag <= (uint64_t)UINTPTR_MAX - b),
               SP_ERR_OVERFLOW, "tensor: base %p + %lld bytes leaves the address space", base,
               (long long)off_bytes);
    void *data = base ? (void *)((uintptr_t)base + (uintptr_t)off_bytes) : NULL;
    return tensor_fill(t, data, dtype, ndim, shape, strides, device);
}

void sp_tensor_extent_(const sp_tensor *t, uintptr_t *lo, uintptr_t *hi) {
    uintptr_t base = (uintptr_t)t->data;
    int64_t neg = 0, pos = 0;
    int bad;
    if (sp_numel_(t) == 0 || byte_reach(t, (int64_t)sp_dtype_size((sp_dtype)t->dtype), &neg, &pos, &bad)) {
        *lo = *hi = base;
        return;
    }
    *lo = base - (uintptr_t)-neg; /* no wrap: sp_tensor_check_ saw to it */
    *hi = base + (uintptr_t)pos;
}

int sp_extents_overlap_(uintptr_t alo, uintptr_t ahi, uintptr_t blo, uintptr_t bhi) {
    return alo < ahi && blo < bhi && alo < bhi && blo < ahi;
}

int sp_tensor_self_overlaps_(const sp_tensor *t) {
    if (sp_numel_(t) <= 1) return 0;
    /* Dims of size > 1 sorted by |stride|; each must step past everything
     * the smaller dims can reach, or two index tuples share an element. */
    int64_t st[SP_MAX_DIMS], sh[SP_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 1) continue;
        if (t->strides[d] == 0) return 1;
        int64_t s = sp_abs64_(t->strides[d]);
        int i = n++;
        for (; i > 0 && st[i - 1] > s; i--) {
            st[i] = st[i - 1];
            sh[i] = sh[i - 1];
        }
        st[i] = s;
        sh[i] = t->shape[d];
    }
    int64_t reach = 0; /* farthest element offset the smaller dims reach */
    for (int i = 0; i < n; i++) {
        if (st[i] <= reach) return 1;
        reach += st[i] * (sh[i] - 1);
    }
    return 0;
}

int sp_widest_vector_(const uint64_t *values, int n) {
    uint64_t acc = 16;
    for (int i = 0; i < n; i++) acc |= values[i];
    int w = 16;
    while (w > 1 && (acc & (uint64_t)(w - 1))) w >>= 1;
    return w;
}

int sp_coalesce_dims_(int ndim, int64_t *shape, int64_t *const *strides, int k) {
    int n = 0; /* reads at d never see what writes at n <= d changed */
    for (int d = 0; d < ndim; d++) {
        int64_t s = shape[d], w; /* w: the size or stride that would fold */
        if (s == 1) continue;
        int fold = n > 0 && !mul_ovf(shape[n - 1], s, &w);
        for (int j = 0; j < k && fold; j++)
            fold = !mul_ovf(s, strides[j][d], &w) && strides[j][n - 1] == w;
        if (fold) { /* the outer dim folds into this one */
            shape[n - 1] *= s;
            for (int j = 0; j < k; j++) strides[j][n - 1] = strides[j][d];
            continue;
        }
        shape[n] = s;
        for (int j = 0; j < k; j++) strides[j][n] = strides[j][d];
        n++;
    }
    return n;
}

void sp_coalesce_pair_(const sp_tensor *src, const sp_tensor *dst, int *ndim, int64_t *shape,
                      int64_t *src_strides, int64_t *dst_strides) {
    for (int d = 0; d < src->ndim; d++) {
        shape[d] = src->shape[d];
        src_strides[d] = src->strides[d];
        dst_strides[d] = dst->strides[d];
    }
    int64_t *const strides[2] = {src_strides, dst_strides};
    *ndim = sp_coalesce_dims_(src->ndim, shape, strides, 2);
}

/* ---- overlap of two views ------------------------------------------------
 * Element x of a and element y of b share a byte iff
 *     sum(c_d * s_d)  lies in  [L, R] = [gap - (es_a - 1), gap + (es_b - 1)]
 * with gap = base_b - base_a, over the dims of both views, each view
 * coalesced first: a's digits c in [0, n-1], b's negated, byte strides made
 * positive by flipping the digit range, dims of equal stride merged. Decided
 *   - at once when no multiple of the gcd of all strides lies in [L, R]
 *     (interleavings such as even and odd bytes);
 *   - exactly, by a lattice argument, when two dims remain (two 1-D
 *     progressions, column slices of one buffer): c1 s1 + c2 s2 = t holds on
 *     c1 = c1' + k s2/g, c2 = c2' - k s1/g, and the ranges of the two digits
 *     bound k to an interval;
 *   - otherwise by a depth-first search over the digits of all dims but one
 *     pair (solved as above; the pair that leaves the fewest digits),
 *     largest stride first, visiting only digits whose residue the dims
 *     below can complete and pruning every branch that cannot reach [L, R].
 *     A budget of visited nodes bounds it; when spent the answer is unknown.
 * In 128-bit integers: the offsets of two views together may pass 2^63. */
__extension__ typedef __int128 i128;

static int64_t floor_div64(int64_t a, int64_t b) { return a / b - (a % b != 0 && a < 0); }

typedef struct odim {
    int64_t s;  /* byte stride, > 0 */
    i128 lo, hi; /* digit range */
} odim;

enum { SP_OVERLAP_BUDGET = 1 << 12 };

typedef struct osearch {
    odim d[2 * SP_MAX_DIMS];
    i128 mins[2 * SP_MAX_DIMS + 1], maxs[2 * SP_MAX_DIMS + 1]; /* reach of d[0 .. k) */
    int64_t gcds[2 * SP_MAX_DIMS + 1];                         /* gcd of d[0 .. k).s */
    int64_t g01, x01; /* d[0].s * x01 == g01 (mod d[1].s), g01 = gcd(d[0].s, d[1].s) */
    int64_t h[2 * SP_MAX_DIMS], inv[2 * SP_MAX_DIMS]; /* d[k].s * inv[k] == h[k] = gcd(d[k].s,
                                                         gcds[k]) (mod gcds[k]) */
    long budget;
} osearch;

/* Floor and ceiling of a / b for b > 0; in 64 bits where a fits (the usual
 * case, and several times faster than a 128-bit division). */
static i128 fdiv(i128 a, i128 b) {
    if (a == (int64_t)a && b == (int64_t)b) return floor_div64((int64_t)a, (int64_t)b);
    return a / b - (a % b != 0 && a < 0);
}
static i128 cdiv(i128 a, i128 b) { return -fdiv(-a, b); }
static i128 imod(i128 a, i128 m) { return a - fdiv(a, m) * m; }
static i128 imax(i128 a, i128 b) { return a > b ? a : b; }
static i128 imin(i128 a, i128 b) { return a < b ? a : b; }

/* gcd(a, b) of a, b > 0, and *x with a * x == gcd (mod b). */
static int64_t ext_gcd(int64_t a, int64_t b, int64_t *x) {
    int64_t r0 = a, r1 = b;
    i128 x0 = 1, x1 = 0; /* r_i == a * x_i (mod b); |x_i| <= b */
    while (r1 != 0) {
        int64_t q = r0 / r1, r = r0 - q * r1;
        i128 x2 = x0 - q * x1;
        r0 = r1;
        r1 = r;
        x0 = x1;
        x1 = x2;
    }
    *x = (int64_t)imod(x0, b);
    return r0;
}

/* Some c0 in [d0.lo, d0.hi], c1 in [d1.lo, d1.hi] with c0 s0 + c1 s1 = t. */
static int solve_two(const osearch *S, i128 t) {
    const odim *a = &S->d[0], *b = &S->d[1];
    const i128 g = S->g01, m0 = a->s / g, m1 = b->s / g, u = t / g;
    /* c0 m0 + c1 m1 = u: c0 == u * x01 (mod m1), and c1 in range bounds c0. */
    i128 r = imod(imod(u, m1) * S->x01, m1);
    i128 lo = imax(a->lo, cdiv(u - b->hi * m1, m0)), hi = imin(a->hi, fdiv(u - b->lo * m1, m0));
    return lo <= hi && lo + imod(r - lo, m1) <= hi;
}

/* 1 when the digits of d[0 .. n) reach [L, R]; 0 when not; -1 when the
 * budget ran out. */
static int digits_reach(osearch *S, int n, i128 L, i128 R) {
    if (--S->budget < 0) return -1;
    if (R < S->mins[n] || L > S->maxs[n]) return 0;
    if (fdiv(R, S->gcds[n]) * S->gcds[n] < L) return 0;
    if (n == 0) return 1;
    if (n == 1) {
        const odim *a = &S->d[0];
        return imax(a->lo, cdiv(L, a->s)) <= imin(a->hi, fdiv(R, a->s));
    }
    if (n == 2) {
        for (i128 t = cdiv(L, S->g01) * S->g01; t <= R; t += S->g01)
            if (solve_two(S, t)) return 1;
        return 0;
    }
    const odim *t = &S->d[n - 1];
    i128 cmin = imax(t->lo, cdiv(L - S->maxs[n - 1], t->s));
    i128 cmax = imin(t->hi, fdiv(R - S->mins[n - 1], t->s));
    /* The dims below make up multiples of G = gcds[n - 1] only: c * s must
     * fall on some u in [L, R] modulo G. When the window is narrower than G
     * each such u (a multiple of h = gcd(s, G)) allows one residue class of
     * c modulo G / h, and only those digits are visited. */
    const int64_t h = S->h[n - 1], inv = S->inv[n - 1];
    int64_t step = S->gcds[n - 1] / h;
    i128 u = cdiv(L, h) * h, ulast = R;
    if (R - L + 1 >= S->gcds[n - 1] || step == 1) step = 1, ulast = u; /* every digit, once */
    for (; u <= ulast; u += h)
        for (i128 c = cmin + imod(imod(u / h, step) * inv - cmin, step); c <= cmax; c += step) {
            int r = digits_reach(S, n - 1, L - c * t->s, R - c * t->s);
            if (r != 0) return r;
        }
    return 0;
}

static int64_t gcd64(int64_t a, int64_t b) {
    while (b != 0) {
        int64_t r = a % b;
        a = b;
        b = r;
    }
    return a;
}

/* Append t's coalesced dims to d[0 .. n), negated for b; returns the new n. */
static int add_dims(odim *d, int n, const sp_tensor *t, int negate) {
    const int64_t es = (int64_t)sp_dtype_size((sp_dtype)t->dtype);
    int64_t shape[SP_MAX_DIMS], st[SP_MAX_DIMS], unused[SP_MAX_DIMS];
    int nd;
    sp_coalesce_pair_(t, t, &nd, shape, st, unused);
    for (int k = 0; k < nd; k++) {
        if (st[k] == 0) continue;
        int64_t s = st[k] * es;
        i128 lo = 0, hi = shape[k] - 1;
        if (negate) { lo = -hi; hi = 0; }
        if (s < 0) { i128 x = lo; lo = -hi; hi = -x; s = -s; }
        int i = 0;
        while (i < n && d[i].s != s) i++;
        if (i == n) d[n++] = (odim){s, 0, 0};
        d[i].lo += lo;
        d[i].hi += hi;
    }
    return n;
}

static void swap_dims(odim *d, int i, int j) {
    odim x = d[i];
    d[i] = d[j];
    d[j] = x;
}

/* The pair (*bi, *bj) of d[0 .. n) to solve exactly: the one that leaves
 * the fewest digits to enumerate, estimated as the product over the other
 * dims of (range / step), where step = g / gcd(s, g) is the spacing of the
 * digits that the pair's gcd g lets through (see digits_reach). */
static void pick_exact_pair(const odim *d, int n, int *bi, int *bj) {
    double best = 0;
    *bi = 0;
    *bj = 1;
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++) {
            const int64_t g = gcd64(d[i].s, d[j].s);
            double cost = 1;
            for (int e = 0; e < n; e++)
                if (e != i && e != j)
                    cost *= (double)(d[e].hi - d[e].lo + 1) / (double)(g / gcd64(d[e].s, g));
            if ((i == 0 && j == 1) || cost < best) {
                best = cost;
                *bi = i;
                *bj = j;
            }
        }
}

int sp_tensors_overlap_(const sp_tensor *a, const sp_tensor *b) {
    uintptr_t alo, ahi, blo, bhi;
    sp_tensor_extent_(a, &alo, &ahi);
    sp_tensor_extent_(b, &blo, &bhi);
    if (!sp_extents_overlap_(alo, ahi, blo, bhi)) return 0;
    osearch S;
    odim *d = S.d;
    int n = add_dims(d, add_dims(d, 0, a, 0), b, 1);
    /* The pair solved exactly goes first, the rest by ascending stride
     * (enumerated from the largest). */
    if (n >= 3) {
        int bi, bj;
        pick_exact_pair(d, n, &bi, &bj);
        swap_dims(d, 0, bi);
        swap_dims(d, 1, bj); /* bj > bi >= 0: not moved by the first swap */
    }
    for (int i = 3; i < n; i++)
        for (int j = i; j > 2 && d[j - 1].s > d[j].s; j--) swap_dims(d, j, j - 1);
    S.mins[0] = S.maxs[0] = 0;
    S.gcds[0] = 1; /* unused: the range test decides n = 0 */
    for (int i = 0; i < n; i++) {
        S.mins[i + 1] = S.mins[i] + d[i].lo * d[i].s;
        S.maxs[i + 1] = S.maxs[i] + d[i].hi * d[i].s;
        S.gcds[i + 1] = i ? gcd64(S.gcds[i], d[i].s) : d[i].s;
    }
    if (n >= 2) S.g01 = ext_gcd(d[0].s, d[1].s, &S.x01);
    for (int i = 2; i < n; i++) S.h[i] = ext_gcd(d[i].s, S.gcds[i], &S.inv[i]);
    S.budget = SP_OVERLAP_BUDGET;
    const i128 gap = (i128)(uintptr_t)b->data - (i128)(uintptr_t)a->data;
    const i128 L = gap - ((i128)sp_dtype_size((sp_dtype)a->dtype) - 1);
    const i128 R = gap + ((i128)sp_dtype_size((sp_dtype)b->dtype) - 1);
    return digits_reach(&S, n, L, R);
}

static sp_dims_text_ dims_text(const int64_t *v, int n, char open, char close) {
    sp_dims_text_ r;
    size_t at = (size_t)snprintf(r.s, sizeof r.s, "%c", open);
    for (int i = 0; i < n && at < sizeof r.s; i++)
        at += (size_t)snprintf(r.s + at, sizeof r.s - at, i ? ", %lld" : "%lld", (long long)v[i]);
    if (at < sizeof r.s) snprintf(r.s + at, sizeof r.s - at, "%c", close);
    return r;
}

sp_dims_text_ sp_shape_text_(const sp_tensor *t) { return dims_text(t->shape, t->ndim, '[', ']'); }

sp_dims_text_ sp_strides_text_(const sp_tensor *t) {
    return dims_text(t->strides, t->ndim, '(', ')');
}
