/*
 * kda_dev.h — a KDA problem's buffers on the GPU, for the KDA and boundary
 * GPU tests: allocate (and upload), download the outputs, free.
 */
#ifndef SP_TEST_KDA_DEV_H
#define SP_TEST_KDA_DEV_H

#include "cuda_ok.h"
#include "kda_problem.h"

/* kp_upload, kp_download and kp_release on CUDA device memory. */
static inline void kd_alloc(const kda_problem *p, void *const host[KB_COUNT], int first,
                            void *dev[KB_COUNT]) {
    kp_upload(ts_mem_cuda(NULL), p, host, first, dev);
}

static inline void kd_download(const kda_problem *p, void *const dev[KB_COUNT],
                               void *host[KB_COUNT]) {
    kp_download(ts_mem_cuda(NULL), p, dev, host);
}

static inline void kd_free(void *dev[KB_COUNT]) { kp_release(ts_mem_cuda(NULL), dev); }

#endif /* SP_TEST_KDA_DEV_H */
