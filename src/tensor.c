/* tensor.c — layer 1: all view math lives here (DESIGN.md, "Tensor views").
 * Sizes, strides and offsets are int64 elements; every product that could
 * overflow is checked once, in sp_tensor_check, so the helpers after it can
 * compute freely. */
#include "internal.h"

#include <string.h>

static int mul_ovf(int64_t a, int64_t b, int64_t *out) { return __builtin_mul_overflow(a, b, out); }
static int add_ovf(int64_t a, int64_t b, int64_t *out) { return __builtin_add_overflow(a, b, out); }

static int64_t abs64(int64_t x) { return x < 0 ? -x : x; }

sp_status sp_tensor_check(const sp_tensor *t, const char *name) {
    SP_REQUIRE(t != NULL, SP_ERR_INVALID_ARGUMENT, "%s: tensor pointer is NULL", name);
    SP_REQUIRE(t->ndim >= 0 && t->ndim <= SP_MAX_DIMS, SP_ERR_INVALID_ARGUMENT,
               "%s: ndim %d is outside 0..%d", name, (int)t->ndim, SP_MAX_DIMS);
    size_t es = sp_dtype_size((sp_dtype)t->dtype);
    SP_REQUIRE(es != 0, SP_ERR_INVALID_ARGUMENT, "%s: unknown dtype %d", name, (int)t->dtype);
    SP_REQUIRE(t->device.type == SP_DEVICE_CPU || t->device.type == SP_DEVICE_CUDA,
               SP_ERR_INVALID_ARGUMENT, "%s: unknown device type %d", name, (int)t->device.type);
    SP_REQUIRE(t->device.ordinal >= 0, SP_ERR_INVALID_ARGUMENT, "%s: device ordinal %d is negative",
               name, (int)t->device.ordinal);
    int empty = 0;
    for (int d = 0; d < t->ndim; d++) {
        SP_REQUIRE(t->shape[d] >= 0, SP_ERR_INVALID_ARGUMENT, "%s: shape[%d] = %lld is negative",
                   name, d, (long long)t->shape[d]);
        empty |= t->shape[d] == 0;
    }
    if (empty) return SP_OK; /* no element: nothing can overflow or be read */
    int64_t numel = 1, span = (int64_t)es;
    for (int d = 0; d < t->ndim; d++)
        SP_REQUIRE(!mul_ovf(numel, t->shape[d], &numel), SP_ERR_OVERFLOW,
                   "%s: element count overflows int64 at dim %d", name, d);
    for (int d = 0; d < t->ndim; d++) {
        int64_t s = t->strides[d], part;
        SP_REQUIRE(s != INT64_MIN && !mul_ovf(abs64(s), t->shape[d] - 1, &part) &&
                       !mul_ovf(part, (int64_t)es, &part) && !add_ovf(span, part, &span),
                   SP_ERR_OVERFLOW, "%s: byte offsets overflow int64 at dim %d (stride %lld)", name,
                   d, (long long)s);
    }
    SP_REQUIRE(t->data != NULL, SP_ERR_INVALID_ARGUMENT,
               "%s: data is NULL for a tensor of %lld elements", name, (long long)numel);
    return SP_OK;
}

sp_status sp_tensor_check_aligned(const sp_tensor *t, const char *name) {
    SP_FORWARD(sp_tensor_check(t, name));
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
    SP_FORWARD(sp_tensor_check(t, "tensor"));
    *numel = sp_numel_(t);
    return SP_OK;
}

int sp_tensor_is_dense(const sp_tensor *t) {
    int64_t n = sp_numel_(t);
    if (n < 0 || sp_dtype_size((sp_dtype)t->dtype) == 0) return 0;
    if (n == 0) return 1;
    int64_t expect = 1;
    for (int d = t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] == 1) continue;
        if (t->strides[d] != expect) return 0;
        expect *= t->shape[d];
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
    SP_FORWARD(sp_tensor_check(&v, "tensor"));
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
    void *data = base ? (void *)((uintptr_t)base + (uintptr_t)off_bytes) : NULL;
    return tensor_fill(t, data, dtype, ndim, shape, strides, device);
}

