/*
 * fuzz_copy.c — libFuzzer target over validation, planning and the CPU copy.
 *
 * Bytes decode into 1..4 (src, dst) pairs on one 4 KiB arena: random dtypes
 * (now and then unknown ones), ranks 0..8, sizes 0..3, strides -8..8 on both
 * sides, byte offsets anywhere (so views overlap, alias and misalign), now
 * and then a mismatch, a malformed view or a CUDA tensor. Then:
 *   sp_copy_batch: on an error nothing may change; on success the batch
 *     must have been valid (checked here byte by byte) and the arena must
 *     equal the reference. A batch that is plainly valid must be accepted.
 *   sp_pack of the sources, with a workspace that is exact, short, NULL or
 *     inside the arena: the same two-sided check.
 * Built with clang, -fsanitize=fuzzer,address,undefined, from the library
 * sources (see CMakeLists.txt). Run: fuzz_copy -max_total_time=30
 */
#include "test_support.h"
#include "stridepack.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { ARENA = 4096, WSCAP = 8192, MAXP = 4, MAXEL = 1024 };

static _Alignas(256) unsigned char arena[ARENA], arena0[ARENA], arena1[ARENA];

static _Alignas(256) unsigned char wsbuf[WSCAP], ws0[WSCAP], ws1[WSCAP];
static unsigned char dmark[ARENA + WSCAP], smark[ARENA + WSCAP];

/* The views of the current input, printed when a property fails. */
static const sp_tensor *cur_views[2 * MAXP];
static int cur_n;

static void dump_views(void) {
    for (int i = 0; i < cur_n; i++) {
        const sp_tensor *t = cur_views[i];
        fprintf(stderr, "  %s[%d]: dtype %d ndim %d data arena%+td shape [", i % 2 ? "dst" : "src",
                i / 2, (int)t->dtype, (int)t->ndim, (const unsigned char *)t->data - arena);
        for (int d = 0; d < t->ndim && d < SP_MAX_DIMS; d++)
            fprintf(stderr, "%s%lld", d ? "," : "", (long long)t->shape[d]);
        fprintf(stderr, "] strides [");
        for (int d = 0; d < t->ndim && d < SP_MAX_DIMS; d++)
            fprintf(stderr, "%s%lld", d ? "," : "", (long long)t->strides[d]);
        fprintf(stderr, "] device %d\n", (int)t->device.type);
    }
}

/* A failed property: say which, and crash so libFuzzer keeps the input. */
#define FUZZ_ASSERT(cond, what)                                                        \
    do {                                                                               \
        if (!(cond)) {                                                                 \
            fprintf(stderr, "fuzz_copy: %s (%s:%d), last error: %s\n", what, __FILE__, \
                    __LINE__, sp_last_error());                                        \
            dump_views();                                                              \
            abort();                                                                   \
        }                                                                              \
    } while (0)

typedef struct reader {
    const uint8_t *p;
    size_t n;
} reader;

static unsigned u8(reader *r) {
    if (!r->n) return 0;
    r->n--;
    return *r->p++;
}
static unsigned u16(reader *r) { return u8(r) | u8(r) << 8; }

/* A view and what the oracle knows about it. */
typedef struct view {
    sp_tensor t;
    int wellformed;     /* ndim, dtype, sizes, offsets: all sane */
    int64_t numel;
    int64_t lo, hi;     /* byte extent relative to data, [lo, hi) */
} view;

static void extent(view *v) {
    int64_t es = (int64_t)sp_dtype_size((sp_dtype)v->t.dtype), lo = 0, hi = 0;
    for (int d = 0; d < v->t.ndim; d++) {
        int64_t span = (v->t.shape[d] - 1) * v->t.strides[d];
        if (span < 0) lo += span; else hi += span;
    }
    v->numel = ts_numel(&v->t);
    v->lo = v->numel ? lo * es : 0;
    v->hi = v->numel ? (hi + 1) * es : 0;
}

/* Place a well-formed view in the arena: `off` picks where, `aligned`
 * whether data is a multiple of the element size. 0 if it cannot fit. */
static int place(view *v, unsigned off, int aligned) {
    int64_t es = (int64_t)sp_dtype_size((sp_dtype)v->t.dtype);
    int64_t room = ARENA - (v->hi - v->lo);
    if (room < 0) return 0;
    int64_t k = (int64_t)off % (room + 1);
    if (aligned) k -= k % es;
    v->t.data = arena + (-v->lo + k);
    return 1;
}

