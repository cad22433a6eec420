/*
 * copy.cu — the CUDA backend of sp_copy_batch: all planned pairs of a batch
 * (at most SP_MAX_PAIRS_PER_LAUNCH) in ONE kernel launch.
 *
 * Why it looks the way it does:
 *   - Every descriptor travels by value in the kernel's parameter block
 *     (__grid_constant__, read through the constant cache). There is no
 *     device table to allocate or upload, so a call allocates nothing,
 *     copies nothing host-to-device, never synchronizes, and is recorded as
 *     one kernel node by CUDA graph capture. The block is kept small (a
 *     compact per-pair record, capacities of 4 and 8 pairs for the usual
 *     few tensors), since the driver copies it on every launch.
 *   - Each pair is cut into tiles of SP_TILE_BYTES whatever the word size,
 *     and tiles are dealt round-robin over the pairs, smallest pair first
 *     (block 0 takes tile 0 of every pair in turn, and so on). Blocks carry
 *     equal bytes, so a 400 MB q and a 3 MB beta share the machine evenly;
 *     the small pairs finish early instead of forming the tail; and the
 *     blocks in flight read q, k and v rows side by side, which for the K3
 *     layout is one dense sweep of the [T, 3P] buffer.
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
#include "cuda/runtime.h"

#include <cuda_runtime.h>
#include <stdint.h>

/* Launch shape: 2 loads per thread with 8 blocks of 256 threads resident
 * (64 KiB in flight per SM, 8 KiB tiles); fewer, fuller threads and larger
 * tiles leave more of each block's life without loads in flight
 * (docs/TUNING.md, "SP_THREADS, SP_UNROLL"). */
#define SP_THREADS 256  /* per block */
#define SP_UNROLL 2     /* loads in flight per thread before its first store */
/* Resident blocks per SM the register budget must allow: 8 (2048 threads)
 * where an SM holds that many, 6 on the chips that hold 1536 (sm_86, sm_87,
 * sm_89, sm_12x); ptxas rejects more there as out of range. */
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ == 860 || __CUDA_ARCH__ == 870 || \
                               __CUDA_ARCH__ == 890 || __CUDA_ARCH__ >= 1200)
#define SP_MIN_BLOCKS 6
#else
#define SP_MIN_BLOCKS 8
#endif
#define SP_MIN_BLOCKS_GENERAL 3
#define SP_TILE_BYTES (SP_THREADS * SP_UNROLL * 16) /* one round of 16-byte words */
/* Capacities of the parameter block: the usual few tensors get a short one,
 * since the driver copies it on every launch. */
#define SP_CAP_4 4
#define SP_CAP_8 8

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

/* What every pair needs; all a pair with at most one outer dim needs. */
typedef struct sp_kpair {
    uint64_t src, dst;      /* byte address of element 0 */
    uint64_t units;         /* moves of 1 << vec_log2 bytes */
    int64_t src_run_stride; /* bytes between moves of a run */
    int64_t dst_run_stride;
    int64_t src_outer;      /* bytes, first outer dim (0 when there is none) */
    int64_t dst_outer;
    sp_divisor run;         /* run_units */
    int32_t vec_log2;
    int32_t mode;
} sp_kpair;

/* The rest, for pairs with 2..7 outer dims (GENERAL launches only). */
typedef struct sp_kouter {
    sp_divisor div[SP_DESC_OUTER - 1]; /* outer dims but the outermost */
    int64_t src[SP_DESC_OUTER];        /* bytes, innermost first */
    int64_t dst[SP_DESC_OUTER];
    int32_t n; /* outer dims */
    int32_t pad_;
} sp_kouter;

/* The tile map: segment s covers blocks [start[s], start[s + 1]); in it,
 * pairs s .. s + act[s] - 1 take turns, block start[s] + k getting tile
 * round0[s] + k / act[s] of pair s + k % act[s]. Pairs are sorted by tile
 * count, so segment s is where pair s - 1 has run out of tiles. */
template <int CAP> struct sp_ktiles {
    uint64_t start[CAP + 1];
    uint64_t round0[CAP];
    uint32_t act[CAP];
    int32_t n;
};

