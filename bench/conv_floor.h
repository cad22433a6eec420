/*
 * conv_floor.h — the yardstick kernels of bench_conv --floor
 * (conv_floor.cu): the prefill convolution's access pattern alone, and with
 * its arithmetic but without sequences or state. Benchmark code, not the
 * library.
 */
#ifndef SP_BENCH_CONV_FLOOR_H
#define SP_BENCH_CONV_FLOOR_H
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BENCH_FLOOR_THREADS 128 /* threads a block, as the library's kernel */

enum {
    BENCH_FLOOR_COPY,        /* the access pattern, rows copied unchanged */
    BENCH_FLOOR_CORE_LINEAR, /* the arithmetic without SiLU, 3 blocks a multiprocessor */
    BENCH_FLOOR_CORE_SILU,   /* with SiLU, 3 blocks a multiprocessor (the library's) */
    BENCH_FLOOR_CORE_SILU4,  /* with SiLU, registers for 4 blocks */
    BENCH_FLOOR_KINDS
};

/* Blocks of 128 threads of kernel `which` a multiprocessor holds; 0 on error. */
int bench_conv_floor_blocks(int which);

/* Kernel `which` over x [T, 3P] dense bf16 into q, k, v [T, P] dense, with
 * weights [3P, 4] dense bf16 (core), tiles of `tile` tokens. P % 8 == 0,
 * every pointer 16-byte aligned. */
cudaError_t bench_conv_floor(int which, const void *x, void *q, void *k, void *v, const void *w,
                             long long T, long long P, long long tile, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif /* SP_BENCH_CONV_FLOOR_H */
