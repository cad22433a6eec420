/*
 * harness.h — what every benchmark program shares: CUDA-event timing with
 * warm-up and the median of many repetitions, host wall-clock cost per
 * call, GB/s, random device contents (never time zeros), and one-line JSON
 * records. Not part of the library; benchmarks are programs, not tests.
 *
 * A timed "arm" is a function run on a stream; what one call does (one
 * launch or several) is the arm's business:
 *
 *     static void arm_limit(void *ctx, cudaStream_t s) { ... cudaMemcpyAsync ... }
 *     bench_stats st;
 *     bench_time(arm_limit, &ctx, stream, 10, 100, &st);
 *     printf("%.1f GB/s\n", bench_gbps(bytes_moved, st.median_ms));
 */
#ifndef SP_BENCH_HARNESS_H
#define SP_BENCH_HARNESS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* A CUDA call a benchmark makes; failing it ends the program. */
#define BENCH_CU(stmt)                                                               \
    do {                                                                             \
        cudaError_t bench_err_ = (stmt);                                             \
        if (bench_err_ != cudaSuccess) {                                             \
            fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #stmt,     \
                    cudaGetErrorString(bench_err_));                                 \
            exit(2);                                                                 \
        }                                                                            \
    } while (0)

typedef void (*bench_fn)(void *ctx, cudaStream_t stream);

typedef struct bench_stats {
    double median_ms, min_ms, max_ms;
    int reps;
} bench_stats;

/* Run fn `warmup` times untimed, then `reps` times, each call between its
 * own pair of events on `stream`; statistics of the per-call times. */
void bench_time(bench_fn fn, void *ctx, cudaStream_t stream, int warmup, int reps,
                bench_stats *out);

/* Several arms timed side by side: each repetition runs every arm once, in
 * order, so that clock drift and other load fall on all of them alike.
 * out[i] gets arm i's statistics. `reps` <= BENCH_MAX_REPS. */
#define BENCH_MAX_REPS 10000
void bench_time_interleaved(const bench_fn *fns, void *const *ctxs, int n, cudaStream_t stream,
                            int warmup, int reps, bench_stats *out);

/* Host cost: wall time of `calls` back-to-back calls (after `warmup`), in
 * microseconds per call, the device synchronized before and after (the
 * final synchronization is not counted). */
double bench_host_us(bench_fn fn, void *ctx, cudaStream_t stream, int warmup, int calls);

/* Host cost with the launch queue kept short: `calls` calls in bursts of
 * `burst`, the device synchronized between bursts outside the timed part,
 * in microseconds per call. Back-to-back calls whose kernels run longer than
 * a call takes on the host end up waiting for the device once the launch
 * queue fills; this measures the calls alone. */
double bench_host_burst_us(bench_fn fn, void *ctx, cudaStream_t stream, int calls, int burst);

/* Host cost of a single call, the device idle before it: median over
 * `calls` calls of the wall time until the call returns, in microseconds. */
double bench_host_single_us(bench_fn fn, void *ctx, cudaStream_t stream, int calls);

/* Bytes over milliseconds, in GB/s (1e9 bytes a second). */
double bench_gbps(double bytes, double ms);

/* The command line `[--json FILE]`: *out is FILE opened for appending, or
 * NULL without the option. @return 0, or 2 after printing the usage for
 * anything else (the caller exits with it). */
int bench_json_arg(int argc, char **argv, FILE **out);

/* The same for a benchmark with options of its own: takes `--json FILE`
 * out of argv wherever it is, and leaves the other arguments, in order, in
 * argv[1 .. *argc - 1] for the caller to parse. @return 0, or 2 after
 * printing why (a missing or unwritable FILE). */
int bench_take_json_arg(int *argc, char **argv, FILE **out);

/* cudaMalloc of `bytes` (at least 256), exiting on failure. */
void *bench_malloc(size_t bytes);

/* n valid bf16 values uniform in [lo, hi) on the device: a 16 MiB host
 * pattern copied over the buffer (timing must not run on zeros, and random
 * bytes would be NaNs for arithmetic kernels). */
void bench_fill_bf16(void *dev, size_t n, double lo, double hi, uint64_t seed);

/* Fill device memory with pseudo-random bytes from `seed` (through a host
 * staging buffer; fine for setup, not for timing). */
void bench_fill_random(void *dev, size_t bytes, uint64_t seed);

/* Name, multiprocessor count and L2 bytes of the current device. */
void bench_device(char *name, size_t name_len, int *sms, size_t *l2_bytes);

/* ---- one JSON object per line ---------------------------------------------- */

typedef struct bench_json {
    char buf[4096];
    size_t len;
    int fields;
} bench_json;

void bench_json_begin(bench_json *j);
void bench_json_str(bench_json *j, const char *key, const char *value);
void bench_json_num(bench_json *j, const char *key, double value); /* NaN/inf -> null */
void bench_json_int(bench_json *j, const char *key, long long value);
/* Add the run's date (UTC) and commit (SP_COMMIT, else the checkout's
 * HEAD, else "unknown"), close the object and write it as one line to
 * stdout and, when `file` is not NULL, to `file`. */
void bench_json_emit(bench_json *j, FILE *file);

#endif /* SP_BENCH_HARNESS_H */
