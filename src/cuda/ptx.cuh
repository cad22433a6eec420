/*
 * ptx.cuh — the inline PTX of every kernel, written once: asynchronous
 * copies into shared memory (cp.async, and on sm_90 bulk copies completing
 * on mbarriers), named barriers, an L2 prefetch, the special-function
 * unit's exp2 and reciprocal, bf16 conversions, and the tensor-core
 * fragments (mma.sync, ldmatrix, stmatrix). Device code, included by .cu
 * files; the exp2, reciprocal and bf16x2 helpers also run on the host, as
 * the instructions compute them, for kernels' host emulations. The sm_90
 * instructions are for callers that check __CUDA_ARCH__ >= 900 themselves.
 */
#ifndef SP_CUDA_PTX_CUH
#define SP_CUDA_PTX_CUH

#include <cuda_runtime.h>
#include <stdint.h>

#define SP_LOG2E 1.4426950408889634f

#include "bf16.h"
#include <math.h>

static __device__ __forceinline__ unsigned sp_smem_addr_(const void *p) {
    return (unsigned)__cvta_generic_to_shared(p);
}

/* Start copying 16 bytes from global src to shared dst. */
static __device__ __forceinline__ void sp_cp_async16_(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(sp_smem_addr_(dst)),
                 "l"(src)
                 : "memory");
}

/* The same, reading only src_bytes (0 or 16) and zero-filling the rest;
 * dst a shared-memory address (sp_smem_addr_). */
static __device__ __forceinline__ void sp_cp_async16_fill_to_(unsigned dst, const void *src,
                                                              int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(dst), "l"(src),
                 "r"(src_bytes)
                 : "memory");
}

/* The same, to a generic pointer into shared memory. */
static __device__ __forceinline__ void sp_cp_async16_fill_(void *dst, const void *src,
                                                           int src_bytes) {
    sp_cp_async16_fill_to_(sp_smem_addr_(dst), src, src_bytes);
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

/* sp_bar_sync_ that also gives every thread whether any of them had `pred`
 * nonzero. */
static __device__ __forceinline__ int sp_bar_sync_or_(int id, int count, int pred) {
    int any;
    asm volatile("{\n"
                 "  .reg .pred p, q;\n"
                 "  setp.ne.s32 p, %3, 0;\n"
                 "  bar.red.or.pred q, %1, %2, p;\n"
                 "  selp.s32 %0, 1, 0, q;\n"
                 "}\n"
                 : "=r"(any)
                 : "r"(id), "r"(count), "r"(pred)
                 : "memory");
    return any;
}

/* The host forms' flush: a result below the smallest normal float is 0. */
static inline float sp_flush_host_(float y) { return fabsf(y) < 1.17549435e-38f ? 0.0f : y; }

/* One special-function instruction on the device; on the host, the exact
 * function (`host`, of x). */
#ifdef __CUDA_ARCH__
#define SP_SFU_(instr, host)                                                                       \
    float y;                                                                                       \
    asm(instr " %0, %1;\n" : "=f"(y) : "f"(x));                                                   \
    return y
#else
#define SP_SFU_(instr, host) return (host)
#endif

/* 2^x and 1/x; results below the smallest normal float flush to zero. (On
 * the host: exact, then flushed; the instructions are within 2 ulp.) */
static __host__ __device__ __forceinline__ float sp_ex2_ftz_(float x) {
    SP_SFU_("ex2.approx.ftz.f32", sp_flush_host_(exp2f(x)));
}
static __host__ __device__ __forceinline__ float sp_rcp_ftz_(float x) {
    SP_SFU_("rcp.approx.ftz.f32", sp_flush_host_(1.0f / x));
}

/* max(a, b), a NaN operand giving NaN (fmaxf gives the other operand):
 * one instruction (sm_80 and later). */
static __host__ __device__ __forceinline__ float sp_fmax_nan_(float a, float b) {
#ifdef __CUDA_ARCH__
    float y;
    asm("max.NaN.f32 %0, %1, %2;\n" : "=f"(y) : "f"(a), "f"(b));
    return y;
#else
    return a != a || b != b ? a + b : fmaxf(a, b);
#endif
}

/* log2(x) (absolute error about 2^-22 for x in [0.5, 2], relative
 * elsewhere); a subnormal x is taken as 0. (On the host: exact.) */
static __host__ __device__ __forceinline__ float sp_lg2_ftz_(float x) {
    SP_SFU_("lg2.approx.ftz.f32", log2f(x));
}

/* Ask for the line at `at` to be brought into L2; nothing waits for it. */
static __device__ __forceinline__ void sp_prefetch_l2_(const void *at) {
    asm volatile("prefetch.global.L2 [%0];\n" ::"l"(at));
}

/* ---- bulk copies and mbarriers (sm_90) ----------------------------------- */

/* mbarrier `bar` (a shared address) expecting `count` arrivals; then, once
 * for all of them, the fence that makes the initializations visible. */
static __device__ __forceinline__ void sp_mbarrier_init_(unsigned bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

static __device__ __forceinline__ void sp_mbarrier_init_fence_(void) {
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

/* This thread's shared-memory accesses ordered before the bulk copies it
 * issues next (the async proxy). */
static __device__ __forceinline__ void sp_fence_proxy_async_(void) {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* Arrive on `bar`, announcing `bytes` of transactions to come. */
static __device__ __forceinline__ void sp_mbarrier_expect_tx_(unsigned bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar),
                 "r"(bytes)
                 : "memory");
}

/* Copy `bytes` (a multiple of 16) from global src to shared dst in one
 * bulk copy, completing as transactions on `bar`. */
static __device__ __forceinline__ void sp_bulk_copy_g2s_(unsigned dst, const void *src,
                                                         unsigned bytes, unsigned bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes "
                 "[%0], [%1], %2, [%3];\n" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(bar)
                 : "memory");
}

/* A flag between blocks of one grid: set with release at GPU scope (what
 * the setting thread wrote before, and what its block wrote before a block
 * barrier, is seen by a thread that acquires the flag), read with acquire. */
static __device__ __forceinline__ void sp_flag_release_(int *at, int v) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(at), "r"(v) : "memory");
}
static __device__ __forceinline__ int sp_flag_acquire_(const int *at) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(at) : "memory");
    return v;
}

