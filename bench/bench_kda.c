/*
 * bench_kda.c — the CUDA KDA prefill, each kernel (recurrent, chunked,
 * two-pass, decode, and the library's plan) on the same inputs in the same
 * process, timed
 * interleaved, at the shapes where fla's Triton chunk_kda was measured on
 * an H200 (2026-11-30, K3 contract, fp32 state): its Python-call times and,
 * at T = 16384, its GPU kernel time. Dense inputs, fp32 and bf16 state
 * pools, no checkpoints. Before timing, the chunked kernel's output is
 * compared with the recurrent kernel's, and so is its final state
 * (relative L2 errors in the JSON). --probe picks the one-pass chunked
 * kernel's build (a plan of this program's, sp_kda_prefill_planned_): m the
 * mma.sync build, g the wgmma build (without --probe, the plan's choice);
 * v (k) the mma.sync build with only its V side's (K side's) arithmetic,
 * g.v and g.k the same of the wgmma build: how long each side takes alone
 * (timing probes built into this program only, kda_probe.cu); g.f the
 * every-gate wgmma build with every chunk factored (no vote, no safe form
 * compiled in: the same results where no chunk's gates leave the factored
 * form's bound, as on this program's inputs). The every-gate probes need
 * the wgmma build's plan (one wave on Hopper); the probes are built for
 * Hopper and later only. v, k, g.v and g.k time the every-gate build's
 * sides under --gate or --every-gate.
 * Prints one JSON line per kernel x shape x state (also appended to FILE
 * with --json FILE), then a table.
 *
 * --two-pass R.P sets the two-pass kernel's records in flight (2, 4) and
 * the thousandths of its records prepared before its state pass starts
 * (1000: two kernels; else the rest beside the pass in one kernel).
 * --shape T H N runs that shape alone, in the table or not.
 *
 * --decode-rows R runs the decode kernel's build with R V rows a warp (16, 32).
 * --decode-pairs P runs a decode step by the decode kernel's stream form, P
 * pairs a block, 32 rows a warp (P >= 1, or auto: the plan's rule on this
 * device's table; docs/TUNING.md, "DECODE_STREAM"); the JSON's
 * "decode_pairs" says the P run (0: a block a pair).
 *
 * --gate G: the gate form, lower_bound (K3's, the default), softplus (the
 * same g inputs), log_decay or log_decay_f32 (g the log-decay itself,
 * uniform in [-1, 0), bf16 or f32); every form but K3's runs the chunked
 * kernels' every-gate builds, and the JSON's "gate" says which.
 * --every-gate runs those builds for K3's forms too (what the build itself
 * costs against K3's; the JSON's "every_gate").
 *
 * --unequal: N sequences of unequal lengths (cut points drawn from a
 * seeded generator) instead of equal ones; --longest-first or --batch-order:
 * the one-pass kernel's block order forced (else the plan's longest_first,
 * docs/TUNING.md, "ONE_PASS_LONGEST_FIRST"); the JSON
 * says both. --k-first: the state pool K-first ([N, H, K, V], passed as its
 * transpose; the JSON's "state_layout"). --bf16-state: with --shape, the
 * bf16 pool instead of the fp32 one (the table runs both; the JSON's
 * "state").
 *
 * --kernels LIST times only those of recurrent, chunked, chunked_two_pass,
 * decode and auto (the recurrent kernel still runs once: the others' errors).
 *
 * Run: build/bench/bench_kda [--shape T H N] [--probe m|g|v|k|g.v|g.k|g.f] [--two-pass R.P]
 *      [--decode-rows R] [--decode-pairs P|auto] [--gate G] [--every-gate] [--unequal]
 *      [--longest-first | --batch-order] [--k-first] [--bf16-state] [--kernels LIST] [--json FILE]
 */
#include "harness.h"
#include "cuda/device.h"
#include "kda/kda_internal.h" /* sp_kda_prefill_planned_, sp_kda_two_pass_slots_ */
#include "stridepack_kda.h"

#include <math.h>
#include <string.h>

enum { D = SP_KDA_HEAD_DIM };

