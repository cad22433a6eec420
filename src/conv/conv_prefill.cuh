/*
 * conv_prefill.cuh — a thread of the prefill kernel: 8 channels of one tile
 * of consecutive tokens (conv_kernels.cuh has what it shares with decode).
 *
 * The thread slides a window of the W-1 previous inputs along its tile in
 * registers. Its next inputs are in flight meanwhile: on the vector path
 * (16-byte rows of x and outputs, the common layouts) RING of them, copied
 * with cp.async into the thread's own slots of shared memory, so that what
 * is in flight costs no registers, in one stream through the tile that runs
 * on across its sequences (xring); elsewhere AHEAD of them, loaded into
 * registers before the first is used (docs/TUNING.md, "CONV_RING"). The
 * token loop runs four tokens a pass, so that the window slides by renaming
 * registers, not by moving them. At the tile's start the window (the halo)
 * is loaded from the W-1 rows before it, which the neighbouring tile's
 * block read moments earlier (an L2 hit, mostly): x is read from memory
 * about once.
 *
 * Sequences and the state pool. A sequence's first W-1 tokens and its state
 * slot belong to the tile that holds its first token, which may run up to
 * W-2 tokens past its own end to finish them: only that thread reads the
 * slot (the initial state is the window before those tokens) and it writes
 * the final state too, from its window when it saw the whole sequence, or
 * else from the sequence's last W-1 rows of x. So no slot is read by one
 * block and written by another: no ordering between blocks is needed, and
 * the call is one launch. Tiles after the first start past those W-1
 * tokens and take their halo from x.
 */
#ifndef SP_CONV_PREFILL_CUH
#define SP_CONV_PREFILL_CUH

#include "conv/conv_kernels.cuh"

#ifdef __CUDA_ARCH__
#define UNROLL_TOKENS _Pragma("unroll (SILU ? 4 : 2)") /* run_tokens' loop */
#else
#define UNROLL_TOKENS
#endif

#define AHEAD 8 /* off the vector path: tokens loaded before the first is used */
/* Tokens in flight per thread on the vector path (device). 8, not 16: with
 * the token loop unrolled, the shorter code and start-up pay off at every
 * prefill shape, and 4, 6 and 12 do no better (docs/TUNING.md, "CONV_RING"). */
#define RING 8

/* The slot's W-1 inputs of 8 channels into z (tap j of channel i is
 * z[j][i]), or back. Dense state: channel c's taps are elements c*(W-1) ..
 * c*(W-1)+W-2, so 8 channels are W-1 16-byte vectors. */
template <int W>
static FN void state_io(const conv_params &p, int64_t slot, int64_t c0, float (&z)[W - 1][VEC],
                        bool store) {
    uint16_t *base = p.state + slot * p.s_slot;
    if (p.state_vec) {
        uint4 *v = (uint4 *)(base + c0 * (W - 1));
        must_align(v, 16);
        bf8 raw[W - 1] = {}; /* a store sets every half below */
        if (!store) {
            SP_HD_UNROLL
            for (int r = 0; r < W - 1; r++) raw[r] = from_uint4(v[r]);
        }
        SP_HD_UNROLL
        for (int i = 0; i < VEC; i++) {
            SP_HD_UNROLL
            for (int j = 0; j < W - 1; j++) {
                const int k = i * (W - 1) + j;
                if (store)
                    put(raw[k / VEC], k % VEC, narrow(z[j][i]));
                else
                    z[j][i] = widen(get(raw[k / VEC], k % VEC));
            }
        }
        if (store) {
            SP_HD_UNROLL
            for (int r = 0; r < W - 1; r++) v[r] = to_uint4(raw[r]);
        }
        return;
    }
    SP_HD_UNROLL
    for (int i = 0; i < VEC; i++) {
        if (c0 + i >= p.C) break;
        SP_HD_UNROLL
        for (int j = 0; j < W - 1; j++) {
            uint16_t *e = base + (c0 + i) * p.s_c + j * p.s_j;
            if (store)
                *e = narrow(z[j][i]);
            else
                z[j][i] = widen(*e);
        }
    }
}

/* The window before token t from x itself: z[j] <- row t-W+1+j. */
template <int W>
static FN void halo_from_x(const conv_params &p, int64_t t, int64_t c0, float (&z)[W - 1][VEC]) {
    SP_HD_UNROLL
    for (int j = 0; j < W - 1; j++) {
        const bf8 r = load_x(p, t - (W - 1) + j, c0);
        SP_HD_UNROLL
        for (int i = 0; i < VEC; i++) z[j][i] = widen(get(r, i));
    }
}

