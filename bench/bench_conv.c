/*
 * bench_conv.c — the producer of the KDA inputs: the causal short
 * convolution writing q, k, v split (dense, nothing left to pack) against
 * writing them token-major (the boundary then packs them), for the K3
 * layouts: H = 96 (TP1) and H = 12 (TP8), T = 16384, 1024 and 64, W = 4,
 * bf16 weights, no bias, SiLU, 8 sequences (1 at T = 64) starting from
 * their state slots. Arms, interleaved, CUDA events, median of 100 after
 * warm-up:
 *   limit       one contiguous cudaMemcpyAsync moving the conv's own traffic
 *               (x read once, the outputs written once: 2 * T * C * 2 bytes)
 *   split       sp_conv_prefill into q, k, v dense
 *   tokenmajor  sp_conv_prefill into one [T, C] buffer
 *   tm_pack     tokenmajor, then one sp_pack of q, k, v (column slices of
 *               the output) and beta (a column slice of a [T, 128 + H]
 *               projection): what the boundary does today
 *   split_pack  split, then sp_pack of beta alone
 * split_ratio = limit / split; prep_ratio = split_pack / tm_pack.
 * Then the decode form at 1, 64 and 512 sequences (x [N, C], state read and
 * written in place), split and token-major against its limit.
 * Before timing, split and token-major outputs are compared bit for bit.
 * Where a set of buffers is under 4x the L2, several sets are rotated so
 * that the figures are not the cache's. One JSON line per case (also
 * appended to FILE with --json FILE).
 *
 * With --floor, each prefill case is timed a second time against the
 * yardsticks of conv_floor.cu, in one interleaved run: limit, split, then
 *   copy         the convolution's access pattern alone (x rows copied to
 *                q, k, v through the same ring, tiles and grid)
 *   core_linear  its arithmetic without SiLU, no sequences or state
 *   core_silu    with SiLU (3 blocks a multiprocessor, as the library)
 *   core_silu4   with SiLU, 4 blocks a multiprocessor
 * each over one wave of token tiles (3 or 4 blocks a multiprocessor).
 *
 * Run: build/bench/bench_conv [--json FILE] [--only CASE] [--items LEN] [--floor]
 *   --only CASE   the one case CASE, written prefill:T:H or decode:N:H
 *   --items LEN   every call with LEN tokens per tile (decode: sequences
 *                 per thread) instead of the launcher's choice, to compare
 *   --floor       the yardsticks above, for prefill cases
 */
#include "harness.h"
#include "stridepack_conv.h"
#include "conv/conv_internal.h" /* sp_conv_cuda_planned_ */
#include "conv_floor.h"

#include <string.h>

enum { D = 128, W = 4, MAX_SETS = 8, REPS = 100, WARMUP = 10 };

typedef struct set {
    sp_conv_args split, tm; /* the two output layouts of one input */
    sp_tensor packin[4];    /* q, k, v from the token-major output; beta */
    sp_tensor packed[4];
    void *ws;
    size_t ws_bytes;
    void *x, *out, *qkv, *proj, *limit_dst;
} set;

typedef struct bctx {
    set s[MAX_SETS];
    int nsets, next[5 + BENCH_FLOOR_KINDS]; /* the set each arm uses next */
    int64_t T, P, floor_tile[BENCH_FLOOR_KINDS];
    int64_t items; /* --items: > 0, every call's work-item length */
    size_t limit_bytes;
    int decode;
} bctx;

static void check(sp_status st, const char *what) {
    if (st != SP_OK) {
        fprintf(stderr, "%s: %s (%s)\n", what, sp_status_string(st), sp_last_error());
        exit(2);
    }
}

static set *take(bctx *c, int arm) {
    set *s = &c->s[c->next[arm]];
    c->next[arm] = (c->next[arm] + 1) % c->nsets;
    return s;
}

/* The public call, or with --items the planned one of that length. */
static void conv(bctx *c, const sp_conv_args *a, cudaStream_t st) {
    if (c->items > 0)
        check(sp_conv_cuda_planned_(a, c->decode, c->items, st), "sp_conv (planned)");
    else
        check(c->decode ? sp_conv_decode(a, st) : sp_conv_prefill(a, st), "sp_conv");
}

static void arm_limit(void *p, cudaStream_t st) {
    bctx *c = p;
    set *s = take(c, 0);
    BENCH_CU(cudaMemcpyAsync(s->limit_dst, s->x, c->limit_bytes, cudaMemcpyDeviceToDevice, st));
}

static void arm_split(void *p, cudaStream_t st) {
    bctx *c = p;
    conv(c, &take(c, 1)->split, st);
}

