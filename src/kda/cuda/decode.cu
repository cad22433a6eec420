/*
 * decode.cu — the KDA decode kernel: few tokens a sequence (decode, and the
 * k+1 tokens of speculative verify), laid out for bandwidth, since such a
 * step is a stream over the state pool (every state read once, written once
 * or once per token of a verify table). Its layout and per-lane phases are
 * decode.cuh; its emulation on the host, lane by lane, for the tests of
 * machines without a GPU, decode_emulate.cu.
 *
 * In the V-first pool a state row j (the 128 K channels of V column j: 512
 * bytes in fp32) is independent of every other row once the token's q^, k^,
 * exp(g), b and v[j] are known:
 *   S[:, j] *= exp(g);  u_j = v_j - S[:, j] . k^;  S[:, j] += b k^ u_j;
 *   o_j = S[:, j] . q^.
 * So a warp owns RPW consecutive rows of one (sequence, head) pair and works
 * alone (but for the tokens-outer slots, below); a block is the pair's 128
 * rows (its token vectors stay in L1). A warp starts copying its rows into
 * its own shared memory (cp.async, or bulk copies for verify on a V-first
 * fp32 pool: the bytes in flight hold no registers), then runs the rows
 * DEC_GROUP at a time through registers, the group's dot products summed
 * over the warp by exchanging halves (xch_rows), storing
 * rows after each token a verify table keeps and after the last one to the
 * final slot (a K-first pool's whole channels at a time: groups outer, back
 * into the copy and out as it came in, dec_kf_via_copy; tokens outer, from
 * the rows kept, dec_kf_out).
 * The lanes hold the token's q, k, g of their channels (lane l: channels
 * 4l .. 4l + 3). Two orders, the plan's decode_tokens_outer, an instance
 * each:
 *   - groups outer (a decode step: no more tokens than sequences): while
 *     its rows arrive a warp sums the norms of q and k of its sequence's
 *     first DEC_NORMS tokens (a xor butterfly; kept in shared memory), then
 *     takes each group through every token (prepared once for one token,
 *     again for each group where there are several). The rows in shared
 *     memory as the pool holds them: a bf16 pool's stay bf16 and take half,
 *     so a multiprocessor keeps 192 KB of the pool in flight (6 blocks of
 *     bf16 rows, as 3 of fp32 rows from an fp32 pool). No block barrier.
 *   - tokens outer (verify: more tokens than sequences): while the rows
 *     arrive the block prepares the first DEC_SLOTS tokens, warp r token r
 *     (q^, k^, exp(g), b and v into a shared slot: once a block, not once a
 *     warp), then every warp takes each token of the round through all its
 *     groups, the rows kept in fp32 in shared memory between tokens ("fp32
 *     room"; a bf16 pool's copy in the second half of it: group G's fp32
 *     rows overwrite only rows of groups up to G, read already); two block
 *     barriers a round. 96 KB of a bf16 pool in flight a multiprocessor.
 * A third form, the stream form (below), runs a step with a block walking
 * several pairs, the next pair's rows copied in while one computes; no plan
 * of the library's takes it yet (docs/TUNING.md, "DECODE_STREAM").
 * The sums' fixed order makes reruns, and any number of tokens a call, give
 * the same bits; a row's arithmetic is the same in either order. The pool
 * is streamed (evict-first stores: it is touched once, the token vectors
 * many times).
 *
 * The arithmetic is written once, as per-lane phases (dec_*, decode.cuh)
 * that the kernel runs with shuffles between them and the emulation runs
 * for every lane of a warp in turn, the same butterflies in between; only expf, sqrtf
 * and the device's fused multiply-adds may differ between the device and
 * the host, so the emulation tests the kernel's indexing, alignment and
 * token logic, not its last bits.
 */
#include "cuda/runtime.h"
#include "kda/cuda/decode.cuh"

/* ---- the kernel ------------------------------------------------------------ */

static __device__ __forceinline__ float butterfly(float x) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(FULL, x, off);
    return x;
}

