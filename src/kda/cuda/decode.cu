/*
 * decode.cu — the KDA decode kernel: few tokens a sequence (decode, and the
 * k+1 tokens of speculative verify), laid out for bandwidth, since such a
 * step is a stream over the state pool (every state read once, written once
 * or once per token of a verify table). And its emulation on the host,
 * lane by lane, for the tests of machines without a GPU.
 *
 * In the V-first pool a state row j (the 128 K channels of V column j: 512
 * bytes in fp32) is independent of every other row once the token's q^, k^,
 * exp(g), b and v[j] are known:
 *   S[:, j] *= exp(g);  u_j = v_j - S[:, j] . k^;  S[:, j] += b k^ u_j;
 *   o_j = S[:, j] . q^.
 * So a warp owns RPW consecutive rows of one (sequence, head) pair and works
 * alone; a block is the pair's 128 rows (its token vectors stay in L1). A
 * warp starts copying its rows into its own shared memory (cp.async: the
 * bytes in flight hold no registers), meanwhile sums the norms of q and k of
 * its sequence's first DEC_NORMS tokens (a xor butterfly; kept in shared
 * memory), then runs the rows DEC_GROUP at a time through registers, the
 * group's dot products summed over the warp by exchanging halves
 * (xch_rows), storing rows after each token a verify table keeps and after
 * the last one to the final slot. The lanes hold the token's q, k, g of
 * their channels (lane l: channels 4l .. 4l + 3). Two orders:
 *   - a sequence of one token, or any where the rows are kept as bf16:
 *     groups outer, each through every token (prepared once for one token,
 *     again for each group where there are several);
 *   - several tokens with fp32 room: tokens outer, each prepared once, the
 *     rows kept in fp32 in shared memory between tokens.
 * The rows are fp32 in shared memory (fp32 room) for an fp32 pool, and for
 * a bf16 pool where the call has more tokens than sequences (its copy in
 * the second half of the room: group G's fp32 rows overwrite only rows of
 * groups up to G, read already); else, a decode step, a bf16 pool's rows
 * stay bf16 and take half: a multiprocessor then keeps 192 KB of the pool in
 * flight (6 blocks of bf16 rows, as 3 of fp32 rows from an fp32 pool; 96 KB
 * of a bf16 pool with room). No block barrier.
 * The sums' fixed order makes reruns, and any number of tokens a call, give
 * the same bits; a row's arithmetic is the same in either order. The pool
 * is streamed (evict-first stores: it is touched once, the token vectors
 * many times).
 *
 * The arithmetic is written once, as per-lane phases (dec_*) that the
 * kernel runs with shuffles between them and the emulation runs for every
 * lane of a warp in turn, the same butterflies in between; only expf, sqrtf
 * and the device's fused multiply-adds may differ between the device and
 * the host, so the emulation tests the kernel's indexing, alignment and
 * token logic, not its last bits.
 */
#include "cuda/ptx.cuh"
#include "kda/cuda/common.cuh"

#include <stdlib.h>
#include <string.h>

#define DEC_GROUP 4 /* rows a warp holds in registers at a time */
#define DEC_NORMS 8 /* tokens whose q . q and k . k a warp keeps for every group */
#define DEC_MAX_WARPS 8 /* warps a block at the fewest rows a warp (16) */
#define FULL SP_KDA_FULL_MASK

/* RPW: V rows a warp (the plan's decode_rows_per_warp: 16 or 32). A block
 * is one (sequence, head) pair; its shared memory the pair's rows as the
 * pool holds them (dec_smem_bytes). */
template <int RPW> struct dec_shape {
    static constexpr int WARPS = SP_KDA_D / RPW;  /* warps a pair: a block */
    static constexpr int GROUPS = RPW / DEC_GROUP; /* register groups a warp */
    static_assert(SP_KDA_D == 32 * 4, "a lane's 4 channels of a row");
    static_assert(SP_KDA_D % RPW == 0 && RPW % (2 * DEC_GROUP) == 0,
                  "rows (a bf16 K-first piece is two groups' rows)");
};

/* Whether the warps keep their rows in fp32 between tokens (fp32 room:
 * several-token sequences then run tokens outer): always with an fp32
 * pool; with a bf16 one where the call has more tokens than sequences
 * (else its rows are copied as bf16, half the bytes, and a rare sequence
 * of several tokens runs groups outer). Bytes an element of the rows. */
static SP_HD int dec_room(const kda_params &p) { return !p.state_bf16 || p.T > p.N; }
static SP_HD int dec_row_es(const kda_params &p) { return dec_room(p) ? 4 : 2; }