template <int CAP, bool GENERAL> struct sp_kparams;
template <int CAP> struct sp_kparams<CAP, false> {
    sp_ktiles<CAP> map;
    sp_kpair d[CAP];
};
template <int CAP> struct sp_kparams<CAP, true> {
    sp_ktiles<CAP> map;
    sp_kpair d[CAP];
    sp_kouter o[CAP];
};

/* CUDA 12.1+ on Volta and later: kernel parameters up to 32764 bytes. */
static_assert(sizeof(sp_kparams<SP_MAX_PAIRS_PER_LAUNCH, true>) <= 32764,
              "descriptors of one launch exceed the kernel parameter limit");
static_assert((SP_MAX_PAIRS_PER_LAUNCH & (SP_MAX_PAIRS_PER_LAUNCH - 1)) == 0 &&
                  (SP_CAP_4 & (SP_CAP_4 - 1)) == 0 && (SP_CAP_8 & (SP_CAP_8 - 1)) == 0,
              "the segment search assumes power-of-two capacities");

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
 * GENERAL the pair has at most one outer dim (the K3 layouts do): one
 * divide and few live registers. */
template <bool GENERAL, typename I, typename O>
static __device__ __forceinline__ void unit_offsets(const sp_kpair &d, const sp_kouter *x, I u,
                                                       O *so, O *to) {
    I o = sp_div(u, d.run);
    const I i = u - o * (I)d.run.d;
    O s = (O)i * (O)d.src_run_stride;
    O t = (O)i * (O)d.dst_run_stride;
    if (!GENERAL) {
        s += (O)o * (O)d.src_outer; /* adds 0 when there is no outer dim: o is 0 */
        t += (O)o * (O)d.dst_outer;
    } else {
#pragma unroll
        for (int j = 0; j < SP_DESC_OUTER - 1; j++) {
            if (j + 1 >= x->n) break;
            const I q = sp_div(o, x->div[j]);
            const I idx = o - q * (I)x->div[j].d;
            s += (O)idx * (O)x->src[j];
            t += (O)idx * (O)x->dst[j];
            o = q;
        }
        if (x->n > 0) { /* the outermost dim takes what is left */
            s += (O)o * (O)x->src[x->n - 1];
            t += (O)o * (O)x->dst[x->n - 1];
        }
    }
    *so = s;
    *to = t;
}

/* Move one tile of a pair: SP_TILE_BYTES from unit `first` on, in rounds of
 * SP_UNROLL words per thread (16 / sizeof(W) rounds). */
template <bool GENERAL, typename W, typename I, typename O>
static __device__ __forceinline__ void copy_tile(const sp_kpair &d, const sp_kouter *x,
                                                    uint64_t first64) {
    constexpr int ROUNDS = (int)(SP_TILE_BYTES / sizeof(W) / (SP_UNROLL * SP_THREADS));
    const char *src = (const char *)(uintptr_t)d.src;
    char *dst = (char *)(uintptr_t)d.dst;
    const I units = (I)d.units;
    const I first = (I)first64;
#pragma unroll 1
    for (int r = 0; r < ROUNDS; r++) {
        const I base = first + (I)(r * SP_UNROLL * SP_THREADS + (int)threadIdx.x);
        if (base >= units) break;
        W v[SP_UNROLL];
        O to[SP_UNROLL];
        /* Loads past the end re-read the last unit, so all of them issue
         * back to back without branches; only the stores are predicated. */
#pragma unroll
        for (int k = 0; k < SP_UNROLL; k++) {
            const I u = base + (I)(k * SP_THREADS);
            O so;
            unit_offsets<GENERAL, I, O>(d, x, u < units ? u : units - 1, &so, &to[k]);
            v[k] = __ldg((const W *)(src + sp_signed(so)));
        }
#pragma unroll
        for (int k = 0; k < SP_UNROLL; k++) {
            const I u = base + (I)(k * SP_THREADS);
            if (u < units) *(W *)(dst + sp_signed(to[k])) = v[k];
        }
    }
}

template <int CAP>
static __device__ __forceinline__ const sp_kouter *sp_outer_of(const sp_kparams<CAP, false> &,
                                                               int) {
    return nullptr;
}
template <int CAP>
static __device__ __forceinline__ const sp_kouter *sp_outer_of(const sp_kparams<CAP, true> &P,
                                                               int p) {
    return &P.o[p];
}

