/*
 * test_pack.c — sp_pack_workspace_bytes and sp_pack over random
 * inputs: dense inputs come back as themselves (same pointer, no copy); the
 * others land in consecutive 256-aligned slots of the workspace, bit-equal
 * to the reference; no other workspace byte and no input byte changes;
 * n_copied is right; the pass counter moves by exactly 1 when anything was
 * copied and by 0 otherwise; a repeated call gives the same outputs. On one
 * memory backend (ts_mem.h): built as test_pack (host memory) and
 * test_pack_gpu (device memory).
 */
#include "check.h"
#include "test_support.h"
#include "ts_mem.h"

#include <stdlib.h>
#include <string.h>

enum { MAX_IN = SP_MAX_PAIRS_PER_LAUNCH };

static const ts_mem *M;

static int same_view(const sp_tensor *a, const sp_tensor *b) {
    if (a->data != b->data || a->dtype != b->dtype || a->ndim != b->ndim) return 0;
    if (a->device.type != b->device.type || a->device.ordinal != b->device.ordinal) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d] || a->strides[d] != b->strides[d]) return 0;
    return 1;
}

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Check one finished pack of n inputs against everything the header
 * promises, and every byte of the arena a: the workspace [ws, ws + wsb)
 * (ws may have been NULL), the inputs, the gaps. Returns 0 if fine. */
static int check_pack(const char *what, int trial, ts_arena *a, const sp_tensor *in, int n,
                      unsigned char *ws, size_t wsb, const sp_tensor *out, size_t n_copied) {
    int bad = 0;
    size_t copies = 0;
    uintptr_t next = (uintptr_t)ws;
    for (int i = 0; i < n && !bad; i++) {
        if (ts_ref_dense(&in[i])) {
            CHECKF(same_view(&out[i], &in[i]), "%s %d: dense inputs[%d] not returned as itself",
                   what, trial, i);
            bad |= !same_view(&out[i], &in[i]);
            continue;
        }
        copies++;
        size_t bytes = (size_t)ts_numel(&in[i]) * sp_dtype_size((sp_dtype)in[i].dtype);
        uintptr_t slot = round_up(next, SP_PACK_ALIGN);
        uintptr_t at = (uintptr_t)out[i].data;
        int ok = ws && at == slot && at + bytes <= (uintptr_t)(ws + wsb) &&
                 out[i].dtype == in[i].dtype && out[i].ndim == in[i].ndim &&
                 out[i].device.type == in[i].device.type;
        for (int d = 0; ok && d < in[i].ndim; d++) ok = out[i].shape[d] == in[i].shape[d];
        ok = ok && ts_ref_dense(&out[i]) && sp_tensor_is_dense(&out[i]);
        CHECKF(ok, "%s %d: outputs[%d] at %+ld from the workspace, expected slot %+ld", what,
               trial, i, (long)(at - (uintptr_t)ws), (long)(slot - (uintptr_t)ws));
        if (!ok) {
            ts_print_tensor(stderr, "input", &in[i]);
            ts_print_tensor(stderr, "output", &out[i]);
            bad = 1;
            break;
        }
        sp_tensor ie = ts_arena_on_image(a, in[i]), oe = ts_arena_on_image(a, out[i]);
        ts_ref_copy(&ie, &oe);
        next = at + bytes;
    }
    if (bad) return 1;
    CHECKF(n_copied == copies, "%s %d: n_copied %zu, expected %zu", what, trial, n_copied, copies);
    long diff = ts_arena_first_diff(a);
    CHECKF(diff < 0, "%s %d: arena byte %ld differs from the image (workspace at %ld)", what,
           trial, diff, ws ? (long)(ws - a->base) : -1L);
    return n_copied != copies || diff >= 0;
}

