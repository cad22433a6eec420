/*
 * test_conv.c — the causal convolution against its float64 reference, one
 * body for both backends: built as test_conv_cpu (CPU tensors), as
 * test_conv_gpu (CUDA tensors, SP_CONV_TEST_CUDA; exits 77 without a
 * device) and, in CUDA builds, as test_conv_emulated (the CUDA kernel's
 * threads run one by one on the host, SP_CONV_TEST_EMULATED: the kernel's
 * logic checked where there is no GPU).
 *
 * Every case lays all its buffers out in one arena with poisoned gaps
 * between them: inputs random, outputs and unused rows poisoned, the state
 * pool random. The reference runs on one copy of the arena, the backend on
 * another (on CUDA: a device mirror, downloaded after the call). Then the
 * whole arena is compared: output elements the reference wrote must agree
 * within the header's bound, |out - ref| <= ulp(ref) + 2^-20 m, where m
 * (the size of the terms) is the reference run on |inputs| without SiLU;
 * every other byte — inputs, gaps, untouched rows, padded slots, the state
 * pool — must be equal bit for bit.
 *
 * Checked: every W, bias and SiLU on and off, f32 and bf16 weights,
 * sequences empty and shorter than W-1 and across token tiles, padded
 * slots (-1), initial states on and off, dense, sliced, misaligned and
 * channel-major x, token-major and split outputs (dense and strided) with
 * the same bits, chunked prefill through the pool equal to one call,
 * decode equal to a one-token prefill step, bad arguments (named errors,
 * nothing written), and on CUDA: the kernel's guard for out-of-range
 * slots, bit equality with the CPU without SiLU, graph capture and replay.
 */
#include "check.h"
#include "kda_problem.h" /* kp_fill_bf16 */
#include "test_support.h"
#include "stridepack_conv.h"

#include <math.h>
#include <string.h>

#ifdef SP_CONV_TEST_CUDA
#ifndef SP_HAVE_CUDA
int main(void) { SP_SKIP("built without CUDA"); }
#define SP_CONV_TEST_BODY 0
#else
#include "cuda_ok.h"
#define SP_CONV_TEST_BODY 1
#endif
#else
#define SP_CONV_TEST_BODY 1
#endif

#if SP_CONV_TEST_BODY

#ifdef SP_CONV_TEST_CUDA
#include "conv/conv_internal.h" /* sp_conv_cuda_planned_ */
static const char *const backend = "cuda";
#elif defined(SP_CONV_TEST_EMULATED)
#include "conv/conv_internal.h" /* sp_conv_emulate_ */
static const char *const backend = "emulated";
#else
static const char *const backend = "cpu";
#endif

/* ---- the arena ---------------------------------------------------------- */

enum { GAP = 64, MAX_REGIONS = 24 };
enum role { IN_BF16, IN_F32, IN_OTHER, OUT_BF16, STATE_BF16 };

typedef struct region {
    size_t off, bytes;
    int role;
} region;

typedef struct arena {
    unsigned char *host; /* the initial image */
    size_t cap, used;
    region r[MAX_REGIONS];
    int n;
    ts_rng rng;
} arena;

static void arena_init(arena *A, size_t cap, uint64_t seed) {
    memset(A, 0, sizeof *A);
    A->cap = cap;
    A->host = aligned_alloc(256, cap);
    if (!A->host) abort();
    ts_rng_seed(&A->rng, seed);
    ts_fill_random(A->host, cap, &A->rng); /* gaps and padding: poison */
}

/* A 256-aligned buffer of `bytes` after a gap; its offset. Inputs and the
 * state get random values (bf16 or f32 in [-1, 1)), outputs keep the poison. */
static size_t arena_take(arena *A, size_t bytes, int role) {
    size_t off = (A->used + GAP + 255) / 256 * 256;
    if (off + bytes + GAP > A->cap || A->n == MAX_REGIONS) {
        fprintf(stderr, "arena: out of room\n");
        abort();
    }
    A->used = off + bytes;
    A->r[A->n++] = (region){off, bytes, role};
    if (role == IN_BF16 || role == STATE_BF16)
        kp_fill_bf16(A->host + off, bytes / 2, &A->rng, -1.0, 1.0);
    if (role == IN_F32)
        for (size_t i = 0; i < bytes / 4; i++)
            ((float *)(A->host + off))[i] = (float)(ts_rng_unit(&A->rng) - 0.5);
    return off;
}

static unsigned char *arena_copy(const arena *A) {
    unsigned char *c = aligned_alloc(256, A->cap);
    if (!c) abort();
    memcpy(c, A->host, A->cap);
    return c;
}

/* ---- running on the backend --------------------------------------------- */

typedef void (*build_fn)(const void *ctx, unsigned char *base, sp_device dev, sp_conv_args *a);

enum { PREFILL = 0, DECODE = 1 };

static sp_status call(int decode, const sp_conv_args *a, struct CUstream_st *s) {
    return decode ? sp_conv_decode(a, s) : sp_conv_prefill(a, s);
}

/* The float64 reference on the host image `img`. */
static sp_status run_reference(int decode, build_fn build, const void *ctx, unsigned char *img) {
    sp_conv_args a;
    build(ctx, img, sp_cpu(), &a);
    return decode ? sp_conv_decode_reference(&a) : sp_conv_prefill_reference(&a);
}

#ifdef SP_CONV_TEST_CUDA
/* Upload img, run, download into img. */
static sp_status run_backend(int decode, build_fn build, const void *ctx, const arena *A,
                             unsigned char *img) {
    unsigned char *dev;
    CUDA_OK(cudaMalloc((void **)&dev, A->cap));
    CUDA_OK(cudaMemcpy(dev, img, A->cap, cudaMemcpyHostToDevice));
    sp_conv_args a;
    build(ctx, dev, sp_cuda(0), &a);
    /* The launcher's items (the public call), and forced ones in turn (the
     * planned call): tiles of 8 and 23 tokens, 8 and 23 sequences a decode
     * thread (an odd last batch). */
    static const int64_t items[4] = {0, 8, 0, 23};
    static int turn;
    const int64_t len = items[turn++ % 4];
    sp_status s = len ? sp_conv_cuda_planned_(&a, decode, len, NULL) : call(decode, &a, NULL);
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(img, dev, A->cap, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaFree(dev));
    return s;
}
#else
/* CPU tensors: the CPU backend, or the CUDA kernel's threads run on the host. */
static sp_status run_backend(int decode, build_fn build, const void *ctx, const arena *A,
                             unsigned char *img) {
    (void)A;
    sp_conv_args a;
    build(ctx, img, sp_cpu(), &a);
#ifdef SP_CONV_TEST_EMULATED
    /* Token tiles of every size the launcher may choose, in turn. */
    static const int64_t tiles[4] = {0, 8, 16, 64};
    static int turn;
    (void)call;
    return sp_conv_emulate_(&a, decode, tiles[turn++ % 4]);
#else
    return call(decode, &a, NULL);
#endif
}
#endif

