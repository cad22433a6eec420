/* harness.c — see harness.h. */
#define _POSIX_C_SOURCE 200809L
#include "harness.h"

#include "kda_problem.h"

#include <math.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void stats_of(double *ms, int n, bench_stats *out) {
    qsort(ms, (size_t)n, sizeof *ms, cmp_double);
    out->reps = n;
    out->min_ms = ms[0];
    out->max_ms = ms[n - 1];
    out->median_ms = n % 2 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]);
}

void bench_time(bench_fn fn, void *ctx, cudaStream_t stream, int warmup, int reps,
                bench_stats *out) {
    bench_time_interleaved(&fn, &ctx, 1, stream, warmup, reps, out);
}

void bench_time_interleaved(const bench_fn *fns, void *const *ctxs, int n, cudaStream_t stream,
                            int warmup, int reps, bench_stats *out) {
    if (reps < 1 || reps > BENCH_MAX_REPS || n < 1) {
        fprintf(stderr, "bench_time: reps %d / arms %d out of range\n", reps, n);
        exit(2);
    }
    for (int w = 0; w < warmup; w++)
        for (int a = 0; a < n; a++) fns[a](ctxs[a], stream);
    BENCH_CU(cudaStreamSynchronize(stream));
    /* Two events per arm and repetition, all recorded before any is read,
     * so that reading them never stalls the stream between arms. */
    size_t ne = (size_t)n * (size_t)reps * 2;
    cudaEvent_t *ev = (cudaEvent_t *)malloc(ne * sizeof *ev);
    double *ms = (double *)malloc((size_t)reps * sizeof *ms);
    if (!ev || !ms) exit(2);
    for (size_t i = 0; i < ne; i++) BENCH_CU(cudaEventCreate(&ev[i]));
    for (int r = 0; r < reps; r++)
        for (int a = 0; a < n; a++) {
            size_t k = ((size_t)r * (size_t)n + (size_t)a) * 2;
            BENCH_CU(cudaEventRecord(ev[k], stream));
            fns[a](ctxs[a], stream);
            BENCH_CU(cudaEventRecord(ev[k + 1], stream));
        }
    BENCH_CU(cudaStreamSynchronize(stream));
    for (int a = 0; a < n; a++) {
        for (int r = 0; r < reps; r++) {
            size_t k = ((size_t)r * (size_t)n + (size_t)a) * 2;
            float t = 0;
            BENCH_CU(cudaEventElapsedTime(&t, ev[k], ev[k + 1]));
            ms[r] = t;
        }
        stats_of(ms, reps, &out[a]);
    }
    for (size_t i = 0; i < ne; i++) BENCH_CU(cudaEventDestroy(ev[i]));
    free(ev);
    free(ms);
}

double bench_host_us(bench_fn fn, void *ctx, cudaStream_t stream, int warmup, int calls) {
    for (int w = 0; w < warmup; w++) fn(ctx, stream);
    BENCH_CU(cudaStreamSynchronize(stream));
    double t0 = now_s();
    for (int c = 0; c < calls; c++) fn(ctx, stream);
    double t1 = now_s();
    BENCH_CU(cudaStreamSynchronize(stream));
    return (t1 - t0) * 1e6 / calls;
}

double bench_host_burst_us(bench_fn fn, void *ctx, cudaStream_t stream, int calls, int burst) {
    double total = 0;
    for (int done = 0; done < calls; done += burst) {
        int n = calls - done < burst ? calls - done : burst;
        BENCH_CU(cudaStreamSynchronize(stream));
        double t0 = now_s();
        for (int c = 0; c < n; c++) fn(ctx, stream);
        total += now_s() - t0;
    }
    BENCH_CU(cudaStreamSynchronize(stream));
    return total * 1e6 / calls;
}

double bench_host_single_us(bench_fn fn, void *ctx, cudaStream_t stream, int calls) {
    double *us = (double *)malloc((size_t)calls * sizeof *us);
    if (!us || calls < 1) exit(2);
    for (int c = 0; c < calls; c++) {
        BENCH_CU(cudaStreamSynchronize(stream));
        double t0 = now_s();
        fn(ctx, stream);
        us[c] = (now_s() - t0) * 1e6;
    }
    BENCH_CU(cudaStreamSynchronize(stream));
    bench_stats st;
    stats_of(us, calls, &st);
    free(us);
    return st.median_ms; /* the unit is the caller's: microseconds here */
}

double bench_gbps(double bytes, double ms) { return ms > 0 ? bytes / (ms * 1e-3) / 1e9 : NAN; }

int bench_take_json_arg(int *argc, char **argv, FILE **out) {
    *out = NULL;
    int kept = 1;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--json") != 0) {
            argv[kept++] = argv[i];
            continue;
        }
        if (i + 1 >= *argc || *out) {
            fprintf(stderr, "%s: --json takes one FILE, given once\n", argv[0]);
            return 2;
        }
        if (!(*out = fopen(argv[++i], "a"))) {
            fprintf(stderr, "%s: cannot write %s\n", argv[0], argv[i]);
            return 2;
        }
    }
    *argc = kept;
    return 0;
}