static void test_random(ts_rng *r, ts_arena *a) {
    int inputs_total = 0;
    for (int trial = 0; trial < 700; trial++) {
        /* sp_pack takes at most SP_MAX_PAIRS_PER_LAUNCH inputs. */
        int n = ts_rng_range(r, 0, 9) == 0 ? (int)ts_rng_range(r, 7, SP_MAX_PAIRS_PER_LAUNCH)
                                           : (int)ts_rng_range(r, 1, 6);
        sp_tensor in[MAX_IN], out[MAX_IN];
        size_t want_ws = 0, copies = 0;
        ts_arena_reset(a);
        for (int i = 0; i < n; i++) {
            if (i > 0 && ts_rng_range(r, 0, 9) == 0) { /* the same input twice */
                in[i] = in[ts_rng_range(r, 0, i - 1)];
            } else {
                int64_t shape[SP_MAX_DIMS];
                int nd = ts_shape_random(r, 8, 8, 2048, shape);
                sp_dtype dt = (sp_dtype)ts_rng_range(r, 0, SP_DTYPE_COUNT_ - 1);
                ts_layout l;
                if (ts_rng_range(r, 0, 2) == 0)
                    ts_layout_dense(dt, nd, shape, &l);
                else
                    ts_layout_random(r, dt, nd, shape, TS_LAYOUT_ALLOW_ZERO_STRIDE, &l);
                size_t es = sp_dtype_size(dt);
                size_t shift = es * (size_t)ts_rng_range(r, 0, 15 / (int64_t)es);
                unsigned char *src = ts_arena_take(a, (size_t)l.buffer_elems * es, shift);
                in[i] = ts_layout_tensor(&l, src, M->device);
            }
            CHECKF(sp_tensor_is_dense(&in[i]) == ts_ref_dense(&in[i]),
                   "trial %d: sp_tensor_is_dense(inputs[%d]) is %d", trial, i,
                   sp_tensor_is_dense(&in[i]));
            if (!ts_ref_dense(&in[i])) {
                copies++;
                want_ws += round_up((size_t)ts_numel(&in[i]) * sp_dtype_size((sp_dtype)in[i].dtype),
                                    SP_PACK_ALIGN);
            }
        }
        if (copies) want_ws += SP_PACK_ALIGN - 1;
        inputs_total += n;

        size_t wsb = 12345;
        CHECK_OK(sp_pack_workspace_bytes(in, (size_t)n, &wsb));
        CHECKF(wsb == want_ws, "trial %d: workspace bytes %zu, expected %zu", trial, wsb, want_ws);
        /* Any byte alignment of the workspace; sometimes more than needed. */
        size_t give = wsb + (ts_rng_range(r, 0, 3) == 0 ? (size_t)ts_rng_range(r, 1, 999) : 0);
        unsigned char *ws = ts_arena_take(a, give, (size_t)ts_rng_range(r, 0, 255));
        ts_arena_poison(a, r);
        ts_fill_random(out, sizeof out, r);
        size_t n_copied = 777;
        uint64_t before = sp_copy_pass_count();
        struct CUstream_st *stream = trial % 2 ? M->stream : NULL; /* NULL on the host */
        sp_status st = sp_pack(in, (size_t)n, ws, give, out, &n_copied, stream);
        uint64_t passes = sp_copy_pass_count() - before;
        CHECKF(st == SP_OK, "trial %d: %s: %s", trial, sp_status_string(st), sp_last_error());
        int bad = st != SP_OK;
        if (!bad) {
            CHECKF(passes == (copies ? 1u : 0u), "trial %d: %llu passes for %zu copies", trial,
                   (unsigned long long)passes, copies);
            bad = check_pack("trial", trial, a, in, n, ws, give, out, n_copied);
        }
        if (!bad && ts_rng_range(r, 0, 3) == 0) {
            /* Same arguments, same outputs: what CUDA graph replay needs. */
            sp_tensor again[MAX_IN];
            ts_fill_random(again, sizeof again, r);
            CHECK_OK(sp_pack(in, (size_t)n, ws, give, again, NULL, NULL));
            for (int i = 0; i < n; i++)
                CHECKF(same_view(&again[i], &out[i]), "trial %d: repeat moved outputs[%d]", trial,
                       i);
        }
        if (bad) return;
    }
    printf("random packs: %d inputs\n", inputs_total);
}