/* ---- comparing ------------------------------------------------------------ */

typedef struct stats {
    long long outputs, equal, one_ulp, beyond; /* beyond: over one ulp, within the bound */
} stats;

static double bf(const unsigned char *p) {
    uint16_t h;
    memcpy(&h, p, 2);
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return (double)f;
}

/* One bf16 ulp at the larger of |a| and |b| (normal numbers; 2^-133 below). */
static double ulp_of(double a, double b) {
    double x = fmax(fabs(a), fabs(b));
    if (x < 0x1p-126) return 0x1p-133;
    int e;
    frexp(x, &e);
    return ldexp(1.0, e - 8);
}

/* The whole arena: outputs within the bound where the reference wrote them,
 * every other byte equal. Returns the number of failures. */
static long long compare(const arena *A, const unsigned char *init, const unsigned char *ref,
                         const unsigned char *got, const unsigned char *mag, stats *st,
                         const char *what) {
    long long bad = 0;
    size_t at = 0;
    for (int i = 0; i <= A->n; i++) {
        const size_t end = i < A->n ? A->r[i].off : A->cap;
        if (memcmp(ref + at, got + at, end - at) != 0) {
            size_t k = at;
            while (ref[k] == got[k]) k++;
            if (bad++ < 3)
                fprintf(stderr, "%s: byte %zu differs (region %d, offset %zu into it)\n", what, k,
                        i - 1, i ? k - (A->r[i - 1].off) : k);
        }
        if (i == A->n) break;
        const region *r = &A->r[i];
        at = r->off + r->bytes;
        if (r->role != OUT_BF16) {
            if (memcmp(ref + r->off, got + r->off, r->bytes) != 0) {
                size_t k = r->off;
                while (ref[k] == got[k]) k++;
                if (bad++ < 3)
                    fprintf(stderr, "%s: region %d (role %d) differs at byte %zu\n", what, i,
                            r->role, k - r->off);
            }
            continue;
        }
        for (size_t e = r->off; e < r->off + r->bytes; e += 2) {
            if (memcmp(ref + e, init + e, 2) == 0) { /* not an output element */
                if (memcmp(got + e, init + e, 2) != 0 && bad++ < 3)
                    fprintf(stderr, "%s: element at %zu written, the reference left it\n", what,
                            e - r->off);
                continue;
            }
            st->outputs++;
            if (memcmp(ref + e, got + e, 2) == 0) {
                st->equal++;
                continue;
            }
            const double x = bf(ref + e), y = bf(got + e), u = ulp_of(x, y);
            const double d = fabs(x - y), bound = u + 0x1p-20 * 1.01 * fabs(bf(mag + e));
            if (d <= u) {
                st->one_ulp++;
            } else if (d <= bound) {
                st->beyond++;
            } else if (bad++ < 3) {
                fprintf(stderr, "%s: element %zu: got %.9g, reference %.9g (bound %.3g)\n", what,
                        (e - r->off) / 2, y, x, bound);
            }
        }
    }
    return bad;
}

/* ---- a prefill or decode case ----------------------------------------------- */

enum { XL_DENSE, XL_SLICE, XL_CHANNEL_MAJOR, XL_MISALIGNED, XL_HALF, XL_COUNT };
/* Rows of x: XL_SLICE 16-byte aligned, XL_HALF 8-byte aligned (a row
 * pitch of 4 mod 8 elements, as in a [T, 4P + 128 + H] projection at odd
 * H / 4), XL_MISALIGNED 2-byte aligned. */
enum { OL_TOKEN, OL_TOKEN_PADDED, OL_SPLIT, OL_SPLIT_STRIDED, OL_COUNT };
enum { MAX_SEQ = 1024, XPAD = 24, OPAD = 8 };

typedef struct tcase {
    int64_t T, C, kd, W, N, slots;
    int silu, bias, wbf16, init, decode, xl, ol;
    int wdense; /* weight [C, W] dense (16-byte rows of 8 channels); else a [W, C] buffer */
    int cu32, idx64; /* cu_seqlens as i32 (else i64), state_indices as i64 (else i32) */
    int64_t cu[MAX_SEQ + 1];
    int32_t idx[MAX_SEQ];
    uint8_t init_of[MAX_SEQ];
    size_t o_x, o_w, o_b, o_cu, o_idx, o_init, o_state, o_out;
    int64_t pitch; /* state slot pitch, elements */
} tcase;