/* Decode one tensor shape/strides/dtype (the dst reuses src's shape). */
static void decode_layout(reader *r, sp_tensor *t, int nd, const int64_t *shape, sp_dtype dt,
                          int dense) {
    memset(t, 0, sizeof *t);
    t->dtype = dt;
    t->ndim = nd;
    t->device = sp_cpu();
    int64_t running = 1;
    for (int d = nd - 1; d >= 0; d--) {
        t->shape[d] = shape[d];
        t->strides[d] = dense ? running : (int64_t)(u8(r) % 17) - 8;
        running *= shape[d];
    }
}

/* Now and then break a view in one of the ways the library must refuse. */
static void maybe_break(reader *r, view *v) {
    unsigned k = u8(r);
    sp_tensor *t = &v->t;
    if (k == 0xff && t->ndim > 0) t->shape[0] = -1 - (int64_t)(u8(r) % 3);
    else if (k == 0xfe) t->ndim = (u8(r) & 1) ? SP_MAX_DIMS + 1 : -1;
    else if (k == 0xfd) t->dtype = SP_DTYPE_COUNT_ + (int32_t)(u8(r) % 3);
    /* Overflows only count for non-empty views: an empty one's strides
     * address nothing. */
    else if (k == 0xfc && v->numel > 0 && t->shape[0] > 1) /* byte offsets past int64 */
        t->strides[0] = (u8(r) & 1) ? INT64_MAX : -INT64_MAX;
    else if (k == 0xfb && v->numel > 0 && t->ndim > 1) /* element count past int64 */
        t->shape[0] = t->shape[1] = INT64_C(1) << 32;
    else if (k == 0xfa) t->device = sp_cuda(0);
    else return;
    if (k != 0xfa) v->wellformed = 0;
}

static int aligned_ok(const view *v) { /* well-formed and element-aligned */
    if (!v->wellformed) return 0;
    size_t es = sp_dtype_size((sp_dtype)v->t.dtype);
    return v->numel == 0 || (uintptr_t)v->t.data % es == 0;
}

/* Valid for the library here, where only the CPU is usable. */
static int usable(const view *v) { return aligned_ok(v) && v->t.device.type == SP_DEVICE_CPU; }

static int ext_overlap(const view *a, const view *b) {
    if (!a->numel || !b->numel) return 0;
    const char *a0 = (const char *)a->t.data + a->lo, *a1 = (const char *)a->t.data + a->hi;
    const char *b0 = (const char *)b->t.data + b->lo, *b1 = (const char *)b->t.data + b->hi;
    return a0 < b1 && b0 < a1;
}

/* Plainly non-aliasing: sorted by |stride|, each stride clears the span of
 * the dims inside it (what any sane self-overlap check accepts). */
static int plainly_disjoint(const sp_tensor *t) {
    int64_t st[SP_MAX_DIMS], sz[SP_MAX_DIMS];
    int n = 0;
    for (int d = 0; d < t->ndim; d++)
        if (t->shape[d] > 1) {
            st[n] = t->strides[d] < 0 ? -t->strides[d] : t->strides[d];
            sz[n++] = t->shape[d];
        }
    for (int i = 1; i < n; i++) /* insertion sort by stride */
        for (int j = i; j > 0 && st[j] < st[j - 1]; j--) {
            int64_t a = st[j], b = sz[j];
            st[j] = st[j - 1], sz[j] = sz[j - 1];
            st[j - 1] = a, sz[j - 1] = b;
        }
    int64_t span = 0;
    for (int i = 0; i < n; i++) {
        if (st[i] <= span) return 0;
        span += (sz[i] - 1) * st[i];
    }
    return 1;
}