/* A block's shared memory: the pair's rows (a warp's RPW rows at RPW * 128
 * * es bytes apart, es = dec_row_es), then each warp's norms of its first
 * DEC_NORMS tokens (dec_warp_norms). */
static SP_HD size_t dec_rows_bytes(int es) { return (size_t)SP_KDA_D * SP_KDA_D * es; }
static SP_HD size_t dec_smem_bytes(int es) {
    return dec_rows_bytes(es) + DEC_MAX_WARPS * DEC_NORMS * 2 * sizeof(float);
}

/* Warp wi's rows in the block's shared memory. */
template <int RPW> static SP_HD unsigned char *dec_warp_rows(unsigned char *smem, int wi, int es) {
    static_assert(SP_KDA_D / RPW <= DEC_MAX_WARPS, "warps a block");
    return smem + (size_t)wi * RPW * SP_KDA_D * es;
}

/* Warp wi's sums q . q and k . k of token i (< DEC_NORMS) at [2 i], [2 i + 1]. */
static SP_HD float *dec_warp_norms(unsigned char *smem, int wi, int es) {
    return (float *)(smem + dec_rows_bytes(es)) + wi * DEC_NORMS * 2;
}

/* Where the read slot's copy lies in a warp's rows: a bf16 pool's in the
 * second half of fp32 room, so that group G's fp32 rows, kept after a
 * token, overwrite only the copy's rows of groups up to G, read already. */
template <int RPW> static SP_HD size_t dec_copy_at(const kda_params &p) {
    return p.state_bf16 && dec_room(p) ? (size_t)RPW * SP_KDA_D * 2 : 0;
}

/* What a warp works on: uniform over its lanes. */
typedef struct dec_warp {
    kda_seq sq;
    int64_t n, h;
    int row0; /* its first V row */
    float expA;
} dec_warp;

/* One lane's registers (the group loop is not unrolled: v of the group's
 * rows is read with it). */
template <int RPW> struct dec_lane {
    float S[DEC_GROUP][4];    /* its channels of the group's rows */
    float q[4], k[4], g[4];   /* the token's: as read, then q^, k^, exp(g) */
    float bias[4];            /* dt_bias of its channels (softplus and lower-bound gates) */
    float v[DEC_GROUP];       /* the token's v of the group's rows */
    float beta;               /* as read, then b */
    float dot[DEC_GROUP];     /* this lane's share of a row's dot product */
    float sq, sk;             /* its share of q . q and k . k */
};

/* ---- the phases: the arithmetic of the kernel and of the emulation ------- */

/* Warp x of the grid; 0 when it has nothing to do (a padded or skipped
 * sequence, or one without tokens). */
template <int RPW> static SP_HD int dec_begin(const kda_params &p, int64_t x, dec_warp *w) {
    typedef dec_shape<RPW> SH;
    const int64_t pair = x / SH::WARPS;
    w->h = pair % p.H;
    w->n = pair / p.H;
    w->row0 = (int)(x % SH::WARPS) * RPW;
    if (!kda_seq_of(p, w->n, w->h, &w->sq) || w->sq.len == 0) return 0;
    w->expA = p.gate == SP_KDA_GATE_LOG_DECAY ? 0.0f : expf(p.A_log[w->h]);
    return 1;
}

/* Where the copy of a K-first pool puts channel d's piece k (per pieces a
 * channel, 2, 4 or 8; a 16-byte unit's index): block k, at place
 * 32 (d % 4) + d / 4, so that lane l's four channels 4l + x lie at
 * 32 x + l (four conflict-free reads), with the place's low three bits
 * XORed by the piece and the channel (the same for every lane's read, a
 * different one for each of the copy's eight lanes of a phase: their
 * writes meet no bank twice). */
static SP_HD int64_t dec_kf_unit(int d, int k, int per) {
    const int swz = (k + per * (d % (8 / per))) & 7;
    return (int64_t)k * SP_KDA_D + ((32 * (d % 4) + d / 4) ^ swz);
}

/* Start copying the warp's rows of the read slot into its shared memory m
 * (RPW rows as the pool holds them), the lane's 16-byte pieces of them
 * (nothing for a fresh sequence); dt_bias of the lane's channels. From a
 * K-first pool (kf) each channel's piece k (its rows 4k .. 4k + 3 in fp32,
 * 8k .. 8k + 7 in bf16) goes to block k (dec_kf_unit): a group's rows (a
 * pair of groups' in bf16) fill one block. */