static void arm_tokenmajor(void *p, cudaStream_t st) {
    bctx *c = p;
    conv(c, &take(c, 2)->tm, st);
}

static void arm_tm_pack(void *p, cudaStream_t st) {
    bctx *c = p;
    set *s = take(c, 3);
    conv(c, &s->tm, st);
    check(sp_pack(s->packin, 4, s->ws, s->ws_bytes, s->packed, NULL, st), "sp_pack q, k, v, beta");
}

static void arm_split_pack(void *p, cudaStream_t st) {
    bctx *c = p;
    set *s = take(c, 4);
    conv(c, &s->split, st);
    check(sp_pack(&s->packin[3], 1, s->ws, s->ws_bytes, s->packed, NULL, st), "sp_pack beta");
}

/* A yardstick arm of --floor: kernel `kind` of conv_floor.cu. */
typedef struct floor_arm {
    bctx *c;
    int kind;
} floor_arm;

static void arm_floor(void *p, cudaStream_t st) {
    const floor_arm *f = p;
    bctx *c = f->c;
    set *s = take(c, 5 + f->kind);
    const size_t plane = (size_t)(c->T * c->P) * 2;
    char *qkv = s->qkv;
    BENCH_CU(bench_conv_floor(f->kind, s->x, qkv, qkv + plane, qkv + 2 * plane,
                              s->split.weight.data, c->T, c->P, c->floor_tile[f->kind], st));
}

/* One set of buffers: x [T, C] dense (the q/k/v projection), outputs both
 * ways, the [T, 128 + H] projection holding beta, the state pool, indices. */
static void make_set(set *s, int64_t T, int64_t H, int64_t N, int decode, uint64_t seed) {
    memset(s, 0, sizeof *s);
    const int64_t P = H * D, C = 3 * P, rows = decode ? N : T;
    const size_t xbytes = (size_t)(rows * C) * 2;
    const sp_device dev = sp_cuda(0);
    s->x = bench_malloc(xbytes);
    s->out = bench_malloc(xbytes);
    s->qkv = bench_malloc(xbytes);
    s->limit_dst = bench_malloc(xbytes);
    bench_fill_bf16(s->x, (size_t)(rows * C), -1, 1, seed);
    bench_fill_random(s->out, xbytes, seed + 1); /* poison */
    bench_fill_random(s->qkv, xbytes, seed + 2);

    sp_conv_args *a = &s->split;
    sp_conv_args_init(a);
    const int64_t xs[2] = {rows, C}, ws[2] = {C, W}, n1 = N + 1, ss[3] = {N, C, W - 1};
    check(sp_tensor_dense(&a->x, s->x, SP_BF16, 2, xs, dev), "x");
    void *w = bench_malloc((size_t)(C * W) * 2),
         *state = bench_malloc((size_t)(N * C * (W - 1)) * 2);
    bench_fill_bf16(w, (size_t)(C * W), -0.5, 0.5, seed + 3);
    bench_fill_bf16(state, (size_t)(N * C * (W - 1)), -1, 1, seed + 4);
    check(sp_tensor_dense(&a->weight, w, SP_BF16, 2, ws, dev), "weight");
    check(sp_tensor_dense(&a->state, state, SP_BF16, 3, ss, dev), "state");
    a->silu = 1;
    int64_t *cu = malloc((size_t)n1 * 8);
    int32_t *idx = malloc((size_t)N * 4);
    uint8_t *init = malloc((size_t)N);
    if (!cu || !idx || !init) exit(2);
    for (int64_t n = 0; n <= N; n++) cu[n] = n < N ? n * (T / N) : T;
    for (int64_t n = 0; n < N; n++) idx[n] = (int32_t)(N - 1 - n), init[n] = 1;
    void *dcu = bench_malloc((size_t)n1 * 8), *didx = bench_malloc((size_t)N * 4);
    void *dinit = bench_malloc((size_t)N);
    BENCH_CU(cudaMemcpy(dcu, cu, (size_t)n1 * 8, cudaMemcpyHostToDevice));
    BENCH_CU(cudaMemcpy(didx, idx, (size_t)N * 4, cudaMemcpyHostToDevice));
    BENCH_CU(cudaMemcpy(dinit, init, (size_t)N, cudaMemcpyHostToDevice));
    free(cu), free(idx), free(init);
    check(sp_tensor_dense(&a->state_indices, didx, SP_I32, 1, &N, dev), "state_indices");
    if (!decode) {
        check(sp_tensor_dense(&a->cu_seqlens, dcu, SP_I64, 1, &n1, dev), "cu_seqlens");
        check(sp_tensor_dense(&a->has_initial_state, dinit, SP_BOOL, 1, &N, dev), "init");
    } else { /* decode takes neither */
        BENCH_CU(cudaFree(dcu));
        BENCH_CU(cudaFree(dinit));
    }
    s->tm = *a;
    check(sp_tensor_dense(&s->tm.out, s->out, SP_BF16, 2, xs, dev), "out");
    const int64_t qs[2] = {rows, P};
    for (int i = 0; i < 3; i++) {
        sp_tensor *t = i == 0 ? &a->q : i == 1 ? &a->k : &a->v;
        check(sp_tensor_dense(t, (char *)s->qkv + (size_t)(i * rows * P) * 2, SP_BF16, 2, qs, dev),
              "q, k, v");
    }

    /* The boundary's inputs: q, k, v as [1, T, H, 128] column slices of
     * the token-major output, beta at column 128 of [T, 128 + H]. */
    const int64_t wp = D + H, x4[4] = {1, rows, H, D}, st4[4] = {rows * C, C, D, 1};
    const int64_t x3[3] = {1, rows, H}, st3[3] = {rows * wp, wp, 1};
    for (int i = 0; i < 3; i++)
        check(sp_tensor_view(&s->packin[i], s->out, i * P, SP_BF16, 4, x4, st4, dev), "view");
    s->proj = bench_malloc((size_t)(rows * wp) * 2);
    bench_fill_bf16(s->proj, (size_t)(rows * wp), -3, 3, seed + 5);
    check(sp_tensor_view(&s->packin[3], s->proj, D, SP_BF16, 3, x3, st3, dev), "beta");
    check(sp_pack_workspace_bytes(s->packin, 4, &s->ws_bytes), "workspace");
    s->ws = bench_malloc(s->ws_bytes);
}

