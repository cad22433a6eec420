/*
 * runtime.cu — the CUDA runtime layer (see runtime.h): error translation,
 * the device guard, allocation, the capture query, and sp_cuda_available().
 */
#include "cuda/runtime.h"

#include <cuda.h> /* driver API types only: the one driver call is looked up at run time */
#include <string.h>

sp_status sp_cuda_fail_(cudaError_t err, const char *stmt, const char *func, const char *file,
                       int line) {
    (void)cudaGetLastError();
    const char *base = strrchr(file, '/'); /* the file name, not the build path */
    /* The runtime names a missing driver "CUDA driver version is
     * insufficient"; a driver version of 0 means there is none at all. */
    int driver = -1;
    const char *what = cudaGetErrorString(err);
    if (err == cudaErrorInsufficientDriver && cudaDriverGetVersion(&driver) == cudaSuccess &&
        driver == 0)
        what = "no NVIDIA driver was found";
    return sp_set_error_(SP_ERR_CUDA, "%s failed in %s (%s:%d): %s (%s)", stmt, func,
                        base ? base + 1 : file, line, what, cudaGetErrorName(err));
}

/* ---- devices --------------------------------------------------------------- */

typedef CUresult (*sp_primary_state_fn)(CUdevice, unsigned int *, int *);

/* cuDevicePrimaryCtxGetState, looked up through the runtime so that the
 * library does not link libcuda (a CUDA build must load on a machine
 * without a driver). NULL when the driver does not offer it. */
static sp_primary_state_fn primary_state(void) {
    static sp_primary_state_fn fn;
    static int looked_up;
    if (__atomic_load_n(&looked_up, __ATOMIC_ACQUIRE)) return fn;
    void *p = NULL;
    cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
    cudaError_t e = cudaGetDriverEntryPointByVersion("cuDevicePrimaryCtxGetState", &p, 12000,
                                                     cudaEnableDefault, &q);
#else
    cudaError_t e = cudaGetDriverEntryPoint("cuDevicePrimaryCtxGetState", &p, cudaEnableDefault, &q);
#endif
    if (e != cudaSuccess || q != cudaDriverEntryPointSuccess) {
        (void)cudaGetLastError();
        p = NULL;
    }
    /* Racing first callers store the same pointer. */
    __atomic_store_n(&fn, (sp_primary_state_fn)p, __ATOMIC_RELAXED);
    __atomic_store_n(&looked_up, 1, __ATOMIC_RELEASE);
    return fn;
}

/* 1 when `device`'s primary context is active, 0 when not, -1 when the
 * driver cannot tell. */
static int primary_active(int device) {
    sp_primary_state_fn fn = primary_state();
    unsigned int flags = 0;
    int active = 0;
    if (!fn || fn((CUdevice)device, &flags, &active) != CUDA_SUCCESS) return -1;
    return active != 0;
}

sp_status sp_cuda_device_enter_(sp_cuda_device_guard *g, int device, const char *arg) {
    g->prev = device;
    g->switched = 0;
    int prev = 0;
    SP_CUDA_CHECK(cudaGetDevice(&prev));
    if (prev == device) return SP_OK;
    /* Name a missing device ourselves rather than through a failed
     * cudaSetDevice, which tools report as an API error. */
    int count = 0;
    SP_CUDA_CHECK(cudaGetDeviceCount(&count));
    SP_REQUIRE(device >= 0 && device < count, SP_ERR_NO_DEVICE,
               "%s: cuda:%d: no such device (this process sees %d)", arg, device, count);
    SP_CUDA_CHECK(cudaSetDevice(device));
    g->prev = prev;
    g->switched = 1;
    return SP_OK;
}

sp_status sp_cuda_device_leave_(const sp_cuda_device_guard *g, sp_status s) {
    if (!g->switched || primary_active(g->prev) == 0) return s;
    cudaError_t e = cudaSetDevice(g->prev);
    if (e != cudaSuccess) {
        sp_status f = sp_cuda_fail_(e, "cudaSetDevice(prev)", __func__, __FILE__, __LINE__);
        if (s == SP_OK) return f;
    }
    return s;
}

/* ---- memory and capture ---------------------------------------------------- */

sp_status sp_cuda_alloc_(int device, size_t bytes, void **p, const char *what) {
    *p = NULL;
    sp_cuda_device_guard g;
    SP_FORWARD(sp_cuda_device_enter_(&g, device, what));
    sp_status s = SP_OK;
    cudaError_t e = cudaMalloc(p, bytes);
    if (e == cudaErrorMemoryAllocation) {
        (void)cudaGetLastError();
        s = sp_set_error_(SP_ERR_OUT_OF_MEMORY, "%s: cudaMalloc of %zu bytes on cuda:%d failed",
                         what, bytes, device);
    } else if (e != cudaSuccess) {
        s = sp_cuda_fail_(e, "cudaMalloc(p, bytes)", __func__, __FILE__, __LINE__);
    }
    if (s != SP_OK) *p = NULL;
    return sp_cuda_device_leave_(&g, s);
}

static sp_status cuda_free_here(void *p) {
    SP_CUDA_CHECK(cudaFree(p));
    return SP_OK;
}

sp_status sp_cuda_free_(int device, void *p) {
    if (!p) return SP_OK;
    sp_cuda_device_guard g;
    SP_FORWARD(sp_cuda_device_enter_(&g, device, "free"));
    return sp_cuda_device_leave_(&g, cuda_free_here(p));
}

sp_status sp_cuda_capturing_(cudaStream_t stream, int *capturing) {
    *capturing = 0;
    if (stream == NULL) return SP_OK;
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    SP_CUDA_CHECK(cudaStreamIsCapturing(stream, &st));
    *capturing = st != cudaStreamCaptureStatusNone;
    return SP_OK;
}

/* ---- sp_cuda_available ----------------------------------------------------- */

#ifndef SP_CUDA_MIN_ARCH
#define SP_CUDA_MIN_ARCH 0 /* unknown (e.g. "native"): any device */
#endif

extern "C" int sp_cuda_available(void) {
    /* The device count is fixed for the life of the process, and this runs
     * on every call that touches CUDA tensors: ask the runtime once. A race
     * between first callers only computes the same answer twice. */
    static int cached = -1;
    int v = __atomic_load_n(&cached, __ATOMIC_ACQUIRE);
    if (v >= 0) return v;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* "no device" is an answer, not an error to keep */
        n = 0;
    }
    /* Usable means the kernels can run there: compute capability at least
     * the lowest architecture this build carries code for. */
    v = 0;
    for (int d = 0; d < n && !v; d++) {
        int major = 0, minor = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) == cudaSuccess &&
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d) == cudaSuccess)
            v = major * 10 + minor >= SP_CUDA_MIN_ARCH;
        else
            (void)cudaGetLastError();
    }
    __atomic_store_n(&cached, v, __ATOMIC_RELEASE);
    return v;
}
