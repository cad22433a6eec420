/*
 * bench_validate.c — what sp_copy_batch's checks cost as the batch grows:
 * n pairs whose sources are column slices of one fused [T, n*C] buffer (all
 * their byte extents intersect) and whose destinations are dense slots one
 * after the other (the sp_pack layout), on the CPU. Prints one line per n:
 * pairs, then the median microseconds of one whole sp_copy_batch call (the
 * checks, the plan and the copy of a few bytes per pair). With --scatter the
 * destinations are the column slices instead (every destination extent
 * meets every other: the overlap policy walks them by their windows
 * modulo the row pitch, which meet none). A program, not a test:
 *     tests/core/bench_validate [--scatter] [max_pairs]
 */
#define _POSIX_C_SOURCE 199309L /* clock_gettime */
#include "stridepack.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { T = 4, C = 8, REPS = 9 };

static double now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int scatter = 0;
    long max_pairs = 16384;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--scatter")) scatter = 1;
        else max_pairs = strtol(argv[i], NULL, 10);
    }
    if (max_pairs < 1) return fprintf(stderr, "usage: %s [--scatter] [max_pairs]\n", argv[0]), 2;
    printf("# sp_copy_batch, %s: %d x %d f32 per pair, median of %d calls\n",
           scatter ? "dense slots -> column slices" : "column slices -> dense slots", T, C, REPS);
    printf("%8s %12s\n", "pairs", "us");
    for (long n = 64; n <= max_pairs; n *= 4) {
        float *fused = calloc((size_t)(T * C * n), sizeof *fused);
        float *slots = calloc((size_t)(T * C * n), sizeof *slots);
        sp_copy_pair *p = calloc((size_t)n, sizeof *p);
        if (!fused || !slots || !p) return fprintf(stderr, "no memory for %ld pairs\n", n), 1;
        const int64_t shape[2] = {T, C}, strides[2] = {C * n, 1};
        for (long i = 0; i < n; i++) {
            sp_tensor col, dense;
            sp_tensor_view(&col, fused, i * C, SP_F32, 2, shape, strides, sp_cpu());
            sp_tensor_dense(&dense, slots + (size_t)i * T * C, SP_F32, 2, shape, sp_cpu());
            p[i].src = scatter ? dense : col;
            p[i].dst = scatter ? col : dense;
        }
        double t[REPS];
        for (int r = 0; r < REPS; r++) {
            double t0 = now_us();
            sp_status s = sp_copy_batch(p, (size_t)n, NULL);
            t[r] = now_us() - t0;
            if (s != SP_OK) return fprintf(stderr, "%ld pairs: %s\n", n, sp_last_error()), 1;
        }
        qsort(t, REPS, sizeof *t, cmp_double);
        printf("%8ld %12.1f\n", n, t[REPS / 2]);
        fflush(stdout);
        free(p);
        free(slots);
        free(fused);
    }
    return 0;
}