static void free_set(set *s) {
    void *p[] = {s->x,
                 s->out,
                 s->qkv,
                 s->limit_dst,
                 s->proj,
                 s->ws,
                 s->split.weight.data,
                 s->split.state.data,
                 s->split.state_indices.data,
                 s->split.cu_seqlens.data,
                 s->split.has_initial_state.data};
    for (size_t i = 0; i < sizeof p / sizeof *p; i++)
        if (p[i]) BENCH_CU(cudaFree(p[i]));
}

/* Split and token-major outputs hold the same bits, channel by channel. */
static int layouts_agree(set *s, int64_t rows, int64_t P, cudaStream_t st, int decode,
                         int64_t items) {
    bctx one;
    memset(&one, 0, sizeof one);
    one.nsets = 1;
    one.decode = decode;
    one.items = items;
    one.s[0] = *s;
    /* Both from the same state: the first call rewrites the slots. */
    const int64_t N = s->split.state.shape[0];
    const size_t sbytes = (size_t)(N * 3 * P * (W - 1)) * 2;
    void *saved = bench_malloc(sbytes);
    BENCH_CU(cudaMemcpy(saved, s->split.state.data, sbytes, cudaMemcpyDeviceToDevice));
    arm_split(&one, st);
    BENCH_CU(cudaStreamSynchronize(st));
    BENCH_CU(cudaMemcpy(s->split.state.data, saved, sbytes, cudaMemcpyDeviceToDevice));
    arm_tokenmajor(&one, st);
    BENCH_CU(cudaStreamSynchronize(st));
    BENCH_CU(cudaFree(saved));
    const size_t bytes = (size_t)(rows * 3 * P) * 2;
    uint16_t *a = malloc(bytes), *b = malloc(bytes);
    if (!a || !b) exit(2);
    BENCH_CU(cudaMemcpy(a, s->qkv, bytes, cudaMemcpyDeviceToHost));
    BENCH_CU(cudaMemcpy(b, s->out, bytes, cudaMemcpyDeviceToHost));
    int same = 1;
    for (int64_t t = 0; t < rows && same; t++)
        for (int64_t c = 0; c < 3 * P && same; c++)
            same = a[(c / P) * rows * P + t * P + c % P] == b[t * 3 * P + c];
    free(a), free(b);
    return same;
}

static char device_name[256];

/* --floor: limit and split against the yardsticks, interleaved, one JSON
 * line ("conv_floor"). Tiles: one wave at 3 blocks a multiprocessor (4 for
 * core_silu4), the library's grid at one-wave shapes. */