template <int RPW>
static SP_HD void dec_stage(const kda_params &p, const dec_warp &w, int kf, int lane,
                            unsigned char *m, dec_lane<RPW> &l) {
    const int c = 4 * lane;
    SP_HD_UNROLL
    for (int i = 0; i < 4; i++)
        l.bias[i] = p.gate == SP_KDA_GATE_LOG_DECAY ? 0.0f : p.dt_bias[w.h * SP_KDA_D + c + i];
    if (w.sq.read_base < 0) return;
    const int64_t es = p.state_bf16 ? 2 : 4; /* bytes an element */
    const char *from = (const char *)p.state +
                       (w.sq.read_base + sp_kda_state_at_(kf, 0, w.row0)) * es;
    const int pieces = (int)(RPW * SP_KDA_D * es / 16), per = (int)(RPW * es / 16);
    for (int i = lane; i < pieces; i += 32) {
        const int d = i / per, k = i % per; /* K-first: piece k of channel d */
        const int64_t src = kf ? (int64_t)d * SP_KDA_D * es + 16 * k : 16 * i,
                      dst = kf ? dec_kf_unit(d, k, per) * 16 : 16 * i;
#ifdef __CUDA_ARCH__
        sp_cp_async16_(m + dst, from + src);
#else
        memcpy(m + dst, from + src, 16);
#endif
    }
}

/* Token t's inputs as read: q, k, g of the lane's channels, v of the warp's
 * rows and beta (the same in every lane); the lane's shares of q . q and
 * k . k. */
template <int RPW>
static SP_HD void dec_read(const kda_params &p, const dec_warp &w, int64_t t, int lane,
                           dec_lane<RPW> &l) {
    const int c = 4 * lane;
    const uint16_t *q = kda_row(p.q, t, w.h) + c, *k = kda_row(p.k, t, w.h) + c;
    SP_HD_UNROLL
    for (int i = 0; i < 4; i++) {
        l.q[i] = sp_bf16_to_f32_(q[i]);
        l.k[i] = sp_bf16_to_f32_(k[i]);
        l.g[i] = kda_in(p.g, p.g_f32, t, w.h, c + i);
    }
    l.beta = kda_in(p.beta, p.beta_f32, t, w.h, 0);
    l.sq = (l.q[0] * l.q[0] + l.q[1] * l.q[1]) + (l.q[2] * l.q[2] + l.q[3] * l.q[3]);
    l.sk = (l.k[0] * l.k[0] + l.k[1] * l.k[1]) + (l.k[2] * l.k[2] + l.k[3] * l.k[3]);
}

/* With the full sums of squares: q^, k^, exp(g) of the lane's channels, b. */
template <int RPW>
static SP_HD void dec_prepare(const kda_params &p, const dec_warp &w, dec_lane<RPW> &l) {
    const float rq = p.scale / sqrtf(l.sq + (float)SP_KDA_EPS);
    const float rk = 1.0f / sqrtf(l.sk + (float)SP_KDA_EPS);
    SP_HD_UNROLL
    for (int i = 0; i < 4; i++) {
        l.q[i] *= rq;
        l.k[i] *= rk;
        l.g[i] = expf(sp_kda_log_decay_f32_(p.gate, p.lower_bound, w.expA, l.g[i], l.bias[i]));
    }
    l.beta = sp_kda_beta_f32_(p.beta_form, l.beta);
}

/* Group G's rows into registers from the read slot's copy m (dec_stage;
 * zeros for a fresh sequence). */
template <int RPW>
static SP_HD void dec_group_rows(const kda_params &p, const dec_warp &w, int kf, int G, int lane,
                                 const unsigned char *m, dec_lane<RPW> &l) {
    if (w.sq.read_base < 0) {
        SP_HD_UNROLL
        for (int r = 0; r < DEC_GROUP; r++) l.S[r][0] = l.S[r][1] = l.S[r][2] = l.S[r][3] = 0.0f;
        return;
    }
    SP_HD_UNROLL
    for (int x = 0; x < 4; x++) {
        /* K-first: channel 4 lane + x's 4 rows of group G (dec_kf_unit: the
         * piece of a pair of groups in bf16); V-first: row G * 4 + x's 4
         * channels of the lane */
        const int d = 4 * lane + x, per = RPW * (p.state_bf16 ? 2 : 4) / 16;
        const int64_t row = (G * DEC_GROUP + x) * SP_KDA_D + 4 * lane;
        float *y = kf ? NULL : l.S[x];
        float f[4];
        if (p.state_bf16) {
            const uint2 u = *(const uint2 *)(m + (kf ? dec_kf_unit(d, G / 2, per) * 16 + (G % 2) * 8
                                                     : row * 2));
            f[0] = sp_bf16_to_f32_((uint16_t)u.x), f[1] = sp_bf16_to_f32_((uint16_t)(u.x >> 16));
            f[2] = sp_bf16_to_f32_((uint16_t)u.y), f[3] = sp_bf16_to_f32_((uint16_t)(u.y >> 16));
        } else {
            const float4 v =
                *(const float4 *)(m + (kf ? dec_kf_unit(d, G, per) * 16 : row * 4));
            f[0] = v.x, f[1] = v.y, f[2] = v.z, f[3] = v.w;
        }
        SP_HD_UNROLL
        for (int r = 0; r < 4; r++) {
            if (kf) l.S[r][x] = f[r];
            else y[r] = f[r];
        }
    }
}