typedef struct kda_case {
    sp_kda_args a;
    int64_t T, H, N;
    void *bufs[16];
    int nbufs;
    void *state0; /* the initial state pool, to restore before compared runs */
    size_t state_bytes;
} kda_case;

static void *owned(kda_case *c, size_t bytes) {
    return c->bufs[c->nbufs++] = bench_malloc(bytes);
}

/* What this program changes of the library's plan (--probe, --two-pass,
 * --decode-rows) and of the inputs (--gate):
 * the one-pass kernel's build (-1: the plan's) and timing probe (0: none,
 * ONE_PASS_PROBE_V or _K); the two-pass kernel's records in flight and
 * thousandths of its slots prepared first (0: the plan's). */
static struct {
    int build, probe, records, head_permille, decode_rows;
    int64_t decode_pairs; /* the stream form's pairs a block (-1: the rule's; 0: none) */
    int32_t gate;   /* sp_kda_gate */
    int g_f32;      /* the log-decay g in f32 */
    int every_gate; /* the chunked kernels' every-gate builds whatever the forms */
    unsigned kernels; /* which kernels to time (bit k: kernel_order[k]; --kernels) */
    int unequal;    /* unequal sequence lengths */
    int longest_first; /* the one-pass kernel's longest-first block order, forced */
    int batch_order;   /* its batch order, forced (neither: the plan's) */
    int k_first;       /* the state pool K-first (passed as its transpose) */
    int bf16_state;    /* with --shape: the bf16 pool instead of the fp32 one */
} opts = {.build = -1, .gate = SP_KDA_GATE_LOWER_BOUND, .kernels = ~0u};
static const char *const gate_names[] = {"lower_bound", "softplus", "log_decay", "log_decay_f32"};

/* Dense inputs for T tokens, H heads, N equal sequences (the last takes the
 * remainder; --unequal: seeded unequal ones), state pool of N slots. */
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
    if (opts.gate == SP_KDA_GATE_LOG_DECAY)
        bench_fill_bf16(g, n4, -1, 0, 4);
    else
        bench_fill_bf16(g, n4, -4, 1.5, 4);
    bench_fill_bf16(beta, (size_t)(T * H), -3, 3, 5);
    bench_fill_random(o, n4 * 2, 6); /* poison */
    sp_tensor_dense(&a->q, q, SP_BF16, 4, x4, dev);
    sp_tensor_dense(&a->k, k, SP_BF16, 4, x4, dev);
    sp_tensor_dense(&a->v, v, SP_BF16, 4, x4, dev);
    sp_tensor_dense(&a->g, g, SP_BF16, 4, x4, dev);
    a->gate = opts.gate;
    if (opts.g_f32) { /* the same values, f32 */
        uint16_t *h16 = malloc(n4 * 2);
        float *h32 = malloc(n4 * 4);
        if (!h16 || !h32) exit(2);
        BENCH_CU(cudaMemcpy(h16, g, n4 * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n4; i++) {
            const uint32_t u = (uint32_t)h16[i] << 16;
            memcpy(&h32[i], &u, 4);
        }
        void *g32 = owned(c, n4 * 4);
        BENCH_CU(cudaMemcpy(g32, h32, n4 * 4, cudaMemcpyHostToDevice));
        free(h16), free(h32);
        sp_tensor_dense(&a->g, g32, SP_F32, 4, x4, dev);
    }
    sp_tensor_dense(&a->beta, beta, SP_BF16, 3, x3, dev);
    sp_tensor_dense(&a->o, o, SP_BF16, 4, x4, dev);

    float *A_log = malloc((size_t)H * 4), *dtb = malloc((size_t)hd * 4);
    int64_t *cu = malloc((size_t)n1 * 8);
    int32_t *idx = malloc((size_t)N * 4);
    if (!A_log || !dtb || !cu || !idx) exit(2);
    for (int64_t h = 0; h < H; h++) A_log[h] = -0.5f + 0.01f * (float)h;
    for (int64_t i = 0; i < hd; i++) dtb[i] = 0.001f * (float)(i % 200) - 0.1f;
    for (int64_t n = 0; n <= N; n++) cu[n] = n < N ? n * (T / N) : T;
    if (opts.unequal && N > 1 && T >= N) { /* N - 1 distinct cut points in 1 .. T - 1, sorted */
        uint64_t x = 0x9E3779B97F4A7C15ull ^ (uint64_t)(T * 131 + N);
        for (int64_t n = 1; n < N; n++) {
            int64_t c;
            int dup;
            do {
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                c = 1 + (int64_t)(x % (uint64_t)(T - 1));
                dup = 0;
                for (int64_t m = 1; m < n; m++) dup |= cu[m] == c;
            } while (dup);
            cu[n] = c;
        }
        for (int64_t n = 1; n < N; n++) /* insertion sort of cu[1 .. N-1] */
            for (int64_t m = n; m > 1 && cu[m - 1] > cu[m]; m--) {
                const int64_t t = cu[m];
                cu[m] = cu[m - 1], cu[m - 1] = t;
            }
    }
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
    if (opts.k_first) { /* a [N, H, K, V] pool as its transpose */
        const int64_t kf[4] = {H * D * D, D * D, 1, D};
        sp_tensor_view(&a->state, st, 0, sdt, 4, ss, kf, dev);
    } else {
        sp_tensor_dense(&a->state, st, sdt, 4, ss, dev);
    }
    c->state_bytes = se * sp_dtype_size(sdt);
    c->state0 = owned(c, c->state_bytes);
    BENCH_CU(cudaMemcpy(c->state0, st, c->state_bytes, cudaMemcpyDeviceToDevice));
    BENCH_CU(cudaDeviceSynchronize());
}

