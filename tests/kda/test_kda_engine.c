/*
 * test_kda_engine.c — the engine conventions of the KDA prefill, one body
 * for each memory backend (test_kda_engine on the CPU, test_kda_engine_gpu
 * on the GPU):
 *   - index arrays of either width (cu_seqlens, state_indices,
 *     checkpoint_cu_starts as i32 or i64): the same bytes out;
 *   - has_initial_state: a fresh sequence gives what a zeroed slot gives,
 *     and its slot (NaN here) is never read;
 *   - a K-first pool ([slots, H, K, V], fla's default) passed as its
 *     transpose: bit for bit the V-first pool's results, transposed;
 *   - the speculative-verify table (state_indices [N, W] with
 *     num_accepted_tokens): every written state and o row bit for bit those
 *     of the same prefill fed one token per call, padded rows and negative
 *     entries untouched, and within the float64 reference's bounds;
 *   - the contract of those arguments, each violation refused with nothing
 *     written; on CUDA, the device rule for rows the host cannot see.
 * Every kernel that serves these calls runs them: the CPU backend; on the
 * GPU the recurrent, chunked and decode kernels (a verify table: recurrent
 * and decode). In CUDA builds test_kda_engine_emulated runs the same cases
 * on the decode kernel's host emulation (SP_KDA_TEST_EMULATED).
 */
#include "bf16.h" /* sp_f32_to_bf16_: the library's rounding, for the oracle */
#include "check.h"
#include "cuda/device.h" /* the stream form's code: kda_decode_stream_per_sm */
#include "kda/kda_internal.h" /* sp_kda_decode_emulate_ */
#include "kda_problem.h"
#include "stridepack_kda.h"
#include "ts_mem.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define D SP_KDA_HEAD_DIM
#define DD (D * D)

static const ts_mem *M;

static int on_device(void) { return M->device.type == SP_DEVICE_CUDA; }

#ifdef SP_KDA_TEST_EMULATED
static const int emulated = 1;
#else
static const int emulated = 0;
#endif

static void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    return p;
}

/* A copy of `bytes` host bytes in the backend's memory. */
static void *put(const void *host, size_t bytes) {
    void *d = M->alloc(bytes ? bytes : 1);
    if (bytes) M->upload(d, host, bytes);
    return d;
}

/* An index array of n entries as dtype `to` (i32 or i64), from int64. */
static void *as_width(const int64_t *x, int64_t n, sp_dtype to) {
    void *out = xmalloc((size_t)n * sp_dtype_size(to));
    for (int64_t i = 0; i < n; i++) {
        if (to == SP_I64) ((int64_t *)out)[i] = x[i];
        else ((int32_t *)out)[i] = (int32_t)x[i];
    }
    return out;
}

/* The decode kernel's rows a warp that run() gives it (sp_kda_plan): 0, the
 * library's plan; else 16 or 32 through a plan of the test's. Its order
 * (decode_tokens_outer): -1 the plan's, else 0 or 1. decode_pairs > 0: its
 * stream form with that many pairs a block, for every call it serves
 * (groups outer, on a V-first pool; refused by name on a K-first one), the
 * rest as the plan has them; stream_runs counts the calls it ran. */
static int decode_rows, decode_outer = -1;
static int64_t decode_pairs, stream_runs;

/* The stream form has code for this device with both pools. */
static int stream_here(void) {
    const sp_cuda_device *dev;
    return on_device() && !emulated &&
           sp_cuda_device_((int)M->device.ordinal, SP_CUDA_PART_KDA, &dev) == SP_OK &&
           dev->kda_decode_stream_per_sm[0] > 0 && dev->kda_decode_stream_per_sm[1] > 0;
}

/* Run a call whose buffers are all in the backend's memory; the two-pass
 * kernel gets the workspace it asks for. */
static sp_status run(sp_kda_args *a) {
    void *ws = NULL;
    if (a->kernel == SP_KDA_KERNEL_CHUNKED_TWO_PASS) {
        size_t bytes = 0;
        CHECK_OK(sp_kda_prefill_workspace_bytes(a, &bytes));
        ws = M->alloc(bytes ? bytes : 1);
        a->workspace = ws;
        a->workspace_bytes = bytes;
    }
#ifdef SP_KDA_TEST_EMULATED
    const sp_status s = sp_kda_decode_emulate_(a, decode_rows ? decode_rows : 16, decode_outer);
#else
    sp_status s;
    sp_kda_plan plan;
    if (a->kernel == SP_KDA_KERNEL_DECODE && (decode_rows || decode_outer >= 0 || decode_pairs) &&
        (s = sp_kda_prefill_plan_(a, &plan)) == SP_OK) {
        if (decode_rows) plan.decode_rows_per_warp = decode_rows;
        if (decode_outer >= 0) plan.decode_tokens_outer = decode_outer;
        if (decode_pairs && !plan.decode_tokens_outer) {
            sp_kda_plan stream = plan;
            stream.decode_rows_per_warp = SP_KDA_DECODE_STREAM_ROWS;
            stream.decode_pairs_a_block = decode_pairs;
            if (a->state.strides[3] == 1) {
                plan = stream;
                stream_runs++;
            } else { /* K-first */
                CHECK_STATUS(sp_kda_prefill_planned_(a, &stream, M->stream), SP_ERR_UNSUPPORTED);
                CHECKF(strstr(sp_last_error(), "V-first") != NULL, "%s", sp_last_error());
            }
        }
        s = sp_kda_prefill_planned_(a, &plan, M->stream);
    } else {
        s = sp_kda_prefill(a, M->stream);
    }
#endif
    if (ws) {
        char sync;
        M->download(&sync, a->o.data, 1); /* the call is done before the release */
        M->release(ws);
        a->workspace = NULL;
        a->workspace_bytes = 0;
    }
    return s;
}

/* The kernels of this backend that serve a plain call. */
static int kernels(int32_t out[4]) {
    if (emulated || !on_device()) {
        out[0] = emulated ? SP_KDA_KERNEL_DECODE : SP_KDA_KERNEL_AUTO;
        return 1;
    }
    out[0] = SP_KDA_KERNEL_RECURRENT;
    out[1] = SP_KDA_KERNEL_CHUNKED;
    out[2] = SP_KDA_KERNEL_CHUNKED_TWO_PASS;
    out[3] = SP_KDA_KERNEL_DECODE;
    return 4;
}

static int is_chunked(int32_t k) {
    return k == SP_KDA_KERNEL_CHUNKED || k == SP_KDA_KERNEL_CHUNKED_TWO_PASS;
}

/* got's o and state against the float64 reference on p's inputs (run here,
 * on a copy): relative errors and stray bytes (kp_err_o, kp_err_state). */
typedef struct ref_err {
    double o, state;
    int64_t so, ss;
} ref_err;
static ref_err from_reference(const kda_problem *p, void *const got[KB_COUNT]) {
    void *ref[KB_COUNT];
    kp_copy(p, ref);
    sp_kda_args r;
    kp_args(p, ref, sp_cpu(), &r);
    CHECK_OK(sp_kda_prefill_reference(&r));
    ref_err e;
    e.o = kp_err_o(p, got[KB_O], ref[KB_O], &e.so);
    e.state = kp_err_state(p, got[KB_STATE], ref[KB_STATE], &e.ss);
    kp_free_copy(ref);
    return e;
}

/* ---- index widths --------------------------------------------------------- */