/* Group G's rows kept in fp32 after the previous token (dec_group_keep). */
template <int RPW>
static SP_HD void dec_group_kept(int G, int lane, const unsigned char *m, dec_lane<RPW> &l) {
    SP_HD_UNROLL
    for (int r = 0; r < DEC_GROUP; r++) {
        const float4 f = *(const float4 *)(m + ((G * DEC_GROUP + r) * SP_KDA_D + 4 * lane) * 4);
        l.S[r][0] = f.x, l.S[r][1] = f.y, l.S[r][2] = f.z, l.S[r][3] = f.w;
    }
}

/* Group G's rows kept in fp32 (V-first, whatever the pool's layout) for the
 * next token. */
template <int RPW>
static SP_HD void dec_group_keep(int G, int lane, unsigned char *m, const dec_lane<RPW> &l) {
    SP_HD_UNROLL
    for (int r = 0; r < DEC_GROUP; r++)
        *(float4 *)(m + ((G * DEC_GROUP + r) * SP_KDA_D + 4 * lane) * 4) =
            make_float4(l.S[r][0], l.S[r][1], l.S[r][2], l.S[r][3]);
}

/* Token t's v of group G's rows. */
template <int RPW>
static SP_HD void dec_group_v(const kda_params &p, const dec_warp &w, int64_t t, int G,
                              dec_lane<RPW> &l) {
    const uint16_t *v = kda_row(p.v, t, w.h) + w.row0 + G * DEC_GROUP;
    SP_HD_UNROLL
    for (int r = 0; r < DEC_GROUP; r++) l.v[r] = sp_bf16_to_f32_(v[r]);
}

/* Step, 1: the group's rows decayed; their share of S[:, j] . k^. */
template <int RPW> static SP_HD void dec_decay(dec_lane<RPW> &l) {
    SP_HD_UNROLL
    for (int r = 0; r < DEC_GROUP; r++) {
        float d = 0.0f;
        SP_HD_UNROLL
        for (int i = 0; i < 4; i++) {
            l.S[r][i] *= l.g[i];
            d = fmaf(l.S[r][i], l.k[i], d);
        }
        l.dot[r] = d;
    }
}

/* Step, 2: with the full S . k^ of each row (dot[]), the rank-1 update;
 * the lane's share of S[:, j] . q^. */
template <int RPW> static SP_HD void dec_update(dec_lane<RPW> &l) {
    SP_HD_UNROLL
    for (int r = 0; r < DEC_GROUP; r++) {
        const float bu = l.beta * (l.v[r] - l.dot[r]);
        float d = 0.0f;
        SP_HD_UNROLL
        for (int i = 0; i < 4; i++) {
            l.S[r][i] = fmaf(l.k[i], bu, l.S[r][i]);
            d = fmaf(l.S[r][i], l.q[i], d);
        }
        l.dot[r] = d;
    }
}

/* Step, 3: o of the group's rows: after the exchange (xch_rows) lane l
 * holds row 2 b4 + b3's full dot in dot[0]; lanes 0, 8, 16, 24 store rows
 * 0 .. 3. */
template <int RPW>
static SP_HD void dec_out(const kda_params &p, const dec_warp &w, int64_t t, int G, int lane,
                          const dec_lane<RPW> &l) {
    if (lane % 8 != 0) return;
    p.o[(t * p.H + w.h) * SP_KDA_D + w.row0 + G * DEC_GROUP + lane / 8] =
        sp_f32_to_bf16_(l.dot[0]);
}

/* The group's four dot products summed over the warp by exchanging halves
 * (16 shuffles a group for both products, where four butterflies each take
 * 40): lane l first keeps rows 2 b4 .. 2 b4 + 1 and adds its xor-16
 * partner's share of them, then keeps row 2 b4 + b3 and adds
 * its xor-8 partner's, then a butterfly over lanes 4, 2, 1 apart (b3, b4:
 * bits 3 and 4 of l). These are the per-lane halves of it. */
