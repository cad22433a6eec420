/*
 * ts_mem_cuda.c — the CUDA memory backend: device memory on device 0.
 * Built into the test support library in CUDA builds only.
 */
#include "ts_mem.h"

#include "cuda_ok.h"

static void *cuda_alloc(size_t bytes) {
    void *p = NULL;
    CUDA_OK(cudaMalloc(&p, bytes)); /* 256-aligned, at least */
    return p;
}

static void cuda_release(void *p) { CUDA_OK(cudaFree(p)); }

static void cuda_upload(void *dst, const void *src, size_t bytes) {
    CUDA_OK(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice));
    /* From pageable memory cudaMemcpy may return before the DMA lands, and
     * the copies under test run on non-blocking streams: wait for it. */
    CUDA_OK(cudaDeviceSynchronize());
}

static void cuda_download(void *dst, const void *src, size_t bytes) {
    CUDA_OK(cudaDeviceSynchronize());
    CUDA_OK(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost));
}

/* Why sp_cuda_available() said no, in the terms `stridepack version` uses. */
static const char *unusable_why(void) {
    static char why[400];
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    struct cudaDeviceProp p;
    int driver = -1;
    if (e == cudaErrorInsufficientDriver && cudaDriverGetVersion(&driver) == cudaSuccess &&
        driver == 0)
        snprintf(why, sizeof why, "no NVIDIA driver was found");
    else if (e != cudaSuccess)
        snprintf(why, sizeof why, "no CUDA device (the CUDA runtime says: %s)",
                 cudaGetErrorString(e));
    else if (n == 0 || cudaGetDeviceProperties(&p, 0) != cudaSuccess)
        snprintf(why, sizeof why, "no CUDA device");
    else
        snprintf(why, sizeof why,
                 "no usable CUDA device: cuda:0 is %s (sm_%d%d), older than every "
                 "architecture this build has code for", p.name, p.major, p.minor);
    (void)cudaGetLastError(); /* the test goes on without CUDA: leave no error behind */
    return why;
}

const ts_mem *ts_mem_cuda(const char **why) {
    static ts_mem mem = {"cuda", {SP_DEVICE_CUDA, 0}, NULL, cuda_alloc, cuda_release,
                         cuda_upload, cuda_download};
    if (!sp_cuda_available()) {
        if (why) *why = unusable_why();
        return NULL;
    }
    CUDA_OK(cudaSetDevice(0));
    if (!mem.stream) {
        cudaStream_t s;
        CUDA_OK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        mem.stream = (struct CUstream_st *)s;
    }
    return &mem;
}