int bench_json_arg(int argc, char **argv, FILE **out) {
    if (bench_take_json_arg(&argc, argv, out)) return 2;
    if (argc == 1) return 0;
    fprintf(stderr, "usage: %s [--json FILE]\n", argv[0]);
    if (*out) fclose(*out);
    *out = NULL;
    return 2;
}

void *bench_malloc(size_t bytes) {
    void *p = NULL;
    BENCH_CU(cudaMalloc(&p, bytes ? bytes : 256));
    return p;
}

void bench_fill_bf16(void *dev, size_t n, double lo, double hi, uint64_t seed) {
    const size_t pat = (size_t)8 << 20; /* elements */
    uint16_t *h = (uint16_t *)malloc(pat * 2);
    if (!h) exit(2);
    ts_rng r;
    ts_rng_seed(&r, seed);
    kp_fill_bf16(h, pat, &r, lo, hi);
    for (size_t off = 0; off < n; off += pat) {
        size_t m = n - off < pat ? n - off : pat;
        BENCH_CU(cudaMemcpy((uint16_t *)dev + off, h, m * 2, cudaMemcpyHostToDevice));
    }
    free(h);
}

void bench_fill_random(void *dev, size_t bytes, uint64_t seed) {
    /* A splitmix stream; 64 MiB staged at a time. */
    const size_t chunk = (size_t)64 << 20;
    uint64_t *host = (uint64_t *)malloc(chunk);
    if (!host) exit(2);
    uint64_t x = seed;
    for (size_t off = 0; off < bytes; off += chunk) {
        size_t n = bytes - off < chunk ? bytes - off : chunk;
        for (size_t i = 0; i < (n + 7) / 8; i++) {
            uint64_t z = (x += 0x9e3779b97f4a7c15ull);
            z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
            z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
            host[i] = z ^ (z >> 31);
        }
        BENCH_CU(cudaMemcpy((char *)dev + off, host, n, cudaMemcpyHostToDevice));
    }
    free(host);
}

void bench_device(char *name, size_t name_len, int *sms, size_t *l2_bytes) {
    int dev = 0, v = 0;
    struct cudaDeviceProp p;
    BENCH_CU(cudaGetDevice(&dev));
    BENCH_CU(cudaGetDeviceProperties(&p, dev));
    snprintf(name, name_len, "%s", p.name);
    BENCH_CU(cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev));
    *sms = v;
    BENCH_CU(cudaDeviceGetAttribute(&v, cudaDevAttrL2CacheSize, dev));
    *l2_bytes = (size_t)v;
}

/* ---- JSON ---------------------------------------------------------------------- */

static void json_put(bench_json *j, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int w = vsnprintf(j->buf + j->len, sizeof j->buf - j->len, fmt, ap);
    va_end(ap);
    if (w < 0 || (size_t)w >= sizeof j->buf - j->len) {
        fprintf(stderr, "bench_json: record too long\n");
        exit(2);
    }
    j->len += (size_t)w;
}

static void json_key(bench_json *j, const char *key) {
    json_put(j, "%s\"%s\": ", j->fields++ ? ", " : "", key);
}

void bench_json_begin(bench_json *j) {
    j->len = 0;
    j->fields = 0;
    j->buf[0] = '\0';
    json_put(j, "{");
}

void bench_json_str(bench_json *j, const char *key, const char *value) {
    json_key(j, key);
    json_put(j, "\"");
    for (const char *c = value; *c; c++) {
        if (*c == '"' || *c == '\\')
            json_put(j, "\\%c", *c);
        else if ((unsigned char)*c < 0x20)
            json_put(j, "\\u%04x", (unsigned)(unsigned char)*c);
        else
            json_put(j, "%c", *c);
    }
    json_put(j, "\"");
}

void bench_json_num(bench_json *j, const char *key, double value) {
    json_key(j, key);
    if (isfinite(value))
        json_put(j, "%.6g", value);
    else
        json_put(j, "null");
}

void bench_json_int(bench_json *j, const char *key, long long value) {
    json_key(j, key);
    json_put(j, "%lld", value);
}

/* The commit a record is of: SP_COMMIT when set (a copy of the tree
 * without its history), else the checkout's HEAD, else "unknown"; read
 * once. */
static const char *run_commit(void) {
    static char commit[64];
    if (commit[0]) return commit;
    const char *env = getenv("SP_COMMIT");
    if (env && *env) {
        snprintf(commit, sizeof commit, "%s", env);
        return commit;
    }
    snprintf(commit, sizeof commit, "unknown");
    FILE *git = popen("git rev-parse HEAD 2>/dev/null", "r");
    if (git) {
        char line[64];
        if (fgets(line, sizeof line, git) && strlen(line) >= 40) {
            line[strcspn(line, "\r\n")] = '\0';
            snprintf(commit, sizeof commit, "%s", line);
        }
        pclose(git);
    }
    return commit;
}

void bench_json_emit(bench_json *j, FILE *file) {
    char date[16];
    const time_t t = time(NULL);
    struct tm utc;
    strftime(date, sizeof date, "%Y-%m-%d", gmtime_r(&t, &utc));
    bench_json_str(j, "date", date);
    bench_json_str(j, "commit", run_commit());
    json_put(j, "}");
    printf("%s\n", j->buf);
    if (file) {
        fprintf(file, "%s\n", j->buf);
        fflush(file);
    }
}