/* This thread's global-memory accesses so far ordered before the bulk
 * copies it issues next (sm_90). */
static __device__ __forceinline__ void sp_fence_proxy_async_global_(void) {
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

/* Arrive on `bar` (release: this thread's earlier shared-memory writes are
 * seen by a thread whose wait on the phase returns). */
static __device__ __forceinline__ void sp_mbarrier_arrive_(unsigned bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

/* Wait until `bar` completes the phase of parity `parity`. */
static __device__ __forceinline__ void sp_mbarrier_wait_(unsigned bar, unsigned parity) {
    asm volatile("{\n.reg .pred done;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT_%=;\n}\n" ::"r"(bar),
                 "r"(parity)
                 : "memory");
}

/* sm_90a: this warpgroup's registers a thread lowered (dec) or raised (inc)
 * to N, from the launch's even share; every warp of the warpgroup executes
 * it. Compiled for plain sm_90 it does nothing (ptxas then keeps the
 * launch's share everywhere). */
template <int N> static __device__ __forceinline__ void sp_setmaxnreg_dec_(void) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}
template <int N> static __device__ __forceinline__ void sp_setmaxnreg_inc_(void) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N));
#endif
}

/* ---- warpgroup matrix products (wgmma, sm_90a) ------------------------------ */

/* The shared-memory descriptor of a bf16 operand in the 128-byte swizzled
 * layout (1024-byte aligned groups of 8 rows of 128 bytes): `smem` its
 * first element (within a row, the k16 slice's 32-byte offset), `lbo` and
 * `sbo` the leading and stride byte offsets (K-major: sbo from one 8-row
 * group to the next, lbo unused; MN-major: lbo from one 64-element block
 * of the MN index to the next, sbo from one 8-row group of K to the next). */
static __device__ __forceinline__ uint64_t sp_gmma_desc_sw128_(unsigned smem, unsigned lbo,
                                                               unsigned sbo) {
    return (uint64_t)((smem & 0x3ffff) >> 4) | (uint64_t)((lbo >> 4) & 0x3fff) << 16 |
           (uint64_t)((sbo >> 4) & 0x3fff) << 32 | (uint64_t)1 << 62;
}

/* Before the first product that reads registers written otherwise; after a
 * batch of products; waiting until at most N batches are in flight. */
static __device__ __forceinline__ void sp_wgmma_fence_(void) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
static __device__ __forceinline__ void sp_wgmma_commit_(void) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
template <int N> static __device__ __forceinline__ void sp_wgmma_wait_(void) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

/* The compiler keeps register x where it is across this point (after a
 * wait: later reads of x stay after it). */
static __device__ __forceinline__ void sp_reg_fence_(float &x) {
    asm volatile("" : "+f"(x)::"memory");
}
static __device__ __forceinline__ void sp_reg_fence_(uint32_t &x) {
    asm volatile("" : "+r"(x)::"memory");
}

