/*
 * copy.cu — the CUDA backend of sp_copy_batch: all planned pairs of a batch
 * (at most SP_MAX_PAIRS_PER_LAUNCH) in ONE kernel launch.
 *
 * Why it looks the way it does:
 *   - Every descriptor travels by value in the kernel's parameter block
 *     (__grid_constant__, read through the constant cache). There is no
 *     device table to allocate or upload, so a call allocates nothing,
 *     copies nothing host-to-device, never synchronizes, and is recorded as
 *     one kernel node by CUDA graph capture.
 *   - Each pair is cut into tiles of SP_TILE_BYTES (32 KiB whatever the word
 *     size), and a prefix sum of tile counts over the pairs maps a block to
 *     its pair. Blocks carry equal bytes, so a 400 MB q and a 3 MB beta
 *     share the machine evenly and nothing waits on one long pair.
 *   - A thread issues SP_UNROLL independent loads before its first store;
 *     consecutive threads take consecutive words, so a warp moves 512
 *     contiguous bytes per 16-byte access of a contiguous run.
 *   - Unit -> byte offset needs a divide per unit; divisors are turned into
 *     multiply-and-shift constants on the host. Index math is 32-bit where
 *     the pair's unit count and byte spans fit, 64-bit otherwise.
 *   - Words are moved as unsigned integers (uint8 ... uint4): bits, never
 *     values, so NaN payloads, infinities, subnormals and -0 survive.
 */
#include "internal.h"
#include "cuda_check.h"

#include <cuda_runtime.h>
#include <stdint.h>

#define SP_THREADS 256 /* per block */
#define SP_UNROLL 8    /* loads in flight per thread before its first store */
#define SP_UNROLL_GENERAL 4 /* fewer where the index math holds more registers */
#define SP_TILE_BYTES (SP_THREADS * SP_UNROLL * 16)

/* ---- descriptors as the kernel sees them ------------------------------- */

/* n / d == (mulhi(n, mul) + n) >> shift for every n below 2^(bits-1), where
 * bits is 32 or 64 by the pair's index width (Granlund-Montgomery with
 * m = 2^bits + mul = floor(2^(bits+shift) / d) + 1, shift = ceil(log2 d)). */
typedef struct sp_divisor {
    uint64_t d;
    uint64_t mul;
    uint32_t shift;
    uint32_t pad_;
} sp_divisor;

/* Index widths: units and divisors (I), byte offsets (O). */
enum { SP_MODE_I32_O32 = 0, SP_MODE_I32_O64 = 1, SP_MODE_I64_O64 = 2, SP_MODES = 3 };

typedef struct sp_kdesc {
    uint64_t src, dst;      /* byte address of element 0 */
    uint64_t units;         /* moves of 1 << vec_log2 bytes */
    int64_t src_run_stride; /* bytes between moves of a run */
    int64_t dst_run_stride;
    sp_divisor run;                        /* run_units */
    sp_divisor outer[SP_DESC_OUTER - 1];   /* outer dims but the outermost */
    int64_t src_outer[SP_DESC_OUTER];      /* bytes, innermost first */
    int64_t dst_outer[SP_DESC_OUTER];
    int32_t vec_log2;
    int32_t nouter;
    int32_t mode;
    int32_t pad_;
} sp_kdesc;

/* CAP pairs per launch; tile_start is the prefix sum of tiles per pair
 * (tile_start[n] = all tiles). Entries past n are never read. A small CAP
 * keeps the parameter block, which the driver copies on every launch,
 * short for the usual handful of tensors. */
template <int CAP> struct sp_kparams {
    uint64_t tile_start[CAP + 1];
    sp_kdesc d[CAP];
    int32_t n;
};

/* CUDA 12.1+ on Volta and later: kernel parameters up to 32764 bytes. */
static_assert(sizeof(sp_kparams<SP_MAX_PAIRS_PER_LAUNCH>) <= 32764,
              "descriptors of one launch exceed the kernel parameter limit");