/* Row 2 b4 + b3's sum of d[] over the warp (the exchange: decode.cuh). */
static __device__ __forceinline__ float xch_rows(int lane, const float d[4]) {
    const float k0 = xch_keep1(lane, d, 0) + __shfl_xor_sync(FULL, xch_send1(lane, d, 0), 16);
    const float k1 = xch_keep1(lane, d, 1) + __shfl_xor_sync(FULL, xch_send1(lane, d, 1), 16);
    const int b3 = (lane >> 3) & 1; /* keep row 2 b4 + b3, send the other */
    float m = (b3 ? k1 : k0) + __shfl_xor_sync(FULL, b3 ? k0 : k1, 8);
#pragma unroll
    for (int off = 4; off > 0; off >>= 1) m += __shfl_xor_sync(FULL, m, off);
    return m;
}

/* Group G's rows landed in the warp's copy, where they come by bulk copies
 * (bars given: dec_stage's, the copy completing bars[G]'s phase of parity
 * `parity`; the lanes' copies were waited for before the group loop). */
static __device__ __forceinline__ void dec_rows_wait(const dec_warp &w, const uint64_t *bars,
                                                     int G, unsigned parity) {
#if DEC_BULK
    if (bars && w.sq.read_base >= 0) sp_mbarrier_wait_(sp_smem_addr_(bars + G), parity);
#else
    (void)w, (void)bars, (void)G, (void)parity;
#endif
}

/* Blocks a multiprocessor holds: at 32 rows a warp six of bf16 rows (32 KB a
 * block), at 16 three (by registers; three of fp32 rows either way, 64 KB a
 * block); the registers held to that (80 a thread). */
template <int RPW> struct dec_launch {
    static constexpr int THREADS = 32 * dec_shape<RPW>::WARPS, PER_SM = RPW == 32 ? 6 : 3;
};

/* Token k through group G's rows (in l.S; the token prepared in l): the
 * decay and the dot products, the update, o, and (stores) the rows' stores
 * after k (the final ones into kf_copy where given: dec_kf_via_copy). */
template <int RPW, int KF>
static __device__ __forceinline__ void dec_token(const kda_params &p, const dec_warp &w,
                                                 const dec_tok &k, int G, int lane,
                                                 dec_lane<RPW> &l, unsigned char *kf_copy,
                                                 int stores) {
    dec_group_v(k, G, l);
    dec_decay(l);
    const float mine = xch_rows(lane, l.dot); /* every row's sum to every lane */
#pragma unroll
    for (int r = 0; r < DEC_GROUP; r++) l.dot[r] = __shfl_sync(FULL, mine, 8 * r);
    dec_update(l);
    l.dot[0] = xch_rows(lane, l.dot);
    dec_out(p, w, k, G, lane, l);
    if (stores) dec_group_done(p, w, k, KF, G, lane, l, kf_copy);
}

/* A read token's norms summed over the warp: the butterflies give every
 * lane the same bits (the emulation's host_read). */
template <int RPW> static __device__ __forceinline__ void dec_sum_norms(dec_lane<RPW> &l) {
    l.sq = butterfly(l.sq);
    l.sk = butterfly(l.sk);
}

/* Token t read and prepared, its norms kept (i < DEC_NORMS) or summed. */
template <int RPW>
static __device__ __forceinline__ void dec_token_prepare(const kda_params &p, const dec_warp &w,
                                                         int64_t i, int lane, const float *norms,
                                                         dec_lane<RPW> &l) {
    dec_read(p, w, w.sq.bos + i, lane, l);
    if (i < DEC_NORMS) {
        l.sq = norms[2 * i], l.sk = norms[2 * i + 1];
    } else {
        dec_sum_norms(l);
    }
    dec_prepare(p, w, l);
}

/* Groups outer, before the group loop: a pair of one token has it
 * prepared once (r: fetched), its v in vf; a pair of several has the norms
 * of its first DEC_NORMS tokens kept in norms for every group (lane 0 keeps
 * them). */