static void widths_case(int32_t kernel) {
    static const int64_t lens[] = {37, 20, 64, 5, 33};
    kda_problem p;
    /* Checkpoints (their cu_starts one more index array) where the kernel writes them. */
    kp_make(&p, 5, lens, 2, 2, SP_F32, SP_KDA_GATE_LOWER_BOUND,
            kernel == SP_KDA_KERNEL_DECODE ? 0 : 32, 6100);
    p.kernel = kernel;
    ((int32_t *)p.host[KB_IDX])[3] = -1; /* a padded sequence: -1 in either width */
    int64_t cu[KP_MAX_SEQ + 1], idx[KP_MAX_SEQ], cks[KP_MAX_SEQ + 1] = {0};
    for (int64_t n = 0; n <= p.N; n++) {
        cu[n] = ((const int64_t *)p.host[KB_CU])[n];
        if (p.interval > 0) cks[n] = ((const int64_t *)p.host[KB_CKS])[n];
        if (n < p.N) idx[n] = ((const int32_t *)p.host[KB_IDX])[n];
    }
    void *base[KB_COUNT] = {0};
    for (int w = 0; w < 8; w++) {
        const sp_dtype cdt = w & 1 ? SP_I32 : SP_I64, idt = w & 2 ? SP_I64 : SP_I32,
                       sdt = w & 4 ? SP_I32 : SP_I64;
        void *buf[KB_COUNT], *out[KB_COUNT];
        kp_upload(M, &p, p.host, 0, buf);
        sp_kda_args a;
        kp_args(&p, buf, M->device, &a);
        void *hc = as_width(cu, p.N + 1, cdt), *hi = as_width(idx, p.N, idt),
             *hs = as_width(cks, p.N + 1, sdt);
        void *dc = put(hc, (size_t)(p.N + 1) * sp_dtype_size(cdt)),
             *di = put(hi, (size_t)p.N * sp_dtype_size(idt)),
             *ds = put(hs, (size_t)(p.N + 1) * sp_dtype_size(sdt));
        const int64_t n1 = p.N + 1, n = p.N;
        CHECK_OK(sp_tensor_dense(&a.cu_seqlens, dc, cdt, 1, &n1, M->device));
        CHECK_OK(sp_tensor_dense(&a.state_indices, di, idt, 1, &n, M->device));
        if (p.interval > 0)
            CHECK_OK(sp_tensor_dense(&a.checkpoint_cu_starts, ds, sdt, 1, &n1, M->device));
        CHECKF(run(&a) == SP_OK, "%s widths %d: %s", sp_kda_kernel_name(kernel), w,
               sp_last_error());
        kp_copy(&p, out);
        kp_download(M, &p, buf, out);
        if (w == 0) {
            memcpy(base, out, sizeof base);
            const ref_err e = from_reference(&p, out);
            CHECKF(e.o < kp_o_tol(&p) && e.so == 0, "%s widths: o %.3g from the reference, %lld "
                   "stray", sp_kda_kernel_name(kernel), e.o, (long long)e.so);
        } else {
            CHECKF(kp_outputs_equal(&p, base, out), "%s: cu %s, indices %s, cu_starts %s: "
                   "outputs differ from i64/i32/i64", sp_kda_kernel_name(kernel),
                   sp_dtype_name(cdt), sp_dtype_name(idt), sp_dtype_name(sdt));
            kp_free_copy(out);
        }
        free(hc), free(hi), free(hs);
        M->release(dc), M->release(di), M->release(ds);
        kp_release(M, buf);
    }
    kp_free_copy(base);
    kp_free(&p);
}

/* ---- has_initial_state ------------------------------------------------------ */

/* Set slot `slot` of a host pool (dense dims 1..3 at p's pitch) to x. */
static void fill_slot(const kda_problem *p, void *pool, int64_t slot, float x) {
    for (int64_t i = 0; i < p->H * DD; i++) {
        const int64_t at = slot * p->pitch + i;
        if (p->state_dtype == SP_F32) {
            ((float *)pool)[at] = x;
        } else {
            uint32_t u;
            memcpy(&u, &x, 4);
            ((uint16_t *)pool)[at] = (uint16_t)(u >> 16);
        }
    }
}

static void has_initial_state_case(int32_t kernel, sp_dtype sdt) {
    static const int64_t lens[] = {37, 0, 64, 5, 33, 40};
    static const uint8_t fresh[] = {1, 1, 0, 1, 0, 1}; /* has_initial_state */
    kda_problem p;
    kp_make(&p, 6, lens, 2, 2, sdt, SP_KDA_GATE_LOWER_BOUND, 0, 6200 + (uint64_t)sdt);
    p.kernel = kernel;
    const int32_t *idx = p.host[KB_IDX];
    /* A: the fresh sequences' slots hold NaN and has_initial_state says
     * not to read them. B: those slots hold zeros, every slot read. The
     * empty sequence (1) keeps its slot either way. */
    void *a_init[KB_COUNT], *b_init[KB_COUNT];
    kp_copy(&p, a_init);
    kp_copy(&p, b_init);
    for (int n = 0; n < 6; n++)
        if (!fresh[n] && lens[n] > 0) {
            fill_slot(&p, a_init[KB_STATE], idx[n], NAN);
            fill_slot(&p, b_init[KB_STATE], idx[n], 0.0f);
        }
    void *bufa[KB_COUNT], *bufb[KB_COUNT], *outa[KB_COUNT], *outb[KB_COUNT];
    kp_upload(M, &p, a_init, 0, bufa);
    kp_upload(M, &p, b_init, 0, bufb);
    const int64_t n6 = 6;
    void *dh = put(fresh, sizeof fresh);
    sp_kda_args a, b;
    kp_args(&p, bufa, M->device, &a);
    CHECK_OK(sp_tensor_dense(&a.has_initial_state, dh, SP_BOOL, 1, &n6, M->device));
    kp_args(&p, bufb, M->device, &b);
    CHECKF(run(&a) == SP_OK, "has_initial_state: %s", sp_last_error());
    CHECK_OK(run(&b));
    kp_copy(&p, outa);
    kp_copy(&p, outb);
    kp_download(M, &p, bufa, outa);
    kp_download(M, &p, bufb, outb);
    /* Bit for bit, but for slots B zeroed and A filled with NaN: both written. */
    CHECKF(memcmp(outa[KB_O], outb[KB_O], p.bytes[KB_O]) == 0, "%s %s: o differs",
           sp_kda_kernel_name(kernel), sp_dtype_name(sdt));
    CHECKF(memcmp(outa[KB_STATE], outb[KB_STATE], p.bytes[KB_STATE]) == 0,
           "%s %s: the pool differs", sp_kda_kernel_name(kernel), sp_dtype_name(sdt));
    CHECK(memcmp(outb[KB_STATE], b_init[KB_STATE], p.bytes[KB_STATE]) != 0);
    /* The float64 reference with the same flags, within the prefill's bounds. */
    void *ref[KB_COUNT];
    kp_copy(&p, ref);
    memcpy(ref[KB_STATE], a_init[KB_STATE], p.bytes[KB_STATE]);
    sp_kda_args r;
    kp_args(&p, ref, sp_cpu(), &r);
    CHECK_OK(sp_tensor_dense(&r.has_initial_state, (void *)fresh, SP_BOOL, 1, &n6, sp_cpu()));
    CHECK_OK(sp_kda_prefill_reference(&r));
    int64_t so;
    const double eo = kp_err_o(&p, outa[KB_O], ref[KB_O], &so);
    CHECKF(eo < kp_o_tol(&p) && so == 0, "%s %s: o %.3g from the reference, %lld stray",
           sp_kda_kernel_name(kernel), sp_dtype_name(sdt), eo, (long long)so);
    printf("has_initial_state %-16s %s: o %.2e from the reference\n", sp_kda_kernel_name(kernel),
           sp_dtype_name(sdt), eo);
    kp_free_copy(ref);
    kp_free_copy(outa), kp_free_copy(outb), kp_free_copy(a_init), kp_free_copy(b_init);
    kp_release(M, bufa), kp_release(M, bufb);
    M->release(dh);
    kp_free(&p);
}

/* ---- gate and beta forms ------------------------------------------------------ */

/* The precomputed log-decay (g bf16 or f32), activated beta and 2 sigmoid
 * beta (beta bf16 or f32), on a kernel that serves them, against the float64
 * reference. */
static void forms_case(int32_t kernel) {
    static const int64_t lens[] = {5, 12, 1, 0};
    static const struct {
        int32_t gate, beta;
        sp_dtype gdt, bdt;
    } forms[] = {{SP_KDA_GATE_LOG_DECAY, SP_KDA_BETA_ACTIVATED, SP_F32, SP_F32},
                 {SP_KDA_GATE_LOG_DECAY, SP_KDA_BETA_LOGITS_X2, SP_BF16, SP_BF16},
                 {SP_KDA_GATE_SOFTPLUS, SP_KDA_BETA_ACTIVATED, SP_BF16, SP_F32}};
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
        kda_problem p;
        const uint64_t seed = 6600 + (uint64_t)i;
        kp_make(&p, 4, lens, 1, 2, SP_F32,
                forms[i].gate == SP_KDA_GATE_LOG_DECAY ? 0 : forms[i].gate, 0, seed);
        if (forms[i].gate == SP_KDA_GATE_LOG_DECAY) kp_log_decay(&p, forms[i].gdt, seed);
        kp_beta_form(&p, forms[i].beta, seed);
        if (forms[i].bdt == SP_F32) kp_beta_f32(&p);
        p.kernel = kernel;
        void *buf[KB_COUNT], *got[KB_COUNT];
        kp_upload(M, &p, p.host, 0, buf);
        sp_kda_args a;
        kp_args(&p, buf, M->device, &a);
        CHECKF(run(&a) == SP_OK, "%s form %zu: %s", sp_kda_kernel_name(kernel), i,
               sp_last_error());
        kp_copy(&p, got);
        kp_download(M, &p, buf, got);
        const ref_err e = from_reference(&p, got);
        printf("forms %-16s gate %d beta %d g %s beta %s: o %.2e state %.2e\n",
               sp_kda_kernel_name(kernel), (int)forms[i].gate, (int)forms[i].beta,
               sp_dtype_name(forms[i].gdt), sp_dtype_name(forms[i].bdt), e.o, e.state);
        CHECKF(e.o < kp_o_tol(&p) && e.so == 0 && e.state < kp_state_tol(&p) && e.ss == 0,
               "%s form %zu: o %.3g state %.3g, %lld + %lld stray", sp_kda_kernel_name(kernel), i,
               e.o, e.state, (long long)e.so, (long long)e.ss);
        kp_free_copy(got);
        kp_release(M, buf);
        kp_free(&p);
    }
}