static_assert((SP_MAX_PAIRS_PER_LAUNCH & (SP_MAX_PAIRS_PER_LAUNCH - 1)) == 0,
              "the pair search assumes a power-of-two capacity");

/* ---- device side --------------------------------------------------------- */

static __device__ __forceinline__ uint32_t sp_div(uint32_t n, const sp_divisor &v) {
    return (__umulhi(n, (uint32_t)v.mul) + n) >> v.shift;
}
static __device__ __forceinline__ uint64_t sp_div(uint64_t n, const sp_divisor &v) {
    return (__umul64hi(n, v.mul) + n) >> v.shift;
}

/* A 32-bit offset holds the true offset modulo 2^32 (any intermediate may
 * wrap); the host chose 32 bits only when the true offset fits int32. */
static __device__ __forceinline__ int64_t sp_signed(uint32_t x) { return (int32_t)x; }
static __device__ __forceinline__ int64_t sp_signed(uint64_t x) { return (int64_t)x; }

/* Byte offsets of unit u in the source and the destination. Without
 * GENERAL the pair has at most one outer dim (the K3 layouts do), which
 * needs one divide and few live registers. */
template <bool GENERAL, typename I, typename O>
static __device__ __forceinline__ void sp_unit_offsets(const sp_kdesc &d, I u, O *so, O *to) {
    I o = sp_div(u, d.run);
    const I i = u - o * (I)d.run.d;
    O s = (O)i * (O)d.src_run_stride;
    O t = (O)i * (O)d.dst_run_stride;
    if (!GENERAL) {
        s += (O)o * (O)d.src_outer[0]; /* adds 0 when nouter == 0: o is 0 */
        t += (O)o * (O)d.dst_outer[0];
    } else {
#pragma unroll
        for (int j = 0; j < SP_DESC_OUTER - 1; j++) {
            if (j + 1 >= d.nouter) break;
            const I q = sp_div(o, d.outer[j]);
            const I idx = o - q * (I)d.outer[j].d;
            s += (O)idx * (O)d.src_outer[j];
            t += (O)idx * (O)d.dst_outer[j];
            o = q;
        }
        /* the outermost dim takes what is left */
        s += (O)o * (O)d.src_outer[d.nouter - 1];
        t += (O)o * (O)d.dst_outer[d.nouter - 1];
    }
    *so = s;
    *to = t;
}

/* Move one tile of a pair: SP_TILE_BYTES from unit `first` on, in rounds of
 * U words per thread. */
template <bool GENERAL, typename W, typename I, typename O>
static __device__ __forceinline__ void sp_copy_tile(const sp_kdesc &d, uint64_t first64) {
    constexpr int U = GENERAL ? SP_UNROLL_GENERAL : SP_UNROLL;
    constexpr int ROUNDS = (int)(SP_TILE_BYTES / sizeof(W) / (U * SP_THREADS));
    const char *src = (const char *)(uintptr_t)d.src;
    char *dst = (char *)(uintptr_t)d.dst;
    const I units = (I)d.units;
    const I first = (I)first64;
#pragma unroll 1
    for (int r = 0; r < ROUNDS; r++) {
        const I base = first + (I)(r * U * SP_THREADS + (int)threadIdx.x);
        if (base >= units) break;
        W v[U];
        O to[U];
        /* Loads past the end re-read the last unit, so all of them issue
         * back to back without branches; only the stores are predicated. */
#pragma unroll
        for (int k = 0; k < U; k++) {
            const I u = base + (I)(k * SP_THREADS);
            O so;
            sp_unit_offsets<GENERAL, I, O>(d, u < units ? u : units - 1, &so, &to[k]);
            v[k] = __ldg((const W *)(src + sp_signed(so)));
        }
#pragma unroll
        for (int k = 0; k < U; k++) {
            const I u = base + (I)(k * SP_THREADS);
            if (u < units) *(W *)(dst + sp_signed(to[k])) = v[k];
        }
    }
}

