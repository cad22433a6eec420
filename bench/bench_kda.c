/*
 * bench_kda.c — throughput of the CUDA KDA prefill: T = 16384 tokens,
 * H = 96 heads, as one sequence and as 8 equal sequences, fp32 state (and
 * bf16 for comparison), no checkpoints. Prints one JSON line per case
 * (also appended to FILE with --json FILE).
 *
 * The kernel runs one block per (sequence, head) through the sequence's
 * tokens one after another, so its time is (T / N) sequential token steps
 * times the time of one step, times the number of waves of blocks over the
 * multiprocessors. The JSON gives the per-step time of a block so that
 * figure can be read directly.
 *
 * Run: build/bench/bench_kda [--json FILE]
 */
#include "harness.h"
#include "stridepack_kda.h"

#include <math.h>
#include <string.h>

enum { D = SP_KDA_HEAD_DIM };

typedef struct kda_case {
    sp_kda_args a;
    int64_t T, H, N;
    void *bufs[16];
    int nbufs;
} kda_case;

static void *owned(kda_case *c, size_t bytes) {
    return c->bufs[c->nbufs++] = bench_malloc(bytes);
}

/* Dense inputs for T tokens, H heads, N equal sequences (the last takes the
 * remainder), state pool of N slots. */
static void make_case(kda_case *c, int64_t T, int64_t H, int64_t N, sp_dtype sdt) {
    memset(c, 0, sizeof *c);
    c->T = T;
    c->H = H;
    c->N = N;
    sp_kda_args *a = &c->a;
    sp_kda_args_init(a);
    const sp_device dev = sp_cuda(0);
    const int64_t x4[4] = {1, T, H, D}, x3[3] = {1, T, H}, n1 = N + 1, hd = H * D;
    const size_t n4 = (size_t)(T * H * D);
    void *q = owned(c, n4 * 2), *k = owned(c, n4 * 2), *v = owned(c, n4 * 2);
    void *g = owned(c, n4 * 2), *beta = owned(c, (size_t)(T * H) * 2), *o = owned(c, n4 * 2);
    bench_fill_bf16(q, n4, -1, 1, 1);
    bench_fill_bf16(k, n4, -1, 1, 2);
    bench_fill_bf16(v, n4, -1, 1, 3);
    bench_fill_bf16(g, n4, -4, 1.5, 4);
    bench_fill_bf16(beta, (size_t)(T * H), -3, 3, 5);
    bench_fill_random(o, n4 * 2, 6); /* poison */
    sp_tensor_dense(&a->q, q, SP_BF16, 4, x4, dev);
    sp_tensor_dense(&a->k, k, SP_BF16, 4, x4, dev);
    sp_tensor_dense(&a->v, v, SP_BF16, 4, x4, dev);
    sp_tensor_dense(&a->g, g, SP_BF16, 4, x4, dev);
    sp_tensor_dense(&a->beta, beta, SP_BF16, 3, x3, dev);
    sp_tensor_dense(&a->o, o, SP_BF16, 4, x4, dev);

    float *A_log = malloc((size_t)H * 4), *dtb = malloc((size_t)hd * 4);
    int64_t *cu = malloc((size_t)n1 * 8);
    int32_t *idx = malloc((size_t)N * 4);
    if (!A_log || !dtb || !cu || !idx) exit(2);
    for (int64_t h = 0; h < H; h++) A_log[h] = -0.5f + 0.01f * (float)h;
    for (int64_t i = 0; i < hd; i++) dtb[i] = 0.001f * (float)(i % 200) - 0.1f;
    for (int64_t n = 0; n <= N; n++) cu[n] = n < N ? n * (T / N) : T;
    for (int64_t n = 0; n < N; n++) idx[n] = (int32_t)(N - 1 - n);
    void *dA = owned(c, (size_t)H * 4), *dB = owned(c, (size_t)hd * 4);
    void *dcu = owned(c, (size_t)n1 * 8), *didx = owned(c, (size_t)N * 4);
    BENCH_CU(cudaMemcpy(dA, A_log, (size_t)H * 4, cudaMemcpyHostToDevice));
    BENCH_CU(cudaMemcpy(dB, dtb, (size_t)hd * 4, cudaMemcpyHostToDevice));
    BENCH_CU(cudaMemcpy(dcu, cu, (size_t)n1 * 8, cudaMemcpyHostToDevice));
    BENCH_CU(cudaMemcpy(didx, idx, (size_t)N * 4, cudaMemcpyHostToDevice));
    free(A_log), free(dtb), free(cu), free(idx);
    sp_tensor_dense(&a->A_log, dA, SP_F32, 1, &H, dev);
    sp_tensor_dense(&a->dt_bias, dB, SP_F32, 1, &hd, dev);
    sp_tensor_dense(&a->cu_seqlens, dcu, SP_I64, 1, &n1, dev);
    sp_tensor_dense(&a->state_indices, didx, SP_I32, 1, &N, dev);

    const int64_t ss[4] = {N, H, D, D};
    const size_t se = (size_t)(N * H * D * D);
    void *st = owned(c, se * sp_dtype_size(sdt));
    if (sdt == SP_BF16)
        bench_fill_bf16(st, se, -0.1, 0.1, 7);
    else
        BENCH_CU(cudaMemset(st, 0, se * 4)); /* a zero start state is a real case */
    sp_tensor_dense(&a->state, st, sdt, 4, ss, dev);
    BENCH_CU(cudaDeviceSynchronize());
}