static_assert(DEC_GROUP == 4, "the exchange sums four rows");
/* What lane l sends at step 1 (value e of 2) and keeps. */
static SP_HD __forceinline__ float xch_send1(int lane, const float d[4], int e) {
    return (lane >> 4) & 1 ? d[e] : d[2 + e];
}
static SP_HD __forceinline__ float xch_keep1(int lane, const float d[4], int e) {
    return (lane >> 4) & 1 ? d[2 + e] : d[e];
}

/* The group's rows to the slot at `base` ([slot, h]), streamed: V-first,
 * each row's 4 channels of the lane; K-first (kf), each channel's 4 rows. */
template <int RPW>
static SP_HD void dec_store(const kda_params &p, const dec_warp &w, int64_t base, int kf, int G,
                            int lane, const dec_lane<RPW> &l) {
    SP_HD_UNROLL
    for (int r = 0; r < DEC_GROUP; r++) {
        float x[4];
        SP_HD_UNROLL
        for (int e = 0; e < 4; e++) x[e] = kf ? l.S[e][r] : l.S[r][e];
        const int64_t at =
            base + (kf ? sp_kda_state_at_(1, 4 * lane + r, w.row0 + G * DEC_GROUP)
                       : sp_kda_state_at_(0, 4 * lane, w.row0 + G * DEC_GROUP + r));
        if (p.state_bf16) {
            uint2 u;
            u.x = (uint32_t)sp_f32_to_bf16_(x[0]) | (uint32_t)sp_f32_to_bf16_(x[1]) << 16;
            u.y = (uint32_t)sp_f32_to_bf16_(x[2]) | (uint32_t)sp_f32_to_bf16_(x[3]) << 16;
#ifdef __CUDA_ARCH__
            __stcs((uint2 *)((uint16_t *)p.state + at), u);
#else
            *(uint2 *)((uint16_t *)p.state + at) = u;
#endif
        } else {
            const float4 f = make_float4(x[0], x[1], x[2], x[3]);
#ifdef __CUDA_ARCH__
            __stcs((float4 *)((float *)p.state + at), f);
#else
            *(float4 *)((float *)p.state + at) = f;
#endif
        }
    }
}

/* After token i (0-based in the sequence) the group's rows go to its verify
 * table slot, if any; after the last token to the final slot, if any. */
template <int RPW>
static SP_HD void dec_group_done(const kda_params &p, const dec_warp &w, int64_t i, int kf, int G,
                                 int lane, const dec_lane<RPW> &l) {
    if (p.ix.width > 0) {
        const int64_t to = sp_kda_token_slot_(&p.ix, w.n, i);
        if (to >= 0) dec_store(p, w, kda_slot_base(p, to, w.h), kf, G, lane, l);
    }
    if (i + 1 == w.sq.len && w.sq.slot_base >= 0) dec_store(p, w, w.sq.slot_base, kf, G, lane, l);
}

/* ---- the kernel ------------------------------------------------------------ */

static __device__ __forceinline__ float butterfly(float x) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) x += __shfl_xor_sync(FULL, x, off);
    return x;
}

/* Row 2 b4 + b3's sum of d[] over the warp (the exchange above). */
static __device__ __forceinline__ float xch_rows(int lane, const float d[4]) {
    const float k0 = xch_keep1(lane, d, 0) + __shfl_xor_sync(FULL, xch_send1(lane, d, 0), 16);
    const float k1 = xch_keep1(lane, d, 1) + __shfl_xor_sync(FULL, xch_send1(lane, d, 1), 16);
    const int b3 = (lane >> 3) & 1; /* keep row 2 b4 + b3, send the other */
    float m = (b3 ? k1 : k0) + __shfl_xor_sync(FULL, b3 ? k0 : k1, 8);
#pragma unroll
    for (int off = 4; off > 0; off >>= 1) m += __shfl_xor_sync(FULL, m, off);
    return m;
}

/* Blocks a multiprocessor holds: at 32 rows a warp six of bf16 rows (32 KB a
 * block), at 16 three (by registers; three of fp32 rows either way, 64 KB a
 * block); the registers held to that (80 a thread). */
template <int RPW> struct dec_launch {
    static constexpr int THREADS = 32 * dec_shape<RPW>::WARPS, PER_SM = RPW == 32 ? 6 : 3;
};

/* Token t through group G's rows (in l.S; the token prepared in l): the
 * decay and the dot products, the update, o, the rows' stores after t. */