static void build_case(const void *ctx, unsigned char *base, sp_device dev, sp_conv_args *a) {
    const tcase *k = ctx;
    const int64_t T = k->T, C = k->C, W = k->W;
    sp_conv_args_init(a);
    const int64_t xs[2] = {T, C};
    int64_t xst[2] = {C, 1}, xoff = 0;
    if (k->xl == XL_SLICE || k->xl == XL_MISALIGNED || k->xl == XL_HALF) {
        xst[0] = C + XPAD + (k->xl == XL_HALF ? 4 : 0);
        xoff = k->xl == XL_SLICE ? 8 : k->xl == XL_HALF ? 0 : 1;
    }
    if (k->xl == XL_CHANNEL_MAJOR) {
        xst[0] = 1;
        xst[1] = T;
    }
    sp_tensor_view(&a->x, base + k->o_x, xoff, SP_BF16, 2, xs, xst, dev);
    const sp_dtype wt = k->wbf16 ? SP_BF16 : SP_F32;
    const int64_t ws[2] = {C, W}, wst[2] = {k->wdense ? W : 1, k->wdense ? 1 : C};
    sp_tensor_view(&a->weight, base + k->o_w, 0, wt, 2, ws, wst, dev);
    if (k->bias) sp_tensor_dense(&a->bias, base + k->o_b, wt, 1, &C, dev);
    a->silu = k->silu;
    const int64_t N = k->N, n1 = N + 1;
    if (!k->decode)
        sp_tensor_dense(&a->cu_seqlens, base + k->o_cu, k->cu32 ? SP_I32 : SP_I64, 1, &n1, dev);
    sp_tensor_dense(&a->state_indices, base + k->o_idx, k->idx64 ? SP_I64 : SP_I32, 1, &N, dev);
    if (!k->decode && k->init)
        sp_tensor_dense(&a->has_initial_state, base + k->o_init, SP_BOOL, 1, &N, dev);
    const int64_t ss[3] = {k->slots, C, W - 1}, sst[3] = {k->pitch, W - 1, 1};
    sp_tensor_view(&a->state, base + k->o_state, 0, SP_BF16, 3, ss, sst, dev);
    const int64_t row = k->ol == OL_TOKEN_PADDED || k->ol == OL_SPLIT_STRIDED ? C + OPAD : C;
    if (k->ol == OL_TOKEN || k->ol == OL_TOKEN_PADDED) {
        const int64_t st[2] = {row, 1};
        sp_tensor_view(&a->out, base + k->o_out, 0, SP_BF16, 2, xs, st, dev);
        return;
    }
    const int64_t kd = k->kd, vd = C - 2 * kd;
    const int64_t sq[2] = {T, kd}, sv[2] = {T, vd};
    if (k->ol == OL_SPLIT) { /* three dense tensors, back to back */
        sp_tensor_dense(&a->q, base + k->o_out, SP_BF16, 2, sq, dev);
        sp_tensor_dense(&a->k, base + k->o_out + (size_t)(T * kd) * 2, SP_BF16, 2, sq, dev);
        sp_tensor_dense(&a->v, base + k->o_out + (size_t)(T * 2 * kd) * 2, SP_BF16, 2, sv, dev);
        return;
    }
    const int64_t st[2] = {row, 1}; /* column slices of one padded buffer */
    sp_tensor_view(&a->q, base + k->o_out, 0, SP_BF16, 2, sq, st, dev);
    sp_tensor_view(&a->k, base + k->o_out, kd, SP_BF16, 2, sq, st, dev);
    sp_tensor_view(&a->v, base + k->o_out, 2 * kd, SP_BF16, 2, sv, st, dev);
}

/* cu_seqlens and state_indices into host, in the case's widths. */
static void write_indices(const tcase *k, unsigned char *host) {
    for (int64_t n = 0; n <= k->N; n++) {
        if (k->cu32) ((int32_t *)(host + k->o_cu))[n] = (int32_t)k->cu[n];
        else ((int64_t *)(host + k->o_cu))[n] = k->cu[n];
        if (n == k->N) break;
        if (k->idx64) ((int64_t *)(host + k->o_idx))[n] = k->idx[n];
        else ((int32_t *)(host + k->o_idx))[n] = k->idx[n];
    }
}

/* Lay a case out in an arena. Lengths: lens[0..N); slots: -1 where pad. */
static void layout_case(tcase *k, arena *A, const int64_t *lens, const int32_t *slots,
                        const uint8_t *init_of, int64_t tail) {
    const int64_t C = k->C, W = k->W;
    k->cu[0] = !k->decode && tail > 0 ? 2 : 0; /* rows before the first sequence */
    for (int64_t n = 0; n < k->N; n++) {
        k->cu[n + 1] = k->cu[n] + (k->decode ? 1 : lens[n]);
        k->idx[n] = slots[n];
        k->init_of[n] = init_of[n];
    }
    k->T = k->decode ? k->N : k->cu[k->N] + tail; /* rows after the last sequence */
    const int64_t T = k->T;
    const int64_t xrows = k->xl == XL_CHANNEL_MAJOR ? C : T;
    const int64_t xcols = k->xl == XL_SLICE || k->xl == XL_MISALIGNED ? C + XPAD
                          : k->xl == XL_HALF                          ? C + XPAD + 4
                          : k->xl == XL_CHANNEL_MAJOR                 ? T
                                                                      : C;
    k->o_x = arena_take(A, (size_t)(xrows * xcols) * 2, IN_BF16);
    const size_t wsz = k->wbf16 ? 2 : 4;
    k->o_w = arena_take(A, (size_t)(C * W) * wsz, k->wbf16 ? IN_BF16 : IN_F32);
    k->o_b = arena_take(A, (size_t)C * wsz, k->wbf16 ? IN_BF16 : IN_F32);
    k->o_cu = arena_take(A, (size_t)(k->N + 1) * 8, IN_OTHER);
    k->o_idx = arena_take(A, (size_t)k->N * 8 + 8, IN_OTHER); /* either width */
    write_indices(k, A->host);
    k->o_init = arena_take(A, (size_t)k->N + 1, IN_OTHER);
    memcpy(A->host + k->o_init, k->init_of, (size_t)k->N);
    k->pitch = C * (W - 1) + (k->xl % 2 ? 8 : 0); /* padded slot pitch on odd layouts */
    k->o_state = arena_take(A, (size_t)(k->slots * k->pitch) * 2, STATE_BF16);
    const int64_t row = k->ol == OL_TOKEN_PADDED || k->ol == OL_SPLIT_STRIDED ? C + OPAD : C;
    k->o_out = arena_take(A, (size_t)(T * row) * 2, OUT_BF16);
    ts_fill_random(A->host + k->o_out, (size_t)(T * row) * 2, &A->rng); /* poison */
}

/* Row t belongs to a sequence that is not padded (an output row). */
static int row_written(const tcase *k, int64_t t) {
    for (int64_t n = 0; n < k->N; n++)
        if (t >= k->cu[n] && t < k->cu[n + 1]) return k->idx[n] >= 0;
    return 0;
}

/* |inputs| and no SiLU: the reference then yields m of the bound. */
static void absolute(const arena *A, unsigned char *img, tcase *k) {
    for (int i = 0; i < A->n; i++) {
        const region *r = &A->r[i];
        if (r->role == IN_BF16 || r->role == STATE_BF16)
            for (size_t e = r->off + 1; e < r->off + r->bytes; e += 2) img[e] &= 0x7f;
        if (r->role == IN_F32)
            for (size_t e = r->off + 3; e < r->off + r->bytes; e += 4) img[e] &= 0x7f;
    }
    k->silu = 0;
}

static stats totals;

