/* demo_cuda.c — device memory and CUDA-event timing for the demo. */
#include "demo.h"

#include <cuda_runtime_api.h>

static cudaEvent_t ev_start, ev_stop;

static void *cu_alloc(size_t bytes) {
    void *p = NULL;
    return cudaMalloc(&p, bytes ? bytes : 1) == cudaSuccess ? p : NULL;
}
static void cu_release(void *p) { cudaFree(p); }
static int cu_upload(void *d, const void *s, size_t n) {
    return cudaMemcpy(d, s, n, cudaMemcpyHostToDevice) != cudaSuccess;
}
static int cu_download(void *d, const void *s, size_t n) {
    return cudaMemcpy(d, s, n, cudaMemcpyDeviceToHost) != cudaSuccess;
}
static int cu_copy(void *d, const void *s, size_t n) {
    return cudaMemcpyAsync(d, s, n, cudaMemcpyDeviceToDevice, 0) != cudaSuccess;
}
static void cu_timer_start(void) { cudaEventRecord(ev_start, 0); }
static double cu_timer_stop_ms(void) {
    float ms = 0;
    cudaEventRecord(ev_stop, 0);
    cudaEventSynchronize(ev_stop);
    cudaEventElapsedTime(&ms, ev_start, ev_stop);
    return ms;
}

int demo_cuda_mem(demo_mem *m) {
    int n = 0;
    if (!sp_cuda_available() || cudaGetDeviceCount(&n) != cudaSuccess || n < 1) return -1;
    if (cudaEventCreate(&ev_start) != cudaSuccess || cudaEventCreate(&ev_stop) != cudaSuccess)
        return -1;
    int dev = 0;
    cudaGetDevice(&dev);
    m->dev = sp_cuda(dev);
    m->alloc = cu_alloc;
    m->release = cu_release;
    m->upload = cu_upload;
    m->download = cu_download;
    m->copy = cu_copy;
    m->timer_start = cu_timer_start;
    m->timer_stop_ms = cu_timer_stop_ms;
    m->name = "cuda";
    return 0;
}