/* ---- the state layout ------------------------------------------------------- */

/* Each (slot, head) state of a host pool transposed in place ([j][d] <->
 * [d][j]): a V-first pool's bytes become the K-first pool's ([slots, H, K,
 * V], fla's default layout) and back. The bytes between slots (a padded
 * pitch) stay. */
static void transpose_states(void *pool, int64_t slots, int64_t H, int64_t pitch, size_t es) {
    for (int64_t s = 0; s < slots; s++)
        for (int64_t h = 0; h < H; h++) {
            char *m = (char *)pool + (size_t)(s * pitch + h * DD) * es;
            for (int j = 0; j < D; j++)
                for (int d = j + 1; d < D; d++) {
                    char t[4], *x = m + (size_t)(j * D + d) * es, *y = m + (size_t)(d * D + j) * es;
                    memcpy(t, x, es), memcpy(x, y, es), memcpy(y, t, es);
                }
        }
}

/* p's call on its V-first pool and on the K-first twin of it (the same
 * states transposed, passed as the transpose's view: state strides (pitch,
 * 128*128, 1, 128)): both run and downloaded, the K-first states transposed
 * back (outk), so that the two compare byte for byte. kf_init: the K-first
 * pool's initial host bytes. */
typedef struct twin_pools {
    void *kf_init[KB_COUNT], *outv[KB_COUNT], *outk[KB_COUNT], *bufv[KB_COUNT], *bufk[KB_COUNT];
} twin_pools;

static void twin_run(kda_problem *p, sp_dtype sdt, const char *what, twin_pools *t) {
    const size_t es = sp_dtype_size(sdt);
    const int64_t ss[4] = {p->slots, p->H, D, D}, st[4] = {p->pitch, DD, 1, D};
    kp_copy(p, t->kf_init);
    transpose_states(t->kf_init[KB_STATE], p->slots, p->H, p->pitch, es);
    kp_upload(M, p, p->host, 0, t->bufv);
    kp_upload(M, p, t->kf_init, 0, t->bufk);
    sp_kda_args v, k;
    kp_args(p, t->bufv, M->device, &v);
    kp_args(p, t->bufk, M->device, &k);
    CHECK_OK(sp_tensor_view(&k.state, t->bufk[KB_STATE], 0, sdt, 4, ss, st, M->device));
    CHECKF(run(&v) == SP_OK, "%s V-first: %s", what, sp_last_error());
    CHECKF(run(&k) == SP_OK, "%s K-first: %s", what, sp_last_error());
    kp_copy(p, t->outv);
    kp_copy(p, t->outk);
    kp_download(M, p, t->bufv, t->outv);
    kp_download(M, p, t->bufk, t->outk);
    transpose_states(t->outk[KB_STATE], p->slots, p->H, p->pitch, es);
}

static void twin_free(twin_pools *t) {
    kp_free_copy(t->kf_init), kp_free_copy(t->outv), kp_free_copy(t->outk);
    kp_release(M, t->bufv), kp_release(M, t->bufk);
}

/* A K-first pool passed as its transpose (state strides (pitch, 128*128, 1,
 * 128)): the same o, and the same states in the transposed places, as the
 * V-first pool, bit for bit (only the addresses differ); the bytes between
 * slots and the slots of the empty and the padded sequence untouched. The
 * float64 reference too. */
static void layout_case(int32_t kernel, sp_dtype sdt) {
    static const int64_t lens[] = {37, 1, 64, 3, 0, 33};
    kda_problem p;
    /* Checkpoints (V-first whatever the pool) where the kernel writes them. */
    kp_make(&p, 6, lens, 2, 2, sdt, SP_KDA_GATE_LOWER_BOUND,
            kernel == SP_KDA_KERNEL_DECODE ? 0 : 32, 6300 + (uint64_t)sdt);
    p.kernel = kernel;
    ((int32_t *)p.host[KB_IDX])[3] = -1; /* a padded sequence */
    const size_t es = sp_dtype_size(sdt);
    const int64_t ss[4] = {p.slots, p.H, D, D}, st[4] = {p.pitch, DD, 1, D};
    char what[64];
    snprintf(what, sizeof what, "%s %s", sp_kda_kernel_name(kernel), sp_dtype_name(sdt));
    twin_pools t;
    twin_run(&p, sdt, what, &t);
    void **outv = t.outv, **outk = t.outk, **kf_init = t.kf_init;
    CHECKF(memcmp(outv[KB_O], outk[KB_O], p.bytes[KB_O]) == 0, "%s %s: o differs, K-first pool",
           sp_kda_kernel_name(kernel), sp_dtype_name(sdt));
    CHECKF(memcmp(outv[KB_STATE], outk[KB_STATE], p.bytes[KB_STATE]) == 0,
           "%s %s: the K-first pool's states differ from the V-first pool's",
           sp_kda_kernel_name(kernel), sp_dtype_name(sdt));
    CHECKF(p.interval == 0 || memcmp(outv[KB_CKPT], outk[KB_CKPT], p.bytes[KB_CKPT]) == 0,
           "%s %s: the checkpoints differ with a K-first pool", sp_kda_kernel_name(kernel),
           sp_dtype_name(sdt));
    CHECK(memcmp(outv[KB_STATE], p.host[KB_STATE], p.bytes[KB_STATE]) != 0); /* written */
    /* Slots no sequence with tokens names, and the bytes past each slot's
     * states (the padded pitch), keep theirs in the K-first pool. */
    const int32_t *idx = p.host[KB_IDX];
    for (int64_t sl = 0; sl < p.slots; sl++) {
        int named = 0;
        for (int n = 0; n < 6; n++) named |= idx[n] == sl && lens[n] > 0;
        const size_t at = (size_t)(sl * p.pitch) * es;
        const size_t len = (size_t)(named ? p.H * DD : 0) * es,
                     end = (size_t)((sl + 1) * p.pitch) * es;
        const size_t stop = end < p.bytes[KB_STATE] ? end : p.bytes[KB_STATE];
        CHECKF(memcmp((char *)outk[KB_STATE] + at + len, (char *)p.host[KB_STATE] + at + len,
                      stop - at - len) == 0,
               "%s %s: K-first pool, slot %lld: bytes no sequence writes were written",
               sp_kda_kernel_name(kernel), sp_dtype_name(sdt), (long long)sl);
    }
    /* The float64 reference on both layouts. */
    void *rv[KB_COUNT], *rk[KB_COUNT];
    kp_copy(&p, rv);
    kp_copy(&p, rk);
    memcpy(rk[KB_STATE], kf_init[KB_STATE], p.bytes[KB_STATE]);
    sp_kda_args a, b;
    kp_args(&p, rv, sp_cpu(), &a);
    kp_args(&p, rk, sp_cpu(), &b);
    CHECK_OK(sp_tensor_view(&b.state, rk[KB_STATE], 0, sdt, 4, ss, st, sp_cpu()));
    CHECK_OK(sp_kda_prefill_reference(&a));
    CHECK_OK(sp_kda_prefill_reference(&b));
    transpose_states(rk[KB_STATE], p.slots, p.H, p.pitch, es);
    CHECK(memcmp(rv[KB_O], rk[KB_O], p.bytes[KB_O]) == 0);
    CHECK(memcmp(rv[KB_STATE], rk[KB_STATE], p.bytes[KB_STATE]) == 0);
    CHECK(p.interval == 0 || memcmp(rv[KB_CKPT], rk[KB_CKPT], p.bytes[KB_CKPT]) == 0);
    int64_t so;
    const double eo = kp_err_o(&p, outk[KB_O], rv[KB_O], &so);
    CHECKF(eo < kp_o_tol(&p) && so == 0, "%s %s K-first: o %.3g from the reference, %lld stray",
           sp_kda_kernel_name(kernel), sp_dtype_name(sdt), eo, (long long)so);
    printf("K-first pool      %-16s %s: bit for bit the V-first pool's; o %.2e from the "
           "reference\n", sp_kda_kernel_name(kernel), sp_dtype_name(sdt), eo);
    kp_free_copy(rv), kp_free_copy(rk);
    twin_free(&t);
    kp_free(&p);
}