/* Reference and backend on copies of the arena; the whole arena compared.
 * Returns the backend's image (caller frees). */
static unsigned char *check_case(tcase *k, arena *A, const char *what) {
    unsigned char *ref = arena_copy(A), *got = arena_copy(A), *mag = arena_copy(A);
    CHECK_OK(run_reference(k->decode, build_case, k, ref));
    CHECK_OK(run_backend(k->decode, build_case, k, A, got));
    tcase km = *k;
    absolute(A, mag, &km);
    CHECK_OK(run_reference(km.decode, build_case, &km, mag));
    stats st = {0, 0, 0, 0};
    const long long bad = compare(A, A->host, ref, got, mag, &st, what);
    CHECKF(bad == 0, "%s: %lld differences", what, bad);
    int any = 0;
    for (int64_t t = 0; t < k->T; t++) any |= row_written(k, t);
    CHECKF(st.outputs > 0 || !any, "%s: no output was written", what);
#ifdef SP_CONV_TEST_CUDA
    if (!k->silu) { /* the same fp32 operations: the CPU's bits exactly */
        unsigned char *cpu = arena_copy(A);
        sp_conv_args a;
        build_case(k, cpu, sp_cpu(), &a);
        CHECK_OK(call(k->decode, &a, NULL));
        CHECKF(memcmp(cpu, got, A->cap) == 0, "%s: differs from the CPU backend", what);
        free(cpu);
    }
#endif
    totals.outputs += st.outputs;
    totals.equal += st.equal;
    totals.one_ulp += st.one_ulp;
    totals.beyond += st.beyond;
    free(ref);
    free(mag);
    return got;
}

/* One case: W, flags, layouts, sequences. Also: the other output layouts of
 * the same inputs give the same bits. */
static void prefill_case(int64_t W, int64_t kd, int64_t vd, int flags, int xl, int ol, int N,
                         const int64_t *lens, const int32_t *slots, const uint8_t *init_of,
                         int64_t tail, uint64_t seed) {
    tcase k;
    memset(&k, 0, sizeof k);
    k.W = W;
    k.kd = kd;
    k.C = 2 * kd + vd;
    k.N = N;
    k.slots = 6;
    k.silu = flags & 1;
    k.bias = (flags >> 1) & 1;
    k.wbf16 = (flags >> 2) & 1;
    k.init = (flags >> 3) & 1;
    k.decode = (flags >> 4) & 1;
    k.wdense = (flags >> 5) & 1;
    k.xl = xl;
    k.ol = ol;
    arena A;
    arena_init(&A, (size_t)8 << 20, seed);
    layout_case(&k, &A, lens, slots, init_of, tail);
    char what[160];
    snprintf(what, sizeof what, "%s %s W %lld C %lld silu %d bias %d w %s%s init %d x %d out %d",
             backend, k.decode ? "decode" : "prefill", (long long)W, (long long)k.C, k.silu, k.bias,
             k.wbf16 ? "bf16" : "f32", k.wdense ? " dense" : "", k.init, xl, ol);
    unsigned char *got = check_case(&k, &A, what);

    /* Same inputs, every other output layout: the same bits per (t, c). */
    for (int ol2 = 0; ol2 < OL_COUNT; ol2++) {
        if (ol2 == ol) continue;
        tcase k2 = k;
        k2.ol = ol2;
        const int64_t row2 = ol2 == OL_TOKEN_PADDED || ol2 == OL_SPLIT_STRIDED ? k.C + OPAD : k.C;
        arena B = A; /* the same inputs; a new output buffer at the end */
        B.host = arena_copy(&A);
        k2.o_out = arena_take(&B, (size_t)(k.T * row2) * 2, OUT_BF16);
        unsigned char *got2 = arena_copy(&B);
        CHECK_OK(run_backend(k.decode, build_case, &k2, &B, got2));
        sp_conv_args a1, a2;
        build_case(&k, got, sp_cpu(), &a1);
        build_case(&k2, got2, sp_cpu(), &a2);
        long long diff = 0;
        for (int64_t t = 0; t < k.T; t++)
            for (int64_t c = 0; c < k.C && row_written(&k, t); c++) {
                const sp_tensor *o1 = &a1.out, *o2 = &a2.out;
                int64_t c1 = c, c2 = c;
                if (!a1.out.data) o1 = c < kd ? &a1.q : c < 2 * kd ? &a1.k : &a1.v;
                if (!a2.out.data) o2 = c < kd ? &a2.q : c < 2 * kd ? &a2.k : &a2.v;
                if (!a1.out.data) c1 = c < kd ? c : c < 2 * kd ? c - kd : c - 2 * kd;
                if (!a2.out.data) c2 = c < kd ? c : c < 2 * kd ? c - kd : c - 2 * kd;
                const uint16_t x1 =
                    ((const uint16_t *)o1->data)[t * o1->strides[0] + c1 * o1->strides[1]];
                const uint16_t x2 =
                    ((const uint16_t *)o2->data)[t * o2->strides[0] + c2 * o2->strides[1]];
                diff += x1 != x2;
            }
        CHECKF(diff == 0, "%s: layout %d and %d differ in %lld elements", what, ol, ol2, diff);
        CHECKF(memcmp(got + k.o_state, got2 + k.o_state, (size_t)(k.slots * k.pitch) * 2) == 0,
               "%s: layout %d and %d leave different states", what, ol, ol2);
        free(got2);
        free(B.host);
    }

    /* Same inputs, cu_seqlens i32 and state_indices i64: the same bytes out. */
    tcase k3 = k;
    k3.cu32 = 1;
    k3.idx64 = 1;
    arena B = A;
    B.host = arena_copy(&A);
    write_indices(&k3, B.host);
    unsigned char *got3 = arena_copy(&B);
    CHECK_OK(run_backend(k.decode, build_case, &k3, &B, got3));
    const int64_t row = k.ol == OL_TOKEN_PADDED || k.ol == OL_SPLIT_STRIDED ? k.C + OPAD : k.C;
    CHECKF(memcmp(got + k.o_out, got3 + k.o_out, (size_t)(k.T * row) * 2) == 0 &&
               memcmp(got + k.o_state, got3 + k.o_state, (size_t)(k.slots * k.pitch) * 2) == 0,
           "%s: i32 cu_seqlens, i64 state_indices give other bytes", what);
    free(got3);
    free(B.host);
    free(got);
    free(A.host);
}