template <int RPW>
static __device__ __forceinline__ void dec_groups_prepare(const kda_params &p, const dec_warp &w,
                                                          int one, int lane, const dec_raw &r,
                                                          float *norms, float *vf,
                                                          dec_lane<RPW> &l) {
    if (one) {
        dec_take(p, r, l);
        dec_sum_norms(l);
        dec_prepare(p, w, l);
        dec_v_put<RPW>(r, lane, vf);
        return;
    }
    for (int64_t i = 0; i < w.sq.len && i < DEC_NORMS; i++) {
        dec_read(p, w, w.sq.bos + i, lane, l);
        dec_sum_norms(l);
        if (lane == 0) norms[2 * i] = l.sq, norms[2 * i + 1] = l.sk;
    }
}

/* Groups outer, group G's rows (in l.S) through every token of the pair:
 * one token prepared already (dec_groups_prepare; k1 its record, made once:
 * dec_one_token), or each token prepared again for the group. */
static __device__ __forceinline__ dec_tok dec_one_token(const kda_params &p, const dec_warp &w,
                                                        const float *vf) {
    dec_tok k = dec_token_at(p, w, 0);
    k.vf = vf;
    return k;
}
template <int RPW, int KF>
static __device__ __forceinline__ void dec_group_tokens(const kda_params &p, const dec_warp &w,
                                                        int one, const dec_tok &k1, int G,
                                                        int lane, const float *norms,
                                                        dec_lane<RPW> &l, unsigned char *kf_copy) {
    if (one) {
        dec_token<RPW, KF>(p, w, k1, G, lane, l, kf_copy, 1);
        return;
    }
    for (int64_t i = 0; i < w.sq.len; i++) {
        dec_token_prepare(p, w, i, lane, norms, l);
        dec_token<RPW, KF>(p, w, dec_token_at(p, w, i), G, lane, l, kf_copy, 1);
    }
}

/* Tokens outer: the round of tokens i0 .. i0 + DEC_SLOTS - 1 of the warp's
 * sequence prepared into the block's slots, warp r token i0 + r (the same
 * butterflies and phases as a warp preparing a token alone: the same bits);
 * the first round's token fetched already (fetched: r holds it). */
template <int RPW>
static __device__ __forceinline__ void dec_round_prepare(const kda_params &p, const dec_warp &w,
                                                         int64_t i0, int wi, int lane,
                                                         dec_slot *slots, dec_lane<RPW> &l,
                                                         dec_raw &r, int fetched) {
    if (wi >= DEC_SLOTS || i0 + wi >= w.sq.len) return;
    if (!fetched) dec_fetch<RPW>(p, w, w.sq.bos + i0 + wi, lane, 4, r);
    dec_take(p, r, l);
    dec_sum_norms(l);
    dec_prepare(p, w, l);
    dec_slot_put(r, slots + wi, lane, l);
}

/* Tokens outer, a round of slots at a time (the first prepared), the rows
 * kept in fp32 in the warp's m; a K-first pool's stores after each token
 * from the kept rows (dec_kf_out). UNROLL: the group loop's (a V-first bf16
 * pool's whole; the others' not: their instances spill at 80 registers). */