/* ---- an engine's decode step ------------------------------------------------ */

/* A decode step as engines make it: at most one token a sequence (the
 * decode kernel then keeps a bf16 pool's rows as bf16), with a padded and an
 * empty sequence; or (two) one sequence of two tokens beside empty ones, no
 * more tokens than sequences still (a bf16 pool's rows as bf16, that
 * sequence run group by group through its tokens). V-first and K-first pools bit for
 * bit alike, within the reference's tolerance. */
static void decode_step_case(int32_t kernel, sp_dtype sdt, int two) {
    static const int64_t ones[] = {1, 1, 0, 1, 1, 1, 1, 1}, twos[] = {1, 2, 0, 1, 0, 1, 1, 1};
    kda_problem p;
    kp_make(&p, 8, two ? twos : ones, 0, 2, sdt, SP_KDA_GATE_SOFTPLUS, 0,
            6400 + (uint64_t)(2 * sdt + two));
    p.kernel = kernel;
    ((int32_t *)p.host[KB_IDX])[3] = -1; /* a padded sequence */
    twin_pools t;
    twin_run(&p, sdt, "decode step", &t);
    void **outv = t.outv, **outk = t.outk;
    CHECK(memcmp(outv[KB_O], outk[KB_O], p.bytes[KB_O]) == 0);
    CHECK(memcmp(outv[KB_STATE], outk[KB_STATE], p.bytes[KB_STATE]) == 0);
    const ref_err e = from_reference(&p, outv);
    CHECKF(e.o < kp_o_tol(&p) && e.so == 0 && e.state < kp_state_tol(&p) && e.ss == 0,
           "decode step %s %s%s: o %.3g, state %.3g from the reference, %lld and %lld stray",
           sp_kda_kernel_name(kernel), sp_dtype_name(sdt), two ? ", two tokens" : "", e.o,
           e.state, (long long)e.so, (long long)e.ss);
    printf("decode step %s %s%s: o %.2e state %.2e from the reference, K-first alike\n",
           sp_kda_kernel_name(kernel), sp_dtype_name(sdt), two ? ", two tokens" : "", e.o, e.state);
    twin_free(&t);
    kp_free(&p);
}

/* ---- speculative verify ---------------------------------------------------- */

/* A verify problem: p's inputs (N sequences of at most W tokens), a pool of
 * its own (S slots, dense) and the table [N, W]. */
typedef struct verify {
    kda_problem p;
    int64_t W, S;
    int64_t table[KP_MAX_SEQ * 8];
    int64_t acc[KP_MAX_SEQ]; /* num_accepted_tokens; 0 in use_acc = 0 */
    int use_acc;
    uint8_t init[KP_MAX_SEQ]; /* has_initial_state */
    int use_init;
    size_t pool_bytes;
    void *pool; /* host, initial */
} verify;

static void verify_make(verify *v, const int64_t *lens, int N, int64_t W, sp_dtype sdt,
                        int use_acc, int use_init, uint64_t seed) {
    memset(v, 0, sizeof *v);
    kp_make(&v->p, N, lens, 1, 2, sdt, SP_KDA_GATE_SOFTPLUS, 0, seed);
    v->W = W;
    v->S = N * W + 2;
    v->use_acc = use_acc;
    v->use_init = use_init;
    ts_rng r;
    ts_rng_seed(&r, seed + 1);
    int64_t perm[KP_MAX_SEQ * 8 + 2];
    for (int64_t i = 0; i < v->S; i++) perm[i] = i;
    for (int64_t i = v->S - 1; i > 0; i--) {
        const int64_t k = ts_rng_range(&r, 0, i), t = perm[i];
        perm[i] = perm[k], perm[k] = t;
    }
    for (int64_t i = 0; i < N * W; i++) v->table[i] = perm[i];
    for (int n = 0; n < N; n++) {
        /* Consecutive counts, turned by the seed: every count 1 .. W where
         * N >= W (W = 4); N of the W where N < W (W = 12). */
        v->acc[n] = use_acc ? 1 + (int64_t)(((uint64_t)n + seed) % (uint64_t)W) : 1;
        v->init[n] = (uint8_t)(n % 3 != 1);
    }
    const size_t es = sp_dtype_size(sdt);
    v->pool_bytes = (size_t)(v->S * v->p.H * DD) * es;
    v->pool = xmalloc(v->pool_bytes);
    for (int64_t i = 0; i < v->S * v->p.H * DD; i++) {
        const float x = (float)(ts_rng_unit(&r) - 0.5) * 0.6f;
        uint32_t u;
        memcpy(&u, &x, 4);
        if (sdt == SP_F32) ((float *)v->pool)[i] = x;
        else ((uint16_t *)v->pool)[i] = (uint16_t)(u >> 16);
    }
}

/* The pool as the call's state: V-first, or (k_first) the transpose of a
 * K-first pool's bytes. */
static void pool_tensor(const verify *v, void *data, sp_device dev, sp_dtype dt, int64_t slots,
                        int k_first, sp_tensor *t) {
    const int64_t shape[4] = {slots, v->p.H, D, D}, kf[4] = {v->p.H * DD, DD, 1, D};
    if (k_first) CHECK_OK(sp_tensor_view(t, data, 0, dt, 4, shape, kf, dev));
    else CHECK_OK(sp_tensor_dense(t, data, dt, 4, shape, dev));
}

/* The verify call on the backend: o and the pool come back in o_out,
 * pool_out (V-first; with k_first the pool goes K-first and is transposed
 * back). The pool lies between two guard slots of poison in one
 * allocation, which must keep their bytes (whatever the indices say: the
 * device rule's skipped rows included). */
static sp_status verify_run(const verify *v, sp_dtype tdt, int k_first, void *o_out,
                            void *pool_out) {
    const kda_problem *p = &v->p;
    void *buf[KB_COUNT];
    kp_upload(M, p, p->host, 0, buf);
    sp_kda_args a;
    kp_args(p, buf, M->device, &a);
    const size_t guard = v->pool_bytes / (size_t)v->S, all = v->pool_bytes + 2 * guard;
    unsigned char *img = xmalloc(all);
    memset(img, 0xA5, all);
    memcpy(img + guard, v->pool, v->pool_bytes);
    const size_t es = sp_dtype_size(p->state_dtype);
    if (k_first) transpose_states(img + guard, v->S, p->H, p->H * DD, es);
    void *dall = put(img, all), *dp = (char *)dall + guard;
    pool_tensor(v, dp, M->device, p->state_dtype, v->S, k_first, &a.state);
    void *ht = as_width(v->table, p->N * v->W, tdt), *ha = as_width(v->acc, p->N, tdt);
    void *dt = put(ht, (size_t)(p->N * v->W) * sp_dtype_size(tdt));
    void *da = put(ha, (size_t)p->N * sp_dtype_size(tdt));
    void *di = put(v->init, (size_t)p->N);
    const int64_t shape[2] = {p->N, v->W}, n = p->N;
    CHECK_OK(sp_tensor_dense(&a.state_indices, dt, tdt, 2, shape, M->device));
    if (v->use_acc) CHECK_OK(sp_tensor_dense(&a.num_accepted_tokens, da, tdt, 1, &n, M->device));
    if (v->use_init) CHECK_OK(sp_tensor_dense(&a.has_initial_state, di, SP_BOOL, 1, &n, M->device));
    const sp_status s = run(&a);
    M->download(o_out, buf[KB_O], p->bytes[KB_O]);
    unsigned char *back = xmalloc(all);
    M->download(back, dall, all);
    memcpy(pool_out, back + guard, v->pool_bytes);
    if (k_first) transpose_states(pool_out, v->S, p->H, p->H * DD, es);
    CHECKF(memcmp(back, img, guard) == 0 && memcmp(back + guard + v->pool_bytes,
                                                   img + guard + v->pool_bytes, guard) == 0,
           "%s: a guard slot around the pool was written", sp_kda_kernel_name(p->kernel));
    free(ht), free(ha), free(img), free(back);
    M->release(dall), M->release(dt), M->release(da), M->release(di);
    kp_release(M, buf);
    return s;
}