static void prefill_matrix(void) {
    static const int64_t lens[] = {0, 1, 2, 150, 5, 70, 3};
    static const int32_t slots[] = {4, 1, -1, 0, 5, 2, 3};
    static const uint8_t init_of[] = {1, 0, 1, 1, 0, 1, 1};
    uint64_t seed = 100;
    for (int64_t W = 2; W <= 4; W++)
        for (int flags = 0; flags < 16; flags++) {
            const int xl = (int)((W + flags) % XL_COUNT), ol = (int)((W * 3 + flags) % OL_COUNT);
            prefill_case(W, 64, 64, flags | (int)(seed & 1) << 5, xl, ol, 7, lens, slots, init_of,
                         3, seed);
            seed++;
        }
    /* C and key_dim not multiples of 8: the element-wise paths. */
    for (int xl = 0; xl < XL_COUNT; xl++)
        prefill_case(4, 5, 7, 1 | 2 | 8, xl, (xl + 2) % OL_COUNT, 7, lens, slots, init_of, 3,
                     seed++);
    /* Empty sequences at T (their slots still get a state), T = 0. */
    static const int64_t ends[] = {4, 70, 0, 0}, none[] = {0, 0};
    static const int32_t slots2[] = {0, 3, 5, 1};
    static const uint8_t mixed[] = {1, 1, 0, 1};
    prefill_case(4, 8, 16, 1 | 8, XL_DENSE, OL_TOKEN, 4, ends, slots2, mixed, 0, seed++);
    prefill_case(3, 8, 16, 8, XL_SLICE, OL_SPLIT, 2, none, slots2 + 2, mixed + 2, 0, seed++);
    /* Sequences that start in a tile's last W-2 rows (at 7, 15 and 63: the
     * last row of tiles of 8, 16 and 64 tokens), whose first W-1 tokens run
     * past the tile: at W = 3 one row, at W = 4 two. */
    static const int64_t late[] = {7, 8, 48, 10, 6};
    static const int32_t slots3[] = {4, 0, 3, 1, 2};
    static const uint8_t all[] = {1, 1, 1, 1, 1};
    for (int64_t W = 3; W <= 4; W++)
        for (int ol = OL_TOKEN; ol <= OL_SPLIT; ol++)
            prefill_case(W, 16, 16, 1 | 8, XL_DENSE, ol, 5, late, slots3, all, 0, seed++);
    /* No sequence at all; one empty sequence only. */
    prefill_case(3, 16, 16, 8, XL_DENSE, OL_SPLIT, 0, lens, slots, init_of, 3, seed++);
    prefill_case(3, 16, 16, 0, XL_DENSE, OL_TOKEN, 1, lens, slots, init_of, 3, seed++);
}

static void decode_matrix(void) {
    static const int64_t lens[] = {1, 1, 1, 1, 1, 1, 1};
    static const int32_t slots[] = {2, -1, 0, 5, 1, 3, 4};
    static const uint8_t ones[] = {1, 1, 1, 1, 1, 1, 1};
    uint64_t seed = 500;
    for (int64_t W = 2; W <= 4; W++)
        for (int flags = 16; flags < 24; flags++, seed++)
            prefill_case(W, 64, 128, flags | (int)(seed & 1) << 5, (int)(flags % XL_COUNT),
                         (int)((W + flags) % OL_COUNT), 7, lens, slots, ones, 3, seed);
    prefill_case(4, 3, 2, 16 | 1, XL_MISALIGNED, OL_SPLIT, 7, lens, slots, ones, 3, seed++);
}

/* ---- engine-sized calls --------------------------------------------------- */

/* Shapes where the CUDA launcher gives a thread long token tiles with
 * sequences starting inside them (prefill), or several sequences (decode):
 * C = 1536 or 4608 channels (4.5 blocks of 1024 at 4608), dense weight
 * rows, many sequences of every length, padded slots. Without SiLU the
 * CUDA outputs and states are the CPU's bit for bit (check_case). */
static void large_case(int decode, int64_t kd, int silu, int wbf16, uint64_t seed) {
    static int64_t lens[MAX_SEQ];
    static int32_t slots[MAX_SEQ];
    static uint8_t init_of[MAX_SEQ];
    static const int64_t pattern[] = {0, 1, 2, 3, 7, 29, 64, 100, 250, 5};
    tcase *k = calloc(1, sizeof *k);
    if (!k) abort();
    k->W = 4;
    k->kd = kd;
    k->C = 3 * kd;
    k->N = decode ? 1000 : 48;
    k->slots = k->N + 5;
    for (int64_t n = 0; n < k->N; n++) {
        lens[n] = decode ? 1 : pattern[n % 10];
        slots[n] = n % 13 == 6 ? -1 : (int32_t)((n * 7 + 3) % k->slots); /* 7 and N+5 coprime */
        init_of[n] = (uint8_t)(n % 3 != 1);
    }
    k->silu = silu;
    k->bias = 1;
    k->wbf16 = wbf16;
    k->wdense = 1;
    k->init = 1;
    k->decode = decode;
    k->xl = XL_DENSE;
    k->ol = OL_SPLIT;
    arena A;
    arena_init(&A, (size_t)64 << 20, seed);
    layout_case(k, &A, lens, slots, init_of, decode ? 0 : 3);
    char what[160];
    snprintf(what, sizeof what, "%s large %s C %lld N %lld silu %d w %s", backend,
             decode ? "decode" : "prefill", (long long)k->C, (long long)k->N, silu,
             wbf16 ? "bf16" : "f32");
    free(check_case(k, &A, what));
    free(A.host);
    free(k);
}

/* ---- chunked prefill and decode through the pool ------------------------- */

/* Each sequence in three calls: its first half (the initial state as
 * given), the rest but the last token (from its slot), then the last token
 * as a decode step. Outputs and the pool must equal one prefill of all
 * sequences, bit for bit, on the same backend (and on the reference). */
typedef struct chunk_ctx {
    tcase k;  /* the whole call: token-major dense, dense x */
    int call; /* -1: the whole call; else 3 * n + part */
    size_t o_pairs, o_one;
} chunk_ctx;

