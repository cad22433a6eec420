/* copy_cpu.c — the CPU backend: all descriptors of a batch in one parallel
 * pass. Work is cut into chunks of whole runs (about CHUNK_BYTES each) over
 * every pair, so a 400 MB tensor and a 3 MB one share the threads evenly;
 * contiguous runs go through memcpy, gathers move one element at a time. */
#include "internal.h"

#include <string.h>

#define CHUNK_BYTES (256 * 1024)
#define SERIAL_BYTES (512 * 1024) /* below this, threads cost more than they give */

typedef struct chunking {
    int64_t rows;           /* runs in the pair */
    int64_t rows_per_chunk;
    int64_t first_chunk;    /* prefix sum over pairs */
} chunking;

/* Move one run of n units; every address is a multiple of vec. */
static void copy_run(const sp_copy_desc *d, const char *s, char *t) {
    const int64_t n = d->run_units, ss = d->src_run_stride, ts = d->dst_run_stride;
    if (ss == d->vec && ts == d->vec) {
        memcpy(t, s, (size_t)(n * d->vec));
        return;
    }
    /* Fixed-size memcpy compiles to one load and one store: bits, not values. */
#define SP_GATHER(W)                                            \
    for (int64_t i = 0; i < n; i++) memcpy(t + i * ts, s + i * ss, W); \
    break
    switch (d->vec) {
    case 1: SP_GATHER(1);
    case 2: SP_GATHER(2);
    case 4: SP_GATHER(4);
    case 8: SP_GATHER(8);
    default: SP_GATHER(16);
    }
#undef SP_GATHER
}

static void copy_rows(const sp_copy_desc *d, int64_t r0, int64_t r1) {
    /* Odometer over the outer dims, innermost first, started at run r0. */
    int64_t idx[SP_DESC_OUTER] = {0}, so = 0, to = 0, rem = r0;
    for (int i = 0; i < d->nouter; i++) {
        idx[i] = rem % d->outer_shape[i];
        rem /= d->outer_shape[i];
        so += idx[i] * d->src_outer_stride[i];
        to += idx[i] * d->dst_outer_stride[i];
    }
    const char *src = (const char *)(uintptr_t)d->src;
    char *dst = (char *)(uintptr_t)d->dst;
    for (int64_t r = r0; r < r1; r++) {
        copy_run(d, src + so, dst + to);
        for (int i = 0; i < d->nouter; i++) { /* advance the odometer */
            so += d->src_outer_stride[i];
            to += d->dst_outer_stride[i];
            if (++idx[i] < d->outer_shape[i]) break;
            so -= d->src_outer_stride[i] * d->outer_shape[i];
            to -= d->dst_outer_stride[i] * d->outer_shape[i];
            idx[i] = 0;
        }
    }
}

sp_status sp_cpu_copy(const sp_copy_desc *descs, int n) {
    chunking ch[SP_MAX_PAIRS_PER_LAUNCH];
    int64_t chunks = 0, bytes = 0;
    for (int p = 0; p < n; p++) {
        const sp_copy_desc *d = &descs[p];
        int64_t run_bytes = d->run_units * d->vec;
        ch[p].rows = d->units / d->run_units;
        ch[p].rows_per_chunk = run_bytes >= CHUNK_BYTES ? 1 : CHUNK_BYTES / run_bytes;
        ch[p].first_chunk = chunks;
        chunks += (ch[p].rows + ch[p].rows_per_chunk - 1) / ch[p].rows_per_chunk;
        bytes += d->units * d->vec;
    }
#pragma omp parallel for schedule(dynamic, 1) if (bytes > SERIAL_BYTES)
    for (int64_t c = 0; c < chunks; c++) {
        int p = 0;
        while (p + 1 < n && ch[p + 1].first_chunk <= c) p++;
        int64_t r0 = (c - ch[p].first_chunk) * ch[p].rows_per_chunk;
        int64_t r1 = r0 + ch[p].rows_per_chunk;
        copy_rows(&descs[p], r0, r1 < ch[p].rows ? r1 : ch[p].rows);
    }
    return SP_OK;
}