/* GENERAL: some pair has two or more outer dims. The bounds cap registers
 * (64 and 85 a thread) at what each variant needs without spilling, which
 * keeps four or three blocks resident per multiprocessor. */
template <int CAP, bool GENERAL>
static __global__ void __launch_bounds__(SP_THREADS, GENERAL ? 3 : 4)
    sp_copy_kernel(const __grid_constant__ sp_kparams<CAP> P) {
    const uint64_t total = P.tile_start[P.n];
    for (uint64_t t = blockIdx.x; t < total; t += gridDim.x) {
        /* The last pair whose first tile is <= t (binary lifting). */
        int p = 0;
#pragma unroll
        for (int step = CAP / 2; step > 0; step >>= 1)
            if (p + step < P.n && P.tile_start[p + step] <= t) p += step;
        const sp_kdesc &d = P.d[p];
        const uint64_t first = (t - P.tile_start[p]) * (uint64_t)(SP_TILE_BYTES >> d.vec_log2);
        switch (d.vec_log2 * SP_MODES + d.mode) {
#define SP_CASE(LOG2, W)                                                                   \
    case LOG2 * SP_MODES + SP_MODE_I32_O32: sp_copy_tile<GENERAL, W, uint32_t, uint32_t>(d, first); break; \
    case LOG2 * SP_MODES + SP_MODE_I32_O64: sp_copy_tile<GENERAL, W, uint32_t, uint64_t>(d, first); break; \
    case LOG2 * SP_MODES + SP_MODE_I64_O64: sp_copy_tile<GENERAL, W, uint64_t, uint64_t>(d, first); break;
            SP_CASE(0, uint8_t)
            SP_CASE(1, uint16_t)
            SP_CASE(2, uint32_t)
            SP_CASE(3, uint2)
            SP_CASE(4, uint4)
#undef SP_CASE
        default: break; /* unreachable: the host checked vec and mode */
        }
    }
}

/* ---- host side ------------------------------------------------------------ */

static sp_divisor sp_make_divisor(uint64_t d, int wide) {
    sp_divisor v = {d, 0, 0, 0};
    uint32_t l = 0;
    while (l < 63 && ((uint64_t)1 << l) < d) l++; /* ceil(log2 d) */
    const uint64_t excess = ((uint64_t)1 << l) - d; /* < d */
    if (wide) {
        v.mul = (uint64_t)(((unsigned __int128)excess << 64) / d) + 1;
    } else {
        v.mul = (excess << 32) / d + 1; /* d < 2^31: no overflow, fits 32 bits */
    }
    v.shift = l;
    return v;
}

static int sp_log2_vec(int32_t vec) {
    switch (vec) {
    case 1: return 0;
    case 2: return 1;
    case 4: return 2;
    case 8: return 3;
    case 16: return 4;
    default: return -1;
    }
}

/* Translate the planner's descriptor; the planner already validated the
 * pair, so a failure here is a broken internal contract. */