template <int RPW, int KF>
static __device__ __forceinline__ void dec_token(const kda_params &p, const dec_warp &w,
                                                 int64_t i, int G, int lane, dec_lane<RPW> &l) {
    dec_group_v(p, w, w.sq.bos + i, G, l);
    dec_decay(l);
    const float mine = xch_rows(lane, l.dot); /* every row's sum to every lane */
#pragma unroll
    for (int r = 0; r < DEC_GROUP; r++) l.dot[r] = __shfl_sync(FULL, mine, 8 * r);
    dec_update(l);
    l.dot[0] = xch_rows(lane, l.dot);
    dec_out(p, w, w.sq.bos + i, G, lane, l);
    dec_group_done(p, w, i, KF, G, lane, l);
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
        l.sq = butterfly(l.sq);
        l.sk = butterfly(l.sk);
    }
    dec_prepare(p, w, l);
}

template <int RPW, int KF> /* KF: p.state_k_first, an instance each */
static __global__ void __launch_bounds__(dec_launch<RPW>::THREADS, dec_launch<RPW>::PER_SM)
    kda_decode_kernel(kda_params p) {
    typedef dec_shape<RPW> SH;
    extern __shared__ __align__(16) unsigned char smem_bytes[];
    const int lane = threadIdx.x % 32, wi = threadIdx.x / 32, es = dec_row_es(p);
    unsigned char *m = dec_warp_rows<RPW>(smem_bytes, wi, es), *copy = m + dec_copy_at<RPW>(p);
    dec_warp w;
    if (!dec_begin<RPW>(p, (int64_t)blockIdx.x * SH::WARPS + wi, &w)) return;
    dec_lane<RPW> l;
    dec_stage(p, w, KF, lane, copy, l);
    sp_cp_async_commit_();
    /* The norms of the first tokens, for every group (the butterflies give
     * every lane the same bits: lane 0 keeps them). */
    float *norms = dec_warp_norms(smem_bytes, wi, es);
    for (int64_t i = 0; i < w.sq.len && i < DEC_NORMS; i++) {
        dec_read(p, w, w.sq.bos + i, lane, l);
        l.sq = butterfly(l.sq);
        l.sk = butterfly(l.sk);
        if (lane == 0) norms[2 * i] = l.sq, norms[2 * i + 1] = l.sk;
    }
    const int one = w.sq.len == 1; /* one token: prepared once (l holds it read) */
    if (one) dec_prepare(p, w, l);
    sp_cp_async_wait_<0>();
    __syncwarp(); /* every lane's pieces of the rows copied, the norms kept */
    if (one || !dec_room(p)) { /* groups outer, each through every token */
#pragma unroll 1
        for (int G = 0; G < SH::GROUPS; G++) {
            dec_group_rows(p, w, KF, G, lane, copy, l);
            for (int64_t i = 0; i < w.sq.len; i++) {
                if (!one) dec_token_prepare(p, w, i, lane, norms, l);
                dec_token<RPW, KF>(p, w, i, G, lane, l);
            }
        }
        return;
    }
    for (int64_t i = 0; i < w.sq.len; i++) { /* tokens outer, the rows kept in fp32 */
        dec_token_prepare(p, w, i, lane, norms, l);
#pragma unroll 1
        for (int G = 0; G < SH::GROUPS; G++) {
            if (i == 0)
                dec_group_rows(p, w, KF, G, lane, copy, l);
            else
                dec_group_kept(G, lane, m, l);
            __syncwarp(); /* read by every lane before any keeps the group (a bf16
                           * V-first copy: other lanes' bytes) */
            dec_token<RPW, KF>(p, w, i, G, lane, l);
            if (i + 1 < w.sq.len) dec_group_keep(G, lane, m, l);
        }
    }
}

template <int RPW> static cudaError_t launch(const kda_params *p, cudaStream_t stream) {
    const void *kernel = p->state_k_first ? (const void *)kda_decode_kernel<RPW, 1>
                                          : (const void *)kda_decode_kernel<RPW, 0>;
    /* The instance's opt-in is always the fp32 rows' size: a launch of bf16
     * rows beside it on another thread cannot lower it. */
    const size_t bytes = dec_smem_bytes(dec_row_es(*p));
    const cudaError_t e = cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dec_smem_bytes(4));
    if (e != cudaSuccess) return e;
    void *params[] = {(void *)p};
    return cudaLaunchKernel(kernel, dim3((unsigned)(p->N * p->H)), dim3(dec_launch<RPW>::THREADS),
                            params, bytes, stream);
}

extern "C" cudaError_t sp_kda_launch_decode_(const kda_params *p, const sp_kda_plan *plan,
                                             cudaStream_t stream) {
    return plan->decode_rows_per_warp == 32 ? launch<32>(p, stream) : launch<16>(p, stream);
}

