/* demo.h — the `stridepack demo` job, split from argument parsing, and the
 * device memory calls it needs (demo_cuda.c when built with CUDA). */
#ifndef SP_DEMO_H
#define SP_DEMO_H

/* The demo counts passes and copies with the test hooks. */
#ifndef SP_EXPERIMENTAL
#define SP_EXPERIMENTAL
#endif
#include "stridepack.h"

enum { DEMO_BETA_FA = 0, DEMO_BETA_INPROJ = 1, DEMO_BETA_BOTH = 2 };
enum { DEMO_DEVICE_AUTO, DEMO_DEVICE_CPU, DEMO_DEVICE_CUDA };

typedef struct demo_options {
    int64_t T, H;
    int64_t kda_tokens; /* end-to-end tokens; -1: T on CUDA, at most 256 on the CPU */
    int beta, device, reps;
    uint64_t seed;
} demo_options;

int demo_run(const demo_options *o);

/* Memory and timing on one device: host memory and a wall clock for the
 * CPU, device memory and CUDA events for CUDA. Each returns 0 on success. */
typedef struct demo_mem {
    sp_device dev;
    void *(*alloc)(size_t bytes);
    void (*release)(void *p);
    int (*upload)(void *dst, const void *src, size_t bytes);
    int (*download)(void *dst, const void *src, size_t bytes);
    int (*copy)(void *dst, const void *src, size_t bytes); /* one plain copy */
    void (*timer_start)(void);
    double (*timer_stop_ms)(void); /* waits for the device */
    const char *name;
} demo_mem;

/* Why the demo failed: each call records one line ("what: what differed"),
 * printed under the final FAILED (printf format). */
void demo_fail(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2)))
#endif
    ;

/* The views among the n for which keep() is 0 — with sp_tensor_is_dense,
 * the ones a pack must copy; with sp_kda_reads_in_place (q, k, v, g), the
 * ones the KDA boundary must copy: their count, and their names (names[i])
 * separated by spaces in buf. */
int demo_to_copy(const sp_tensor *views, const char *const *names, int n,
                 int (*keep)(const sp_tensor *), char *buf, size_t len);

/* Times of one end-to-end layout: medians, and the spread of the runs
 * (the larger max - min of the two arms), in ms. */
typedef struct demo_kda_times {
    double boundary_ms, prefill_ms, spread_ms;
    size_t copied; /* inputs the boundary copied */
} demo_kda_times;

/* Strided K3 inputs -> KDA boundary -> prefill, compared bit for bit with
 * the prefill on dense copies, each timed as the median of `reps` runs;
 * prints one KDA_ROW, fills *t. @return 0 when equal and the boundary
 * copied exactly the strided inputs (demo_fail says otherwise). */
int demo_kda(const demo_mem *m, int64_t T, int64_t H, int beta_kind, int reps, uint64_t seed,
             demo_kda_times *t);
#define KDA_HEAD "%-18s %6s %8s %11s %10s  %-9s %-9s %s\n"
#define KDA_ROW "%-18s %6zu %8llu %11.3f %10.3f  %-9s %-9s %s\n"

/* Projection x -> causal convolution (token-major, then the boundary packs
 * q, k, v, beta; or split, then it copies beta only) -> boundary ->
 * prefill; prints two PRODUCER_ROWs, the second with the comparison.
 * @return 0 when both give the same bits (demo_fail says otherwise). */
int demo_producer(const demo_mem *m, int64_t T, int64_t H, int reps, uint64_t seed);
#define PRODUCER_HEAD "%-20s %6s %9s  %-9s %-9s %s\n"
#define PRODUCER_ROW "%-20s %6zu %9.3f  %-9s %-9s %s\n"

/* Device copies of every argument buffer of a KDA problem (each run gets
 * its own set, so runs start from the same bytes); 0 on success. */
typedef struct kda_problem kda_problem;
int demo_upload_all(const demo_mem *m, const kda_problem *p, void **dev);
/* The end-to-end parts' problem: 4 sequences (T/2, T/4, T/8, the rest),
 * fp32 state, lower-bound gate, checkpoints every 64 tokens; K3 buffers
 * with beta of `beta_kind`; r seeded for the caller's further draws. */
typedef struct k3_bufs k3_bufs;
typedef struct ts_rng ts_rng;
void demo_problem(int64_t T, int64_t H, int beta_kind, uint64_t seed, kda_problem *p, k3_bufs *kb,
                  ts_rng *r);
/* The bytes that differ between n bytes at a and b (device memory of m),
 * *first the offset of the first (-1 when none); -1 when they could not be
 * read. */
int64_t demo_diff_bytes(const demo_mem *m, const void *a, const void *b, size_t n,
                        int64_t *first);
/* "bit-equal", else records with demo_fail what differs ("<what>: <n> of
 * <bytes> bytes differ, the first at byte <i>") and returns "DIFFER". */
const char *demo_compare(const demo_mem *m, const void *a, const void *b, size_t n,
                         const char *what);

/* 0 and *m filled when the CUDA memory calls are usable. */
int demo_cuda_mem(demo_mem *m);

/* Whether CUDA is usable, and if not which of the reasons: a build without
 * the CUDA backend, no NVIDIA driver, a driver older than the CUDA runtime
 * needs, no device, or devices older than the architectures the build has
 * code for. Written into buf. */
void demo_cuda_describe(char *buf, size_t n);

#endif
