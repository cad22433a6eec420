/*
 * ptx.cuh — the inline PTX the kernels share, written once: asynchronous
 * copies into shared memory, named barriers, and the special-function
 * unit's exp2 and reciprocal. Device code only; included by .cu files.
 */
#ifndef SP_CUDA_PTX_CUH
#define SP_CUDA_PTX_CUH

#include <cuda_runtime.h>

#define SP_LOG2E 1.4426950408889634f

static __device__ __forceinline__ unsigned sp_smem_addr_(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

/* Start copying 16 bytes from global src to shared dst. */
static __device__ __forceinline__ void sp_cp_async16_(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sp_smem_addr_(dst)),
                 "l"(src)
                 : "memory");
}

/* The same, reading only src_bytes (0 or 16) and zero-filling the rest. */
static __device__ __forceinline__ void sp_cp_async16_fill_(void *dst, const void *src,
                                                           int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(sp_smem_addr_(dst)),
                 "l"(src), "r"(src_bytes)
                 : "memory");
}

static __device__ __forceinline__ void sp_cp_async_commit_(void) {
    asm volatile("cp.async.commit_group;\n" ::: "memory");
}

/* Wait until at most `younger` of this thread's committed groups are still
 * in flight (0: all have landed). */
template <int younger> static __device__ __forceinline__ void sp_cp_async_wait_(void) {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(younger) : "memory");
}

/* Named barrier `id` (1..15; 0 is __syncthreads) over `count` threads:
 * wait for all of them, or only count this thread in. */
static __device__ __forceinline__ void sp_bar_sync_(int id, int count) {
    asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

static __device__ __forceinline__ void sp_bar_arrive_(int id, int count) {
    asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(count) : "memory");
}

/* 2^x and 1/x, one special-function instruction each; results below the
 * smallest normal float flush to zero. */
static __device__ __forceinline__ float sp_ex2_ftz_(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

static __device__ __forceinline__ float sp_rcp_ftz_(float x) {
    float y;
    asm("rcp.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

#endif /* SP_CUDA_PTX_CUH */