/* ---- the emulation ------------------------------------------------------------ */

/* The butterfly over a warp's lanes of x(l) = field of lane l, in the order
 * the shuffles add: x_l += x_(l ^ off), off = 16, 8, 4, 2, 1. */
template <int RPW, typename F> static void host_butterfly(dec_lane<RPW> *L, F field) {
    for (int off = 16; off > 0; off >>= 1) {
        float next[32];
        for (int i = 0; i < 32; i++) next[i] = *field(L[i]) + *field(L[i ^ off]);
        for (int i = 0; i < 32; i++) *field(L[i]) = next[i];
    }
}

/* xch_rows over the warp's lanes, shuffle by shuffle: lane l's result in
 * m[l]. */
template <int RPW> static void host_xch(const dec_lane<RPW> *L, float m[32]) {
    float k[32][2];
    for (int l = 0; l < 32; l++)
        for (int e = 0; e < 2; e++)
            k[l][e] = xch_keep1(l, L[l].dot, e) + xch_send1(l ^ 16, L[l ^ 16].dot, e);
    for (int l = 0; l < 32; l++) {
        const int b3 = (l >> 3) & 1;
        m[l] = k[l][b3] + k[l ^ 8][(((l ^ 8) >> 3) & 1) ^ 1];
    }
    for (int off = 4; off > 0; off >>= 1) {
        float next[32];
        for (int l = 0; l < 32; l++) next[l] = m[l] + m[l ^ off];
        for (int l = 0; l < 32; l++) m[l] = next[l];
    }
}

/* Token t read by every lane of the warp, the norms summed as the kernel's
 * butterflies sum them (or taken from norms, where given). */
template <int RPW>
static void host_read(const kda_params &p, const dec_warp &w, int64_t t, dec_lane<RPW> *L,
                      const float *norms) {
    typedef dec_lane<RPW> lane_t;
    for (int j = 0; j < 32; j++) dec_read(p, w, t, j, L[j]);
    if (norms) {
        for (int j = 0; j < 32; j++) L[j].sq = norms[0], L[j].sk = norms[1];
        return;
    }
    host_butterfly(L, [](lane_t &l) { return &l.sq; });
    host_butterfly(L, [](lane_t &l) { return &l.sk; });
}

/* One warp's start: the read slot's rows copied to copy, the norms of its
 * first tokens kept (and, for one token, that token read: L). */
template <int RPW>
static void emulate_start(const kda_params &p, const dec_warp &w, unsigned char *copy,
                          float *norms, dec_lane<RPW> *L) {
    for (int j = 0; j < 32; j++) dec_stage(p, w, p.state_k_first, j, copy, L[j]);
    for (int64_t i = 0; i < w.sq.len && i < DEC_NORMS; i++) {
        host_read(p, w, w.sq.bos + i, L, (const float *)NULL);
        norms[2 * i] = L[0].sq, norms[2 * i + 1] = L[0].sk;
    }
}

/* dec_token over the warp's lanes. */
template <int RPW>
static void host_token(const kda_params &p, const dec_warp &w, int64_t i, int G,
                       dec_lane<RPW> *L) {
    float sums[32];
    for (int j = 0; j < 32; j++) {
        dec_group_v(p, w, w.sq.bos + i, G, L[j]);
        dec_decay(L[j]);
    }
    host_xch(L, sums);
    for (int j = 0; j < 32; j++)
        for (int r = 0; r < DEC_GROUP; r++) L[j].dot[r] = sums[8 * r];
    for (int j = 0; j < 32; j++) dec_update(L[j]);
    host_xch(L, sums);
    for (int j = 0; j < 32; j++) L[j].dot[0] = sums[j];
    for (int j = 0; j < 32; j++) {
        dec_out(p, w, w.sq.bos + i, G, j, L[j]);
        dec_group_done(p, w, i, p.state_k_first, G, j, L[j]);
    }
}

/* The rest of the warp's run, as the kernel runs it (m its rows, copy the
 * read slot's copy in them). */