/* The vector path's next inputs: rows [row, row + RING) of the thread's 8
 * channels, in flight while earlier ones are used. One stream runs through
 * a tile, across the sequences in it, so that a sequence's first rows are
 * on their way while the one before it ends (a stream restarted at each
 * sequence waits out a memory latency there: docs/TUNING.md, "CONV_RING").
 * On the device the rows are copied (cp.async) into the thread's own slots
 * of shared memory, so that what is in flight costs no registers; a slot is
 * read back by the thread that filled it, once its copy group has
 * completed. The host loads them at once. */
typedef struct xring {
    const uint16_t *x;    /* row 0's vector */
    const uint16_t *next; /* the next row to load */
    int64_t xr;           /* x's row stride */
    int64_t row, end;     /* the next row used; rows from `end` are never read */
    int64_t left;         /* rows still to load */
    int u;                /* the slot of `row` */
#ifndef __CUDA_ARCH__
    bf8 slot[RING];
#endif
} xring;

/* A stream over rows before `end`, none in flight yet. */
static FN void ring_init(xring &r, const conv_params &p, int64_t c0, int64_t end) {
    r.x = p.x + c0;
    r.next = r.x;
    r.xr = p.x_row;
    r.row = -1;
    r.end = end;
    r.left = 0;
    r.u = 0;
}

#ifdef __CUDA_ARCH__
static __device__ __forceinline__ uint4 *ring_slot(int u) {
    __shared__ uint4 ring[RING][THREADS];
    return &ring[u][threadIdx.x];
}
#endif

/* The next row into slot u, if there is one to read; one copy group
 * either way. */
static FN void ring_issue(xring &r, int u) {
#ifdef __CUDA_ARCH__
    if (r.left > 0) sp_cp_async16_(ring_slot(u), r.next);
    sp_cp_async_commit_();
#else
    if (r.left > 0) r.slot[u] = load16(r.next);
#endif
    r.next += r.xr;
    r.left--;
}

/* Rows [a, b) next: the stream goes on if row a is its next, else (or if
 * b is past what it reads) restarts at a. */
static FN void ring_seek(xring &r, int64_t a, int64_t b) {
    if (a == r.row && b <= r.end) return;
#ifdef __CUDA_ARCH__
    sp_cp_async_wait_<0>();
#endif
    if (b > r.end) r.end = b;
    r.row = a;
    r.next = r.x + a * r.xr;
    r.left = r.end - a;
    r.u = 0;
    SP_HD_UNROLL
    for (int u = 0; u < RING; u++) ring_issue(r, u);
}

static FN bf8 ring_next(xring &r) {
#ifdef __CUDA_ARCH__
    sp_cp_async_wait_<RING - 1>();
    const bf8 x = from_uint4(*ring_slot(r.u));
#else
    const bf8 x = r.slot[r.u];
#endif
    ring_issue(r, r.u);
    r.row++;
    r.u = r.u == RING - 1 ? 0 : r.u + 1;
    return x;
}

/* Every copy landed (before the thread ends). */
static FN void ring_drain() {
#ifdef __CUDA_ARCH__
    sp_cp_async_wait_<0>();
#endif
}

/* Tokens [a, b) of one sequence, the window z already holding the W-1
 * inputs before a; z ends holding the W-1 inputs before b. FAST: x rows
 * and outputs are 16-byte vectors (the common layouts): x comes from the
 * stream r and outputs are walked with a pointer; else each access takes
 * the layout's general path. */
template <int W, int FAST, int SILU>
static FN void run_tokens(const conv_params &p, const float (&w)[VEC][W], const float (&bias)[VEC],
                          float (&z)[W - 1][VEC], xring &r, int64_t a, int64_t b, int64_t c0) {
    if (a >= b) return;
    const int si = seg_of(p, c0);
    if (FAST) {
        const sp_conv_seg &g = p.seg[si];
        uint16_t *op = g.data + a * g.row + (c0 - g.first);
        const int64_t orow = g.row;
        ring_seek(r, a, b);
        /* Four tokens a pass (two without SiLU, where ptxas spills at
         * four, W = 4): the window's shifts become renamed registers
         * instead of moves, fewer instructions (docs/TUNING.md,
         * "CONV_RING"). Fully unrolled with the ring, the loop's code was
         * what a short tile's warps waited to fetch. */
        UNROLL_TOKENS
        for (int64_t t = a; t < b; t++, op += orow) {
            const bf8 y = step<W, SILU>(w, bias, z, ring_next(r));
            must_align(op, 16);
            *(uint4 *)op = to_uint4(y);
        }
    } else {
        for (int64_t t = a; t < b; t += AHEAD) {
            const int64_t m = b - t;
            bf8 xs[AHEAD];
            SP_HD_UNROLL
            for (int u = 0; u < AHEAD; u++)
                if (u < m) xs[u] = load_x(p, t + u, c0);
            SP_HD_UNROLL
            for (int u = 0; u < AHEAD; u++) {
                if (u >= m) break;
                store_out(p, si, t + u, c0, step<W, SILU>(w, bias, z, xs[u]));
            }
        }
    }
}