/* GENERAL: some pair has two or more outer dims. The bounds cap registers
 * (32 and 85 a thread) at what each variant needs without spilling, so
 * that eight or three blocks stay resident per multiprocessor. */
template <int CAP, bool GENERAL>
static __global__ void __launch_bounds__(SP_THREADS, GENERAL ? SP_MIN_BLOCKS_GENERAL : SP_MIN_BLOCKS)
    copy_kernel(const __grid_constant__ sp_kparams<CAP, GENERAL> P) {
    const sp_ktiles<CAP> &m = P.map;
    const uint64_t total = m.start[m.n];
    for (uint64_t t = blockIdx.x; t < total; t += gridDim.x) {
        int s = 0; /* the last segment that starts at or before t */
#pragma unroll
        for (int step = CAP / 2; step > 0; step >>= 1)
            if (s + step < m.n && m.start[s + step] <= t) s += step;
        const uint64_t off = t - m.start[s];
        const uint32_t act = m.act[s];
        const uint64_t k = act == 1 ? off : off / act;
        const int p = s + (int)(off - k * act);
        const sp_kpair &d = P.d[p];
        const sp_kouter *x = sp_outer_of(P, p);
        const uint64_t first = (m.round0[s] + k) * (uint64_t)(SP_TILE_BYTES >> d.vec_log2);
        switch (d.vec_log2 * SP_MODES + d.mode) {
#define SP_CASE(LOG2, W)                                                                   \
    case LOG2 * SP_MODES + SP_MODE_I32_O32:                                                \
        copy_tile<GENERAL, W, uint32_t, uint32_t>(d, x, first);                          \
        break;                                                                             \
    case LOG2 * SP_MODES + SP_MODE_I32_O64:                                                \
        copy_tile<GENERAL, W, uint32_t, uint64_t>(d, x, first);                          \
        break;                                                                             \
    case LOG2 * SP_MODES + SP_MODE_I64_O64:                                                \
        copy_tile<GENERAL, W, uint64_t, uint64_t>(d, x, first);                          \
        break;
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

static sp_divisor make_divisor(uint64_t d, int wide) {
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

static int log2_vec(int32_t vec) {
    switch (vec) {
    case 1: return 0;
    case 2: return 1;
    case 4: return 2;
    case 8: return 3;
    case 16: return 4;
    default: return -1;
    }
}

/* The planner validated every pair; a malformed descriptor here is a broken
 * internal contract, reported rather than run. */
static sp_status check_desc(const sp_copy_desc *c, int i) {
    SP_REQUIRE(log2_vec(c->vec) >= 0 && c->units > 0 && c->run_units > 0 &&
                   c->units % c->run_units == 0 && c->nouter >= 0 && c->nouter <= SP_DESC_OUTER,
               SP_ERR_INVALID_ARGUMENT,
               "descs[%d]: malformed copy descriptor (vec %d, units %lld, run %lld, nouter %d)", i,
               (int)c->vec, (long long)c->units, (long long)c->run_units, (int)c->nouter);
    for (int j = 0; j < c->nouter; j++)
        SP_REQUIRE(c->outer_shape[j] > 0, SP_ERR_INVALID_ARGUMENT,
                   "descs[%d]: outer_shape[%d] = %lld is not positive", i, j,
                   (long long)c->outer_shape[j]);
    return SP_OK;
}

static void fill_pair(const sp_copy_desc *c, sp_kpair *k, sp_kouter *x) {
    const int64_t lim32 = INT32_MAX;
    const int idx32 = c->units <= lim32; /* every divisor is <= units */
    const int off32 = c->src_span <= lim32 && c->dst_span <= lim32;
    k->src = c->src;
    k->dst = c->dst;
    k->units = (uint64_t)c->units;
    k->src_run_stride = c->src_run_stride;
    k->dst_run_stride = c->dst_run_stride;
    k->src_outer = c->nouter > 0 ? c->src_outer_stride[0] : 0;
    k->dst_outer = c->nouter > 0 ? c->dst_outer_stride[0] : 0;
    k->run = make_divisor((uint64_t)c->run_units, !idx32);
    k->vec_log2 = log2_vec(c->vec);
    k->mode = !idx32 ? SP_MODE_I64_O64 : off32 ? SP_MODE_I32_O32 : SP_MODE_I32_O64;
    if (!x) return;
    x->n = c->nouter;
    x->pad_ = 0;
    for (int j = 0; j < c->nouter; j++) {
        if (j < SP_DESC_OUTER - 1) x->div[j] = make_divisor((uint64_t)c->outer_shape[j], !idx32);
        x->src[j] = c->src_outer_stride[j];
        x->dst[j] = c->dst_outer_stride[j];
    }
}

template <int CAP> static sp_kouter *sp_outer_slot(sp_kparams<CAP, false> &, int) { return NULL; }
template <int CAP> static sp_kouter *sp_outer_slot(sp_kparams<CAP, true> &P, int p) {
    return &P.o[p];
}

/* Fill the parameter block (pairs in `order`, which sorts them by tile
 * count) and launch. Only the first n entries of each array are written or
 * read. */
template <int CAP, bool GENERAL>
static sp_status launch(const sp_copy_desc *descs, const int *order, const uint64_t *tiles,
                           int n, cudaStream_t stream) {
    sp_kparams<CAP, GENERAL> P;
    sp_ktiles<CAP> &m = P.map;
    uint64_t start = 0, prev = 0;
    for (int s = 0; s < n; s++) {
        fill_pair(&descs[order[s]], &P.d[s], sp_outer_slot(P, s));
        const uint64_t c = tiles[order[s]];
        m.start[s] = start;
        /* rounds prev .. c - 1 of pairs s .. n - 1, in turn */
        m.round0[s] = prev;
        m.act[s] = (uint32_t)(n - s);
        start += (c - prev) * (uint64_t)(n - s);
        prev = c;
    }
    m.start[n] = start;
    m.n = n;
    /* One block per tile; the kernel loops should a grid ever be capped. */
    const unsigned grid = start < (uint64_t)INT32_MAX ? (unsigned)start : (unsigned)INT32_MAX;
    /* cudaLaunchKernel returns this launch's own error, where the
     * last-error state (cudaGetLastError) may hold an older one of the
     * caller's. */
    void *args[] = {&P};
    SP_CUDA_CHECK(cudaLaunchKernel((const void *)copy_kernel<CAP, GENERAL>, dim3(grid),
                                   dim3(SP_THREADS), args, 0, stream));
    return SP_OK;
}

static sp_status plan_and_launch(const sp_copy_desc *descs, int n, cudaStream_t stream) {
    uint64_t tiles[SP_MAX_PAIRS_PER_LAUNCH];
    int order[SP_MAX_PAIRS_PER_LAUNCH];
    bool general = false;
    for (int i = 0; i < n; i++) {
        SP_FORWARD(check_desc(&descs[i], i));
        const uint64_t tile_units = (uint64_t)(SP_TILE_BYTES / descs[i].vec);
        tiles[i] = ((uint64_t)descs[i].units + tile_units - 1) / tile_units;
        general = general || descs[i].nouter > 1;
        int j = i; /* insertion sort by tile count, fewest first */
        while (j > 0 && tiles[order[j - 1]] > tiles[i]) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = i;
    }
    if (n <= SP_CAP_4)
        return general ? launch<SP_CAP_4, true>(descs, order, tiles, n, stream)
                       : launch<SP_CAP_4, false>(descs, order, tiles, n, stream);
    if (n <= SP_CAP_8)
        return general ? launch<SP_CAP_8, true>(descs, order, tiles, n, stream)
                       : launch<SP_CAP_8, false>(descs, order, tiles, n, stream);
    return general ? launch<SP_MAX_PAIRS_PER_LAUNCH, true>(descs, order, tiles, n, stream)
                   : launch<SP_MAX_PAIRS_PER_LAUNCH, false>(descs, order, tiles, n, stream);
}

extern "C" sp_status sp_cuda_copy_(const sp_copy_desc *descs, int n, int device,
                                  struct CUstream_st *stream) {
    SP_REQUIRE(descs != NULL && n >= 1 && n <= SP_MAX_PAIRS_PER_LAUNCH, SP_ERR_INVALID_ARGUMENT,
               "descs: %d descriptors, expected 1..%d", n, SP_MAX_PAIRS_PER_LAUNCH);
    sp_cuda_device_guard g;
    SP_FORWARD(sp_cuda_device_enter_(&g, device, "descs"));
    return sp_cuda_device_leave_(&g, plan_and_launch(descs, n, (cudaStream_t)stream));
}