static void free_case(kda_case *c) {
    for (int i = 0; i < c->nbufs; i++) BENCH_CU(cudaFree(c->bufs[i]));
}


/* kda_probe.cu: the probe instance `side` of the plan's one-pass build. */
int bench_kda_probe(const sp_kda_args *a, const sp_kda_plan *plan, int side, cudaStream_t s);

/* The plan a case runs: the library's for its kernel field, with the
 * options' forced parts. */
static sp_status case_plan(const kda_case *c, sp_kda_plan *plan) {
    const sp_status st = sp_kda_prefill_plan_(&c->a, plan);
    if (st != SP_OK) return st;
    if (plan->kernel == SP_KDA_KERNEL_CHUNKED && opts.build >= 0) plan->wgmma = opts.build;
    if (plan->kernel == SP_KDA_KERNEL_CHUNKED && (opts.longest_first || opts.batch_order))
        plan->longest_first = opts.longest_first && c->N <= SP_KDA_LONGEST_FIRST_MAX_N;
    if (opts.every_gate) sp_kda_plan_every_gate_(plan);
    if (plan->kernel == SP_KDA_KERNEL_CHUNKED_TWO_PASS && opts.records) {
        const int64_t slots = sp_kda_two_pass_slots_(c->T, c->N);
        const int64_t h = slots * opts.head_permille / 1000;
        plan->records = opts.records;
        plan->head_slots = h < 1 ? 1 : h;
    }
    if (plan->kernel == SP_KDA_KERNEL_DECODE && opts.decode_rows)
        plan->decode_rows_per_warp = opts.decode_rows;
    if (plan->kernel == SP_KDA_KERNEL_DECODE && opts.decode_pairs) {
        int64_t P = opts.decode_pairs;
        if (P < 0) {
            const sp_cuda_device *dev;
            const sp_status ds = sp_cuda_device_(0, SP_CUDA_PART_KDA, &dev);
            if (ds != SP_OK) return ds;
            const int per_sm = dev->kda_decode_stream_per_sm[c->a.state.dtype == SP_BF16];
            P = sp_kda_decode_pairs_a_block_(c->N * c->H, (int64_t)dev->sms * per_sm);
        }
        if (P > 0) {
            plan->decode_rows_per_warp = SP_KDA_DECODE_STREAM_ROWS;
            plan->decode_pairs_a_block = P;
        }
    }
    return SP_OK;
}