void sp_tensor_extent(const sp_tensor *t, uintptr_t *lo, uintptr_t *hi) {
    uintptr_t base = (uintptr_t)t->data;
    if (sp_numel_(t) == 0) {
        *lo = *hi = base;
        return;
    }
    int64_t es = (int64_t)sp_dtype_size((sp_dtype)t->dtype), neg = 0, pos = 0;
    for (int d = 0; d < t->ndim; d++) {
        int64_t span = (t->shape[d] - 1) * t->strides[d] * es;
        if (span < 0) neg += span; else pos += span;
    }
    *lo = base + (uintptr_t)neg; /* wraps as intended: neg <= 0 */
    *hi = base + (uintptr_t)pos + (uintptr_t)es;
}

int sp_extents_overlap(uintptr_t alo, uintptr_t ahi, uintptr_t blo, uintptr_t bhi) {
    return alo < ahi && blo < bhi && alo < bhi && blo < ahi;
}

int sp_tensor_self_overlaps(const sp_tensor *t) {
    if (sp_numel_(t) <= 1) return 0;
    /* Dims of size > 1 sorted by |stride|; each must step past everything
     * the smaller dims can reach, or two index tuples share an element. */
    int64_t st[SP_MAX_DIMS], sh[SP_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] == 1) continue;
        if (t->strides[d] == 0) return 1;
        int64_t s = abs64(t->strides[d]);
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

int sp_widest_vector(const uint64_t *values, int n) {
    uint64_t acc = 16;
    for (int i = 0; i < n; i++) acc |= values[i];
    int w = 16;
    while (w > 1 && (acc & (uint64_t)(w - 1))) w >>= 1;
    return w;
}

void sp_coalesce_pair(const sp_tensor *src, const sp_tensor *dst, int *ndim, int64_t *shape,
                      int64_t *src_strides, int64_t *dst_strides) {
    int n = 0;
    for (int d = 0; d < src->ndim; d++) {
        int64_t s = src->shape[d];
        if (s == 1) continue;
        if (n > 0 && src_strides[n - 1] == s * src->strides[d] &&
            dst_strides[n - 1] == s * dst->strides[d]) {
            shape[n - 1] *= s; /* the outer dim folds into this one */
            src_strides[n - 1] = src->strides[d];
            dst_strides[n - 1] = dst->strides[d];
            continue;
        }
        shape[n] = s;
        src_strides[n] = src->strides[d];
        dst_strides[n] = dst->strides[d];
        n++;
    }
    *ndim = n;
}

void sp_plan_pair(const sp_copy_pair *p, sp_copy_desc *d) {
    int64_t shape[SP_MAX_DIMS], ss[SP_MAX_DIMS], ds[SP_MAX_DIMS];
    int n;
    sp_coalesce_pair(&p->src, &p->dst, &n, shape, ss, ds);
    if (n == 0) { /* a single element */
        shape[0] = 1;
        ss[0] = ds[0] = 1;
        n = 1;
    }
    const int64_t es = (int64_t)sp_dtype_size((sp_dtype)p->src.dtype);
    memset(d, 0, sizeof *d);
    d->src = (uint64_t)(uintptr_t)p->src.data;
    d->dst = (uint64_t)(uintptr_t)p->dst.data;
    d->nouter = n - 1;
    int64_t rows = 1;
    for (int i = 0; i < n - 1; i++) { /* outer dims, innermost first */
        int dim = n - 2 - i;
        d->outer_shape[i] = shape[dim];
        d->src_outer_stride[i] = ss[dim] * es;
        d->dst_outer_stride[i] = ds[dim] * es;
        rows *= shape[dim];
    }
    const int64_t inner = shape[n - 1];
    if (ss[n - 1] == 1 && ds[n - 1] == 1) {
        /* A contiguous run on both sides: move the widest words that divide
         * both addresses, the run and every outer stride. */
        uint64_t v[2 + 2 * SP_DESC_OUTER + 1];
        int k = 0;
        v[k++] = d->src;
        v[k++] = d->dst;
        v[k++] = (uint64_t)(inner * es);
        for (int i = 0; i < d->nouter; i++) {
            v[k++] = (uint64_t)d->src_outer_stride[i];
            v[k++] = (uint64_t)d->dst_outer_stride[i];
        }
        d->vec = sp_widest_vector(v, k);
        d->run_units = inner * es / d->vec;
        d->src_run_stride = d->dst_run_stride = d->vec;
    } else { /* a gather (or scatter): one element per move */
        d->vec = (int32_t)es;
        d->run_units = inner;
        d->src_run_stride = ss[n - 1] * es;
        d->dst_run_stride = ds[n - 1] * es;
    }
    d->units = rows * d->run_units;
    int64_t sspan = abs64(d->src_run_stride) * (d->run_units - 1) + d->vec;
    int64_t dspan = abs64(d->dst_run_stride) * (d->run_units - 1) + d->vec;
    for (int i = 0; i < d->nouter; i++) {
        sspan += abs64(d->src_outer_stride[i]) * (d->outer_shape[i] - 1);
        dspan += abs64(d->dst_outer_stride[i]) * (d->outer_shape[i] - 1);
    }
    d->src_span = sspan;
    d->dst_span = dspan;
}