static void test_fixed(ts_rng *r, ts_arena *a) {
    /* n == 0. */
    size_t wsb = 99, n_copied = 99;
    CHECK_OK(sp_pack_workspace_bytes(NULL, 0, &wsb));
    CHECK(wsb == 0);
    uint64_t before = sp_copy_pass_count();
    CHECK_OK(sp_pack(NULL, 0, NULL, 0, NULL, &n_copied, NULL));
    CHECK(n_copied == 0 && sp_copy_pass_count() == before);

    /* All dense (a scalar, an empty, size-1 dims with odd strides): no
     * workspace needed, none given, nothing runs. */
    ts_arena_reset(a);
    unsigned char *buf = ts_arena_take(a, 256, 0);
    ts_arena_poison(a, r);
    sp_tensor in[3], out[3];
    int64_t s1[3] = {1, 4, 1}, st1[3] = {-50, 1, 9}, s0[2] = {3, 0}, st0[2] = {-1, 5};
    CHECK_OK(sp_tensor_view(&in[0], buf, 0, SP_F32, 3, s1, st1, M->device));
    CHECK_OK(sp_tensor_view(&in[1], buf, 8, SP_U8, 2, s0, st0, M->device));
    CHECK_OK(sp_tensor_dense(&in[2], buf + 64, SP_F64, 0, NULL, M->device));
    CHECK_OK(sp_pack_workspace_bytes(in, 3, &wsb));
    CHECK(wsb == 0);
    before = sp_copy_pass_count();
    CHECK_OK(sp_pack(in, 3, NULL, 0, out, &n_copied, NULL));
    CHECK(n_copied == 0 && sp_copy_pass_count() == before);
    for (int i = 0; i < 3; i++) CHECK(same_view(&out[i], &in[i]));
    CHECK(ts_arena_first_diff(a) < 0);

    /* The K3 boundary: q, k, v, beta need copies, g is dense. Exactly the
     * workspace asked for, at the worst alignment (1 past 256). */
    for (int kind = TS_K3_BETA_FA; kind <= TS_K3_BETA_INPROJ; kind++) {
        ts_k3 k;
        ts_k3_init(&k, 40, 4, kind);
        ts_arena_reset(a);
        unsigned char *qkv = ts_arena_take(a, k.qkv_bytes, 0);
        unsigned char *proj = ts_arena_take(a, k.proj_bytes, 0);
        unsigned char *g = ts_arena_take(a, k.g_bytes, 0);
        sp_tensor v[5], o[5];
        ts_k3_views(&k, qkv, proj, g, M->device, v);
        CHECK_OK(sp_pack_workspace_bytes(v, 5, &wsb));
        unsigned char *ws = ts_arena_take(a, wsb, 1);
        ts_arena_poison(a, r);
        before = sp_copy_pass_count();
        CHECK_OK(sp_pack(v, 5, ws, wsb, o, &n_copied, NULL));
        CHECK(sp_copy_pass_count() - before == 1);
        CHECK(o[3].data == g);
        check_pack(ts_k3_beta_name(kind), 0, a, v, 5, ws, wsb, o, n_copied);
        CHECK(n_copied == 4);
    }

    /* A workspace whose used part ends exactly where an input begins is
     * fine (touching is not overlapping). The input starts 256-aligned. */
    ts_arena_reset(a);
    buf = ts_arena_take(a, 4096 - 256, 0);
    unsigned char *at = buf + 1792; /* 256-aligned, inside the buffer */
    int64_t shp[2] = {8, 8}, tr[2] = {1, 8};
    sp_tensor t, o1;
    CHECK_OK(sp_tensor_view(&t, at, 0, SP_F32, 2, shp, tr, M->device));
    CHECK_OK(sp_pack_workspace_bytes(&t, 1, &wsb)); /* 256 + 255 */
    CHECK(wsb == 511);
    ts_arena_poison(a, r);
    /* The workspace: the buffer up to the input. */
    CHECK_OK(sp_pack(&t, 1, buf, (size_t)(at - buf), &o1, &n_copied, NULL));
    check_pack("before", 0, a, &t, 1, buf, (size_t)(at - buf), &o1, n_copied);
    CHECK_OK(sp_pack(&t, 1, at - wsb, wsb, &o1, &n_copied, NULL));
    CHECK(n_copied == 1 && (unsigned char *)o1.data + 256 == at);
    sp_tensor te = ts_arena_on_image(a, t), oe = ts_arena_on_image(a, o1);
    ts_ref_copy(&te, &oe);
    CHECK(ts_arena_first_diff(a) < 0);
}

int main(void) {
    M = ts_mem_or_skip(TS_MEM_BACKEND);
    ts_rng r;
    ts_rng_seed(&r, 0x9ac4ull);
    ts_arena a;
    ts_arena_init(&a, M, (size_t)16 << 20);
    test_fixed(&r, &a);
    test_random(&r, &a);
    ts_arena_free(&a);
    return sp_test_finish(ts_mem_test_name(M, "test_pack"));
}