template <int RPW, int KF, int UNROLL>
static __device__ __forceinline__ void dec_run_tokens_outer(const kda_params &p, const dec_warp &w,
                                                            int wi, int lane, unsigned char *m,
                                                            const unsigned char *copy,
                                                            const uint64_t *bars,
                                                            dec_slot *slots, dec_lane<RPW> &l,
                                                            dec_raw &r) {
    typedef dec_shape<RPW> SH;
    for (int64_t i0 = 0; i0 < w.sq.len; i0 += DEC_SLOTS) {
        if (i0 > 0) {
            __syncthreads(); /* the previous round's slots read by every warp */
            dec_round_prepare(p, w, i0, wi, lane, slots, l, r, 0);
        }
        __syncthreads(); /* the round's slots written */
        for (int64_t i = i0; i < w.sq.len && i < i0 + DEC_SLOTS; i++) {
            dec_slot_get(slots + (i - i0), lane, l);
            dec_tok k = dec_token_at(p, w, i);
            k.vf = slots[i - i0].v + w.row0;
#pragma unroll(UNROLL)
            for (int G = 0; G < SH::GROUPS; G++) {
                if (i == 0) {
                    dec_rows_wait(w, bars, G, 0);
                    dec_group_rows(p, w, KF, G, lane, copy, l);
                } else
                    dec_group_kept(G, lane, m, l);
                __syncwarp(); /* read by every lane before any keeps the group (a bf16
                               * V-first copy: other lanes' bytes) */
                dec_token<RPW, KF>(p, w, k, G, lane, l, (unsigned char *)NULL, !KF);
                if (KF || i + 1 < w.sq.len) dec_group_keep(G, lane, m, l);
            }
            if (KF) {
                __syncwarp(); /* every group kept */
                if (k.to >= 0) dec_kf_out<RPW>(p, w, k.to, lane, m, 1);
                if (i + 1 == w.sq.len && w.sq.slot_base >= 0)
                    dec_kf_out<RPW>(p, w, w.sq.slot_base, lane, m, 1);
                __syncwarp(); /* read by every lane before the next token keeps its groups */
            }
        }
    }
}

/* KF: p.state_k_first; BF: p.state_bf16; OUTER: the plan's
 * decode_tokens_outer (decode.cuh); an instance each. The phases read the
 * pool's dtype from the parameters: a copy of them with it known at compile
 * time takes the other dtype's code out of the group loop, and the
 * registers it held (with both, 80 registers spilled there, and the
 * reloads were the loop's longest waits: journal, 2026-12-06). */
template <int RPW, int KF, int BF, int OUTER>
static __global__ void __launch_bounds__(dec_launch<RPW>::THREADS, dec_launch<RPW>::PER_SM)
    kda_decode_kernel(const kda_params params) {
    kda_params p = params;
    p.state_bf16 = BF;
    typedef dec_shape<RPW> SH;
    static_assert(DEC_SLOTS <= SH::WARPS, "a warp a token of a round");
    /* Verify on a V-first fp32 pool: the rows by bulk copies, each group
     * waited for as it lands (dec_stage); elsewhere the lanes' copies, which
     * were the faster there on an H100 (journal, 2026-12-06, "Bulk copies
     * for verify on an fp32 pool"). */
    constexpr int BULK = DEC_BULK && !KF && !BF && OUTER;
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    const int lane = threadIdx.x % 32, wi = threadIdx.x / 32, es = dec_row_es(p, OUTER);
    unsigned char *m = dec_warp_rows<RPW>(smem_bytes, wi, es),
                  *copy = m + dec_copy_at<RPW>(p, OUTER);
    dec_warp w;
    /* Every warp of a block works on one pair: what follows is the same in
     * each (the block barriers of the tokens-outer order rely on it). */
    if (!dec_begin<RPW>(p, (int64_t)blockIdx.x * SH::WARPS + wi, &w)) return;
    dec_lane<RPW> l;
    dec_raw r; /* the warp's first token, fetched ahead of the copy (dec_raw) */
    const int one = w.sq.len == 1;
    if (OUTER ? wi < DEC_SLOTS && wi < w.sq.len : one)
        dec_fetch<RPW>(p, w, w.sq.bos + (OUTER ? wi : 0), lane, OUTER ? 4 : 1, r);
    uint64_t *const bars = BULK ? dec_warp_bars<RPW>(smem_bytes, wi, es) : (uint64_t *)NULL;
    dec_stage(p, w, KF, lane, copy, bars, l);
    sp_cp_async_commit_();
    float *norms = dec_warp_norms(smem_bytes, wi, es);
    dec_slot *slots = dec_slots(smem_bytes, es);
    float *vf = dec_warp_v<RPW>(smem_bytes, wi, es);
    if (OUTER) {
        dec_round_prepare(p, w, 0, wi, lane, slots, l, r, 1); /* the first round */
    } else {
        dec_groups_prepare(p, w, one, lane, r, norms, vf, l);
    }
    sp_cp_async_wait_<0>();
    __syncwarp(); /* every lane's pieces of a K-first pool's rows copied, the norms (or v) kept */
    if (OUTER) {
        dec_run_tokens_outer<RPW, KF, BF && !KF ? SH::GROUPS : 1>(p, w, wi, lane, m, copy,
                                                                         bars, slots, l, r);
        return;
    }
    /* Groups outer, each through every token; a step's one token made once
     * (its record, v in vf), outside the group loop. */
    unsigned char *kf_copy = dec_kf_via_copy(p, KF) ? copy : NULL;
    if (one) {
        const dec_tok k1 = dec_one_token(p, w, vf);
#pragma unroll 1
        for (int G = 0; G < SH::GROUPS; G++) {
            dec_group_rows(p, w, KF, G, lane, copy, l);
            dec_group_tokens<RPW, KF>(p, w, 1, k1, G, lane, norms, l, kf_copy);
        }
    } else {
        const dec_tok none = {};
#pragma unroll 1
        for (int G = 0; G < SH::GROUPS; G++) {
            dec_group_rows(p, w, KF, G, lane, copy, l);
            dec_group_tokens<RPW, KF>(p, w, 0, none, G, lane, norms, l, kf_copy);
        }
    }
    if (kf_copy && w.sq.slot_base >= 0) {
        __syncwarp(); /* every lane's channels kept */
        dec_kf_out<RPW>(p, w, w.sq.slot_base, lane, kf_copy, 0);
    }
}