static void arm_prefill(void *ctx, cudaStream_t s) {
    kda_case *c = ctx;
    sp_kda_plan plan;
    sp_status st = case_plan(c, &plan);
    if (st == SP_OK && plan.kernel == SP_KDA_KERNEL_CHUNKED && opts.probe) {
        if (bench_kda_probe(&c->a, &plan, opts.probe, s) != 0) {
            fprintf(stderr, "bench_kda_probe: %s\n", sp_last_error());
            exit(2);
        }
        return;
    }
    if (st == SP_OK) st = sp_kda_prefill_planned_(&c->a, &plan, s);
    if (st != SP_OK) {
        fprintf(stderr, "sp_kda_prefill: %s\n", sp_last_error());
        exit(2);
    }
}

/* o of one run of `kernel`, downloaded (caller frees); its final state
 * into *state (caller frees) when state is not NULL. */
static uint16_t *run_once(kda_case *c, int32_t kernel, cudaStream_t s, void **state) {
    const size_t n = (size_t)(c->T * c->H * D);
    c->a.kernel = kernel;
    BENCH_CU(cudaMemcpy(c->a.state.data, c->state0, c->state_bytes, cudaMemcpyDeviceToDevice));
    bench_fill_random(c->a.o.data, n * 2, 99); /* poison: every element must be written */
    arm_prefill(c, s);
    BENCH_CU(cudaStreamSynchronize(s));
    uint16_t *o = malloc(n * 2);
    if (!o) exit(2);
    BENCH_CU(cudaMemcpy(o, c->a.o.data, n * 2, cudaMemcpyDeviceToHost));
    if (state) {
        *state = malloc(c->state_bytes);
        if (!*state) exit(2);
        BENCH_CU(cudaMemcpy(*state, c->a.state.data, c->state_bytes, cudaMemcpyDeviceToHost));
    }
    return o;
}

static double bf16_val(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static double rel_err(const uint16_t *x, const uint16_t *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double a = bf16_val(x[i]), b = bf16_val(ref[i]);
        num += (a - b) * (a - b);
        den += b * b;
    }
    return den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0); /* NaN stays NaN */
}

/* The same over two final-state pools (f32 or bf16 elements). */
static double state_rel_err(const void *x, const void *ref, size_t bytes, sp_dtype dt) {
    double num = 0, den = 0;
    const size_t n = bytes / sp_dtype_size(dt);
    for (size_t i = 0; i < n; i++) {
        double a, b;
        if (dt == SP_F32)
            a = ((const float *)x)[i], b = ((const float *)ref)[i];
        else
            a = bf16_val(((const uint16_t *)x)[i]), b = bf16_val(((const uint16_t *)ref)[i]);
        num += (a - b) * (a - b);
        den += b * b;
    }
    return den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
}

static const char *kernel_name(int32_t k) { return sp_kda_kernel_name((sp_kda_kernel)k); }

/* The kernels this program times, in its order (the first is the others'
 * reference; the last is the library's choice). */
static const int32_t kernel_order[] = {SP_KDA_KERNEL_RECURRENT, SP_KDA_KERNEL_CHUNKED,
                                       SP_KDA_KERNEL_CHUNKED_TWO_PASS, SP_KDA_KERNEL_DECODE,
                                       SP_KDA_KERNEL_AUTO};
enum { NK = sizeof kernel_order / sizeof *kernel_order };

static int wgmma_available(void) {
    const sp_cuda_device *d;
    return sp_cuda_device_(0, SP_CUDA_PART_KDA, &d) == SP_OK && d->kda_wgmma;
}