template <int RPW>
static void emulate_warp(const kda_params &p, const dec_warp &w, unsigned char *m,
                         const unsigned char *copy, const float *norms, dec_lane<RPW> *L) {
    const int kf = p.state_k_first, one = w.sq.len == 1;
    for (int j = 0; one && j < 32; j++) dec_prepare(p, w, L[j]);
    if (one || !dec_room(p)) {
        for (int G = 0; G < dec_shape<RPW>::GROUPS; G++) {
            for (int j = 0; j < 32; j++) dec_group_rows(p, w, kf, G, j, copy, L[j]);
            for (int64_t i = 0; i < w.sq.len; i++) {
                if (!one) {
                    host_read(p, w, w.sq.bos + i, L, i < DEC_NORMS ? norms + 2 * i : NULL);
                    for (int j = 0; j < 32; j++) dec_prepare(p, w, L[j]);
                }
                host_token(p, w, i, G, L);
            }
        }
        return;
    }
    for (int64_t i = 0; i < w.sq.len; i++) {
        host_read(p, w, w.sq.bos + i, L, i < DEC_NORMS ? norms + 2 * i : NULL);
        for (int j = 0; j < 32; j++) dec_prepare(p, w, L[j]);
        for (int G = 0; G < dec_shape<RPW>::GROUPS; G++) {
            for (int j = 0; j < 32; j++) {
                if (i == 0)
                    dec_group_rows(p, w, kf, G, j, copy, L[j]);
                else
                    dec_group_kept(G, j, m, L[j]);
            }
            host_token(p, w, i, G, L);
            for (int j = 0; i + 1 < w.sq.len && j < 32; j++) dec_group_keep(G, j, m, L[j]);
        }
    }
}

/* Block b of the grid (one pair) on the host: every warp started first (the
 * kernel's warps may all copy their rows and keep their norms before any
 * runs: a warp's writes into another's would show), then each warp run. */
template <int RPW>
static void emulate_block(const kda_params &p, int64_t b, unsigned char *smem,
                          dec_lane<RPW> (*L)[32]) {
    typedef dec_shape<RPW> SH;
    dec_warp w[SH::WARPS];
    int live[SH::WARPS];
    const int es = dec_row_es(p);
    for (int wi = 0; wi < SH::WARPS; wi++) {
        live[wi] = dec_begin<RPW>(p, b * SH::WARPS + wi, &w[wi]);
        if (live[wi])
            emulate_start(p, w[wi], dec_warp_rows<RPW>(smem, wi, es) + dec_copy_at<RPW>(p),
                          dec_warp_norms(smem, wi, es), L[wi]);
    }
    for (int wi = 0; wi < SH::WARPS; wi++) {
        unsigned char *m = dec_warp_rows<RPW>(smem, wi, es);
        if (live[wi])
            emulate_warp(p, w[wi], m, m + dec_copy_at<RPW>(p), dec_warp_norms(smem, wi, es),
                         L[wi]);
    }
}

template <int RPW> static sp_status emulate(const kda_params &p, const sp_kda_dims &d) {
    unsigned char *smem = (unsigned char *)malloc(dec_smem_bytes(dec_row_es(p)));
    dec_lane<RPW>(*lanes)[32] =
        (dec_lane<RPW>(*)[32])malloc(dec_shape<RPW>::WARPS * sizeof *lanes);
    if (!smem || !lanes) {
        free(smem);
        free(lanes);
        return sp_set_error_(SP_ERR_OUT_OF_MEMORY, "sp_kda_decode_emulate_: no memory");
    }
    for (int64_t b = 0; b < d.N * d.H; b++) emulate_block<RPW>(p, b, smem, lanes);
    free(smem);
    free(lanes);
    return SP_OK;
}

extern "C" sp_status sp_kda_decode_emulate_(const sp_kda_args *a, int rows_per_warp) {
    SP_REQUIRE(a, SP_ERR_INVALID_ARGUMENT, "args: NULL");
    SP_REQUIRE(rows_per_warp == 16 || rows_per_warp == 32, SP_ERR_INVALID_ARGUMENT,
               "rows_per_warp: %d is not 16 or 32", rows_per_warp);
    sp_kda_args call = *a;
    call.kernel = SP_KDA_KERNEL_AUTO; /* the plan's device rule aside: checked below */
    sp_kda_dims d;
    SP_FORWARD(sp_kda_check_(&call, 1, &d));
    SP_REQUIRE(d.dev.type == SP_DEVICE_CPU, SP_ERR_UNSUPPORTED,
               "q: the decode kernel's emulation runs on CPU tensors only");
    const char *no = sp_kda_decode_layout_unsupported_(&call, &d);
    SP_REQUIRE(!no, SP_ERR_UNSUPPORTED, "kernel: the decode kernel cannot serve this call: %s", no);
    if (d.T == 0 || d.N == 0 || d.H == 0) return SP_OK;
    const kda_params p = sp_kda_cuda_params_(&call, &d);
    return rows_per_warp == 32 ? emulate<32>(p, d) : emulate<16>(p, d);
}