static sp_status sp_kdesc_from(const sp_copy_desc *c, int i, sp_kdesc *k) {
    const int lv = sp_log2_vec(c->vec);
    SP_REQUIRE(lv >= 0 && c->units > 0 && c->run_units > 0 && c->nouter >= 0 &&
                   c->nouter <= SP_DESC_OUTER,
               SP_ERR_INVALID_ARGUMENT,
               "descs[%d]: malformed copy descriptor (vec %d, units %lld, run %lld, nouter %d)", i,
               (int)c->vec, (long long)c->units, (long long)c->run_units, (int)c->nouter);
    const int64_t lim32 = INT32_MAX;
    const int idx32 = c->units <= lim32; /* every divisor is <= units */
    const int off32 = c->src_span <= lim32 && c->dst_span <= lim32;
    k->src = c->src;
    k->dst = c->dst;
    k->units = (uint64_t)c->units;
    k->src_run_stride = c->src_run_stride;
    k->dst_run_stride = c->dst_run_stride;
    k->vec_log2 = lv;
    k->nouter = c->nouter;
    k->mode = !idx32 ? SP_MODE_I64_O64 : off32 ? SP_MODE_I32_O32 : SP_MODE_I32_O64;
    k->pad_ = 0;
    k->run = sp_make_divisor((uint64_t)c->run_units, !idx32);
    k->src_outer[0] = k->dst_outer[0] = 0; /* read, times 0, when nouter == 0 */
    for (int j = 0; j < c->nouter; j++) {
        SP_REQUIRE(c->outer_shape[j] > 0, SP_ERR_INVALID_ARGUMENT,
                   "descs[%d]: outer_shape[%d] = %lld is not positive", i, j,
                   (long long)c->outer_shape[j]);
        if (j < SP_DESC_OUTER - 1) k->outer[j] = sp_make_divisor((uint64_t)c->outer_shape[j], !idx32);
        k->src_outer[j] = c->src_outer_stride[j];
        k->dst_outer[j] = c->dst_outer_stride[j];
    }
    return SP_OK;
}

template <int CAP>
static sp_status sp_launch_copy(const sp_copy_desc *descs, int n, cudaStream_t stream) {
    sp_kparams<CAP> P; /* only the first n entries are filled or read */
    uint64_t tiles = 0;
    bool general = false;
    for (int i = 0; i < n; i++) {
        SP_FORWARD(sp_kdesc_from(&descs[i], i, &P.d[i]));
        general = general || P.d[i].nouter > 1;
        const uint64_t tile_units = (uint64_t)(SP_TILE_BYTES >> P.d[i].vec_log2);
        P.tile_start[i] = tiles;
        tiles += (P.d[i].units + tile_units - 1) / tile_units;
    }
    P.tile_start[n] = tiles;
    P.n = n;
    /* One block per tile; the kernel loops should a grid ever be capped. */
    const unsigned grid = tiles < (uint64_t)INT32_MAX ? (unsigned)tiles : (unsigned)INT32_MAX;
    /* cudaLaunchKernel returns this launch's own error; the last-error
     * state (cudaGetLastError) may hold an older one of the caller's. */
    const void *kernel = general ? (const void *)sp_copy_kernel<CAP, true>
                                 : (const void *)sp_copy_kernel<CAP, false>;
    void *args[] = {&P};
    SP_CUDA_CHECK(cudaLaunchKernel(kernel, dim3(grid), dim3(SP_THREADS), args, 0, stream));
    return SP_OK;
}

extern "C" sp_status sp_cuda_copy(const sp_copy_desc *descs, int n, int device,
                                  struct CUstream_st *stream) {
    SP_REQUIRE(descs != NULL && n >= 1 && n <= SP_MAX_PAIRS_PER_LAUNCH, SP_ERR_INVALID_ARGUMENT,
               "descs: %d descriptors, expected 1..%d", n, SP_MAX_PAIRS_PER_LAUNCH);
    int prev = 0;
    SP_CUDA_CHECK(cudaGetDevice(&prev));
    if (prev != device) SP_CUDA_CHECK(cudaSetDevice(device));
    sp_status s = n <= 8 ? sp_launch_copy<8>(descs, n, stream)
                         : sp_launch_copy<SP_MAX_PAIRS_PER_LAUNCH>(descs, n, stream);
    if (prev != device) { /* restore the caller's device on every path */
        cudaError_t e = cudaSetDevice(prev);
        if (e != cudaSuccess && s == SP_OK)
            s = sp_cuda_fail(e, "cudaSetDevice(prev)", __func__, __FILE__, __LINE__);
    }
    return s;
}

extern "C" int sp_cuda_available(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError(); /* "no device" is an answer, not an error to keep */
        return 0;
    }
    return n > 0;
}