int main(int argc, char **argv) {
    /* --shape T H N: that shape only (for profiling). */
    int64_t only[3] = {0, 0, 0};
    for (int i = 1; i + 3 < argc; i++)
        if (strcmp(argv[i], "--shape") == 0) {
            for (int k = 0; k < 3; k++) only[k] = strtoll(argv[i + 1 + k], NULL, 10);
            for (int k = i; k + 4 < argc; k++) argv[k] = argv[k + 4];
            argc -= 4;
            break;
        }
    int probe = 0;
    /* --probe's word, the JSON's words, the build and the probe side
     * (kda_probe.cu: 1 the V side only, 2 the K side only, 4 every chunk
     * factored). */
    static const struct {
        const char *flag, *what;
        int build, side;
    } probes[] = {
        {"", "", -1, 0},
        {"v", "mma.sync build, V side only", 0, 1},
        {"k", "mma.sync build, K side only", 0, 2},
        {"g", "wgmma build", 1, 0},
        {"g.v", "wgmma build, V side only", 1, 1},
        {"g.k", "wgmma build, K side only", 1, 2},
        {"m", "mma.sync build", 0, 0},
        {"g.f", "wgmma every-gate build, every chunk factored", 1, 4},
    };
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--probe") == 0) {
            probe = -1;
            for (int n = 1; n < (int)(sizeof probes / sizeof probes[0]); n++)
                if (strcmp(argv[i + 1], probes[n].flag) == 0) probe = n;
            if (probe < 0) {
                fprintf(stderr, "--probe takes v, k, g, g.v, g.k, m or g.f\n");
                return 2;
            }
            for (int k = i; k + 2 < argc; k++) argv[k] = argv[k + 2];
            argc -= 2;
            break;
        }
    opts.build = probes[probe].build;
    opts.probe = probes[probe].side;
    /* --two-pass R.P: the two-pass kernel with R records in flight and the
     * first P thousandths of its records prepared before the state pass
     * (1000: two kernels), not the library's plan. */
    int tp_records = 0, tp_head = 0;
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--two-pass") == 0) {
            if (sscanf(argv[i + 1], "%d.%d", &tp_records, &tp_head) != 2 ||
                (tp_records != 2 && tp_records != 4) || tp_head < 1 || tp_head > 1000) {
                fprintf(stderr, "--two-pass takes R.P: R 2 or 4, P 1 to 1000\n");
                return 2;
            }
            for (int k = i; k + 2 < argc; k++) argv[k] = argv[k + 2];
            argc -= 2;
            break;
        }
    opts.records = tp_records;
    opts.head_permille = tp_head;
    /* --decode-rows R: the decode kernel's build with R V rows a warp (16, 32). */
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--decode-rows") == 0) {
            opts.decode_rows = atoi(argv[i + 1]);
            if (opts.decode_rows != 16 && opts.decode_rows != 32) {
                fprintf(stderr, "--decode-rows takes 16 or 32\n");
                return 2;
            }
            for (int k = i; k + 2 < argc; k++) argv[k] = argv[k + 2];
            argc -= 2;
            break;
        }
    /* --decode-pairs P|auto: a decode step by the stream form, P pairs a block. */
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--decode-pairs") == 0) {
            char *end = NULL;
            opts.decode_pairs = strcmp(argv[i + 1], "auto") == 0 ? -1 : strtoll(argv[i + 1], &end, 10);
            if (opts.decode_pairs != -1 ? opts.decode_pairs < 1 || *end != '\0'
                                        : strcmp(argv[i + 1], "auto") != 0) {
                fprintf(stderr, "--decode-pairs takes a count of at least 1, or auto\n");
                return 2;
            }
            for (int k = i; k + 2 < argc; k++) argv[k] = argv[k + 2];
            argc -= 2;
            break;
        }
    /* --kernels LIST: time only these (recurrent, chunked, chunked_two_pass,
     * decode, auto; the recurrent kernel still runs once, as the others'
     * reference) */
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--kernels") == 0) {
            opts.kernels = 0;
            char list[256];
            snprintf(list, sizeof list, "%s", argv[i + 1]);
            for (char *tok = strtok(list, ","); tok; tok = strtok(NULL, ",")) {
                int found = 0;
                for (int k = 0; k < NK; k++)
                    if (strcmp(tok, kernel_name(kernel_order[k])) == 0) opts.kernels |= 1u << k, found = 1;
                if (!found) {
                    fprintf(stderr, "--kernels takes recurrent, chunked, chunked_two_pass, decode, auto\n");
                    return 2;
                }
            }
            for (int k = i; k + 2 < argc; k++) argv[k] = argv[k + 2];
            argc -= 2;
            break;
        }
    /* --gate G */
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--gate") == 0) {
            int gi = -1;
            for (int n = 0; n < 4; n++)
                if (strcmp(argv[i + 1], gate_names[n]) == 0) gi = n;
            if (gi < 0) {
                fprintf(stderr, "--gate takes lower_bound, softplus, log_decay or log_decay_f32\n");
                return 2;
            }
            opts.gate = gi == 3 ? SP_KDA_GATE_LOG_DECAY : gi;
            opts.g_f32 = gi == 3;
            for (int k = i; k + 2 < argc; k++) argv[k] = argv[k + 2];
            argc -= 2;
            break;
        }
    const char *gate_name = gate_names[opts.g_f32 ? 3 : opts.gate];
    /* --every-gate, --unequal, --longest-first, --batch-order, --k-first,
     * --bf16-state: flags */
    static const char *const flags[] = {"--every-gate", "--unequal",  "--longest-first",
                                        "--batch-order", "--k-first", "--bf16-state"};
    int *const flag_of[] = {&opts.every_gate, &opts.unequal, &opts.longest_first,
                            &opts.batch_order, &opts.k_first, &opts.bf16_state};
    for (int f = 0; f < 6; f++)
        for (int i = 1; i < argc; i++)
            if (strcmp(argv[i], flags[f]) == 0) {
                *flag_of[f] = 1;
                for (int k = i; k + 1 < argc; k++) argv[k] = argv[k + 1];
                argc -= 1;
                break;
            }
    if (opts.longest_first && opts.batch_order) {
        fprintf(stderr, "--longest-first and --batch-order: one order at a time\n");
        return 2;
    }
    /* The factored-only probe is of the every-gate build (kda_probe.cu). */
    if (opts.probe == 4 && !opts.every_gate &&
        opts.gate == SP_KDA_GATE_LOWER_BOUND) {
        fprintf(stderr, "--probe g.f times the every-gate build: with --gate G other than "
                        "lower_bound, or --every-gate\n");
        return 2;
    }
    FILE *out = NULL;
    if (bench_json_arg(argc, argv, &out)) return 2;
    char name[256];
    int sms = 0;
    size_t l2 = 0;
    bench_device(name, sizeof name, &sms, &l2);
    cudaStream_t s;
    BENCH_CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    /* fla chunk_kda on one H200 (2026-11-30): Python-call ms, and GPU
     * kernel ms (torch profiler) where measured (0: not measured). Fixed
     * figures of that device: written to the JSON, as "fla_ms" and
     * "fla_kernel_ms" with their ratios, only when this device is an H200
     * (bench/kda_anchors.py times fla live, on any device). */
    const int fla_device = strstr(name, "H200") != NULL;
    static struct {
        int64_t T, H, N;
        double fla_ms, fla_kernel_ms;
    } shapes[] = {{16384, 96, 1, 5.86, 5.27},
                  {16384, 96, 8, 5.60, 0},
                  {16384, 12, 1, 1.82, 0.95},
                  {2048, 96, 1, 1.44, 0},
                  {2048, 96, 16, 1.53, 0},
                  /* Not in fla's table (fla_ms 0): where the two-pass
                   * kernel stops paying, for the plan's rules. */
                  {16384, 24, 1, 0, 0},
                  {16384, 48, 1, 0, 0},
                  /* The rest of the anchor table's shapes (bench/kda_anchors.py). */
                  {16384, 64, 1, 0, 0},
                  {8192, 96, 1, 0, 0},
                  {65536, 12, 1, 0, 0},
                  /* Short sequences (64, 32, 16 and 8 tokens): the
                   * plan's rule between recurrent and chunked. */
                  {2048, 96, 32, 0, 0},
                  {2048, 96, 64, 0, 0},
                  {2048, 96, 128, 0, 0},
                  {2048, 96, 256, 0, 0},
                  /* Decode (one token a sequence) and four tokens a sequence: the
                   * decode kernel's shapes (bench/kda_decode.py has the grid). */
                  {64, 12, 64, 0, 0},
                  {64, 96, 64, 0, 0},
                  {512, 96, 512, 0, 0},
                  {2048, 96, 512, 0, 0}};
    static const sp_dtype states[] = {SP_F32, SP_BF16};
    char table[160][160];
    int rows = 0;
    /* --shape outside the table: it alone, in the first row's place. */
    int listed = 0;
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        listed |= only[0] == shapes[i].T && only[1] == shapes[i].H && only[2] == shapes[i].N;
    if (only[0] && !listed) {
        shapes[0].T = only[0], shapes[0].H = only[1], shapes[0].N = only[2];
        shapes[0].fla_ms = shapes[0].fla_kernel_ms = 0;
    }
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int si = 0; si < 2; si++) {
            /* rows without fla's time: the fp32 pool only, unless --shape asks bf16 */
            if (si > 0 && shapes[i].fla_ms == 0 && !(only[0] && opts.bf16_state)) continue;
            if (only[0] && (only[0] != shapes[i].T || only[1] != shapes[i].H ||
                            only[2] != shapes[i].N || si != opts.bf16_state))
                continue;
            kda_case c[NK];
            make_case(&c[0], shapes[i].T, shapes[i].H, shapes[i].N, states[si]);
            for (int k = 1; k < NK; k++) {
                c[k] = c[0]; /* the same inputs; the state pool is rewritten each run alike */
                c[k].nbufs = 0; /* freed once, through c[0] */
                c[k].a.kernel = kernel_order[k];
            }
            c[0].a.kernel = kernel_order[0];
            /* The two-pass kernel and AUTO get the workspace the library
             * asks for, as the boundary gives it. */
            size_t ws_bytes = 0;
            if (sp_kda_prefill_workspace_bytes(&c[0].a, &ws_bytes) != SP_OK) {
                fprintf(stderr, "sp_kda_prefill_workspace_bytes: %s\n", sp_last_error());
                return 2;
            }
            void *ws = bench_malloc(ws_bytes);
            for (int k = 2; k < NK; k++) {
                c[k].a.workspace = ws;
                c[k].a.workspace_bytes = ws_bytes;
            }
            sp_kda_kernel chosen = SP_KDA_KERNEL_AUTO;
            if (sp_kda_prefill_kernel(&c[NK - 1].a, &chosen) != SP_OK) {
                fprintf(stderr, "sp_kda_prefill_kernel: %s\n", sp_last_error());
                return 2;
            }
            const size_t n = (size_t)(c[0].T * c[0].H * D);
            void *s_rec = NULL;
            uint16_t *o_rec = run_once(&c[0], kernel_order[0], s, &s_rec);
            double err[NK] = {0}, serr[NK] = {0};
            for (int k = 1; k < NK - 1; k++) {
                if (!(opts.kernels >> k & 1)) continue;
                void *s_k = NULL;
                uint16_t *o_k = run_once(&c[k], kernel_order[k], s, &s_k);
                err[k] = rel_err(o_k, o_rec, n);
                serr[k] = state_rel_err(s_k, s_rec, c[0].state_bytes, states[si]);
                free(o_k), free(s_k);
            }
            free(o_rec), free(s_rec);

            bench_fn fns[NK];
            void *ctxs[NK];
            int timed[NK], nt = 0;
            for (int k = 0; k < NK; k++)
                if (opts.kernels >> k & 1) fns[nt] = arm_prefill, ctxs[nt] = &c[k], timed[nt++] = k;
            bench_stats st_timed[NK], st[NK];
            bench_time_interleaved(fns, ctxs, nt, s, 3, 50, st_timed);
            for (int m = 0; m < nt; m++) st[timed[m]] = st_timed[m];
            for (int k = 0; k < NK; k++) {
                if (!(opts.kernels >> k & 1)) continue;
                bench_json j;
                bench_json_begin(&j);
                bench_json_str(&j, "bench", "kda_prefill");
                bench_json_str(&j, "device", name);
                bench_json_str(&j, "kernel", kernel_name(kernel_order[k]));
                bench_json_str(&j, "gate", gate_name);
                /* the chunked kernels' build (every-gate forced, or for forms other than
                 * K3's) and the one-pass kernel's block order, as run */
                const int chunked = kernel_order[k] == SP_KDA_KERNEL_CHUNKED ||
                                    kernel_order[k] == SP_KDA_KERNEL_CHUNKED_TWO_PASS;
                if (chunked)
                    bench_json_int(&j, "every_gate",
                                   opts.every_gate || opts.gate != SP_KDA_GATE_LOWER_BOUND);
                bench_json_int(&j, "unequal", opts.unequal && shapes[i].N > 1);
                sp_kda_plan ran;
                if (case_plan(&c[k], &ran) == SP_OK && ran.kernel == SP_KDA_KERNEL_CHUNKED)
                    bench_json_int(&j, "longest_first", ran.longest_first);
                if (kernel_order[k] == SP_KDA_KERNEL_AUTO)
                    bench_json_str(&j, "auto_chose", kernel_name(chosen));
                if (kernel_order[k] == SP_KDA_KERNEL_DECODE) { /* 0: the plan's */
                    bench_json_int(&j, "decode_rows", opts.decode_rows);
                    bench_json_int(&j, "decode_pairs",
                                   case_plan(&c[k], &ran) == SP_OK ? ran.decode_pairs_a_block : 0);
                }
                bench_json_int(&j, "T", shapes[i].T);
                bench_json_int(&j, "H", shapes[i].H);
                bench_json_int(&j, "N", shapes[i].N);
                bench_json_str(&j, "state", sp_dtype_name(states[si]));
                bench_json_str(&j, "state_layout", opts.k_first ? "k_first" : "v_first");
                bench_json_num(&j, "ms", st[k].median_ms);
                bench_json_num(&j, "min_ms", st[k].min_ms);
                bench_json_int(&j, "reps", st[k].reps);
                bench_json_num(&j, "tokens_per_s", (double)shapes[i].T / (st[k].median_ms * 1e-3));
                if (fla_device && shapes[i].fla_ms > 0) {
                    bench_json_num(&j, "fla_ms", shapes[i].fla_ms);
                    bench_json_num(&j, "ratio_to_fla", st[k].median_ms / shapes[i].fla_ms);
                }
                if (fla_device && shapes[i].fla_kernel_ms > 0) {
                    bench_json_num(&j, "fla_kernel_ms", shapes[i].fla_kernel_ms);
                    bench_json_num(&j, "ratio_to_fla_kernel",
                                   st[k].median_ms / shapes[i].fla_kernel_ms);
                }
                if (k > 0 && k < NK - 1) {
                    bench_json_num(&j, "o_rel_err_vs_recurrent", err[k]);
                    bench_json_num(&j, "state_rel_err_vs_recurrent", serr[k]);
                }
                if (kernel_order[k] == SP_KDA_KERNEL_CHUNKED || kernel_order[k] == SP_KDA_KERNEL_AUTO)
                    bench_json_int(&j, "wgmma_build_available", wgmma_available());
                if (kernel_order[k] == SP_KDA_KERNEL_CHUNKED && probe)
                    bench_json_str(&j, "probe", probes[probe].what);
                if (k >= 2) bench_json_int(&j, "workspace_bytes", (int64_t)ws_bytes);
                if (k >= 2 && tp_records) {
                    bench_json_int(&j, "two_pass_records", tp_records);
                    bench_json_int(&j, "two_pass_head_permille", tp_head);
                }
                bench_json_emit(&j, out);
                if (rows < 96)
                    snprintf(table[rows++], sizeof table[0],
                             "%6lld %3lld %3lld %-4s %-16s %8.3f %6.2f %8.1e %8.1e  %s",
                             (long long)shapes[i].T,
                             (long long)shapes[i].H, (long long)shapes[i].N,
                             sp_dtype_name(states[si]), kernel_name(kernel_order[k]), st[k].median_ms,
                             fla_device && shapes[i].fla_ms > 0 ? st[k].median_ms / shapes[i].fla_ms
                                                                : 0.0,
                             err[k], serr[k], kernel_order[k] == SP_KDA_KERNEL_AUTO ? kernel_name(chosen) : "");
            }
            BENCH_CU(cudaFree(ws));
            free_case(&c[0]);
        }
    printf("\ngate %s\n%6s %3s %3s %-4s %-16s %8s %6s %8s %8s  %s\n", gate_name, "T", "H", "N",
           "state", "kernel",
           "ms", "/fla", "o_err", "st_err", "auto chose");
    for (int r = 0; r < rows; r++) printf("%s\n", table[r]);
    BENCH_CU(cudaStreamDestroy(s));
    if (out) fclose(out);
    return 0;
}
