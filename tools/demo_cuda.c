/* demo_cuda.c — device memory and CUDA-event timing for the demo. */
#include "demo.h"

#include <cuda_runtime_api.h>
#include <stdio.h>

#ifndef SP_CUDA_ARCHS
#define SP_CUDA_ARCHS "unknown"
#endif

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

void demo_cuda_describe(char *buf, size_t n) {
    int count = 0, driver = 0, runtime = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) (void)cudaGetLastError();
    /* The runtime reports a missing driver as an old one ("CUDA driver
     * version is insufficient"); the driver version, 0 without a driver,
     * tells the two apart. */
    if (cudaDriverGetVersion(&driver) != cudaSuccess) driver = 0;
    cudaRuntimeGetVersion(&runtime);
    if (e == cudaErrorInsufficientDriver && driver == 0) {
        snprintf(buf, n, "no NVIDIA driver was found (libcuda.so.1 is not installed or cannot be "
                         "loaded), so no GPU can be used");
        return;
    }
    if (e == cudaErrorInsufficientDriver) {
        snprintf(buf, n,
                 "the NVIDIA driver supports CUDA %d.%d, older than the CUDA %d.%d runtime this "
                 "build links: update the driver",
                 driver / 1000, driver % 1000 / 10, runtime / 1000, runtime % 1000 / 10);
        return;
    }
    if (e != cudaSuccess || count < 1) {
        snprintf(buf, n, "no device (the CUDA runtime says: %s)",
                 e != cudaSuccess ? cudaGetErrorString(e) : "the driver lists none");
        return;
    }
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) p.name[0] = '\0', p.major = p.minor = 0;
    if (sp_cuda_available()) {
        snprintf(buf, n, "usable: %d device%s, cuda:0 is %s (sm_%d%d)", count,
                 count > 1 ? "s" : "", p.name, p.major, p.minor);
        return;
    }
    snprintf(buf, n,
             "no usable device: cuda:0 is %s (sm_%d%d), older than every architecture this "
             "build has code for (%s); rebuild with -DCMAKE_CUDA_ARCHITECTURES=%d%d",
             p.name, p.major, p.minor, SP_CUDA_ARCHS, p.major, p.minor);
}