static void build_chunk(const void *ctx, unsigned char *base, sp_device dev, sp_conv_args *a) {
    const chunk_ctx *c = ctx;
    build_case(&c->k, base, dev, a);
    if (c->call < 0) return;
    const int64_t n = c->call / 3, part = c->call % 3, one = 1, two = 2, C = c->k.C;
    sp_tensor_dense(&a->state_indices, base + c->k.o_idx + (size_t)n * 4, SP_I32, 1, &one, dev);
    if (part < 2) {
        sp_tensor_dense(&a->cu_seqlens, base + c->o_pairs + (size_t)(2 * n + part) * 16, SP_I64, 1,
                        &two, dev);
        sp_tensor_dense(&a->has_initial_state,
                        part == 0 ? base + c->k.o_init + (size_t)n : base + c->o_one, SP_BOOL, 1,
                        &one, dev);
        return;
    }
    const int64_t last = c->k.cu[n + 1] - 1, shape[2] = {1, C};
    memset(&a->cu_seqlens, 0, sizeof a->cu_seqlens);
    memset(&a->has_initial_state, 0, sizeof a->has_initial_state);
    sp_tensor_dense(&a->x, base + c->k.o_x + (size_t)(last * C) * 2, SP_BF16, 2, shape, dev);
    sp_tensor_dense(&a->out, base + c->k.o_out + (size_t)(last * C) * 2, SP_BF16, 2, shape, dev);
}

typedef sp_status (*runner)(int decode, build_fn build, const void *ctx, const arena *A,
                            unsigned char *img);

static sp_status reference_runner(int decode, build_fn build, const void *ctx, const arena *A,
                                  unsigned char *img) {
    (void)A;
    return run_reference(decode, build, ctx, img);
}

static void chunk_case(int64_t W, int silu, runner run, const char *name, uint64_t seed) {
    static const int64_t lens[] = {0, 1, 2, 5, 150, 3, 70};
    static const int32_t slots[] = {3, 1, 0, -1, 5, 2, 4};
    static const uint8_t init_of[] = {0, 1, 0, 1, 1, 0, 1};
    chunk_ctx c;
    memset(&c, 0, sizeof c);
    c.k.W = W;
    c.k.kd = 32;
    c.k.C = 96;
    c.k.N = 7;
    c.k.slots = 6;
    c.k.silu = silu;
    c.k.bias = 1;
    c.k.init = 1;
    arena A;
    arena_init(&A, (size_t)4 << 20, seed);
    layout_case(&c.k, &A, lens, slots, init_of, 0);
    c.o_pairs = arena_take(&A, (size_t)c.k.N * 32, IN_OTHER);
    c.o_one = arena_take(&A, 1, IN_OTHER);
    A.host[c.o_one] = 1;
    for (int64_t n = 0; n < c.k.N; n++) {
        const int64_t s = c.k.cu[n], e = c.k.cu[n + 1], cut = s + (e - s) / 2;
        const int64_t pairs[4] = {s, cut, cut, e > s ? e - 1 : e};
        memcpy(A.host + c.o_pairs + (size_t)n * 32, pairs, sizeof pairs);
    }
    unsigned char *whole = arena_copy(&A), *chunked = arena_copy(&A);
    c.call = -1;
    CHECK_OK(run(PREFILL, build_chunk, &c, &A, whole));
    for (int64_t n = 0; n < c.k.N; n++) {
        const int parts = lens[n] == 0 ? 1 : 3;
        for (int part = 0; part < parts; part++) {
            c.call = (int)(3 * n + part);
            CHECK_OK(run(part == 2 ? DECODE : PREFILL, build_chunk, &c, &A, chunked));
        }
    }
    CHECKF(memcmp(whole, chunked, A.cap) == 0, "%s W %lld silu %d: chunked calls differ from one",
           name, (long long)W, silu);
    free(whole);
    free(chunked);
    free(A.host);
}

/* ---- bad arguments: a named error, nothing written ------------------------- */

typedef struct bad_ctx {
    tcase k;
    int mutation;
} bad_ctx;

enum { N_MUTATIONS = 19 };

static sp_status mutation_status(int m) {
    static const sp_status want[N_MUTATIONS] = {
        SP_ERR_DTYPE_MISMATCH,   SP_ERR_UNSUPPORTED,      SP_ERR_UNSUPPORTED,
        SP_ERR_SHAPE_MISMATCH,   SP_ERR_INVALID_ARGUMENT, SP_ERR_INVALID_ARGUMENT,
        SP_ERR_OVERLAP,          SP_ERR_OVERLAP,          SP_ERR_OVERLAP,
        SP_ERR_INVALID_ARGUMENT, SP_ERR_DTYPE_MISMATCH,   SP_ERR_INVALID_ARGUMENT,
        SP_ERR_MISALIGNED,       SP_ERR_DTYPE_MISMATCH,   SP_ERR_SHAPE_MISMATCH,
        SP_ERR_DEVICE_MISMATCH,  SP_ERR_SHAPE_MISMATCH,   SP_ERR_DTYPE_MISMATCH,
        SP_ERR_OVERLAP};
    return want[m];
}

static void build_bad(const void *ctx, unsigned char *base, sp_device dev, sp_conv_args *a) {
    const bad_ctx *b = ctx;
    build_case(&b->k, base, dev, a);
    switch (b->mutation) {
    case 0: a->x.dtype = SP_F16; break;
    case 1: a->weight.shape[1] = 5; break;
    case 2: a->weight.shape[1] = 1; break;
    case 3: a->q.shape[0] -= 1; break;
    case 4: a->out = a->q; break;
    case 5:
        memset(&a->q, 0, sizeof a->q), memset(&a->k, 0, sizeof a->k), memset(&a->v, 0, sizeof a->v);
        break;
    case 6: a->k.data = a->q.data; break;
    case 7: a->q.data = a->x.data; break;
    case 8: a->state.data = a->weight.data; break;
    case 9: a->cu_seqlens.strides[0] = 2; break;
    case 10: a->state_indices.dtype = SP_F32; break;
    case 11: a->silu = 2; break;
    case 12: a->x.data = (char *)a->x.data + 1; break;
    case 13: a->bias.dtype = SP_BF16; break;
    case 14: a->v.shape[1] += 1; break;
    case 15: a->weight.device = dev.type == SP_DEVICE_CPU ? sp_cuda(0) : sp_cpu(); break;
    case 16: a->state.shape[2] += 1; break;
    case 17: a->has_initial_state.dtype = SP_U8; break;
    case 18: a->state.strides[1] = 0; break;
    }
}