static void free_case(kda_case *c) {
    for (int i = 0; i < c->nbufs; i++) BENCH_CU(cudaFree(c->bufs[i]));
}

static void arm_prefill(void *ctx, cudaStream_t s) {
    kda_case *c = ctx;
    sp_status st = sp_kda_prefill(&c->a, s);
    if (st != SP_OK) {
        fprintf(stderr, "sp_kda_prefill: %s\n", sp_last_error());
        exit(2);
    }
}

int main(int argc, char **argv) {
    FILE *out = NULL;
    if (bench_json_arg(argc, argv, &out)) return 2;
    char name[256];
    int sms = 0;
    size_t l2 = 0;
    bench_device(name, sizeof name, &sms, &l2);
    cudaStream_t s;
    BENCH_CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const int64_t T = 16384, H = 96;
    const struct {
        int64_t N;
        sp_dtype sdt;
    } cases[] = {{1, SP_F32}, {8, SP_F32}, {1, SP_BF16}, {8, SP_BF16}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        kda_case c;
        make_case(&c, T, H, cases[i].N, cases[i].sdt);
        bench_stats st;
        bench_time(arm_prefill, &c, s, 3, 50, &st);
        const int64_t steps = (T + c.N - 1) / c.N; /* sequential steps per block */
        const int64_t blocks = c.N * H;
        const int64_t waves = (blocks + sms - 1) / sms; /* one resident block per SM */
        bench_json j;
        bench_json_begin(&j);
        bench_json_str(&j, "bench", "kda_prefill");
        bench_json_str(&j, "device", name);
        bench_json_int(&j, "T", T);
        bench_json_int(&j, "H", H);
        bench_json_int(&j, "N", c.N);
        bench_json_str(&j, "state", sp_dtype_name(cases[i].sdt));
        bench_json_num(&j, "ms", st.median_ms);
        bench_json_num(&j, "min_ms", st.min_ms);
        bench_json_int(&j, "reps", st.reps);
        bench_json_num(&j, "tokens_per_s", (double)T / (st.median_ms * 1e-3));
        bench_json_int(&j, "blocks", blocks);
        bench_json_int(&j, "sms", sms);
        bench_json_int(&j, "waves", waves);
        bench_json_num(&j, "us_per_step_per_block",
                       st.median_ms * 1e3 / (double)(steps * waves));
        bench_json_emit(&j, out);
        free_case(&c);
    }
    BENCH_CU(cudaStreamDestroy(s));
    if (out) fclose(out);
    return 0;
}