/* ---- exact overlap of two views ------------------------------------------
 * Element x of a and element y of b share a byte iff
 *     base_a - base_b + sum(c_d * s_d)  lies in  [-(es_a - 1), es_b - 1]
 * where the dims d are a's (c in [0, n-1]) and b's negated (c in [-(n-1), 0]),
 * dims of equal |stride| merged. A depth-first search over the digits c_d,
 * largest stride first, prunes every branch whose remaining dims cannot reach
 * the target; a node budget keeps it cheap, answering "overlap" when spent. */
typedef struct odim {
    int64_t s, lo, hi;
} odim;

static int64_t floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && a < 0); }
static int64_t ceil_div(int64_t a, int64_t b) { return a / b + (a % b != 0 && a > 0); }

static int digits_reach(const odim *d, int n, const int64_t *mins, const int64_t *maxs,
                        int64_t L, int64_t R, int *budget) {
    if (R < mins[n] || L > maxs[n]) return 0;
    if (n == 0) return 1; /* mins[0] = maxs[0] = 0 lies in [L, R] */
    if (--*budget < 0) return 1;
    const odim *t = &d[n - 1];
    int64_t cmin = ceil_div(L - maxs[n - 1], t->s), cmax = floor_div(R - mins[n - 1], t->s);
    if (cmin < t->lo) cmin = t->lo;
    if (cmax > t->hi) cmax = t->hi;
    for (int64_t c = cmin; c <= cmax; c++)
        if (digits_reach(d, n - 1, mins, maxs, L - c * t->s, R - c * t->s, budget)) return 1;
    return 0;
}

static int add_dims(odim *d, int n, const sp_tensor *t, int negate) {
    const int64_t es = (int64_t)sp_dtype_size((sp_dtype)t->dtype);
    for (int k = 0; k < t->ndim; k++) {
        if (t->shape[k] == 1 || t->strides[k] == 0) continue;
        int64_t s = t->strides[k] * es, lo = 0, hi = t->shape[k] - 1;
        if (negate) { lo = -hi; hi = 0; }
        if (s < 0) { int64_t x = lo; lo = -hi; hi = -x; s = -s; }
        int i = 0;
        while (i < n && d[i].s != s) i++;
        if (i == n) d[n++] = (odim){s, 0, 0};
        d[i].lo += lo;
        d[i].hi += hi;
    }
    return n;
}

int sp_tensors_overlap(const sp_tensor *a, const sp_tensor *b) {
    uintptr_t alo, ahi, blo, bhi;
    sp_tensor_extent(a, &alo, &ahi);
    sp_tensor_extent(b, &blo, &bhi);
    if (!sp_extents_overlap(alo, ahi, blo, bhi)) return 0;
    odim d[2 * SP_MAX_DIMS];
    int n = add_dims(d, add_dims(d, 0, a, 0), b, 1);
    for (int i = 1; i < n; i++) /* ascending |stride| */
        for (int j = i; j > 0 && d[j - 1].s > d[j].s; j--) {
            odim x = d[j];
            d[j] = d[j - 1];
            d[j - 1] = x;
        }
    int64_t mins[2 * SP_MAX_DIMS + 1] = {0}, maxs[2 * SP_MAX_DIMS + 1] = {0};
    for (int i = 0; i < n; i++) {
        mins[i + 1] = mins[i] + d[i].lo * d[i].s;
        maxs[i + 1] = maxs[i] + d[i].hi * d[i].s;
    }
    /* Both bases lie inside the overlapping extents, so the gap fits int64. */
    int64_t gap = (int64_t)((uintptr_t)b->data - (uintptr_t)a->data);
    int64_t L = gap - ((int64_t)sp_dtype_size((sp_dtype)a->dtype) - 1);
    int64_t R = gap + ((int64_t)sp_dtype_size((sp_dtype)b->dtype) - 1);
    int budget = 4096;
    return digits_reach(d, n, mins, maxs, L, R, &budget);
}
