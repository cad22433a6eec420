/* copy_cpu.c — the CPU backend: all descriptors of a batch in one parallel
 * pass. Work is cut into chunks of about CHUNK_BYTES over every pair, so a
 * 400 MB tensor and a 3 MB one share the threads evenly: short runs are
 * grouped whole, long runs (a dense-to-dense copy is one run) are split.
 * Contiguous runs go through memcpy, gathers move one element at a time.
 * Small batches run on the calling thread without entering the OpenMP
 * runtime at all. */
#include "internal.h"

#include <string.h>

#define CHUNK_BYTES (256 * 1024)
#define SERIAL_BYTES (512 * 1024) /* below this, threads cost more than they give */

typedef struct chunking {
    int64_t rows;           /* runs in the pair */
    int64_t rows_per_chunk; /* whole runs per chunk (1 when runs are split) */
    int64_t pieces;         /* chunks per run: 1 unless a run is split */
    int64_t piece_units;    /* units per piece of a split run */
    int64_t first_chunk;    /* prefix sum over pairs */
} chunking;

/* Move units [u0, u1) of one run; every address is a multiple of vec. */
static void copy_run(const sp_copy_desc *d, const char *s, char *t, int64_t u0, int64_t u1) {
    const int64_t ss = d->src_run_stride, ts = d->dst_run_stride;
    if (ss == d->vec && ts == d->vec) {
        memcpy(t + u0 * d->vec, s + u0 * d->vec, (size_t)((u1 - u0) * d->vec));
        return;
    }
    /* Fixed-size memcpy compiles to one load and one store: bits, not values. */
#define SP_GATHER(W)                                                          \
    for (int64_t i = u0; i < u1; i++) memcpy(t + i * ts, s + i * ss, W); \
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

/* Units [u0, u1) of runs [r0, r1). */
static void copy_rows(const sp_copy_desc *d, int64_t r0, int64_t r1, int64_t u0, int64_t u1) {
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
        copy_run(d, src + so, dst + to, u0, u1);
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

static void copy_chunk(const sp_copy_desc *descs, const chunking *ch, int n, int64_t c) {
    int p = 0;
    while (p + 1 < n && ch[p + 1].first_chunk <= c) p++;
    const sp_copy_desc *d = &descs[p];
    const chunking *k = &ch[p];
    const int64_t local = c - k->first_chunk;
    if (k->pieces == 1) {
        const int64_t r0 = local * k->rows_per_chunk, r1 = r0 + k->rows_per_chunk;
        copy_rows(d, r0, r1 < k->rows ? r1 : k->rows, 0, d->run_units);
    } else {
        const int64_t row = local / k->pieces, u0 = (local % k->pieces) * k->piece_units;
        const int64_t u1 = u0 + k->piece_units;
        copy_rows(d, row, row + 1, u0, u1 < d->run_units ? u1 : d->run_units);
    }
}

sp_status sp_cpu_copy_(const sp_copy_desc *descs, int n) {
    chunking ch[SP_MAX_PAIRS_PER_LAUNCH];
    int64_t chunks = 0, bytes = 0;
    for (int p = 0; p < n; p++) {
        const sp_copy_desc *d = &descs[p];
        const int64_t run_bytes = d->run_units * d->vec;
        chunking *k = &ch[p];
        k->rows = d->units / d->run_units;
        if (run_bytes > CHUNK_BYTES) {
            k->rows_per_chunk = 1;
            k->piece_units = CHUNK_BYTES / d->vec;
            k->pieces = (d->run_units + k->piece_units - 1) / k->piece_units;
        } else {
            k->rows_per_chunk = CHUNK_BYTES / run_bytes;
            k->piece_units = d->run_units;
            k->pieces = 1;
        }
        k->first_chunk = chunks;
        chunks += k->pieces == 1 ? (k->rows + k->rows_per_chunk - 1) / k->rows_per_chunk
                                 : k->rows * k->pieces;
        bytes += d->units * d->vec;
    }
    if (bytes <= SERIAL_BYTES) {
        for (int64_t c = 0; c < chunks; c++) copy_chunk(descs, ch, n, c);
        return SP_OK;
    }
#pragma omp parallel for schedule(dynamic, 1)
    for (int64_t c = 0; c < chunks; c++) copy_chunk(descs, ch, n, c);
    return SP_OK;
}