/* ---- the stream form --------------------------------------------------------
 * A decode step (groups outer) on a V-first pool, where the plan's
 * decode_pairs_a_block P > 0: block b walks pairs b P .. b P + P - 1 (one
 * wave of blocks at the P the plan's rule gives: docs/TUNING.md,
 * "DECODE_STREAM"), each warp its RPW rows of each. A warp's shared memory
 * is a ring of one slot a group (DEC_GROUP rows as the pool holds them, in
 * the places dec_group_rows reads), each filled by one bulk copy completing
 * on the slot's mbarrier (dec_group_copy). Group G of the warp's next pair
 * is copied into slot G once every lane has read group G of this one into
 * registers, so the next pair's rows are in flight while this one
 * computes and stores, where a block of one pair has nothing in flight
 * between its copy's landing and its exit. Only the rows' way in differs
 * from the block-a-pair kernel: the same phases, the same bits. */

/* The stream form's rows a warp, and the blocks a multiprocessor its
 * registers allow: it holds the next pair's token and read slot through a
 * pair, and spills at the block-a-pair kernel's registers
 * (docs/TUNING.md, "DECODE_STREAM"). */
#define DEC_STREAM_RPW SP_KDA_DECODE_STREAM_ROWS
#define DEC_STREAM_PER_SM 4

/* The first pair from x before end with work for warp wi (into *w; a
 * padded or skipped sequence, or one without tokens, has none): end if
 * none. */
template <int RPW>
static __device__ __forceinline__ int64_t dec_stream_next(const kda_params &p, int64_t x,
                                                          int64_t end, int wi, dec_warp *w) {
    for (; x < end; x++)
        if (dec_begin<RPW>(p, x * dec_shape<RPW>::WARPS + wi, w)) break;
    return x;
}

#if DEC_BULK
/* Group G's rows from slot G into registers once they landed (zeros for a
 * fresh sequence), then, once every lane has read them, the next pair's
 * group G (its read slot `from`, if any) copied into the slot. */
template <int RPW>
static __device__ __forceinline__ void dec_stream_group(const kda_params &p, const dec_warp &w,
                                                        int G, int lane, int64_t from,
                                                        unsigned char *m, uint64_t *bars,
                                                        unsigned &phase, dec_lane<RPW> &l) {
    dec_rows_wait(w, bars, G, (phase >> G) & 1);
    if (w.sq.read_base >= 0) phase ^= 1u << G;
    dec_group_rows(p, w, 0, G, lane, m, l);
    sp_fence_proxy_async_(); /* the reads before the bulk copy's writes */
    __syncwarp();            /* slot G read by every lane */
    if (lane == 0 && from >= 0) dec_group_copy(p, from, w.row0, G, m, bars);
}
#endif

