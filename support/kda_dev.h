/*
 * kda_dev.h — a KDA problem's buffers on the GPU, for the KDA and boundary
 * GPU tests: allocate (and upload), download the outputs, free.
 */
#ifndef SP_TEST_KDA_DEV_H
#define SP_TEST_KDA_DEV_H

#include "cuda_ok.h"
#include "kda_problem.h"

/* Device buffers for every argument, each 256 bytes longer than the
 * problem's; the buffers from `first` on get host[] uploaded (q .. beta
 * before it are left for the caller to fill). */
static inline void kd_alloc(const kda_problem *p, void *const host[KB_COUNT], int first,
                            void *dev[KB_COUNT]) {
    for (int b = 0; b < KB_COUNT; b++) {
        CUDA_OK(cudaMalloc(&dev[b], p->bytes[b] + 256));
        if (b >= first) CUDA_OK(cudaMemcpy(dev[b], host[b], p->bytes[b], cudaMemcpyHostToDevice));
    }
    CUDA_OK(cudaDeviceSynchronize()); /* pageable copies may still be in flight */
}

/* The outputs (o, state pool, checkpoints) back into host[]. */
static inline void kd_download(const kda_problem *p, void *const dev[KB_COUNT],
                               void *host[KB_COUNT]) {
    CUDA_OK(cudaDeviceSynchronize());
    for (int b = KB_O; b < KB_COUNT; b++)
        CUDA_OK(cudaMemcpy(host[b], dev[b], p->bytes[b], cudaMemcpyDeviceToHost));
}

static inline void kd_free(void *dev[KB_COUNT]) {
    for (int b = 0; b < KB_COUNT; b++) CUDA_OK(cudaFree(dev[b]));
}

#endif /* SP_TEST_KDA_DEV_H */