static float pool_f32(const verify *v, const void *pool, int64_t i) {
    if (v->p.state_dtype == SP_F32) return ((const float *)pool)[i];
    uint32_t u = (uint32_t)((const uint16_t *)pool)[i] << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* The oracle: each token of each sequence in a call of its own (one
 * sequence, one token, an f32 pool of one slot), the state carried from
 * call to call on the host; each state the table keeps stored in the
 * pool's dtype, rounded once. */
static void verify_oracle(const verify *v, void *o_out, void *pool_out) {
    const kda_problem *p = &v->p;
    const int64_t slot_el = p->H * DD;
    memcpy(pool_out, v->pool, v->pool_bytes);
    memcpy(o_out, p->host[KB_O], p->bytes[KB_O]);
    void *buf[KB_COUNT];
    kp_upload(M, p, p->host, 0, buf);
    float *cur = xmalloc((size_t)slot_el * 4);
    void *ds = M->alloc((size_t)slot_el * 4), *dcu = M->alloc(16), *didx = M->alloc(4);
    const int32_t zero = 0;
    M->upload(didx, &zero, 4);
    const int64_t *cu = p->host[KB_CU];
    for (int64_t n = 0; n < p->N; n++) {
        const int64_t *row = v->table + n * v->W, len = cu[n + 1] - cu[n];
        if (row[0] < 0) continue; /* padded */
        const int64_t from = row[v->acc[n] - 1];
        for (int64_t i = 0; i < slot_el; i++)
            cur[i] = v->use_init && !v->init[n] ? 0.0f : pool_f32(v, v->pool, from * slot_el + i);
        for (int64_t t = 0; t < len; t++) {
            sp_kda_args a;
            kp_args(p, buf, M->device, &a);
            const int64_t c[2] = {cu[n] + t, cu[n] + t + 1}, two = 2, one = 1;
            M->upload(dcu, c, 16);
            M->upload(ds, cur, (size_t)slot_el * 4);
            CHECK_OK(sp_tensor_dense(&a.cu_seqlens, dcu, SP_I64, 1, &two, M->device));
            CHECK_OK(sp_tensor_dense(&a.state_indices, didx, SP_I32, 1, &one, M->device));
            pool_tensor(v, ds, M->device, SP_F32, 1, 0, &a.state);
            CHECKF(run(&a) == SP_OK, "oracle: %s", sp_last_error());
            M->download(cur, ds, (size_t)slot_el * 4);
            if (row[t] < 0) continue;
            for (int64_t i = 0; i < slot_el; i++) {
                const int64_t at = row[t] * slot_el + i;
                if (p->state_dtype == SP_F32) ((float *)pool_out)[at] = cur[i];
                else ((uint16_t *)pool_out)[at] = sp_f32_to_bf16_(cur[i]);
            }
        }
    }
    M->download(o_out, buf[KB_O], p->bytes[KB_O]);
    free(cur);
    M->release(ds), M->release(dcu), M->release(didx);
    kp_release(M, buf);
}

/* ||x - y|| / ||y|| over the o rows of the sequences not padded. */
static double o_err(const verify *v, const void *x, const void *y) {
    const kda_problem *p = &v->p;
    const int64_t *cu = p->host[KB_CU];
    double num = 0, den = 0;
    for (int64_t n = 0; n < p->N; n++) {
        if (v->table[n * v->W] < 0) continue;
        for (int64_t i = cu[n] * p->H * D; i < cu[n + 1] * p->H * D; i++) {
            uint32_t a = (uint32_t)((const uint16_t *)x)[i] << 16,
                     b = (uint32_t)((const uint16_t *)y)[i] << 16;
            float fa, fb;
            memcpy(&fa, &a, 4), memcpy(&fb, &b, 4);
            num += ((double)fa - fb) * ((double)fa - fb);
            den += (double)fb * fb;
        }
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* W = 4, or 12: more tokens than the decode kernel prepares at a time (8). */
static void verify_case(int32_t kernel, sp_dtype sdt, sp_dtype tdt, int use_acc, int use_init,
                        int64_t W, uint64_t seed) {
    static const int64_t lens4[] = {3, 1, 4, 2, 4, 0}, lens12[] = {11, 1, 12, 2, 9, 0};
    verify v;
    verify_make(&v, W == 4 ? lens4 : lens12, 6, W, sdt, use_acc, use_init, seed);
    v.p.kernel = kernel;
    v.table[3 * v.W] = -1; /* sequence 3 padded */
    for (int64_t t = 1; t < v.W; t++) v.table[3 * v.W + t] = -1;
    v.table[4 * v.W + 1] = -1; /* sequence 4 keeps no state after its token 1 */
    if (v.acc[4] == 2) v.acc[4] = 3; /* and starts from another column */
    const kda_problem *p = &v.p;
    void *o = xmalloc(p->bytes[KB_O]), *pool = xmalloc(v.pool_bytes);
    void *o2 = xmalloc(p->bytes[KB_O]), *pool2 = xmalloc(v.pool_bytes);
    void *oo = xmalloc(p->bytes[KB_O]), *opool = xmalloc(v.pool_bytes);
    void *o3 = xmalloc(p->bytes[KB_O]), *pool3 = xmalloc(v.pool_bytes);
    CHECKF(verify_run(&v, tdt, 0, o, pool) == SP_OK, "verify: %s", sp_last_error());
    CHECK_OK(verify_run(&v, tdt, 0, o2, pool2));
    /* The same pool in the K-first layout: the same bits. */
    CHECKF(verify_run(&v, tdt, 1, o3, pool3) == SP_OK, "verify, K-first: %s", sp_last_error());
    verify_oracle(&v, oo, opool);
    char what[96];
    snprintf(what, sizeof what, "%s: verify %s pool, %s table%s%s", sp_kda_kernel_name(kernel),
             sp_dtype_name(sdt),
             sp_dtype_name(tdt), use_acc ? ", num_accepted_tokens" : "",
             use_init ? ", has_initial_state" : "");
    CHECKF(memcmp(o, oo, p->bytes[KB_O]) == 0, "%s: o differs from one token a call", what);
    CHECKF(memcmp(pool, opool, v.pool_bytes) == 0, "%s: the pool differs from one token a call",
           what);
    CHECKF(memcmp(o, o2, p->bytes[KB_O]) == 0 && memcmp(pool, pool2, v.pool_bytes) == 0,
           "%s: two runs differ", what);
    CHECKF(memcmp(o, o3, p->bytes[KB_O]) == 0 && memcmp(pool, pool3, v.pool_bytes) == 0,
           "%s: the run with the pool K-first differs", what);
    /* The oracle moved something: every sequence with tokens wrote a slot. */
    CHECK(memcmp(opool, v.pool, v.pool_bytes) != 0);
    /* The float64 reference with the same table. */
    void *ro = xmalloc(p->bytes[KB_O]), *rpool = xmalloc(v.pool_bytes);
    memcpy(ro, p->host[KB_O], p->bytes[KB_O]);
    memcpy(rpool, v.pool, v.pool_bytes);
    sp_kda_args r;
    kp_args(p, p->host, sp_cpu(), &r);
    r.o.data = ro;
    pool_tensor(&v, rpool, sp_cpu(), sdt, v.S, 0, &r.state);
    void *ht = as_width(v.table, p->N * v.W, tdt), *ha = as_width(v.acc, p->N, tdt);
    const int64_t shape[2] = {p->N, v.W}, n = p->N;
    CHECK_OK(sp_tensor_dense(&r.state_indices, ht, tdt, 2, shape, sp_cpu()));
    if (use_acc) CHECK_OK(sp_tensor_dense(&r.num_accepted_tokens, ha, tdt, 1, &n, sp_cpu()));
    if (use_init) CHECK_OK(sp_tensor_dense(&r.has_initial_state, v.init, SP_BOOL, 1, &n, sp_cpu()));
    CHECK_OK(sp_kda_prefill_reference(&r));
    const double eo = o_err(&v, o, ro);
    double num = 0, den = 0;
    int64_t moved = 0;
    for (int64_t i = 0; i < v.S * p->H * DD; i++) {
        const double x = pool_f32(&v, pool, i), y = pool_f32(&v, rpool, i);
        if (memcmp((const char *)rpool + i * (int64_t)sp_dtype_size(sdt),
                   (const char *)v.pool + i * (int64_t)sp_dtype_size(sdt),
                   sp_dtype_size(sdt)) != 0)
            moved++;
        num += (x - y) * (x - y);
        den += y * y;
    }
    const double es = sqrt(num / den);
    printf("%-60s: o %.2e state %.2e from the reference\n", what, eo, es);
    CHECKF(eo < kp_o_tol(p), "%s: o %.3g from the reference", what, eo);
    CHECKF(es < kp_state_tol(p), "%s: pool %.3g from the reference", what, es);
    CHECK(moved > 0);
    /* The padded row's o rows and every slot outside the written columns
     * keep their bytes (the oracle wrote only those). */
    const int64_t *cu = p->host[KB_CU];
    CHECK(memcmp((const char *)o + cu[3] * p->H * D * 2,
                 (const char *)p->host[KB_O] + cu[3] * p->H * D * 2,
                 (size_t)((cu[4] - cu[3]) * p->H * D * 2)) == 0);
    free(ht), free(ha), free(ro), free(rpool);
    free(o), free(pool), free(o2), free(pool2), free(o3), free(pool3), free(oo), free(opool);
    free(v.pool);
    kp_free(&v.p);
}

/* The decode kernel's two orders (decode_tokens_outer, each forced) give
 * the same bits, the order the plan would not take too: a verify call (more
 * tokens than sequences) and a step with a two-token sequence among single
 * ones (no more), each with a verify table; both pools, both layouts. */
static void orders_case(sp_dtype sdt, int k_first) {
    static const int64_t lens4[] = {3, 1, 4, 2, 4, 0}, step[] = {1, 2, 0, 1, 1, 0};
    for (int c = 0; c < 2; c++) {
        verify v;
        verify_make(&v, c ? step : lens4, 6, c ? 2 : 4, sdt, c == 0, 1,
                    6600 + (uint64_t)(4 * c + 2 * (sdt == SP_BF16) + k_first));
        v.p.kernel = SP_KDA_KERNEL_DECODE;
        const kda_problem *p = &v.p;
        void *o[2], *pool[2];
        for (int outer = 0; outer < 2; outer++) {
            o[outer] = xmalloc(p->bytes[KB_O]);
            pool[outer] = xmalloc(v.pool_bytes);
            decode_outer = outer;
            CHECKF(verify_run(&v, SP_I32, k_first, o[outer], pool[outer]) == SP_OK,
                   "decode order %d: %s", outer, sp_last_error());
        }
        decode_outer = -1;
        CHECKF(memcmp(o[0], o[1], p->bytes[KB_O]) == 0 &&
                   memcmp(pool[0], pool[1], v.pool_bytes) == 0,
               "decode, %s pool%s, %s: the two orders differ", sp_dtype_name(sdt),
               k_first ? " K-first" : "", c ? "a step" : "verify");
        CHECK(memcmp(pool[0], v.pool, v.pool_bytes) != 0); /* it wrote */
        for (int i = 0; i < 2; i++) free(o[i]), free(pool[i]);
        free(v.pool);
        kp_free(&v.p);
    }
}

/* The decode kernel's stream form (decode_pairs_a_block, forced by run())
 * against its block-a-pair form, the same o and pool bits at 1, 3 and (one
 * block for every pair) 1,000 pairs a block: a decode step with a
 * one-column verify table (W 1), with a padded row (-1), a row past the
 * pool (the device rule: skipped), sequences without tokens and fresh ones
 * (has_initial_state); and a verify call (W 4, accepted counts) in the
 * groups-outer order both forms run, each group through up to four tokens;
 * the guard slots around the pool kept (verify_run). */
static void stream_case(sp_dtype sdt, int64_t W) {
    static const int64_t step[] = {1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1};
    static const int64_t lens4[] = {3, 1, 4, 2, 4, 0, 1, 3};
    static const int64_t per_block[] = {1, 3, 1000};
    verify v;
    verify_make(&v, W == 1 ? step : lens4, W == 1 ? 13 : 8, W, sdt, W > 1, 1,
                6800 + (uint64_t)(2 * W + (sdt == SP_BF16)));
    v.p.kernel = SP_KDA_KERNEL_DECODE;
    v.table[3 * W] = -1;      /* padded */
    v.table[5 * W] = v.S + 3; /* past the pool (its first column: the read one at W 1) */
    if (W > 1) v.acc[5] = 1;
    decode_outer = 0;
    const kda_problem *p = &v.p;
    void *o[2], *pool[2];
    for (int i = 0; i < 2; i++) o[i] = xmalloc(p->bytes[KB_O]), pool[i] = xmalloc(v.pool_bytes);
    CHECKF(verify_run(&v, SP_I32, 0, o[0], pool[0]) == SP_OK, "W %lld: %s", (long long)W,
           sp_last_error());
    CHECK(memcmp(pool[0], v.pool, v.pool_bytes) != 0); /* it wrote */
    const int64_t runs = stream_runs;
    for (int i = 0; i < 3; i++) {
        decode_pairs = per_block[i];
        CHECKF(verify_run(&v, SP_I32, 0, o[1], pool[1]) == SP_OK, "stream form, %lld a block: %s",
               (long long)per_block[i], sp_last_error());
        CHECKF(memcmp(o[0], o[1], p->bytes[KB_O]) == 0 &&
                   memcmp(pool[0], pool[1], v.pool_bytes) == 0,
               "decode, %s pool, W %lld: the stream form at %lld pairs a block differs from a "
               "block a pair",
               sp_dtype_name(sdt), (long long)W, (long long)per_block[i]);
    }
    CHECKF(stream_runs == runs + 3, "the stream form ran %lld of 3 calls",
           (long long)(stream_runs - runs));
    decode_pairs = 0, decode_outer = -1;
    printf("decode stream form, %s pool, W %lld: bit for bit a block a pair at 1, 3, 1000 pairs "
           "a block\n",
           sp_dtype_name(sdt), (long long)W);
    for (int i = 0; i < 2; i++) free(o[i]), free(pool[i]);
    free(v.pool);
    kp_free(&v.p);
}

#ifdef TS_MEM_IS_CUDA
#include "cuda_ok.h"

#include <cuda_runtime.h>

/* The verify call captured in a CUDA graph on the backend's stream, then
 * replayed after new inputs, a new pool, table and accepted counts are
 * written at the same addresses: bit for bit the eager call on those
 * contents (the engine's decode step under graphs). */
static void graph_case(int32_t kernel) {
    static const int64_t lens[] = {3, 1, 4, 2};
    verify v, w;
    verify_make(&v, lens, 4, 4, SP_F32, 1, 0, 6700);
    verify_make(&w, lens, 4, 4, SP_F32, 1, 0, 6701);
    v.p.kernel = w.p.kernel = kernel;
    const kda_problem *p = &v.p;
    cudaStream_t st = (cudaStream_t)M->stream;
    void *buf[KB_COUNT];
    kp_upload(M, p, p->host, 0, buf);
    sp_kda_args a;
    kp_args(p, buf, M->device, &a);
    void *dp = put(v.pool, v.pool_bytes);
    pool_tensor(&v, dp, M->device, SP_F32, v.S, 0, &a.state);
    void *ht = as_width(v.table, p->N * v.W, SP_I32), *ha = as_width(v.acc, p->N, SP_I32);
    void *dt = put(ht, (size_t)(p->N * v.W) * 4), *da = put(ha, (size_t)p->N * 4);
    const int64_t shape[2] = {p->N, v.W}, n = p->N;
    CHECK_OK(sp_tensor_dense(&a.state_indices, dt, SP_I32, 2, shape, M->device));
    CHECK_OK(sp_tensor_dense(&a.num_accepted_tokens, da, SP_I32, 1, &n, M->device));
    CHECK_OK(sp_kda_prefill(&a, st)); /* warm-up, eager */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CUDA_OK(cudaStreamBeginCapture(st, cudaStreamCaptureModeThreadLocal));
    const sp_status s = sp_kda_prefill(&a, st);
    CUDA_OK(cudaStreamEndCapture(st, &graph));
    CHECKF(s == SP_OK, "capture: %s", sp_last_error());
    CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
    /* New contents at the same addresses. */
    for (int b = 0; b < KB_COUNT; b++)
        if (w.p.bytes[b]) M->upload(buf[b], w.p.host[b], w.p.bytes[b]);
    M->upload(dp, w.pool, w.pool_bytes);
    free(ht), free(ha);
    ht = as_width(w.table, p->N * v.W, SP_I32), ha = as_width(w.acc, p->N, SP_I32);
    M->upload(dt, ht, (size_t)(p->N * v.W) * 4);
    M->upload(da, ha, (size_t)p->N * 4);
    CUDA_OK(cudaGraphLaunch(exec, st));
    void *o = xmalloc(p->bytes[KB_O]), *pool = xmalloc(v.pool_bytes);
    M->download(o, buf[KB_O], p->bytes[KB_O]);
    M->download(pool, dp, v.pool_bytes);
    void *o2 = xmalloc(p->bytes[KB_O]), *pool2 = xmalloc(v.pool_bytes);
    CHECK_OK(verify_run(&w, SP_I32, 0, o2, pool2));
    CHECKF(memcmp(o, o2, p->bytes[KB_O]) == 0 && memcmp(pool, pool2, v.pool_bytes) == 0,
           "%s: the replayed graph differs from the eager call", sp_kda_kernel_name(kernel));
    CHECK(memcmp(pool, w.pool, v.pool_bytes) != 0);
    CUDA_OK(cudaGraphExecDestroy(exec));
    CUDA_OK(cudaGraphDestroy(graph));
    free(o), free(pool), free(o2), free(pool2), free(ht), free(ha);
    M->release(dp), M->release(dt), M->release(da);
    kp_release(M, buf);
    free(v.pool), free(w.pool);
    kp_free(&v.p), kp_free(&w.p);
}
#endif

/* ---- the contract ------------------------------------------------------------ */

typedef struct bad {
    const char *what;
    sp_status want;
    const char *says;
    int where; /* 0 every backend; 1 host tensors only (index contents); 2 CUDA only */
} bad;

/* One call of a verify problem with one thing changed (case c), refused
 * with nothing written. */
static void bad_case(int c, const bad *b) {
    static const int64_t lens[] = {3, 1, 4, 2};
    verify v;
    verify_make(&v, lens, 4, 4, SP_F32, 1, 0, 6300 + (uint64_t)c);
    kda_problem *p = &v.p;
    void *buf[KB_COUNT];
    kp_upload(M, p, p->host, 0, buf);
    sp_kda_args a;
    kp_args(p, buf, M->device, &a);
    int64_t two[2] = {p->N, v.W}, n = p->N, n1 = p->N + 1;
    switch (c) {
    case 0: v.acc[1] = 0; break;
    case 1: v.acc[2] = v.W + 1; break;
    case 2: /* sequence 2 has 4 tokens */
        two[1] = 3;
        for (int64_t i = 0; i < p->N; i++) v.acc[i] = 1;
        break;
    case 3: v.table[2 * v.W + 3] = v.table[0]; break;
    case 4: v.table[1 * v.W + 0] = v.table[0 * v.W + 1]; break;
    case 5: v.table[2 * v.W + 1] = v.S; break;
    case 6: v.table[0 * v.W + 2] = v.table[0 * v.W + 0]; break;
    case 7: v.acc[1] = 3, v.table[1 * v.W + 2] = v.table[0 * v.W + 1]; break;
    default: break;
    }
    void *dp = put(v.pool, v.pool_bytes);
    pool_tensor(&v, dp, M->device, SP_F32, v.S, 0, &a.state);
    void *ht = as_width(v.table, p->N * v.W, SP_I32), *ha = as_width(v.acc, p->N, SP_I32);
    void *dt = put(ht, (size_t)(p->N * v.W) * 4), *da = put(ha, (size_t)p->N * 4);
    void *dh = put(v.init, (size_t)p->N);
    void *dck = M->alloc(v.pool_bytes); /* checkpoints of their own (not the pool's memory) */
    CHECK_OK(sp_tensor_dense(&a.state_indices, dt, SP_I32, 2, two, M->device));
    CHECK_OK(sp_tensor_dense(&a.num_accepted_tokens, da, SP_I32, 1, &n, M->device));
    switch (c) {
    case 8: CHECK_OK(sp_tensor_dense(&a.state_indices, dt, SP_I32, 1, &n, M->device)); break;
    case 9:
        a.checkpoint_interval = 1;
        CHECK_OK(sp_tensor_dense(&a.checkpoint_cu_starts, buf[KB_CU], SP_I64, 1, &n1, M->device));
        CHECK_OK(sp_tensor_dense(&a.checkpoints, dp, SP_F32, 4, a.state.shape, M->device));
        break;
    case 10:
        two[1] = 0;
        CHECK_OK(sp_tensor_dense(&a.state_indices, dt, SP_I32, 2, two, M->device));
        break;
    case 11: CHECK_OK(sp_tensor_dense(&a.has_initial_state, dh, SP_U8, 1, &n, M->device)); break;
    case 12: CHECK_OK(sp_tensor_dense(&a.has_initial_state, dh, SP_BOOL, 1, &n1, M->device)); break;
    case 13: a.num_accepted_tokens.dtype = SP_F32; break;
    case 14: a.kernel = SP_KDA_KERNEL_CHUNKED; break;
    case 15: a.state_indices.dtype = SP_I16; break;
    case 16: /* one slot a sequence, checkpoints every token */
        memset(&a.num_accepted_tokens, 0, sizeof a.num_accepted_tokens);
        CHECK_OK(sp_tensor_dense(&a.state_indices, dt, SP_I32, 1, &n, M->device));
        a.checkpoint_interval = 1;
        CHECK_OK(sp_tensor_dense(&a.checkpoint_cu_starts, buf[KB_CU], SP_I64, 1, &n1, M->device));
        CHECK_OK(sp_tensor_dense(&a.checkpoints, dck, SP_F32, 4, a.state.shape, M->device));
        a.kernel = SP_KDA_KERNEL_DECODE;
        break;
    case 17: a.kernel = SP_KDA_KERNEL_DECODE; break;
    case 18: /* one slot a sequence, a log-decay gate (which the chunked kernels serve),
              * checkpoints every 16 tokens on a chunked kernel (which they do not) */
        memset(&a.num_accepted_tokens, 0, sizeof a.num_accepted_tokens);
        CHECK_OK(sp_tensor_dense(&a.state_indices, dt, SP_I32, 1, &n, M->device));
        a.gate = SP_KDA_GATE_LOG_DECAY;
        a.checkpoint_interval = 16;
        CHECK_OK(sp_tensor_dense(&a.checkpoint_cu_starts, buf[KB_CU], SP_I64, 1, &n1, M->device));
        CHECK_OK(sp_tensor_dense(&a.checkpoints, dck, SP_F32, 4, a.state.shape, M->device));
        a.kernel = SP_KDA_KERNEL_CHUNKED;
        break;
    case 19: /* one slot a sequence, an activated beta, the two-pass kernel without its
              * workspace */
        memset(&a.num_accepted_tokens, 0, sizeof a.num_accepted_tokens);
        CHECK_OK(sp_tensor_dense(&a.state_indices, dt, SP_I32, 1, &n, M->device));
        a.beta_form = SP_KDA_BETA_ACTIVATED;
        a.kernel = SP_KDA_KERNEL_CHUNKED_TWO_PASS;
        break;
    default: break;
    }
    const sp_status s = sp_kda_prefill(&a, M->stream);
    CHECKF(s == b->want, "%s: %s, want %s (%s)", b->what, sp_status_string(s),
           sp_status_string(b->want), sp_last_error());
    CHECKF(!b->says || strstr(sp_last_error(), b->says), "%s: message '%s' lacks '%s'", b->what,
           sp_last_error(), b->says);
    void *pool = xmalloc(v.pool_bytes);
    M->download(pool, dp, v.pool_bytes);
    CHECKF(memcmp(pool, v.pool, v.pool_bytes) == 0, "%s: the pool was written", b->what);
    CHECKF(kp_untouched(M, p, buf), "%s: o was written", b->what);
    free(pool), free(ht), free(ha);
    M->release(dp), M->release(dt), M->release(da), M->release(dh), M->release(dck);
    kp_release(M, buf);
    free(v.pool);
    kp_free(p);
}

static void bad_cases(void) {
    static const bad cases[] = {
        {"num_accepted_tokens 0", SP_ERR_INVALID_ARGUMENT, "num_accepted_tokens: [1] = 0", 1},
        {"num_accepted_tokens > W", SP_ERR_INVALID_ARGUMENT, "is outside [1, 4]", 1},
        {"a sequence longer than W", SP_ERR_INVALID_ARGUMENT, "more than the verify table's", 1},
        {"a slot two sequences write", SP_ERR_INVALID_ARGUMENT, "is used by sequences", 1},
        {"a slot two sequences write (column 0)", SP_ERR_INVALID_ARGUMENT, "is used by", 1},
        {"an entry past the pool", SP_ERR_INVALID_ARGUMENT, "is outside [0, 18)", 1},
        {"a slot written twice", SP_ERR_INVALID_ARGUMENT, "written twice by sequence 0", 1},
        {"an initial state another writes", SP_ERR_INVALID_ARGUMENT, "is written by sequence 0", 1},
        {"num_accepted_tokens without a table", SP_ERR_INVALID_ARGUMENT,
         "num_accepted_tokens: given with a 1-D state_indices", 0},
        {"a table with checkpoints", SP_ERR_INVALID_ARGUMENT, "checkpoint_interval: 1 with a "
         "verify table", 0},
        {"a table without columns", SP_ERR_SHAPE_MISMATCH, "has no column", 0},
        {"has_initial_state u8", SP_ERR_DTYPE_MISMATCH, "has_initial_state: dtype u8", 0},
        {"has_initial_state [N + 1]", SP_ERR_SHAPE_MISMATCH, "has_initial_state: shape", 0},
        {"num_accepted_tokens f32", SP_ERR_DTYPE_MISMATCH, "expected i32 or i64", 0},
        {"a table on a chunked kernel", SP_ERR_UNSUPPORTED, "verify table", 2},
        {"state_indices i16", SP_ERR_DTYPE_MISMATCH, "state_indices: dtype i16, expected i32 or "
         "i64", 0},
        {"checkpoints on the decode kernel", SP_ERR_UNSUPPORTED, "writes no checkpoints", 2},
        {"a decode kernel on CPU tensors", SP_ERR_UNSUPPORTED, "CUDA tensors only", 1},
        {"a log-decay gate, checkpoints every 16, on the chunked kernel", SP_ERR_UNSUPPORTED,
         "multiple of 32", 2},
        {"an activated beta on the two-pass kernel without a workspace",
         SP_ERR_WORKSPACE_TOO_SMALL, "sp_kda_prefill_workspace_bytes", 2},
    };
    for (int c = 0; c < (int)(sizeof cases / sizeof cases[0]); c++)
        if (cases[c].where == 0 || cases[c].where == 1 + on_device()) bad_case(c, &cases[c]);
}

/* On CUDA the index arrays are not read on the host: rows the host would
 * refuse are skipped on the device, nothing written for them, and the
 * other rows are computed as without them. */
static void device_rule_case(int32_t kernel) {
    static const int64_t lens[] = {3, 1, 4, 2, 4};
    verify v;
    verify_make(&v, lens, 5, 4, SP_F32, 1, 0, 6400);
    v.p.kernel = kernel;
    v.acc[0] = 1; /* sequence 0 starts from column 0 (its column 2 is made -7 below) */
    const kda_problem *p = &v.p;
    void *o = xmalloc(p->bytes[KB_O]), *pool = xmalloc(v.pool_bytes);
    CHECK_OK(verify_run(&v, SP_I32, 0, o, pool));
    verify bad = v;
    bad.acc[1] = 0;                   /* outside [1, W] */
    bad.table[2 * v.W + 3] = v.S + 7; /* past the pool */
    bad.acc[4] = v.W + 1;
    bad.table[0 * v.W + 2] = -7;      /* any negative entry: that state not kept */
    void *bo = xmalloc(p->bytes[KB_O]), *bpool = xmalloc(v.pool_bytes);
    CHECK_OK(verify_run(&bad, SP_I32, 0, bo, bpool));
    const int64_t *cu = p->host[KB_CU], el = p->H * DD, row = p->H * D * 2;
    for (int64_t n = 0; n < p->N; n++) {
        const int skipped = n == 1 || n == 2 || n == 4;
        const char *want_o = skipped ? (const char *)p->host[KB_O] : (const char *)o;
        CHECKF(memcmp((const char *)bo + cu[n] * row, want_o + cu[n] * row,
                      (size_t)((cu[n + 1] - cu[n]) * row)) == 0,
               "device rule: sequence %lld's o rows", (long long)n);
        for (int64_t t = 0; t < v.W; t++) {
            const int64_t s = bad.table[n * v.W + t];
            if (s < 0 || s >= v.S) continue;
            const char *want = skipped ? (const char *)v.pool : (const char *)pool;
            CHECKF(memcmp((const char *)bpool + s * el * 4, want + s * el * 4, (size_t)el * 4) == 0,
                   "device rule: sequence %lld's slot %lld", (long long)n, (long long)s);
        }
    }
    const int64_t kept = v.table[0 * v.W + 2]; /* the slot the -7 replaced: not written */
    CHECK(memcmp((const char *)bpool + kept * el * 4, (const char *)v.pool + kept * el * 4,
                 (size_t)el * 4) == 0);
    CHECK(memcmp((const char *)pool + kept * el * 4, (const char *)v.pool + kept * el * 4,
                 (size_t)el * 4) != 0);
    free(o), free(pool), free(bo), free(bpool), free(v.pool);
    kp_free(&v.p);
}

int main(void) {
    M = ts_mem_or_skip(TS_MEM_BACKEND);
    int32_t ks[4];
    const int nk = kernels(ks);
    for (int i = 0; i < nk; i++) {
        /* The decode kernel in each of its builds: rows a warp 32, 16, and
         * (where it has code) its stream form, groups outer, at 3 pairs a
         * block and one block for every pair. */
        static const int rows[4] = {32, 16, 32, 32};
        static const int64_t pairs[4] = {0, 0, 3, 1000};
        const int builds = ks[i] != SP_KDA_KERNEL_DECODE ? 1 : stream_here() ? 4 : 2;
        for (int ri = 0; ri < builds; ri++) {
            decode_rows = ks[i] == SP_KDA_KERNEL_DECODE ? rows[ri] : 0;
            decode_pairs = ks[i] == SP_KDA_KERNEL_DECODE ? pairs[ri] : 0;
            decode_outer = decode_pairs ? 0 : -1;
            if (decode_pairs)
                printf("decode kernel, stream form, %lld pairs a block\n", (long long)decode_pairs);
            else if (decode_rows)
                printf("decode kernel, %d rows a warp\n", decode_rows);
            widths_case(ks[i]);
            has_initial_state_case(ks[i], SP_F32);
            has_initial_state_case(ks[i], SP_BF16);
            layout_case(ks[i], SP_F32);
            layout_case(ks[i], SP_BF16);
            for (int two = 0; two < 2; two++) {
                decode_step_case(ks[i], SP_F32, two);
                decode_step_case(ks[i], SP_BF16, two);
            }
            if (decode_pairs) continue; /* its verify tables and refusals: stream_case */
            if (is_chunked(ks[i])) continue; /* forms, a verify table: refused by name */
            forms_case(ks[i]);
            for (int s = 0; s < 2; s++)
                for (int w = 0; w < 2; w++)
                    verify_case(ks[i], s ? SP_BF16 : SP_F32, w ? SP_I64 : SP_I32, 1, s == w, 4,
                                6500 + (uint64_t)(s * 2 + w));
            verify_case(ks[i], SP_F32, SP_I32, 0, 0, 4, 6510);
            verify_case(ks[i], SP_F32, SP_I32, 1, 0, 12, 6511);
            verify_case(ks[i], SP_BF16, SP_I64, 1, 1, 12, 6512);
            if (ks[i] == SP_KDA_KERNEL_DECODE)
                for (int s = 0; s < 4; s++) orders_case(s & 1 ? SP_BF16 : SP_F32, s >> 1);
            if (ks[i] == SP_KDA_KERNEL_DECODE && ri == 0 && stream_here())
                for (int s = 0; s < 4; s++) stream_case(s & 1 ? SP_BF16 : SP_F32, s < 2 ? 1 : 4);
            if (on_device()) device_rule_case(ks[i]);
#ifdef TS_MEM_IS_CUDA
            graph_case(ks[i]);
#endif
        }
        decode_rows = 0, decode_pairs = 0, decode_outer = -1;
    }
    if (!emulated) bad_cases(); /* the contract of sp_kda_prefill itself */
    return sp_test_finish(emulated ? "test_kda_engine_emulated"
                                   : ts_mem_test_name(M, "test_kda_engine"));
}