template <int BF>
static __global__ void __launch_bounds__(dec_launch<DEC_STREAM_RPW>::THREADS, DEC_STREAM_PER_SM)
    kda_decode_stream_kernel(const kda_params params, int64_t pairs_a_block) {
#if DEC_BULK
    constexpr int RPW = DEC_STREAM_RPW;
    kda_params p = params;
    p.state_bf16 = BF;
    typedef dec_shape<RPW> SH;
    static_assert(SH::GROUPS <= 32, "a bit of the phases a slot");
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    const int lane = threadIdx.x % 32, wi = threadIdx.x / 32, es = dec_row_es(p, 0);
    unsigned char *const m = dec_warp_rows<RPW>(smem_bytes, wi, es);
    uint64_t *const bars = dec_warp_bars<RPW>(smem_bytes, wi, es);
    float *const norms = dec_warp_norms(smem_bytes, wi, es);
    float *const vf = dec_warp_v<RPW>(smem_bytes, wi, es);
    const int64_t x0 = (int64_t)blockIdx.x * pairs_a_block;
    const int64_t end = min(x0 + pairs_a_block, p.N * p.H);
    if (lane == 0) dec_bars_init<RPW>(bars);
    __syncwarp(); /* the mbarriers made before any lane waits on them */
    dec_warp w;
    dec_raw r = {}; /* the pair's token (one token), fetched a pair ahead */
    int64_t x = dec_stream_next<RPW>(p, x0, end, wi, &w);
    if (x < end) {
        if (w.sq.len == 1) dec_fetch<RPW>(p, w, w.sq.bos, lane, 1, r);
        if (lane == 0 && w.sq.read_base >= 0)
            for (int G = 0; G < SH::GROUPS; G++) dec_group_copy(p, w.sq.read_base, w.row0, G, m, bars);
    }
    unsigned phase = 0; /* bit G: the parity of slot G's next completion */
    while (x < end) {
        dec_raw rn = {};
        int64_t from = -1; /* the next pair's rows (its read slot) */
        int64_t xn;
        {
            dec_warp next;
            xn = dec_stream_next<RPW>(p, x + 1, end, wi, &next);
            if (xn < end) from = next.sq.read_base;
            if (xn < end && next.sq.len == 1) dec_fetch<RPW>(p, next, next.sq.bos, lane, 1, rn);
        }
        dec_lane<RPW> l;
        dec_bias(p, w, lane, l);
        const int one = w.sq.len == 1;
        dec_groups_prepare(p, w, one, lane, r, norms, vf, l);
        __syncwarp(); /* the norms (or v) kept */
        if (one) {
            const dec_tok k1 = dec_one_token(p, w, vf);
#pragma unroll 1
            for (int G = 0; G < SH::GROUPS; G++) {
                dec_stream_group(p, w, G, lane, from, m, bars, phase, l);
                dec_group_tokens<RPW, 0>(p, w, 1, k1, G, lane, norms, l, (unsigned char *)NULL);
            }
        } else {
            const dec_tok none = {};
#pragma unroll 1
            for (int G = 0; G < SH::GROUPS; G++) {
                dec_stream_group(p, w, G, lane, from, m, bars, phase, l);
                dec_group_tokens<RPW, 0>(p, w, 0, none, G, lane, norms, l, (unsigned char *)NULL);
            }
        }
        __syncwarp(); /* v and the norms read by every lane before the next pair's */
        if (xn < end) dec_begin<RPW>(p, xn * SH::WARPS + wi, &w); /* again: fewer registers held */
        r = rn, x = xn;
    }
#else
    (void)params, (void)pairs_a_block;
    __trap(); /* no bulk copies: kda_decode_stream_per_sm is 0 here, no plan launches it */
#endif
}