static void run_floor(bctx *c, int sms, cudaStream_t st, FILE *out) {
    static const char *const keys[2 + BENCH_FLOOR_KINDS] = {
        "limit_ms", "split_ms", "copy_ms", "core_linear_ms", "core_silu_ms", "core_silu4_ms"};
    const int64_t C8 = 3 * c->P / 8;
    bench_fn fns[2 + BENCH_FLOOR_KINDS] = {arm_limit, arm_split};
    void *ctxs[2 + BENCH_FLOOR_KINDS] = {c, c};
    floor_arm arms[BENCH_FLOOR_KINDS];
    for (int k = 0; k < BENCH_FLOOR_KINDS; k++) {
        const int blocks = k == BENCH_FLOOR_CORE_SILU4 ? 4 : 3;
        if (bench_conv_floor_blocks(k) < blocks) {
            fprintf(stderr, "floor kernel %d: fewer than %d blocks a multiprocessor fit\n", k,
                    blocks);
            exit(2);
        }
        const int64_t per_wave = (int64_t)blocks * sms * BENCH_FLOOR_THREADS / C8;
        const int64_t tiles = per_wave > 1 ? per_wave : 1, tile = (c->T + tiles - 1) / tiles;
        c->floor_tile[k] = tile < 8 ? 8 : tile;
        arms[k].c = c;
        arms[k].kind = k;
        fns[2 + k] = arm_floor;
        ctxs[2 + k] = &arms[k];
    }
    bench_stats r[2 + BENCH_FLOOR_KINDS];
    bench_time_interleaved(fns, ctxs, 2 + BENCH_FLOOR_KINDS, st, WARMUP, REPS, r);
    bench_json j;
    bench_json_begin(&j);
    bench_json_str(&j, "bench", "conv_floor");
    bench_json_str(&j, "device", device_name);
    bench_json_int(&j, "T", c->T);
    bench_json_int(&j, "H", c->P / D);
    bench_json_int(&j, "tile", c->floor_tile[BENCH_FLOOR_CORE_SILU]);
    bench_json_int(&j, "tile4", c->floor_tile[BENCH_FLOOR_CORE_SILU4]);
    printf("  floor T %lld H %lld:", (long long)c->T, (long long)(c->P / D));
    for (int i = 0; i < 2 + BENCH_FLOOR_KINDS; i++) {
        bench_json_num(&j, keys[i], r[i].median_ms);
        printf(" %.*s %.4f (%.3f)", (int)(strlen(keys[i]) - 3), keys[i], r[i].median_ms,
               r[0].median_ms / r[i].median_ms);
    }
    printf("  [ms (share of the limit)]\n");
    bench_json_emit(&j, out);
}