/* Add 1 to mark[] for every byte of every element of t (arena or ws). */
static void mark_bytes(const sp_tensor *t, unsigned char *mark) {
    int64_t n = ts_numel(t), idx[SP_MAX_DIMS] = {0};
    size_t es = sp_dtype_size((sp_dtype)t->dtype);
    for (int64_t k = 0; k < n; k++) {
        int64_t off = 0;
        for (int d = 0; d < t->ndim; d++) off += idx[d] * t->strides[d];
        const unsigned char *p = (const unsigned char *)t->data + off * (int64_t)es;
        size_t at = (p >= wsbuf && p < wsbuf + WSCAP) ? ARENA + (size_t)(p - wsbuf)
                                                      : (size_t)(p - arena);
        for (size_t b = 0; b < es; b++)
            if (mark[at + b] < 255) mark[at + b]++;
        for (int d = t->ndim - 1; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
    }
}

/* The same view on a snapshot: 0 = state before the call, 1 = expected. */
static sp_tensor on_image(sp_tensor t, int which) {
    unsigned char *p = t.data;
    if (p >= wsbuf && p < wsbuf + WSCAP)
        t.data = (which ? ws1 : ws0) + (p - wsbuf);
    else
        t.data = (which ? arena1 : arena0) + (p - arena);
    return t;
}

static void snapshot(void) {
    memcpy(arena0, arena, ARENA);
    memcpy(arena1, arena, ARENA);
    memcpy(ws0, wsbuf, WSCAP);
    memcpy(ws1, wsbuf, WSCAP);
}

static int unchanged(void) {
    return memcmp(arena, arena0, ARENA) == 0 && memcmp(wsbuf, ws0, WSCAP) == 0;
}

static int as_expected(void) {
    return memcmp(arena, arena1, ARENA) == 0 && memcmp(wsbuf, ws1, WSCAP) == 0;
}

static void fuzz_copy(view *s, view *d, int n) {
    sp_copy_pair pairs[MAXP];
    int valid = 1, plain = 1, nonempty = 0;
    for (int i = 0; i < n; i++) {
        pairs[i].src = s[i].t;
        pairs[i].dst = d[i].t;
        int same = s[i].t.dtype == d[i].t.dtype && s[i].t.ndim == d[i].t.ndim;
        for (int k = 0; same && k < s[i].t.ndim && k < SP_MAX_DIMS; k++)
            same = s[i].t.shape[k] == d[i].t.shape[k];
        valid = valid && same && usable(&s[i]) && usable(&d[i]);
    }
    for (int i = 0; valid && i < n; i++) {
        nonempty += d[i].numel > 0;
        if (d[i].numel && !plainly_disjoint(&d[i].t)) plain = 0;
        for (int j = 0; j < n; j++) {
            if (ext_overlap(&d[i], &s[j])) plain = 0;
            if (j != i && ext_overlap(&d[i], &d[j])) plain = 0;
        }
    }
    snapshot();
    uint64_t before = sp_copy_pass_count();
    sp_status st = sp_copy_batch(pairs, (size_t)n, NULL);
    uint64_t passes = sp_copy_pass_count() - before;
    if (st != SP_OK) {
        FUZZ_ASSERT(unchanged(), "sp_copy_batch failed but wrote");
        FUZZ_ASSERT(passes == 0, "sp_copy_batch failed but ran a pass");
        FUZZ_ASSERT(sp_last_error()[0], "sp_copy_batch failed without a message");
        FUZZ_ASSERT(!(valid && plain), "sp_copy_batch refused a plainly valid batch");
        return;
    }
    FUZZ_ASSERT(valid, "sp_copy_batch accepted an invalid batch");
    FUZZ_ASSERT(passes <= 1 && (nonempty == 0 || passes == 1), "pass count");
    memset(dmark, 0, sizeof dmark);
    memset(smark, 0, sizeof smark);
    for (int i = 0; i < n; i++) {
        mark_bytes(&d[i].t, dmark);
        mark_bytes(&s[i].t, smark);
    }
    for (size_t b = 0; b < ARENA; b++) {
        FUZZ_ASSERT(dmark[b] <= 1, "sp_copy_batch accepted destinations sharing a byte");
        FUZZ_ASSERT(!(dmark[b] && smark[b]), "sp_copy_batch accepted a dst over a src");
    }
    for (int i = 0; i < n; i++) {
        sp_tensor a = on_image(s[i].t, 0), b = on_image(d[i].t, 1);
        ts_ref_copy(&a, &b);
    }
    FUZZ_ASSERT(as_expected(), "sp_copy_batch result differs from the reference");
}

static void fuzz_pack(reader *r, view *in, int n) {
    sp_tensor inputs[MAXP], outputs[MAXP], out0[MAXP];
    int valid = 1;
    size_t want = 0, copies = 0;
    for (int i = 0; i < n; i++) {
        inputs[i] = in[i].t;
        /* One device for all; it must be usable only when something is
         * copied (dense inputs pass through as pointers). */
        valid = valid && aligned_ok(&in[i]) && in[i].t.device.type == in[0].t.device.type;
        if (in[i].wellformed && !ts_ref_dense(&in[i].t)) {
            copies++;
            size_t b = (size_t)in[i].numel * sp_dtype_size((sp_dtype)in[i].t.dtype);
            want += (b + SP_PACK_ALIGN - 1) / SP_PACK_ALIGN * SP_PACK_ALIGN;
        }
    }
    if (copies) want += SP_PACK_ALIGN - 1;
    if (copies && in[0].t.device.type != SP_DEVICE_CPU) valid = 0;
    int formed = 1;
    for (int i = 0; i < n; i++) formed = formed && in[i].wellformed;
    size_t wsb = 0;
    sp_status stb = sp_pack_workspace_bytes(inputs, (size_t)n, &wsb);
    if (formed) {
        FUZZ_ASSERT(stb == SP_OK, "sp_pack_workspace_bytes refused well-formed inputs");
        FUZZ_ASSERT(wsb == want, "sp_pack_workspace_bytes is not the documented sum");
    } else {
        FUZZ_ASSERT(stb != SP_OK, "sp_pack_workspace_bytes accepted a malformed input");
        wsb = want;
    }

    /* Where the workspace goes and how big it is. */
    unsigned mode = u8(r) % 8;
    unsigned char *ws = wsbuf + u8(r);
    size_t bytes = wsb;
    if (mode == 4 && wsb) bytes = wsb - 1 - u8(r) % (wsb < 16 ? wsb : 16);
    if (mode == 5) bytes = u16(r) % 4096;
    if (mode == 6) {
        size_t off = u16(r) % ARENA;
        ws = arena + off;
        if (bytes > ARENA - off) bytes = ARENA - off;
    }
    if (mode == 7) ws = NULL;
    if (ws && ws >= wsbuf && ws < wsbuf + WSCAP && bytes > WSCAP - (size_t)(ws - wsbuf))
        bytes = 0;

    /* Could a correct library refuse? Only for a reason seen here. The used
     * part of the workspace is taken as [ws, end of the last slot rounded
     * up to SP_PACK_ALIGN), gaps included, so that any reading of "used" is
     * accepted. */
    int plain = valid && bytes >= wsb && (ws != NULL || wsb == 0);
    uintptr_t next = (uintptr_t)ws;
    for (int i = 0; i < n; i++) {
        if (!in[i].wellformed || ts_ref_dense(&in[i].t)) continue;
        size_t b = (size_t)in[i].numel * sp_dtype_size((sp_dtype)in[i].t.dtype);
        next = (next + SP_PACK_ALIGN - 1) / SP_PACK_ALIGN * SP_PACK_ALIGN;
        next += (b + SP_PACK_ALIGN - 1) / SP_PACK_ALIGN * SP_PACK_ALIGN;
    }
    for (int j = 0; plain && copies && j < n; j++) {
        if (!in[j].numel) continue;
        uintptr_t lo = (uintptr_t)in[j].t.data + (uintptr_t)in[j].lo;
        uintptr_t hi = (uintptr_t)in[j].t.data + (uintptr_t)in[j].hi;
        if ((uintptr_t)ws < hi && lo < next) plain = 0;
    }

    memset(outputs, 0xa5, sizeof outputs);
    memcpy(out0, outputs, sizeof outputs);
    snapshot();
    size_t n_copied = 999;
    uint64_t before = sp_copy_pass_count();
    sp_status st = sp_pack(inputs, (size_t)n, ws, bytes, outputs, &n_copied, NULL);
    uint64_t passes = sp_copy_pass_count() - before;
    if (st != SP_OK) {
        FUZZ_ASSERT(unchanged(), "sp_pack failed but wrote");
        FUZZ_ASSERT(memcmp(outputs, out0, sizeof outputs) == 0, "sp_pack failed but set outputs");
        FUZZ_ASSERT(passes == 0, "sp_pack failed but ran a pass");
        FUZZ_ASSERT(!plain, "sp_pack refused plainly valid arguments");
        return;
    }
    FUZZ_ASSERT(valid, "sp_pack accepted an invalid input");
    FUZZ_ASSERT(n_copied == copies, "sp_pack n_copied");
    FUZZ_ASSERT(passes == (copies ? 1u : 0u), "sp_pack pass count");
    memset(dmark, 0, sizeof dmark);
    memset(smark, 0, sizeof smark);
    next = (uintptr_t)ws;
    for (int i = 0; i < n; i++) {
        const sp_tensor *o = &outputs[i];
        if (ts_ref_dense(&inputs[i])) {
            FUZZ_ASSERT(o->data == inputs[i].data && o->ndim == inputs[i].ndim &&
                            o->dtype == inputs[i].dtype,
                        "sp_pack did not return a dense input as itself");
            continue;
        }
        size_t b = (size_t)in[i].numel * sp_dtype_size((sp_dtype)inputs[i].dtype);
        uintptr_t slot = (next + SP_PACK_ALIGN - 1) / SP_PACK_ALIGN * SP_PACK_ALIGN;
        FUZZ_ASSERT((uintptr_t)o->data == slot, "sp_pack slot is not the next aligned one");
        FUZZ_ASSERT(slot + b <= (uintptr_t)ws + bytes, "sp_pack slot beyond the workspace");
        FUZZ_ASSERT(o->dtype == inputs[i].dtype && o->ndim == inputs[i].ndim && ts_ref_dense(o),
                    "sp_pack output is not a dense copy of the input's shape");
        for (int k = 0; k < o->ndim; k++)
            FUZZ_ASSERT(o->shape[k] == inputs[i].shape[k], "sp_pack output shape");
        mark_bytes(o, dmark);
        next = slot + b;
    }
    for (int i = 0; i < n; i++) mark_bytes(&inputs[i], smark);
    for (size_t b = 0; b < sizeof dmark; b++)
        FUZZ_ASSERT(!(dmark[b] && smark[b]), "sp_pack wrote a slot over an input");
    for (int i = 0; i < n; i++) {
        if (ts_ref_dense(&inputs[i])) continue;
        sp_tensor a = on_image(inputs[i], 0), b = on_image(outputs[i], 1);
        ts_ref_copy(&a, &b);
    }
    FUZZ_ASSERT(as_expected(), "sp_pack result differs from the reference");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    reader r = {data, size};
    view s[MAXP], d[MAXP];
    int n = 1 + (int)(u8(&r) % MAXP);
    for (int i = 0; i < n; i++) {
        unsigned v = u8(&r);
        sp_dtype dt = (sp_dtype)(v % SP_DTYPE_COUNT_);
        int64_t es = (int64_t)sp_dtype_size(dt);
        int nd = (int)(u8(&r) % (SP_MAX_DIMS + 1));
        int64_t shape[SP_MAX_DIMS], numel = 1;
        for (int k = 0; k < nd; k++) numel *= shape[k] = u8(&r) % 4;
        for (int k = 0; k < nd && numel * es > MAXEL; k++) /* keep it small */
            if (shape[k] > 1) numel = numel / shape[k], shape[k] = 1;
        unsigned flags = u8(&r);
        decode_layout(&r, &s[i].t, nd, shape, dt, 0);
        decode_layout(&r, &d[i].t, nd, shape, dt, flags & 1);
        s[i].wellformed = d[i].wellformed = 1;
        extent(&s[i]);
        extent(&d[i]);
        if (!place(&s[i], u16(&r), (flags & 6) != 0)) return 0;
        if (!place(&d[i], u16(&r), (flags & 24) != 0)) return 0;
        unsigned k = u8(&r);
        if (k == 0xff && nd > 0) d[i].t.shape[nd - 1] += 1; /* shape mismatch */
        if (k == 0xfe) d[i].t.dtype = (int32_t)((dt + 1) % SP_DTYPE_COUNT_);
        if (k == 0xfd) d[i].t.ndim = nd < SP_MAX_DIMS ? nd + 1 : nd - 1;
        if (k == 0xff || k == 0xfd) { /* recompute the dst's extent, and refit */
            if (d[i].t.ndim > nd) d[i].t.shape[nd] = 1, d[i].t.strides[nd] = 1;
            extent(&d[i]);
            if (!place(&d[i], u16(&r), 1)) return 0;
        }
        maybe_break(&r, &s[i]);
        maybe_break(&r, &d[i]);
        if (!s[i].wellformed) s[i].t.data = arena;
        if (!d[i].wellformed) d[i].t.data = arena;
    }
    /* The arena's bytes are the rest of the input, repeated. */
    for (size_t b = 0; b < ARENA; b++) arena[b] = r.n ? r.p[b % r.n] : (unsigned char)(b * 131);
    for (size_t b = 0; b < WSCAP; b++) wsbuf[b] = (unsigned char)(b * 7 + 3);
    cur_n = 2 * n;
    for (int i = 0; i < n; i++) cur_views[2 * i] = &s[i].t, cur_views[2 * i + 1] = &d[i].t;
    fuzz_copy(s, d, n);
    fuzz_pack(&r, s, n);
    return 0;
}