template <int RPW, int OUTER>
static cudaError_t launch(const kda_params *p, cudaStream_t stream) {
    const void *kernels[2][2] = {
        {(const void *)kda_decode_kernel<RPW, 0, 0, OUTER>,
         (const void *)kda_decode_kernel<RPW, 0, 1, OUTER>},
        {(const void *)kda_decode_kernel<RPW, 1, 0, OUTER>,
         (const void *)kda_decode_kernel<RPW, 1, 1, OUTER>}};
    const void *kernel = kernels[p->state_k_first != 0][p->state_bf16 != 0];
    /* The instance's opt-in is always the most a block of it takes: a
     * launch of bf16 rows beside it on another thread cannot lower it. */
    const size_t bytes = dec_smem_bytes(*p, OUTER);
    const cudaError_t e = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dec_smem_bytes_es(4, OUTER));
    if (e != cudaSuccess) return e;
    void *params[] = {(void *)p};
    return cudaLaunchKernel(kernel, dim3((unsigned)(p->N * p->H)), dim3(dec_launch<RPW>::THREADS),
                            params, bytes, stream);
}

/* The stream form's instance for the pool's dtype, with the shared memory
 * it opts into (its own: an instance a dtype). */
static const void *stream_kernel(int bf16, size_t *smem) {
    *smem = dec_smem_bytes_es(bf16 ? 2 : 4, 0);
    return bf16 ? (const void *)kda_decode_stream_kernel<1>
                : (const void *)kda_decode_stream_kernel<0>;
}

static cudaError_t launch_stream(const kda_params *p, int64_t pairs_a_block, cudaStream_t stream) {
    if (p->state_k_first || pairs_a_block < 1) return cudaErrorInvalidValue; /* the plan's checks */
    size_t bytes;
    const void *kernel = stream_kernel(p->state_bf16, &bytes);
    const cudaError_t e =
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e != cudaSuccess) return e;
    const int64_t blocks = (p->N * p->H - 1) / pairs_a_block + 1;
    void *params[] = {(void *)p, (void *)&pairs_a_block};
    return cudaLaunchKernel(kernel, dim3((unsigned)blocks),
                            dim3(dec_launch<DEC_STREAM_RPW>::THREADS), params, bytes, stream);
}

/* Blocks of the stream form a multiprocessor holds with a bf16 pool or
 * not; 0 where its code has no bulk copies (code from PTX or machine code
 * below 9.0: its body there is a trap) or the runtime cannot say, which
 * leaves the form to no plan (its error cleared, as the one-pass kernel's
 * facts do): a form no plan takes by itself does not fail the table. */
static int stream_per_sm(int bf16) {
    size_t bytes;
    const void *kernel = stream_kernel(bf16, &bytes);
    cudaFuncAttributes a;
    int n = 0;
    cudaError_t e = cudaFuncGetAttributes(&a, kernel);
    if (e == cudaSuccess && (a.ptxVersion < 90 || a.binaryVersion < 90)) return 0;
    if (e == cudaSuccess)
        e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e == cudaSuccess)
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel,
                                                          dec_launch<DEC_STREAM_RPW>::THREADS, bytes);
    if (e != cudaSuccess) {
        (void)cudaGetLastError(); /* ours */
        return 0;
    }
    return n;
}

extern "C" void sp_kda_decode_device_facts_(sp_cuda_device *d) {
    for (int bf = 0; bf < 2; bf++) d->kda_decode_stream_per_sm[bf] = stream_per_sm(bf);
}

extern "C" cudaError_t sp_kda_launch_decode_(const kda_params *p, const sp_kda_plan *plan,
                                             cudaStream_t stream) {
    const int outer = plan->decode_tokens_outer;
    const int64_t stream_pairs = plan->decode_pairs_a_block;
    if (stream_pairs > 0) return launch_stream(p, stream_pairs, stream);
    if (plan->decode_rows_per_warp == 32)
        return outer ? launch<32, 1>(p, stream) : launch<32, 0>(p, stream);
    return outer ? launch<16, 1>(p, stream) : launch<16, 0>(p, stream);
}