static void run_case(int64_t T, int64_t H, int64_t N, int decode, int64_t items, cudaStream_t st,
                     FILE *out, size_t l2, int sms, int floor) {
    const int64_t P = H * D, C = 3 * P, rows = decode ? N : T;
    bctx c;
    memset(&c, 0, sizeof c);
    c.decode = decode;
    c.items = items;
    c.T = T;
    c.P = P;
    /* Traffic: x read and outputs written; decode also reads and writes the
     * W-1 state entries of each channel. */
    const size_t xbytes = (size_t)(rows * C) * 2;
    const size_t traffic = 2 * xbytes + (decode ? 2 * (size_t)(N * C * (W - 1)) * 2 : 0);
    c.limit_bytes = traffic / 2;
    c.nsets = 1;
    while (c.nsets < MAX_SETS && (size_t)c.nsets * traffic < 4 * l2) c.nsets++;
    for (int i = 0; i < c.nsets; i++) make_set(&c.s[i], T, H, N, decode, 100 + 10 * (uint64_t)i);
    if (decode) /* the limit copy moves state bytes too: a source that large */
        for (int i = 0; i < c.nsets; i++) {
            BENCH_CU(cudaFree(c.s[i].limit_dst));
            c.s[i].limit_dst = bench_malloc(c.limit_bytes);
            BENCH_CU(cudaFree(c.s[i].x));
            c.s[i].x = bench_malloc(c.limit_bytes);
            bench_fill_bf16(c.s[i].x, c.limit_bytes / 2, -1, 1, 7);
            c.s[i].split.x.data = c.s[i].tm.x.data = c.s[i].x;
        }
    BENCH_CU(cudaDeviceSynchronize());
    if (!layouts_agree(&c.s[0], rows, P, st, decode, items)) {
        fprintf(stderr, "T %lld H %lld: split and token-major outputs differ\n", (long long)T,
                (long long)H);
        exit(1);
    }

    /* The arms, and the JSON fields that name their medians. */
    static const char *const keys[5] = {"limit_ms", "split_ms", "tokenmajor_ms", "tm_pack_ms",
                                        "split_pack_ms"};
    bench_fn fns[5] = {arm_limit, arm_split, arm_tokenmajor, arm_tm_pack, arm_split_pack};
    void *ctxs[5] = {&c, &c, &c, &c, &c};
    const int arms = decode ? 3 : 5;
    bench_stats r[5];
    bench_time_interleaved(fns, ctxs, arms, st, WARMUP, REPS, r);

    bench_json j;
    bench_json_begin(&j);
    bench_json_str(&j, "bench", decode ? "conv_decode" : "conv_prefill");
    bench_json_str(&j, "device", device_name);
    bench_json_int(&j, decode ? "N" : "T", decode ? N : T);
    bench_json_int(&j, "H", H);
    bench_json_int(&j, "W", W);
    if (!decode) bench_json_int(&j, "N", N);
    bench_json_int(&j, "sets", c.nsets);
    bench_json_int(&j, "bytes", (long long)traffic);
    for (int i = 0; i < arms; i++) bench_json_num(&j, keys[i], r[i].median_ms);
    bench_json_num(&j, "split_ratio", r[0].median_ms / r[1].median_ms);
    bench_json_num(&j, "tokenmajor_ratio", r[0].median_ms / r[2].median_ms);
    bench_json_num(&j, "split_gbps", bench_gbps((double)traffic, r[1].median_ms));
    bench_json_num(&j, "limit_gbps", bench_gbps((double)traffic, r[0].median_ms));
    if (!decode) bench_json_num(&j, "prep_ratio", r[4].median_ms / r[3].median_ms);
    printf("%s %s %5lld H %2lld: split %.4f ms (%.2f of the limit), token-major %.4f ms, limit "
           "%.4f ms",
           decode ? "decode" : "prefill", decode ? "N" : "T", (long long)(decode ? N : T),
           (long long)H, r[1].median_ms, r[0].median_ms / r[1].median_ms, r[2].median_ms,
           r[0].median_ms);
    if (!decode)
        printf("; split + beta pack %.4f ms, token-major + pack %.4f ms (prep ratio %.2f)",
               r[4].median_ms, r[3].median_ms, r[4].median_ms / r[3].median_ms);
    printf("\n");
    bench_json_emit(&j, out);
    if (floor && !decode) run_floor(&c, sms, st, out);
    for (int i = 0; i < c.nsets; i++) free_set(&c.s[i]);
}

static int usage(void) {
    fprintf(stderr, "usage: bench_conv [--json FILE] [--only prefill:T:H|decode:N:H] [--items LEN] "
                    "[--floor]\n");
    return 2;
}

int main(int argc, char **argv) {
    FILE *out = NULL;
    if (bench_take_json_arg(&argc, argv, &out)) return 2;
    char only_form[16] = "";
    long long only_size = 0, only_h = 0;
    int floor = 0;
    int64_t items = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--only") && i + 1 < argc) {
            if (sscanf(argv[++i], "%15[a-z]:%lld:%lld", only_form, &only_size, &only_h) != 3 ||
                (strcmp(only_form, "prefill") && strcmp(only_form, "decode")))
                return usage();
        } else if (!strcmp(argv[i], "--items") && i + 1 < argc) {
            items = atoll(argv[++i]);
        } else if (!strcmp(argv[i], "--floor")) {
            floor = 1;
        } else {
            return usage();
        }
    }
#define WANTED(form, size, h)                                                                   \
    (!only_form[0] || (!strcmp(only_form, form) && only_size == (size) && only_h == (h)))
    int sms = 0;
    size_t l2 = 0;
    bench_device(device_name, sizeof device_name, &sms, &l2);
    printf("%s, %d SMs, L2 %zu MiB\n", device_name, sms, l2 >> 20);
    cudaStream_t st;
    BENCH_CU(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    static const int64_t Ts[] = {16384, 1024, 64}, Hs[] = {96, 12}, Ns[] = {1, 64, 512};
    for (int h = 0; h < 2; h++)
        for (int t = 0; t < 3; t++)
            if (WANTED("prefill", Ts[t], Hs[h]))
                run_case(Ts[t], Hs[h], Ts[t] >= 1024 ? 8 : 1, 0, items, st, out, l2, sms, floor);
    for (int h = 0; h < 2; h++)
        for (int n = 0; n < 3; n++)
            if (WANTED("decode", Ns[n], Hs[h]))
                run_case(Ns[n], Hs[h], Ns[n], 1, items, st, out, l2, sms, floor);
    BENCH_CU(cudaStreamDestroy(st));
    if (out) fclose(out);
    return 0;
}