/* D (64 x 32 fp32: this thread's 16) += A (64 x 16 bf16, from registers:
 * the mma.sync m16n8k16 A fragment of this warp's 16 rows) times B (16 x
 * 32 bf16, a shared-memory descriptor); TRANS_B: B's rows are its N index
 * (MN-major). Asynchronous: D and A must not be touched until
 * sp_wgmma_wait_ (after sp_wgmma_commit_). */
template <int TRANS_B>
static __device__ __forceinline__ void sp_wgmma_m64n32k16_(float d[16], const uint32_t a[4],
                                                     uint64_t b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15"
                 "}, {%16, %17, %18, %19}, %20, p, 1, 1, %22;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1), "n"(TRANS_B));
#else
    (void)d, (void)a, (void)b;
#endif
}

/* The same, 64 x 64. */
template <int TRANS_B>
static __device__ __forceinline__ void sp_wgmma_m64n64k16_(float d[32], const uint32_t a[4],
                                                     uint64_t b) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
                 "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, "
                 "%15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, "
                 "%30, %31"
                 "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]),
                   "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]),
                   "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]),
                   "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
                   "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]),
                   "+f"(d[30]), "+f"(d[31])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(1), "n"(TRANS_B));
#else
    (void)d, (void)a, (void)b;
#endif
}

/* ---- bf16 conversions ------------------------------------------------------ */

/* Two floats as a bf16x2 word (lo in the low half), each rounded to nearest
 * even; no flush to zero. On the device one instruction (where
 * sp_f32_to_bf16_ takes about ten a value): the same bits for every value
 * but NaN, which stays a NaN (the canonical one, its payload not kept). */
static __host__ __device__ __forceinline__ uint32_t sp_bf16x2_(float lo, float hi) {
    uint32_t u;
#ifdef __CUDA_ARCH__
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(u) : "f"(hi), "f"(lo));
#else
    u = (uint32_t)sp_f32_to_bf16_(lo) | ((uint32_t)sp_f32_to_bf16_(hi) << 16);
#endif
    return u;
}

static __device__ __forceinline__ uint16_t sp_bf16_rn_(float x) {
    uint16_t h;
    asm("cvt.rn.bf16.f32 %0, %1;\n" : "=h"(h) : "f"(x));
    return h;
}

/* ---- tensor-core fragments ------------------------------------------------- */

/* c += a b for one tile (A row-major, B column-major fragments), fp32
 * accumulation: sp_mma_tf32_ m16n8k8 with tf32 operands, sp_mma_bf16_
 * m16n8k16 with bf16 operands. */
#define SP_MMA_TILE_(name, shape_and_types)                                                        \
    static __device__ __forceinline__ void name(float c[4], const uint32_t a[4], uint32_t b0,     \
                                                uint32_t b1) {                                    \
        asm volatile("mma.sync.aligned." shape_and_types " "                                      \
                     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                    \
                     : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])                             \
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));             \
    }
SP_MMA_TILE_(sp_mma_tf32_, "m16n8k8.row.col.f32.tf32.tf32.f32")
SP_MMA_TILE_(sp_mma_bf16_, "m16n8k16.row.col.f32.bf16.bf16.f32")

/* Four 8x8 b16 matrices from shared memory, lanes 8i .. 8i + 7 giving the
 * row addresses of matrix i; x[i] is this lane's part of it (row lane / 4,
 * columns 2 (lane % 4), +1), or with TRANS of its transpose. */
template <int TRANS>
static __device__ __forceinline__ void sp_ldsm_x4_(const uint16_t *row, uint32_t x[4]) {
    if (TRANS)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3])
                     : "r"(sp_smem_addr_(row)));
    else
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                     : "=r"(x[0]), "=r"(x[1]), "=r"(x[2]), "=r"(x[3])
                     : "r"(sp_smem_addr_(row)));
}

/* The reverse, transposed (sm_90): this lane's parts x[i] of four 8x8
 * matrices stored transposed, lanes 8i .. 8i + 7 giving the row addresses
 * of stored matrix i. */
static __device__ __forceinline__ void sp_stsm_x4_trans_(uint16_t *row, const uint32_t x[4]) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1,%2,%3,%4};\n" ::"r"(
                     sp_smem_addr_(row)),
                 "r"(x[0]), "r"(x[1]), "r"(x[2]), "r"(x[3])
                 : "memory");
}

#endif /* SP_CUDA_PTX_CUH */