/* First k in [0, n) with v[k] >= key, n if none. */
static FN int64_t lower_bound(sp_index_ v, int64_t n, int64_t key) {
    int64_t lo = 0, hi = n;
    while (lo < hi) {
        const int64_t mid = lo + (hi - lo) / 2;
        if (sp_index_at_(v, mid) < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* One thread of the grid: token tile `bx` of `tiles`, channels from c0. */
template <int W, int FAST, int SILU>
static FN void conv_thread(const conv_params &p, int64_t bx, int64_t tiles, int64_t c0) {
    if (c0 >= p.C) return;
    const int64_t t0 = bx * p.tile;
    const int64_t t1 = t0 + p.tile < p.T ? t0 + p.tile : p.T;
    /* The halo and the first rows of the tile, on their way to L2 while the
     * sequence lookups and the weights are read: a tile's start then waits
     * on L2, not on memory. */
    if (FAST)
        for (int64_t t = t0 - (W - 1); t < t0 + RING && t < p.T; t++)
            if (t >= 0) prefetch_l2(p.x + t * p.x_row + c0);
    float w[VEC][W], bias[VEC];
    load_params<W>(p, c0, w, bias);
    float z[W - 1][VEC] = {}; /* channels past C are never loaded: zeros */
    /* The rows of the tile; a sequence that starts in its last W-2 rows
     * extends the stream past them (see the file's header). */
    xring r;
    ring_init(r, p, c0, t1);

    /* A sequence that began in an earlier tile: tokens from t0, or from its
     * W-th token if that is later; the halo comes from x. */
    const int64_t lo = lower_bound(p.cu, p.N + 1, t0);
    if (lo >= 1 && lo <= p.N) {
        const int64_t n = lo - 1, s = sp_index_at_(p.cu, n), e = sp_index_at_(p.cu, n + 1);
        const int64_t slot = sp_index_at_(p.idx, n);
        const int64_t a = t0 > s + W - 1 ? t0 : s + W - 1, b = t1 < e ? t1 : e;
        if (s >= 0 && s <= e && e <= p.T && slot >= 0 && slot < p.slots && a < b) {
            halo_from_x<W>(p, a, c0, z);
            run_tokens<W, FAST, SILU>(p, w, bias, z, r, a, b, c0);
        }
    }
    /* Sequences that begin in this tile (the last tile also owns those
     * that begin at T: empty ones, whose state is still written). */
    const bool last = bx == tiles - 1;
    for (int64_t n = lo; n < p.N; n++) {
        const int64_t s = sp_index_at_(p.cu, n), e = sp_index_at_(p.cu, n + 1);
        if (!(s < t1 || (last && s <= p.T))) break;
        const int64_t slot = sp_index_at_(p.idx, n);
        if (s < 0 || s > e || e > p.T || slot < 0 || slot >= p.slots) continue;
        if (p.init && p.init[n]) {
            state_io<W>(p, slot, c0, z, false);
        } else {
            SP_HD_UNROLL
            for (int j = 0; j < W - 1; j++)
                SP_HD_UNROLL
                for (int i = 0; i < VEC; i++) z[j][i] = 0.0f;
        }
        const int64_t own = t1 > s + W - 1 ? t1 : s + W - 1;
        const int64_t end = e < own ? e : own;
        run_tokens<W, FAST, SILU>(p, w, bias, z, r, s, end, c0);
        if (end < e) halo_from_x<W>(p, e, c0, z);
        state_io<W>(p, slot, c0, z, true);
    }
    ring_drain();
}

/* Blocks per multiprocessor to aim for, so that ptxas keeps each instance
 * within the registers of 4 blocks (W = 2) or 3 (W = 3, 4), sm_90: at
 * W = 4 the vector path spills at 4 blocks and runs slower than at 3
 * (docs/TUNING.md, "CONV_BLOCKS"). */
template <int W, int FAST, int SILU>
static __global__ void __launch_bounds__(THREADS, W == 2 ? 4 : 3)
    conv_kernel(const conv_params p) {
    int64_t bx, c0;
    if (item_of(p, (int64_t)blockIdx.x * THREADS + threadIdx.x, &bx, &c0))
        conv_thread<W, FAST, SILU>(p, bx, p.tiles, c0);
}

#endif /* SP_CONV_PREFILL_CUH */