static void bad_arguments(void) {
    static const int64_t lens[] = {4, 9, 2};
    static const int32_t slots[] = {1, 0, 2};
    static const uint8_t init_of[] = {1, 0, 1};
    bad_ctx b;
    memset(&b, 0, sizeof b);
    b.k.W = 4;
    b.k.kd = 16;
    b.k.C = 48;
    b.k.N = 3;
    b.k.slots = 3;
    b.k.silu = 1;
    b.k.bias = 1;
    b.k.init = 1;
    b.k.xl = XL_DENSE;
    b.k.ol = OL_SPLIT_STRIDED;
    arena A;
    arena_init(&A, (size_t)1 << 20, 77);
    layout_case(&b.k, &A, lens, slots, init_of, 1);
    for (int m = 0; m < N_MUTATIONS; m++) {
        b.mutation = m;
        unsigned char *img = arena_copy(&A);
        sp_status s = run_backend(PREFILL, build_bad, &b, &A, img);
        CHECKF(s == mutation_status(m), "%s: mutation %d: %s, expected %s (%s)", backend, m,
               sp_status_string(s), sp_status_string(mutation_status(m)), sp_last_error());
        CHECKF(strlen(sp_last_error()) > 0, "mutation %d: no message", m);
        CHECKF(memcmp(img, A.host, A.cap) == 0, "%s: mutation %d wrote memory", backend, m);
        free(img);
    }
    /* Decode takes no cu_seqlens. */
    b.mutation = -1;
    unsigned char *img = arena_copy(&A);
    CHECK_STATUS(run_backend(DECODE, build_bad, &b, &A, img), SP_ERR_INVALID_ARGUMENT);
    CHECK(memcmp(img, A.host, A.cap) == 0);
    free(img);

    /* Index contents: checked on the CPU; on CUDA (and in the kernel's
     * emulation) the kernel skips the sequence, as if padded. */
    unsigned char *pristine = arena_copy(&A);
    for (int c = 0; c < 3; c++) {
        memcpy(A.host, pristine, A.cap);
        int32_t *idx = (int32_t *)(A.host + b.k.o_idx);
        int64_t *cu = (int64_t *)(A.host + b.k.o_cu);
        if (c == 0) idx[1] = (int32_t)b.k.slots; /* slot out of range */
        if (c == 1) cu[3] = b.k.T + 4;           /* last sequence past T */
        if (c == 2) idx[2] = idx[0];             /* a slot used twice */
        img = arena_copy(&A);
        sp_status s = run_backend(PREFILL, build_bad, &b, &A, img);
#if defined(SP_CONV_TEST_CUDA) || defined(SP_CONV_TEST_EMULATED)
        CHECK_OK(s); /* distinct slots (case 2) are the caller's duty on CUDA */
        if (c < 2) {
            /* Expected: the valid call with that sequence padded. */
            unsigned char *expect = arena_copy(&A), *mag = arena_copy(&A);
            memcpy(expect, pristine, A.cap);
            memcpy(mag, pristine, A.cap);
            ((int32_t *)(expect + b.k.o_idx))[c == 0 ? 1 : 2] = -1;
            ((int32_t *)(mag + b.k.o_idx))[c == 0 ? 1 : 2] = -1;
            CHECK_OK(run_reference(PREFILL, build_case, &b.k, expect));
            tcase km = b.k;
            absolute(&A, mag, &km);
            CHECK_OK(run_reference(PREFILL, build_case, &km, mag));
            /* The index arrays differ by design; everything else must not. */
            memcpy(expect + b.k.o_idx, A.host + b.k.o_idx, (size_t)b.k.N * 4);
            memcpy(expect + b.k.o_cu, A.host + b.k.o_cu, (size_t)(b.k.N + 1) * 8);
            stats st = {0, 0, 0, 0};
            CHECKF(compare(&A, A.host, expect, img, mag, &st, "device guard") == 0,
                   "device guard case %d", c);
            free(expect);
            free(mag);
        }
#else
        CHECKF(s == SP_ERR_INVALID_ARGUMENT, "index case %d: %s (%s)", c, sp_status_string(s),
               sp_last_error());
        CHECKF(memcmp(img, A.host, A.cap) == 0, "index case %d wrote memory", c);
#endif
        free(img);
    }
    free(pristine);
    free(A.host);
    CHECK_STATUS(sp_conv_args_init(NULL), SP_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(sp_conv_prefill(NULL, NULL), SP_ERR_INVALID_ARGUMENT);
    CHECK_STATUS(sp_conv_decode_reference(NULL), SP_ERR_INVALID_ARGUMENT);
}

/* ---- messages: the rule as the call reads it -------------------------------- */

typedef struct msg_ctx {
    tcase k;
    int what; /* 0: q one row short; 1: out one row short; 2: q 1-D; 3: cu_seqlens[0] = -1 */
} msg_ctx;

static void build_msg(const void *ctx, unsigned char *base, sp_device dev, sp_conv_args *a) {
    const msg_ctx *m = ctx;
    build_case(&m->k, base, dev, a);
    if (m->what == 0) a->q.shape[0] -= 1;
    if (m->what == 1) a->out.shape[0] -= 1;
    if (m->what == 2) a->q.ndim = 1;
}

/* The call is refused with `want`, its message holds `has` and not `lacks`,
 * and nothing is written. */
static void expect_message(int decode, const msg_ctx *m, const arena *A, sp_status want,
                           const char *has, const char *lacks) {
    unsigned char *img = arena_copy(A);
    sp_status s = run_backend(decode, build_msg, m, A, img);
    const char *msg = sp_last_error();
    CHECKF(s == want, "%s: message case %d: %s, expected %s (%s)", backend, m->what,
           sp_status_string(s), sp_status_string(want), msg);
    CHECKF(strstr(msg, has) != NULL, "%s: message case %d: \"%s\" does not say \"%s\"", backend,
           m->what, msg, has);
    CHECKF(!lacks || strstr(msg, lacks) == NULL, "%s: message case %d: \"%s\" says \"%s\"",
           backend, m->what, msg, lacks);
    CHECKF(memcmp(img, A->host, A->cap) == 0, "%s: message case %d wrote memory", backend,
           m->what);
    free(img);
}

static void messages(void) {
    static const int64_t lens[] = {1, 1, 1};
    static const int32_t slots[] = {1, 0, 2};
    static const uint8_t init_of[] = {1, 0, 1};
    msg_ctx m;
    memset(&m, 0, sizeof m);
    m.k.W = 4;
    m.k.kd = 16;
    m.k.C = 48;
    m.k.N = 3;
    m.k.slots = 3;
    m.k.bias = 1;
    m.k.xl = XL_DENSE;
    m.k.ol = OL_SPLIT_STRIDED;
    m.k.decode = 1;
    arena A;
    arena_init(&A, (size_t)1 << 20, 78);
    layout_case(&m.k, &A, lens, slots, init_of, 0);
    /* Decode: one token per sequence, so the rows are N, not T. */
    m.what = 0;
    expect_message(DECODE, &m, &A, SP_ERR_SHAPE_MISMATCH, "q: shape [2, 16], expected [N, key_dim]",
                   "[T");
    m.what = 2;
    expect_message(DECODE, &m, &A, SP_ERR_SHAPE_MISMATCH, "[N, key_dim] / [N, value_dim]", "[T");
    m.what = 1;
    m.k.ol = OL_TOKEN_PADDED; /* the same rows, C + OPAD apart, as one output */
    expect_message(DECODE, &m, &A, SP_ERR_SHAPE_MISMATCH, "out: shape [2, 48], expected [N, C]",
                   "[T");
    /* Prefill says T. */
    m.k.decode = 0;
    m.k.ol = OL_SPLIT_STRIDED;
    m.what = 0;
    expect_message(PREFILL, &m, &A, SP_ERR_SHAPE_MISMATCH, "expected [T, key_dim]", "[N,");
#if !defined(SP_CONV_TEST_CUDA) && !defined(SP_CONV_TEST_EMULATED)
    /* A negative first offset is named as that (index contents are read
     * on the CPU only). */
    ((int64_t *)(A.host + m.k.o_cu))[0] = -1;
    m.what = 3;
    expect_message(PREFILL, &m, &A, SP_ERR_INVALID_ARGUMENT, "cu_seqlens: [0] = -1 is negative",
                   "0 = 0");
#endif
    free(A.host);
}

/* ---- CUDA only ------------------------------------------------------------ */

#ifdef SP_CONV_TEST_CUDA
/* Graph capture and replay: the captured call, replayed on new contents at
 * the same addresses, gives what an eager call gives. */
static void graph_case(void) {
    static const int64_t lens[] = {40, 0, 130, 2};
    static const int32_t slots[] = {2, 0, 3, -1};
    static const uint8_t init_of[] = {1, 1, 0, 1};
    tcase k;
    memset(&k, 0, sizeof k);
    k.W = 4;
    k.kd = 128;
    k.C = 384;
    k.N = 4;
    k.slots = 4;
    k.silu = 1;
    k.bias = 1;
    k.init = 1;
    k.xl = XL_SLICE;
    k.ol = OL_SPLIT;
    arena A;
    arena_init(&A, (size_t)4 << 20, 901);
    layout_case(&k, &A, lens, slots, init_of, 5);
    unsigned char *dev;
    CUDA_OK(cudaMalloc((void **)&dev, A.cap));
    cudaStream_t s;
    CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    sp_conv_args a;
    build_case(&k, dev, sp_cuda(0), &a);
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CUDA_OK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
    sp_status st = sp_conv_prefill(&a, (struct CUstream_st *)s);
    CUDA_OK(cudaStreamEndCapture(s, &g));
    CHECK_OK(st);
    CUDA_OK(cudaGraphInstantiate(&ge, g, 0));
    for (int round = 0; round < 2; round++) {
        if (round) kp_fill_bf16(A.host + k.o_x, (size_t)(k.T * (k.C + XPAD)), &A.rng, -3, 3);
        CUDA_OK(cudaMemcpy(dev, A.host, A.cap, cudaMemcpyHostToDevice));
        CUDA_OK(cudaGraphLaunch(ge, s));
        CUDA_OK(cudaStreamSynchronize(s));
        unsigned char *replayed = arena_copy(&A), *eager = arena_copy(&A);
        CUDA_OK(cudaMemcpy(replayed, dev, A.cap, cudaMemcpyDeviceToHost));
        CHECK_OK(run_backend(PREFILL, build_case, &k, &A, eager));
        CHECKF(memcmp(replayed, eager, A.cap) == 0, "graph replay %d differs from eager", round);
        CHECKF(memcmp(replayed, A.host, A.cap) != 0, "graph replay %d wrote nothing", round);
        free(replayed);
        free(eager);
    }
    CUDA_OK(cudaGraphExecDestroy(ge));
    CUDA_OK(cudaGraphDestroy(g));
    CUDA_OK(cudaStreamDestroy(s));
    CUDA_OK(cudaFree(dev));
    free(A.host);
}
#endif

int main(void) {
#ifdef SP_CONV_TEST_CUDA
    if (!sp_cuda_available()) SP_SKIP("no usable CUDA device");
#endif
    prefill_matrix();
    decode_matrix();
    large_case(PREFILL, 1536, 0, 1, 700);
    large_case(PREFILL, 512, 1, 0, 701);
    large_case(DECODE, 512, 0, 1, 702);
    large_case(DECODE, 1536, 0, 0, 703);
    large_case(DECODE, 512, 1, 1, 704);
    for (int64_t W = 2; W <= 4; W++)
        for (int silu = 0; silu < 2; silu++) {
            chunk_case(W, silu, run_backend, backend, 300 + (uint64_t)(W * 2 + silu));
            chunk_case(W, silu, reference_runner, "reference", 400 + (uint64_t)(W * 2 + silu));
        }
    bad_arguments();
    messages();
#ifdef SP_CONV_TEST_CUDA
    graph_case();
#endif
    printf("%s: %lld outputs against the reference: %lld equal, %lld one ulp apart, %lld further "
           "(within the cancellation bound)\n",
           backend, totals.outputs, totals.equal, totals.one_ulp, totals.beyond);
    /* The bound is what is promised; most outputs must be exact, too. */
    CHECKF(totals.equal >= totals.outputs * 9 / 10, "only %lld of %lld outputs equal the reference",
           totals.equal, totals.outputs);
    char name[32];
    snprintf(name, sizeof name, "test_conv (%s)", backend);
    return sp_test_finish(name);
}

#endif /* SP_CONV_TEST_BODY */
